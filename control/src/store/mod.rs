//! Control's SQLite store: one writer, a small pool of readers, migrations embedded.
//!
//! The database runs in WAL mode with `synchronous = FULL`, so a write is on disk before it is
//! acknowledged and a `kill -9` (or a power cut) at any point loses nothing acknowledged. The
//! one exception is bookkeeping shown safe to lose ([`Db::write_unsynced`]: what an edge took).
//! Every change is one `BEGIN IMMEDIATE` transaction. The store's functions that change users
//! and nodes say what they touched ([`changes::Changes`]); the layer above them
//! ([`crate::users`], [`crate::nodes`]) has it signed ([`crate::publish`]) in the same
//! transaction, so a change and what the edges must get of it commit together. The store is
//! the bottom layer: it imports nothing of control's above it.

pub(crate) mod admins;
pub(crate) mod aliases;
pub(crate) mod archive;
pub(crate) mod audit_log;
pub(crate) mod changes;
pub(crate) mod cred_sets;
pub(crate) mod edges;
pub(crate) mod enrollment;
pub(crate) mod events;
mod fresh;
pub(crate) mod groups;
pub(crate) mod hwid;
pub(crate) mod identity;
pub(crate) mod node_input;
pub(crate) mod nodes;
pub(crate) mod overview;
pub(crate) mod owner;
pub(crate) mod passkeys;
pub(crate) mod presence;
pub(crate) mod releases;
pub(crate) mod restoring;
pub(crate) mod routing;
pub(crate) mod sessions;
pub(crate) mod snapshots;
pub(crate) mod streams;
pub(crate) mod sweeps;
pub(crate) mod telegram;
pub(crate) mod tokens;
pub(crate) mod usage;
pub(crate) mod usage_reports;
pub(crate) mod user_create;
pub(crate) mod user_edit;
pub(crate) mod user_import;
pub(crate) mod user_input;
pub(crate) mod users;

pub(crate) use audit_log::{AuditFilter, audit, audit_facets, audit_page};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior};

use crate::error::Error;

/// Migrations, applied in order at start; `PRAGMA user_version` counts the applied ones. A
/// new database is made in one step from what they all leave ([`fresh`]: add a migration,
/// then write `fresh.sql` again as its test says).
const MIGRATIONS: &[&str] = &[
    include_str!("schema.sql"),
    include_str!("totp.sql"),
    "CREATE INDEX usage_daily_by_day ON usage_daily (day);",
    // Daily traffic per node, for the nodes pages.
    "CREATE TABLE node_usage_daily (
        node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
        day     INTEGER NOT NULL,
        up      INTEGER NOT NULL,
        down    INTEGER NOT NULL,
        PRIMARY KEY (node_id, day)
    ) STRICT, WITHOUT ROWID;",
    include_str!("releases.sql"),
    // Streams the edge refused, set aside so the rest goes on (per edge since edges.sql).
    "CREATE TABLE outbox_held (
        stream  TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        reason  TEXT NOT NULL,
        held_at INTEGER NOT NULL
    ) STRICT;",
    // Addresses the owner signed in from (SHA-256 of the address's key), exempt from the
    // sign-in budget of strangers (see crate::auth).
    "CREATE TABLE known_addresses (
        address_hash BLOB PRIMARY KEY,
        signed_in    INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;",
    // Speed limits in kbit/s (0: none) and what a used-up quota does: a user's own (NULL:
    // its groups') and each group's default for its nodes.
    "ALTER TABLE users ADD COLUMN speed_up INTEGER CHECK (speed_up >= 0);
     ALTER TABLE users ADD COLUMN speed_down INTEGER CHECK (speed_down >= 0);
     ALTER TABLE users ADD COLUMN on_quota TEXT CHECK (on_quota IN ('cut', 'slow'));
     ALTER TABLE users ADD COLUMN slow_kbps INTEGER NOT NULL DEFAULT 0 CHECK (slow_kbps >= 0);
     ALTER TABLE groups ADD COLUMN speed_up INTEGER NOT NULL DEFAULT 0 CHECK (speed_up >= 0);
     ALTER TABLE groups ADD COLUMN speed_down INTEGER NOT NULL DEFAULT 0 CHECK (speed_down >= 0);
     ALTER TABLE groups ADD COLUMN on_quota TEXT NOT NULL DEFAULT 'cut' CHECK (on_quota IN ('cut', 'slow'));
     ALTER TABLE groups ADD COLUMN slow_kbps INTEGER NOT NULL DEFAULT 0 CHECK (slow_kbps >= 0);",
    include_str!("edges.sql"),
    include_str!("fair_use.sql"),
    include_str!("hwid.sql"),
    include_str!("aliases.sql"),
    include_str!("events.sql"),
    include_str!("telegram.sql"),
    include_str!("sessions.sql"),
    include_str!("admins.sql"),
    include_str!("passkeys.sql"),
    include_str!("search.sql"),
    include_str!("creds_digest.sql"),
    include_str!("deltas.sql"),
    include_str!("names.sql"),
    include_str!("identity.sql"),
    include_str!("acme.sql"),
    include_str!("audit_changes.sql"),
    // A reseller's allowance of traffic (resets counted: `spent`), slowed rate and time.
    "ALTER TABLE admins ADD COLUMN spent INTEGER NOT NULL DEFAULT 0 CHECK (spent >= 0);
     ALTER TABLE admins ADD COLUMN max_slow_kbps INTEGER CHECK (max_slow_kbps >= 0);
     ALTER TABLE admins ADD COLUMN max_days INTEGER CHECK (max_days >= 0);",
    // What a native edge said of a proxy in front of it that it does not trust.
    "ALTER TABLE edges ADD COLUMN untrusted_forwarding TEXT;
     ALTER TABLE edges ADD COLUMN disk_full INTEGER NOT NULL DEFAULT 0;",
    USERS_PER_TENANT,
    // When control last heard what a node runs (a pull's time, or a relayed report's), so
    // an older report an edge passes on later does not undo a newer word.
    "ALTER TABLE nodes ADD COLUMN release_said_at INTEGER NOT NULL DEFAULT 0;",
    // The folder each alias lives under (`/sub/` of `/sub/<id>`, `/` for a path of one
    // segment), indexed: adding an alias asks whether its folder is known without reading
    // every alias (an import of 10,000 old links read 50 million).
    "ALTER TABLE aliases ADD COLUMN prefix TEXT GENERATED ALWAYS AS (
        CASE WHEN instr(substr(path, 2), '/') = 0 THEN '/' ELSE substr(path, 1, instr(substr(path, 2), '/') + 1) END
     ) VIRTUAL;
     CREATE INDEX aliases_by_prefix ON aliases (prefix);",
    // An import asks of each user whether its password is another's: without an index that
    // read every user, for every user.
    "CREATE INDEX users_credential ON users (credential_hash);",
    include_str!("routing.sql"),
    include_str!("telegram_users.sql"),
    // New users are added to the search index by the code that adds them
    // (`user_create::index_for_search`), not by a trigger for each row.
    "DROP TRIGGER user_search_insert;",
];

/// Runs `f` on the blocking pool, in the caller's span and with the caller's log subscriber:
/// what `f` logs carries the fields of the request, edge or node it works for, and goes where
/// the caller's logs go.
async fn on_blocking_pool<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    let (span, dispatch) = (tracing::Span::current(), tracing::dispatcher::get_default(Clone::clone));
    tokio::task::spawn_blocking(move || tracing::dispatcher::with_default(&dispatch, || span.in_scope(f)))
        .await
        .map_err(|e| Error::Internal(format!("{what} task failed: {e}")))?
}

/// A write to run on the writer's thread.
type Job = Box<dyn FnOnce() + Send>;

/// Starts the thread every write transaction of the server runs on, one after another (they
/// take the one writer in turn anyway). One thread, so what a large write allocates (a bulk
/// create of 10,000 users signs and stores that many snapshots) lands in one of glibc's
/// arenas, where on the blocking pool each thread that happened to run one kept an arena of
/// its own grown to that write's peak. It ends when the last handle to the database is gone.
fn writer_thread() -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new().name("hearth-writer".into()).spawn(move || {
        for job in queue {
            job();
        }
    })?;
    Ok(jobs)
}

/// Runs `f` on the writer's thread, in the caller's span; a panic in it is an error for the
/// caller (the thread goes on with the next write).
async fn on_writer<T: Send + 'static>(
    jobs: &std::sync::mpsc::Sender<Job>,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    let (span, dispatch) = (tracing::Span::current(), tracing::dispatcher::get_default(Clone::clone));
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let run = || tracing::dispatcher::with_default(&dispatch, || span.in_scope(f));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
            .unwrap_or_else(|_| Err(Error::Internal("a write panicked".into())));
        let _ = done.send(outcome);
    });
    jobs.send(job).map_err(|_| Error::Internal("the writer's thread is gone".into()))?;
    result.await.map_err(|_| Error::Internal("the writer's thread is gone".into()))?
}

/// Readers kept open between requests.
const IDLE_READERS: usize = 2;
/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 128;

/// A handle to the database; cheap to clone.
#[derive(Clone)]
pub(crate) struct Db {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    /// The writer's thread ([`writer_thread`]).
    jobs: std::sync::mpsc::Sender<Job>,
}

fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // A 1 MiB page cache per connection keeps control small; the OS caches the file too.
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA cache_size = -1024;")?;
    // Control runs a few dozen distinct statements; rusqlite's default cache of 16 made the
    // busiest ones (a user change, a usage report) parse their SQL again each time.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

impl Db {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub(crate) fn open(path: &Path) -> Result<Db, Error> {
        let mut conn = connect(path)?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Internal(format!("{} cannot use WAL (journal mode {mode})", path.display())));
        }
        migrate(&mut conn)?;
        Ok(Db {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                writer: Mutex::new(conn),
                readers: Mutex::new(Vec::new()),
                jobs: writer_thread().map_err(|e| Error::Internal(format!("starting the writer's thread: {e}")))?,
            }),
        })
    }

    /// Runs `f` in a write transaction that is always rolled back (a dry run: what a change
    /// would do, with nothing of it kept), on the blocking pool, in the caller's span.
    pub(crate) async fn dry_run<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, Error> + Send + 'static,
    {
        let db = self.clone();
        on_blocking_pool("dry run", move || db.dry_run_blocking(f)).await
    }

    /// [`Db::dry_run`] for callers outside the runtime (the CLI).
    pub(crate) fn dry_run_blocking<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let mut conn = self.inner.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx);
        tx.rollback()?;
        value
    }

    /// Runs `f` in one write transaction, committed when it returns `Ok`, on the writer's
    /// thread, in the caller's span (what `f` logs carries the fields of the request, edge or
    /// node it works for).
    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, Error> + Send + 'static,
    {
        let db = self.clone();
        on_writer(&self.inner.jobs, move || db.write_blocking(f)).await
    }

    /// [`Db::write`] for callers outside the runtime (the CLI).
    pub(crate) fn write_blocking<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, Error>) -> Result<T, Error> {
        self.transact(true, f)
    }

    /// One write transaction on the writer; `synced: false` commits it without waiting for
    /// the disk ([`Db::write_unsynced`]), the writer set back to synced commits after it,
    /// whatever happens in between.
    fn transact<T>(&self, synced: bool, f: impl FnOnce(&Transaction<'_>) -> Result<T, Error>) -> Result<T, Error> {
        /// Sets the writer back to synced commits when dropped (a no-op for a synced write).
        struct Unsynced<'a>(&'a mut Connection, bool);
        impl Drop for Unsynced<'_> {
            fn drop(&mut self) {
                if self.1
                    && let Err(error) = self.0.execute_batch("PRAGMA synchronous = FULL")
                {
                    tracing::error!(%error, "could not set the writer back to synced commits");
                }
            }
        }
        let asked = std::time::Instant::now();
        let mut conn = self.inner.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = std::time::Instant::now();
        if !synced {
            // SQLite takes the setting only outside a transaction.
            conn.execute_batch("PRAGMA synchronous = NORMAL")?;
        }
        let guard = Unsynced(&mut conn, !synced);
        let tx = guard.0.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        let work = held.elapsed();
        tx.commit()?;
        drop(guard);
        tracing::debug!(
            synced,
            waited_us = (held - asked).as_micros() as u64,
            work_us = work.as_micros() as u64,
            commit_us = (held.elapsed() - work).as_micros() as u64,
            "write transaction"
        );
        Ok(value)
    }

    /// [`Db::write`] for bookkeeping that is safe to lose, committed without waiting for the
    /// disk (`synchronous = NORMAL` for this one transaction): a change waits behind fewer
    /// syncs. In WAL mode a power cut can then lose this commit and those after it, never one
    /// before it, and the next synced commit (every change is one) makes it durable with
    /// itself; a `kill -9` loses nothing committed. Only for writes a crash test shows are
    /// found again when lost (what an edge took, say: it is pushed again).
    pub(crate) async fn write_unsynced<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, Error> + Send + 'static,
    {
        let db = self.clone();
        on_writer(&self.inner.jobs, move || db.transact(false, f)).await
    }

    /// Runs `f` on a reader (a consistent snapshot for its duration), on the blocking pool, in
    /// the caller's span.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    {
        let db = self.clone();
        on_blocking_pool("read", move || db.read_blocking(f)).await
    }

    /// A connection of its own (for watching `PRAGMA data_version`).
    pub(crate) fn connect(&self) -> Result<Connection, Error> {
        Ok(connect(&self.inner.path)?)
    }

    /// [`Db::read`] for callers outside the runtime.
    pub(crate) fn read_blocking<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, Error> {
        let idle = self.inner.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => connect(&self.inner.path)?,
        };
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let value = f(&tx);
        drop(tx);
        let mut readers = self.inner.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if readers.len() < IDLE_READERS {
            readers.push(conn);
        }
        value
    }
}

fn migrate(conn: &mut Connection) -> Result<(), Error> {
    let applied: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if applied > MIGRATIONS.len() {
        return Err(Error::Internal(format!(
            "the database is from a newer Hearth (schema {applied}, this build knows {})",
            MIGRATIONS.len()
        )));
    }
    // A database this start just created is made in one step, as the migrations would leave it.
    if applied == 0 && fresh::make(conn, MIGRATIONS.len())? {
        return Ok(());
    }
    apply(conn, &MIGRATIONS[applied..], applied)
}

/// A migration done in Rust, named in [`MIGRATIONS`] by this marker: the users table rebuilt
/// without its one global UNIQUE name, each user given its tenant (a reseller's users are
/// theirs, everyone else's 0), and names made unique within a tenant. SQLite cannot drop a
/// constraint, so the table is made again as the procedure of its manual says (`ALTER
/// TABLE`, "other kinds of table schema changes"), with foreign keys off around it.
const USERS_PER_TENANT: &str = "-- rebuild: users' names unique per tenant";

fn users_per_tenant(tx: &Connection) -> Result<(), Error> {
    let sql: String =
        tx.query_row("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'users'", [], |row| row.get(0))?;
    let unique = "name            TEXT NOT NULL UNIQUE";
    if !sql.contains(unique) {
        return Err(Error::Internal("the users table is not as this migration expects".into()));
    }
    let rebuilt = sql.replacen(unique, "name            TEXT NOT NULL", 1).replacen(
        "CREATE TABLE users",
        "CREATE TABLE users_rebuilt",
        1,
    );
    // Its indexes and triggers go with it: made again after.
    let dependents: Vec<String> = tx
        .prepare(
            "SELECT sql FROM sqlite_schema WHERE tbl_name = 'users' AND type IN ('index', 'trigger') AND sql IS NOT NULL",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    tx.execute_batch(&rebuilt)?;
    tx.execute_batch(
        "INSERT INTO users_rebuilt SELECT * FROM users;
         DROP TABLE users;
         ALTER TABLE users_rebuilt RENAME TO users;",
    )?;
    for sql in &dependents {
        tx.execute_batch(sql)?;
    }
    tx.execute_batch(
        "ALTER TABLE users ADD COLUMN tenant INTEGER NOT NULL DEFAULT 0;
         UPDATE users SET tenant = admin_id WHERE admin_id IN (SELECT id FROM admins WHERE role = 'reseller');
         CREATE UNIQUE INDEX users_name_in_tenant ON users (tenant, name);
         CREATE INDEX users_name_nocase_in_tenant ON users (tenant, name COLLATE NOCASE);
         INSERT INTO user_search (user_search) VALUES ('rebuild');",
    )?;
    Ok(())
}

/// Applies `pending` (the migrations after the first `applied`) in one transaction: all or
/// none, and one synced commit (a first start made one for each of the thirty-odd).
fn apply(conn: &mut Connection, pending: &[&str], applied: usize) -> Result<(), Error> {
    if pending.is_empty() {
        return Ok(());
    }
    // A table rebuilt drops its old self: with foreign keys on, that would delete what refers
    // to it. Off around the transaction (the pragma does nothing inside one), checked after.
    let rebuilds = pending.contains(&USERS_PER_TENANT);
    if rebuilds {
        conn.pragma_update(None, "foreign_keys", false)?;
    }
    let result = (|| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
        for (index, sql) in pending.iter().enumerate() {
            if *sql == USERS_PER_TENANT {
                users_per_tenant(&tx)?;
            } else {
                tx.execute_batch(sql)?;
            }
            tx.pragma_update(None, "user_version", applied + index + 1)?;
        }
        if rebuilds {
            let broken: i64 = tx.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| row.get(0))?;
            if broken > 0 {
                return Err(Error::Internal(format!("rebuilding the users table would break {broken} references")));
            }
        }
        tx.commit()?;
        Ok(())
    })();
    if rebuilds {
        conn.pragma_update(None, "foreign_keys", true)?;
    }
    result
}

/// What nodes do with a device over a user's allowance (the owner's choice; refusing by
/// default).
pub(crate) fn device_policy(conn: &Connection) -> Result<hearth_shared::wire::DevicePolicy, Error> {
    let name: Option<String> = get_state_text(conn, "device_policy")?.and_then(|json| serde_json::from_str(&json).ok());
    Ok(name.and_then(|name| hearth_shared::wire::DevicePolicy::from_name(&name)).unwrap_or_default())
}

/// The owner's User-Agent rules (none until set).
pub(crate) fn ua_rules(conn: &Connection) -> Result<Vec<hearth_shared::agent::UaRule>, Error> {
    Ok(get_state_text(conn, "ua_rules")?.and_then(|json| serde_json::from_str(&json).ok()).unwrap_or_default())
}

/// Reads a named integer from `state` (0 when unset).
pub(crate) fn get_state(conn: &Connection, key: &str) -> Result<i64, Error> {
    let mut query = conn.prepare_cached("SELECT value FROM state WHERE key = ?1")?;
    Ok(query.query_row([key], |row| row.get(0)).optional()?.unwrap_or(0))
}

/// Reads a named text from `state`.
pub(crate) fn get_state_text(conn: &Connection, key: &str) -> Result<Option<String>, Error> {
    Ok(conn.query_row("SELECT value FROM state WHERE key = ?1", [key], |row| row.get(0)).optional()?)
}

/// Sets a named value in `state`.
pub(crate) fn set_state(conn: &Connection, key: &str, value: impl rusqlite::ToSql) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        rusqlite::params![key, value],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write committed without waiting for the disk is committed as any other, and the
    /// writer goes back to synced commits after it, whether it committed or failed.
    #[tokio::test]
    async fn an_unsynced_write_leaves_the_writer_synced() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("control.db")).unwrap();
        let level = |db: &Db| {
            let conn = db.inner.writer.lock().unwrap();
            conn.query_row("PRAGMA synchronous", [], |row| row.get::<_, i64>(0)).unwrap()
        };
        assert_eq!(level(&db), 2, "FULL");
        db.write_unsynced(|tx| {
            assert_eq!(tx.query_row("PRAGMA synchronous", [], |row| row.get::<_, i64>(0))?, 1, "NORMAL inside");
            set_state(tx, "unsynced", 5)
        })
        .await
        .unwrap();
        assert_eq!(level(&db), 2);
        let failed = db.write_unsynced(|tx| {
            set_state(tx, "unsynced", 6)?;
            Err::<(), _>(Error::Internal("refused".into()))
        });
        assert!(failed.await.is_err());
        assert_eq!(level(&db), 2);
        assert_eq!(db.read(|c| get_state(c, "unsynced")).await.unwrap(), 5, "the failed one rolled back");
    }

    /// The users table rebuilt for names per tenant (issue 46, 4) keeps every user, their
    /// groups, usage and search, gives a reseller's users the reseller's tenant, and lets two
    /// tenants hold one name while one tenant still cannot.
    #[test]
    fn the_users_table_rebuilt_for_tenants_keeps_everything() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        let before = MIGRATIONS.iter().position(|m| *m == USERS_PER_TENANT).unwrap();
        apply(&mut conn, &MIGRATIONS[..before], 0).unwrap();
        conn.execute_batch(
            "INSERT INTO admins (id, login, password_hash, role, created) VALUES (7, 'rita', 'x', 'reseller', 0);
             INSERT INTO admins (id, login, password_hash, role, created) VALUES (8, 'otto', 'x', 'operator', 0);
             INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, created, updated, note)
                 VALUES (1, 'grandma', x'01', x'', x'', x'', 0, 0, 'tablet in the kitchen');
             INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, created, updated, admin_id)
                 VALUES (2, 'sold', x'02', x'', x'', x'', 0, 0, 7);
             INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, created, updated, admin_id)
                 VALUES (3, 'staff', x'03', x'', x'', x'', 0, 0, 8);
             INSERT INTO user_groups (user_id, group_id) SELECT 1, id FROM groups WHERE name = 'default';
             INSERT INTO usage_daily (user_id, day, up, down) VALUES (1, 20000, 5, 6);",
        )
        .unwrap();
        apply(&mut conn, &MIGRATIONS[before..], before).unwrap();
        let fk: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).unwrap();
        assert!(fk, "foreign keys are on again");
        let tenants: Vec<(i64, i64)> = conn
            .prepare("SELECT id, tenant FROM users ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tenants, [(1, 0), (2, 7), (3, 0)], "a reseller's users are theirs; an operator's are everyone's");
        let kept: (i64, i64) = conn
            .query_row("SELECT (SELECT count(*) FROM user_groups), (SELECT count(*) FROM usage_daily)", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(kept, (1, 1), "what refers to users is kept");
        let found: i64 = conn
            .query_row("SELECT rowid FROM user_search WHERE user_search MATCH 'kitchen'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(found, 1, "search still finds by note");
        let insert = |id: i64, name: &str, tenant: i64| {
            conn.execute(
                "INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, created, updated, tenant)
                 VALUES (?1, ?2, randomblob(32), x'', x'', x'', 0, 0, ?3)",
                rusqlite::params![id, name, tenant],
            )
        };
        insert(4, "grandma", 7).expect("another tenant may use the name");
        assert!(insert(5, "grandma", 7).is_err(), "one tenant may not hold it twice");
        conn.execute("DELETE FROM users WHERE id = 1", []).unwrap();
        let cascaded: i64 = conn.query_row("SELECT count(*) FROM user_groups", [], |r| r.get(0)).unwrap();
        assert_eq!(cascaded, 0, "deleting a user still takes its memberships with it");
    }

    #[test]
    fn migrations_apply_once_and_refuse_newer_schemas() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.db");
        let db = Db::open(&path).unwrap();
        db.write_blocking(|tx| set_state(tx, "k", 5)).unwrap();
        drop(db);
        let db = Db::open(&path).unwrap();
        assert_eq!(db.read_blocking(|c| get_state(c, "k")).unwrap(), 5);
        let groups: i64 =
            db.read_blocking(|c| Ok(c.query_row("SELECT count(*) FROM groups", [], |r| r.get(0))?)).unwrap();
        assert_eq!(groups, 1, "the default group is made once");
        drop(db);
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        let err = Db::open(&path).err().unwrap().to_string();
        assert!(err.contains("newer Hearth"), "{err}");
    }

    /// Pending migrations go in together or not at all: one that fails leaves the database at
    /// the schema it had, and the ones before it in the same start undone.
    #[test]
    fn a_failing_migration_leaves_the_schema_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("control.db")).unwrap();
        apply(&mut conn, &MIGRATIONS[..1], 0).unwrap();
        let err = apply(&mut conn, &["CREATE TABLE later (a);", "NOT SQL AT ALL;"], 1).unwrap_err();
        assert!(err.to_string().contains("syntax error"), "{err}");
        let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, 1);
        let later: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = 'later'", [], |row| row.get(0)).unwrap();
        assert_eq!(later, 0, "the migration before the failing one is undone with it");
        apply(&mut conn, &MIGRATIONS[1..], 1).unwrap();
        let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, MIGRATIONS.len());
    }

    /// A database from before many edges: its edge becomes `main`, holding everything but what
    /// waited in the outbox or was set aside, which goes out again; its drain cursor is kept.
    #[test]
    fn the_outbox_of_one_edge_becomes_the_main_edges_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.db");
        let before = MIGRATIONS.iter().position(|m| *m == include_str!("edges.sql")).unwrap();
        let conn = Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..before] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", before).unwrap();
        conn.execute_batch(
            "INSERT INTO streams (name, version) VALUES ('sub/a', 1), ('sub/b', 2), ('sub/c', 1), ('creds/1', 4);
             INSERT INTO outbox (stream, version, created) VALUES ('sub/b', 2, 0);
             INSERT INTO outbox_held (stream, version, reason, held_at) VALUES ('creds/1', 4, 'rollback', 0);
             INSERT INTO state (key, value) VALUES ('edge_url', 'https://edge.example'), ('drain_cursor', 7);",
        )
        .unwrap();
        drop(conn);
        let db = Db::open(&path).unwrap();
        let main = db.read_blocking(|c| edges::by_name(c, edges::MAIN)).unwrap().expect("the main edge");
        assert_eq!((main.url.as_str(), main.drained), ("https://edge.example", 7));
        let lacks: Vec<String> = db
            .read_blocking(|c| {
                let mut query = c.prepare("SELECT name FROM streams WHERE seq > ?1 ORDER BY name")?;
                Ok(query.query_map([main.pushed], |row| row.get(0))?.collect::<Result<_, _>>()?)
            })
            .unwrap();
        assert_eq!(lacks, ["creds/1", "sub/b"]);
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("control.db")).unwrap();
        let result: Result<(), Error> = db.write_blocking(|tx| {
            set_state(tx, "k", 1)?;
            Err(Error::invalid("test", "refused"))
        });
        assert!(result.is_err());
        assert_eq!(db.read_blocking(|c| get_state(c, "k")).unwrap(), 0);
    }
}
