//! Reading a Marzban or PasarGuard database (SQLite, or a MySQL dump loaded into SQLite): which
//! of the two panels it is, from its tables, and its users' rows by column name (so that every
//! version from Marzban 0.5 to PasarGuard 5 reads alike), with the secret its links are signed
//! with.

use std::collections::HashSet;

use anyhow::{Context as _, bail};
use rusqlite::Connection;
use rusqlite::types::Value as Sql;
use serde_json::Value;

use super::user::{Flavor, Row, date, hysteria_auth};

/// A number of a column or field: an integer, a real, or a numeric text.
fn count(value: &Sql) -> u64 {
    match value {
        Sql::Integer(n) => u64::try_from(*n).unwrap_or(0),
        Sql::Real(f) if *f > 0.0 => *f as u64,
        Sql::Text(s) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// An instant of a column: Unix seconds (Marzban's `expire`) or a date.
fn instant(value: &Sql, ceil: bool) -> u64 {
    match value {
        Sql::Text(s) => date(s, ceil).or_else(|| s.trim().parse().ok()).unwrap_or(0),
        other => count(other),
    }
}

fn text_of(value: &Sql) -> String {
    match value {
        Sql::Text(s) => s.trim().to_owned(),
        Sql::Integer(n) => n.to_string(),
        _ => String::new(),
    }
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut query = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
    let names: HashSet<String> = query.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Which panel a database is, from its tables.
pub(super) fn flavor_of(conn: &Connection) -> anyhow::Result<Flavor> {
    let users = columns(conn, "users").context("not an SQLite database")?;
    if !["id", "username", "status", "used_traffic", "data_limit"].iter().all(|c| users.contains(*c)) {
        bail!("not a Marzban or PasarGuard database: it has no users table of theirs");
    }
    Ok(if users.contains("proxy_settings") { Flavor::PasarGuard } else { Flavor::Marzban })
}

/// Reads the users (and the secret their links are signed with) of a database.
pub(super) fn rows_of(conn: &Connection, flavor: Flavor) -> anyhow::Result<(Vec<Row>, Option<String>)> {
    let have = columns(conn, "users")?;
    let column = |name: &str| if have.contains(name) { format!("\"{name}\"") } else { "NULL".to_owned() };
    let query = format!(
        "SELECT id, username, status, used_traffic, data_limit, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM users ORDER BY id",
        column("expire"),
        column("created_at"),
        column("sub_revoked_at"),
        column("data_limit_reset_strategy"),
        column("note"),
        column("on_hold_expire_duration"),
        column("proxy_settings"),
        column("hwid_limit"),
        column("on_hold_timeout"),
    );
    let mut statement = conn.prepare(&query)?;
    let mut rows: Vec<Row> = statement
        .query_map([], |row| {
            let value = |i: usize| row.get::<_, Sql>(i);
            let settings: Value = serde_json::from_str(&text_of(&value(11)?)).unwrap_or(Value::Null);
            Ok(Row {
                id: row.get::<_, Option<i64>>(0)?.unwrap_or(0),
                username: text_of(&value(1)?),
                status: text_of(&value(2)?),
                used: count(&value(3)?),
                data_limit: count(&value(4)?),
                expire: instant(&value(5)?, false),
                created: instant(&value(6)?, true),
                revoked: instant(&value(7)?, true),
                reset: text_of(&value(8)?),
                note: text_of(&value(9)?),
                on_hold_seconds: count(&value(10)?),
                hysteria: hysteria_auth(&settings),
                hwid_limit: u32::try_from(count(&value(12)?)).ok().filter(|n| *n > 0),
                on_hold_timeout: instant(&value(13)?, false),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    // Marzban keeps credentials in a table of their own: none of them is Hysteria2.
    if flavor == Flavor::Marzban {
        for row in &mut rows {
            row.hysteria = None;
        }
    }
    let secret = if columns(conn, "jwt")?.contains("secret_key") {
        conn.query_row("SELECT secret_key FROM jwt ORDER BY id LIMIT 1", [], |row| row.get::<_, Option<String>>(0))
            .ok()
            .flatten()
    } else {
        None
    };
    Ok((rows, secret))
}
