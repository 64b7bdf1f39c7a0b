//! A new database made in one step: `fresh.sql` holds what every migration together leaves
//! in an empty database (its tables, indexes and triggers in the order they came, and the
//! rows the migrations put in), so a first start runs one script instead of replaying the
//! schema's whole history (about half of a first start's work in SQLite).
//!
//! `fresh.sql` is written by this module's test from a database the migrations made, and
//! the test fails while the two differ in any object or row: a new migration is followed by
//! `HEARTH_WRITE_FRESH=1 cargo test -p hearth-control --bin hearth-control store::fresh`.
//! Its first line names how many migrations it stands for; a build whose count differs (the
//! file not written again) makes new databases by the migrations, as before.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::Error;

/// The schema after every migration, as the test below wrote it.
const FRESH: &str = include_str!("fresh.sql");

/// The first line of [`FRESH`], before the number of migrations it stands for.
const HEADER: &str = "-- Hearth's schema after migration ";

/// [`FRESH`], if it stands for the `migrations` this build knows.
fn script(migrations: usize) -> Option<&'static str> {
    let (first, _) = FRESH.split_once('\n')?;
    let count: usize = first.strip_prefix(HEADER)?.split_whitespace().next()?.parse().ok()?;
    (count == migrations).then_some(FRESH)
}

/// Makes a new database in `conn` from [`FRESH`] when `conn` holds nothing yet and the
/// script stands for all `migrations`; false (nothing done) otherwise.
pub(super) fn make(conn: &mut Connection, migrations: usize) -> Result<bool, Error> {
    let Some(script) = script(migrations) else { return Ok(false) };
    // Asked under the lock the script runs under: another process making the same new
    // database first leaves this one nothing to do.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
    let objects: i64 = tx.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    if objects > 0 {
        return Ok(false);
    }
    tx.execute_batch(script)?;
    tx.pragma_update(None, "user_version", migrations)?;
    tx.commit()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables of `conn` whose rows a dump writes: its own, not SQLite's nor a full-text
    /// index's (made by its virtual table).
    fn tables(conn: &Connection) -> Vec<(String, String)> {
        let objects: Vec<(String, String, String)> = conn
            .prepare("SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let virtuals: Vec<String> = objects
            .iter()
            .filter(|(_, _, sql)| sql.starts_with("CREATE VIRTUAL TABLE"))
            .map(|(_, name, _)| format!("{name}_"))
            .collect();
        objects
            .into_iter()
            .filter(|(kind, name, _)| {
                let shadow = kind == "table" && virtuals.iter().any(|prefix| name.starts_with(prefix.as_str()));
                !shadow && !name.starts_with("sqlite_")
            })
            .map(|(_, name, sql)| (name, sql))
            .collect()
    }

    /// Every row of `table` as SQL literals (its stored columns, not generated ones), in a
    /// fixed order.
    fn rows(conn: &Connection, table: &str) -> (Vec<String>, Vec<String>) {
        let columns: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_xinfo('{table}') WHERE hidden = 0 ORDER BY cid"))
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let quoted: Vec<String> = columns.iter().map(|c| format!("quote(\"{c}\")")).collect();
        let order: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
        let select = format!("SELECT {} FROM \"{table}\" ORDER BY {}", quoted.join(" || ', ' || "), order.join(", "));
        let mut statement = conn.prepare(&select).unwrap();
        let values = statement.query_map([], |row| row.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
        (columns, values)
    }

    /// What `fresh.sql` should say for the database `conn` the migrations made.
    fn dump(conn: &Connection, migrations: usize) -> String {
        let mut out = format!(
            "{HEADER}{migrations} (written by store::fresh's test from a database the migrations made: \
             HEARTH_WRITE_FRESH=1 cargo test -p hearth-control --bin hearth-control store::fresh)\n"
        );
        let objects = tables(conn);
        for (_, sql) in &objects {
            out.push_str(sql);
            out.push_str(";\n");
        }
        for (name, sql) in &objects {
            if !sql.starts_with("CREATE TABLE") {
                continue;
            }
            let (columns, values) = rows(conn, name);
            for value in values {
                out.push_str(&format!("INSERT INTO \"{name}\" (\"{}\") VALUES ({value});\n", columns.join("\", \"")));
            }
        }
        // A full-text index over another table is built from it (what its migration did),
        // which leaves its own records as the migrations left them.
        for (name, sql) in &objects {
            if sql.starts_with("CREATE VIRTUAL TABLE") && sql.contains("USING fts5") {
                out.push_str(&format!("INSERT INTO \"{name}\" (\"{name}\") VALUES ('rebuild');\n"));
            }
        }
        out
    }

    /// Everything a database holds: its objects, every table's rows (SQLite's own and a
    /// full-text index's too) and its schema version.
    fn contents(conn: &Connection) -> Vec<String> {
        let mut all: Vec<String> = conn
            .prepare("SELECT type || ' ' || name || ' ' || tbl_name || ' ' || ifnull(sql, '') FROM sqlite_schema")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let names: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for name in names {
            let (_, values) = rows(conn, &name);
            all.extend(values.into_iter().map(|value| format!("{name}: {value}")));
        }
        let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        all.push(format!("user_version {version}"));
        all.sort();
        all
    }

    fn migrated() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        super::super::apply(&mut conn, super::super::MIGRATIONS, 0).unwrap();
        conn
    }

    /// `fresh.sql` is what the migrations make, object for object and row for row, and a
    /// new database made from it holds exactly what one the migrations made holds.
    #[test]
    fn a_new_database_is_what_the_migrations_make() {
        let count = super::super::MIGRATIONS.len();
        let migrated = migrated();
        let expected = dump(&migrated, count);
        if std::env::var_os("HEARTH_WRITE_FRESH").is_some() {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/fresh.sql");
            std::fs::write(path, &expected).unwrap();
        }
        assert!(
            expected == FRESH,
            "store/fresh.sql is not what the migrations make: \
             HEARTH_WRITE_FRESH=1 cargo test -p hearth-control --bin hearth-control store::fresh writes it again"
        );
        let mut fresh = Connection::open_in_memory().unwrap();
        fresh.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        super::super::migrate(&mut fresh).unwrap();
        assert_eq!(contents(&fresh), contents(&migrated));
        let broken: i64 = fresh.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| r.get(0)).unwrap();
        assert_eq!(broken, 0);
    }

    /// The script is used only for an empty database and only when it stands for every
    /// migration this build knows: a database with anything in it, or a script left behind
    /// by a new migration, goes the migrations' way.
    #[test]
    fn only_an_empty_database_of_this_schema_is_made_from_the_script() {
        let count = super::super::MIGRATIONS.len();
        assert!(script(count).is_some());
        assert!(script(count + 1).is_none(), "a script of an older schema is not used");
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE other (x INTEGER)").unwrap();
        assert!(!make(&mut conn, count).unwrap(), "a database with a table in it is left alone");
        let mut empty = Connection::open_in_memory().unwrap();
        assert!(!make(&mut empty, count + 1).unwrap());
        assert!(make(&mut empty, count).unwrap());
        let version: usize = empty.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, count);
    }
}
