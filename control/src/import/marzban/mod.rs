//! Marzban and PasarGuard (its fork): their database (the SQLite file, or a MySQL dump as
//! `mysqldump` writes it), or their REST API with an admin token. Marzban 0.5 to 0.8 and
//! PasarGuard 1 to 5 keep users alike; what differs is read by column name.
//!
//! - The Hysteria2 password is PasarGuard's `proxy_settings.hysteria.auth` (3.0 and later).
//!   Marzban has no Hysteria2: its users come with a new password, and their apps move over
//!   through their subscription (an alias serves them Hearth's servers).
//! - `status` `disabled` (the owner's decision) comes disabled; `limited` and `expired` are
//!   the panel's reckoning of quota and expiry, which Hearth redoes, so they come enabled;
//!   `on_hold` starts on first use, for the days of `on_hold_expire_duration`.
//! - Resets: `day`, `week`, `month` as daily, weekly, monthly; `year` (Hearth resets at most
//!   monthly) as none, said in the note.
//! - Subscription links: both panels make a new token each time a link is shown (the
//!   username or id and the time, signed with the panel's `jwt.secret_key`), so the links apps
//!   hold cannot be listed from the database. They are taken from a list of the links in use
//!   (the old web server's access log, or any text holding them): each is checked as the
//!   panel checks it (signature, not before the user was made, not revoked) and becomes an
//!   alias. The secret is read from the database and used only for this check: it is never
//!   stored, and a link nobody fetched is never served. Checking needs the database (the API
//!   tells neither the secret nor when a user's links were revoked).

mod api;
mod database;
mod links;
mod mysql;
mod user;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context as _, bail};
use rusqlite::{Connection, OpenFlags};

pub(crate) use api::read_api;
use database::{flavor_of, rows_of};
use links::links;
pub(crate) use user::Flavor;
use user::{FIELDS, user_of};

use crate::import::fetch::{intact, wal_without_log};
use crate::import::incoming::{Incoming, Skipped};

/// The users of a database `conn` holds, with the old links of `list` checked.
fn from_database(
    conn: &Connection,
    flavor: Flavor,
    list: Option<&mut dyn BufRead>,
    what: &str,
) -> anyhow::Result<Incoming> {
    let found = flavor_of(conn).with_context(|| format!("{what} is not a {} database", flavor.title()))?;
    if found != flavor {
        bail!("{what} is a {} database: import it as {}", found.title(), found.source());
    }
    let (rows, secret) = rows_of(conn, flavor)?;
    let (mut aliases, skipped) = match list {
        Some(list) => {
            let secret = secret
                .filter(|s| !s.is_empty())
                .with_context(|| format!("{what} has no jwt.secret_key: old links cannot be checked"))?;
            links(list, &rows, &secret, flavor)?
        }
        None => (HashMap::new(), Vec::new()),
    };
    let mut incoming =
        Incoming { source: flavor.source().to_owned(), skipped, fields: FIELDS.to_vec(), ..Incoming::default() };
    for row in rows {
        if row.username.is_empty() {
            incoming.skipped.push(Skipped { id: row.id.to_string(), reason: "no username".to_owned() });
            continue;
        }
        let paths = aliases.remove(&row.id).unwrap_or_default();
        incoming.users.push(user_of(row, flavor, paths));
    }
    Ok(incoming)
}

/// Reads a database file: SQLite (opened read-only), or a MySQL dump.
pub(crate) fn read_file(path: &Path, flavor: Flavor, list: Option<&mut dyn BufRead>) -> anyhow::Result<Incoming> {
    let what = path.display().to_string();
    let mut head = [0u8; 16];
    let n = std::io::Read::read(&mut std::fs::File::open(path).with_context(|| format!("reading {what}"))?, &mut head)
        .with_context(|| format!("reading {what}"))?;
    if head[..n] == *b"SQLite format 3\0" {
        let behind = wal_without_log(path);
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .with_context(|| format!("opening {what} as SQLite"))?;
        intact(&conn, path)?;
        let mut incoming = from_database(&conn, flavor, list, &what)?;
        incoming.warnings.extend(behind);
        return Ok(incoming);
    }
    let file = std::fs::File::open(path).with_context(|| format!("reading {what}"))?;
    let conn = mysql::load(&mut std::io::BufReader::new(file)).with_context(|| format!("reading {what}"))?;
    from_database(&conn, flavor, list, &what)
}

/// Reads the bytes of a database (an upload to the panel): SQLite or a MySQL dump.
pub(crate) fn read_bytes(bytes: &[u8], flavor: Flavor) -> anyhow::Result<Incoming> {
    if bytes.starts_with(b"SQLite format 3\0") {
        let dir = tempfile::tempdir().context("a temporary directory")?;
        let path = dir.path().join("db.sqlite3");
        std::fs::write(&path, bytes).context("writing the upload")?;
        let conn =
            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .context("opening the upload as SQLite")?;
        intact(&conn, &path)?;
        return from_database(&conn, flavor, None, "the upload");
    }
    let conn = mysql::load(&mut std::io::Cursor::new(bytes)).context("the upload")?;
    from_database(&conn, flavor, None, "the upload")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/marzban").join(name)
    }

    /// A damaged database imports nothing (issue 47, 3): a page of zeros where the users were,
    /// in either panel's SQLite file, read from a file or uploaded.
    #[test]
    fn a_damaged_database_imports_nothing() {
        let temp = tempfile::tempdir().unwrap();
        for (file, flavor) in
            [("marzban-v0.8.4.sqlite3", Flavor::Marzban), ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard)]
        {
            assert!(!read_file(&fixture(file), flavor, None).unwrap().users.is_empty());
            let copy = temp.path().join(file);
            std::fs::copy(fixture(file), &copy).unwrap();
            let (root, page): (i64, i64) = Connection::open(&copy)
                .unwrap()
                .query_row(
                    "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = 'users'",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            let mut bytes = std::fs::read(&copy).unwrap();
            let at = usize::try_from((root - 1) * page).unwrap();
            bytes[at..at + usize::try_from(page).unwrap()].fill(0);
            std::fs::write(&copy, &bytes).unwrap();
            let error = format!("{:#}", read_file(&copy, flavor, None).unwrap_err());
            assert!(error.contains("is damaged") && error.contains("nothing is imported"), "{file}: {error}");
            let error = format!("{:#}", read_bytes(&bytes, flavor).unwrap_err());
            assert!(error.contains("is damaged"), "{file} uploaded: {error}");
        }
    }

    /// The fixtures' users, as each panel has them, from its SQLite database and its API pages.
    #[test]
    fn users_come_with_limits_status_and_passwords_where_the_panel_has_them() {
        for (file, flavor) in
            [("marzban-v0.8.4.sqlite3", Flavor::Marzban), ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard)]
        {
            let incoming = read_file(&fixture(file), flavor, None).unwrap();
            assert_eq!(incoming.source, flavor.source());
            let names: Vec<&str> = incoming.users.iter().map(|u| u.name.as_str()).collect();
            assert_eq!(names, ["alice", "bob", "carol"], "{file}");
            let [alice, bob, carol] = &incoming.users[..] else { unreachable!() };
            assert_eq!((alice.quota, alice.used_down, alice.expires_at), (50 << 30, 3 << 29, 1_798_761_600));
            assert_eq!(
                (alice.reset.as_str(), alice.enabled, alice.note.as_str()),
                ("monthly", true, "paid until 2027-01-01")
            );
            assert_eq!(
                (bob.days_from_first_use, bob.expires_at, bob.enabled),
                (30, 0, true),
                "on hold: 30 days from first use"
            );
            // The date the panel would have started them by itself is said, not silently lost.
            assert_eq!(bob.mapped.len(), 1, "{file}: {:?}", bob.mapped);
            assert!(
                bob.mapped[0].ends_with(
                    "its days on 2026-01-01 if it had not connected by then: here they start at its first connection"
                ),
                "{:?}",
                bob.mapped
            );
            assert!(alice.mapped.is_empty() && carol.mapped.is_empty());
            assert_eq!(incoming.fields, FIELDS);
            assert!(incoming.warnings.is_empty(), "{:?}", incoming.warnings);
            assert!(!carol.enabled, "disabled in the panel");
            assert_eq!((carol.quota, carol.expires_at), (0, 1_767_225_600));
            match flavor {
                Flavor::Marzban => {
                    assert!(incoming.users.iter().all(|u| u.password.is_none()), "Marzban has no Hysteria2");
                    assert_eq!(alice.id, "alice");
                }
                Flavor::PasarGuard => {
                    assert_eq!(alice.password.as_deref(), Some("hy2-alice-auth-0001"));
                    assert_eq!(carol.password.as_deref(), Some("hy2-carol-auth-0003"));
                    assert_eq!(alice.id, "1");
                }
            }
            let wrong = if flavor == Flavor::Marzban { Flavor::PasarGuard } else { Flavor::Marzban };
            let refused = read_file(&fixture(file), wrong, None).unwrap_err();
            assert!(format!("{refused:#}").contains(&format!("import it as {}", flavor.source())), "{refused:#}");
        }
        let refused = read_file(&fixture("tokens.json"), Flavor::Marzban, None).unwrap_err();
        assert!(format!("{refused:#}").contains("not a MySQL dump"), "{refused:#}");
    }

    #[test]
    fn a_mysql_dump_reads_as_its_sqlite_twin() {
        let by_dump = read_file(&fixture("marzban-v0.8.4.mysqldump.sql"), Flavor::Marzban, None).unwrap();
        let by_file = read_file(&fixture("marzban-v0.8.4.sqlite3"), Flavor::Marzban, None).unwrap();
        assert_eq!(by_dump, by_file);
        let list = std::fs::read(fixture("marzban-v0.8.4.access.log")).unwrap();
        let from_dump =
            read_file(&fixture("marzban-v0.8.4.mysqldump.sql"), Flavor::Marzban, Some(&mut &list[..])).unwrap();
        let from_file = read_file(&fixture("marzban-v0.8.4.sqlite3"), Flavor::Marzban, Some(&mut &list[..])).unwrap();
        assert_eq!(from_dump, from_file);
        assert!(from_dump.users.iter().any(|u| !u.aliases.is_empty()));
        let whole = std::fs::read_to_string(fixture("marzban-v0.8.4.mysqldump.sql")).unwrap();
        let cut = &whole[..whole.find("-- Table structure for table `proxies`").unwrap()];
        let error = mysql::load(&mut cut.as_bytes()).unwrap_err().to_string();
        assert!(error.contains("cut short"), "{error}");
        for bad in [
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1,'a",
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1,2);",
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1) (2);",
        ] {
            assert!(mysql::load(&mut bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
