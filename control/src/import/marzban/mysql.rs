//! A MySQL dump (as `mysqldump` and `mariadb-dump` write it) read into an in-memory SQLite
//! database: each table's columns from its `CREATE TABLE`, its rows from its `INSERT`s. Only
//! the tables an import reads are kept.

use std::collections::HashMap;
use std::io::BufRead;

use anyhow::{Context as _, bail};
use rusqlite::Connection;
use rusqlite::types::Value;

/// The tables read.
const TABLES: [&str; 3] = ["users", "jwt", "proxies"];
/// The most bytes of one line (one `INSERT` of many rows).
const LINE_BYTES: u64 = 256 << 20;

fn identifier(text: &str) -> Option<&str> {
    let name = text.strip_prefix('`')?.split('`').next()?;
    (!name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

pub(super) fn load(dump: &mut dyn BufRead) -> anyhow::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    let mut tables: HashMap<String, Vec<String>> = HashMap::new();
    let mut creating: Option<(String, Vec<String>)> = None;
    let mut line = Vec::new();
    let mut number = 0usize;
    let mut statements = 0usize;
    // mysqldump and mariadb-dump end with this line: a dump without it was cut short.
    let (mut signed, mut completed) = (false, false);
    loop {
        line.clear();
        let n = std::io::Read::take(&mut *dump, LINE_BYTES).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        number += 1;
        if n as u64 == LINE_BYTES && !line.ends_with(b"\n") {
            bail!("line {number} is over {} MiB", LINE_BYTES >> 20);
        }
        let text = std::str::from_utf8(&line).with_context(|| format!("line {number} is not UTF-8"))?;
        let text = text.trim_end();
        if number == 1 {
            signed = text.starts_with("-- MySQL dump") || text.starts_with("-- MariaDB dump");
        }
        completed |= text.starts_with("-- Dump completed");
        if let Some((_, columns)) = creating.as_mut() {
            if text.starts_with(')') {
                let (table, columns) = creating.take().unwrap_or_default();
                let list: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
                conn.execute_batch(&format!("CREATE TABLE \"{table}\" ({})", list.join(", ")))?;
                tables.insert(table, columns);
            } else if let Some(column) = identifier(text.trim_start()) {
                columns.push(column.to_owned());
            }
            continue;
        }
        if let Some(rest) = text.strip_prefix("CREATE TABLE ") {
            let rest = rest.trim_start_matches("IF NOT EXISTS ");
            let table = identifier(rest).with_context(|| format!("line {number}: a table without a name"))?;
            statements += 1;
            if TABLES.contains(&table) {
                creating = Some((table.to_owned(), Vec::new()));
            }
            continue;
        }
        let Some(rest) = text.strip_prefix("INSERT INTO ") else { continue };
        let table = identifier(rest).with_context(|| format!("line {number}: an INSERT without a table"))?;
        statements += 1;
        let Some(columns) = tables.get(table) else { continue };
        let rest = &rest[table.len() + 2..];
        let (names, values) = match rest.trim_start().strip_prefix('(') {
            Some(list) => {
                let (list, values) = list.split_once(')').context("an unended column list")?;
                let names: Vec<String> =
                    list.split(',').filter_map(|c| identifier(c.trim())).map(str::to_owned).collect();
                (names, values)
            }
            None => (columns.clone(), rest),
        };
        let values = values.trim_start().strip_prefix("VALUES").with_context(|| format!("line {number}: no VALUES"))?;
        let rows = tuples(values).with_context(|| format!("line {number}"))?;
        let quoted: Vec<String> = names.iter().map(|c| format!("\"{c}\"")).collect();
        let marks = vec!["?"; names.len()].join(", ");
        let mut insert = conn.prepare(&format!("INSERT INTO \"{table}\" ({}) VALUES ({marks})", quoted.join(", ")))?;
        for row in rows {
            if row.len() != names.len() {
                bail!("line {number}: a row of {} values for {} columns", row.len(), names.len());
            }
            insert.execute(rusqlite::params_from_iter(row))?;
        }
    }
    if statements == 0 {
        bail!("not a MySQL dump (nor an SQLite database): no CREATE TABLE or INSERT in it");
    }
    if signed && !completed {
        bail!("the dump was cut short: it has no \"-- Dump completed\" line at its end");
    }
    Ok(conn)
}

/// The rows of `VALUES (...),(...);`.
fn tuples(text: &str) -> anyhow::Result<Vec<Vec<Value>>> {
    let mut rows = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let skip = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip(&mut i);
        if bytes.get(i) != Some(&b'(') {
            bail!("a row does not begin with (");
        }
        i += 1;
        let mut row = Vec::new();
        loop {
            skip(&mut i);
            row.push(value(bytes, &mut i)?);
            skip(&mut i);
            match bytes.get(i) {
                Some(b',') => i += 1,
                Some(b')') => {
                    i += 1;
                    break;
                }
                _ => bail!("a row is not ended"),
            }
        }
        rows.push(row);
        skip(&mut i);
        match bytes.get(i) {
            Some(b',') => i += 1,
            Some(b';') | None => return Ok(rows),
            _ => bail!("rows are not separated by ,"),
        }
    }
}

/// One value: NULL, a number, a quoted string (with MySQL's escapes), `0x` hex or
/// `_binary '...'`.
fn value(bytes: &[u8], i: &mut usize) -> anyhow::Result<Value> {
    let rest = &bytes[*i..];
    if rest.starts_with(b"NULL") {
        *i += 4;
        return Ok(Value::Null);
    }
    if rest.starts_with(b"_binary ") {
        *i += 8;
        return value(bytes, i);
    }
    if rest.starts_with(b"0x") {
        let end = rest[2..].iter().position(|b| !b.is_ascii_hexdigit()).map_or(rest.len(), |n| n + 2);
        *i += end;
        return Ok(Value::Blob(hex::decode(&rest[2..end]).context("bad hex")?));
    }
    if rest.first() == Some(&b'\'') {
        let mut out = Vec::new();
        let mut j = 1;
        loop {
            match rest.get(j) {
                None => bail!("an unended string"),
                Some(b'\\') => {
                    let escaped = *rest.get(j + 1).context("an unended string")?;
                    out.push(match escaped {
                        b'0' => 0,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'Z' => 26,
                        other => other,
                    });
                    j += 2;
                }
                Some(b'\'') if rest.get(j + 1) == Some(&b'\'') => {
                    out.push(b'\'');
                    j += 2;
                }
                Some(b'\'') => break,
                Some(&b) => {
                    out.push(b);
                    j += 1;
                }
            }
        }
        *i += j + 1;
        return Ok(match String::from_utf8(out) {
            Ok(text) => Value::Text(text),
            Err(e) => Value::Blob(e.into_bytes()),
        });
    }
    let end = rest.iter().position(|b| !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')));
    let number = std::str::from_utf8(&rest[..end.unwrap_or(rest.len())])?;
    if number.is_empty() {
        bail!("an unknown value");
    }
    *i += number.len();
    Ok(match number.parse::<i64>() {
        Ok(n) => Value::Integer(n),
        Err(_) => Value::Real(number.parse().with_context(|| format!("{number:?} is not a number"))?),
    })
}
