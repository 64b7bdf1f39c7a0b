//! The native edge's storage: an embedded libSQL database with the schema the Worker's
//! Durable Objects use. One writer at a time; every push is one transaction.

use std::path::Path;

use hearth_shared::Digest;
use hearth_shared::trust::{StreamState, Trust};
use hearth_shared::wire::{UsageDrain, decode};
use libsql::{Connection, params};
use tokio::sync::Mutex;

use crate::push::{Checked, PushError, Target, Write, apply_node_record, decide};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS links (
    token_hash BLOB PRIMARY KEY,
    version INTEGER NOT NULL,
    digest BLOB NOT NULL,
    envelope BLOB
) STRICT;
CREATE TABLE IF NOT EXISTS streams (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    digest BLOB NOT NULL,
    envelope BLOB
) STRICT;
CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS usage_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    envelope BLOB NOT NULL,
    UNIQUE (node, seq)
) STRICT;
";

/// Why storage failed (as opposed to a push being refused).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database said no.
    #[error("database: {0}")]
    Db(#[from] libsql::Error),
    /// Stored bytes do not decode.
    #[error("stored {0} does not decode")]
    Corrupt(&'static str),
    /// A push was refused while applying.
    #[error(transparent)]
    Refused(#[from] PushError),
}

/// The database.
pub struct Store {
    conn: Connection,
    // The one statement on the hot path, prepared once (parsing it took a large share of an
    // answer's CPU); a statement runs one query at a time, hence the lock.
    link_lookup: Mutex<libsql::Statement>,
    // libSQL connections are shared; writes take this so transactions never interleave.
    writer: Mutex<()>,
    _db: libsql::Database,
}

fn i(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn state_of(version: i64, digest: Vec<u8>) -> Result<StreamState, StoreError> {
    Ok(StreamState {
        version: u64::try_from(version).map_err(|_| StoreError::Corrupt("version"))?,
        digest: digest.try_into().map_err(|_| StoreError::Corrupt("digest"))?,
    })
}

/// What a push changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Streams written.
    pub written: usize,
    /// Streams that already held the very same envelope.
    pub unchanged: usize,
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let db = libsql::Builder::new_local(path).build().await?;
        let conn = db.connect()?;
        // journal_mode answers with a row, so it is a query.
        conn.query("PRAGMA journal_mode = WAL", ()).await?;
        conn.execute("PRAGMA synchronous = NORMAL", ()).await?;
        conn.execute_batch(SCHEMA).await?;
        let link_lookup = Mutex::new(conn.prepare("SELECT envelope FROM links WHERE token_hash = ?1").await?);
        Ok(Store { conn, link_lookup, writer: Mutex::new(()), _db: db })
    }

    /// The stored envelope of a link, if the link exists and was not deleted.
    pub async fn link(&self, token_hash: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        let statement = self.link_lookup.lock().await;
        statement.reset();
        let mut rows = statement.query(params![token_hash.to_vec()]).await?;
        let envelope = match rows.next().await? {
            Some(row) => row.get::<Option<Vec<u8>>>(0)?,
            None => None,
        };
        drop(rows);
        statement.reset();
        Ok(envelope)
    }

    /// A stream's stored version and envelope (`None` envelope: deleted).
    pub async fn stream(&self, name: &str) -> Result<Option<(StreamState, Option<Vec<u8>>)>, StoreError> {
        let mut rows =
            self.conn.query("SELECT version, digest, envelope FROM streams WHERE name = ?1", params![name]).await?;
        match rows.next().await? {
            Some(row) => Ok(Some((state_of(row.get(0)?, row.get(1)?)?, row.get::<Option<Vec<u8>>>(2)?))),
            None => Ok(None),
        }
    }

    async fn value(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut rows = self.conn.query("SELECT value FROM state WHERE key = ?1", params![key]).await?;
        Ok(match rows.next().await? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    /// The trust stored by earlier pushes, if any.
    pub async fn trust(&self) -> Result<Option<Trust>, StoreError> {
        self.value("trust")
            .await?
            .map(|bytes| decode(&bytes, "trust").map_err(|_| StoreError::Corrupt("trust")))
            .transpose()
    }

    /// The last batch applied.
    pub async fn batch(&self) -> Result<Option<StreamState>, StoreError> {
        self.value("batch")
            .await?
            .map(|bytes| decode(&bytes, "batch state").map_err(|_| StoreError::Corrupt("batch state")))
            .transpose()
    }

    /// Applies a checked push in one transaction: every write or none. Node records update
    /// `checked.trust`'s node keys, which is stored with the batch state.
    pub async fn apply(&self, checked: &mut Checked) -> Result<Applied, StoreError> {
        let _writer = self.writer.lock().await;
        let tx = self.conn.transaction().await?;
        let mut applied = Applied::default();
        for write in &checked.writes {
            let (table, key_column, key): (&str, &str, libsql::Value) = match &write.target {
                Target::Link(hash) => ("links", "token_hash", hash.to_vec().into()),
                Target::Creds(_) | Target::Ack(_) | Target::Node(_) | Target::Archive => {
                    ("streams", "name", write.stream.clone().into())
                }
            };
            let mut rows = tx
                .query(&format!("SELECT version, digest FROM {table} WHERE {key_column} = ?1"), [key.clone()])
                .await?;
            let stored = match rows.next().await? {
                Some(row) => Some(state_of(row.get(0)?, row.get(1)?)?),
                None => None,
            };
            drop(rows);
            if !decide(write, stored.as_ref())? {
                applied.unchanged += 1;
                continue;
            }
            tx.execute(
                &format!(
                    "INSERT INTO {table} ({key_column}, version, digest, envelope) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT ({key_column}) DO UPDATE SET version = ?2, digest = ?3, envelope = ?4"
                ),
                params![key, i(write.version), write.digest.to_vec(), write.envelope.clone()],
            )
            .await?;
            apply_node_record(&mut checked.trust, write)?;
            applied.written += 1;
        }
        let trust = hearth_shared::wire::encode(&checked.trust);
        let batch = hearth_shared::wire::encode(&checked.batch);
        for (key, value) in [("trust", trust), ("batch", batch)] {
            tx.execute(
                "INSERT INTO state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
                params![key, value],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(applied)
    }

    /// Queues a node's usage report; `false` when that (node, seq) is already queued.
    pub async fn enqueue_usage(&self, node: u64, seq: u64, envelope: &[u8]) -> Result<bool, StoreError> {
        let _writer = self.writer.lock().await;
        let inserted = self
            .conn
            .execute(
                "INSERT INTO usage_queue (node, seq, envelope) VALUES (?1, ?2, ?3) ON CONFLICT (node, seq) DO NOTHING",
                params![i(node), i(seq), envelope.to_vec()],
            )
            .await?;
        Ok(inserted == 1)
    }

    /// Drops what control has received (up to `after`) and hands it the next reports.
    pub async fn drain_usage(&self, after: u64, limit: u32) -> Result<UsageDrain, StoreError> {
        {
            let _writer = self.writer.lock().await;
            self.conn.execute("DELETE FROM usage_queue WHERE id <= ?1", params![i(after)]).await?;
        }
        let mut rows = self
            .conn
            .query("SELECT id, envelope FROM usage_queue WHERE id > ?1 ORDER BY id LIMIT ?2", params![i(after), limit])
            .await?;
        let mut drain = UsageDrain { cursor: after, reports: Vec::new() };
        while let Some(row) = rows.next().await? {
            drain.cursor = u64::try_from(row.get::<i64>(0)?).map_err(|_| StoreError::Corrupt("usage id"))?;
            drain.reports.push(row.get::<Vec<u8>>(1)?.into());
        }
        Ok(drain)
    }

    /// Stores control's archive if its version is newer than the stored one.
    pub async fn put_archive(&self, write: &Write) -> Result<bool, StoreError> {
        let _writer = self.writer.lock().await;
        let stored = self.stream(&write.stream).await?.map(|(state, _)| state);
        if !decide(write, stored.as_ref())? {
            return Ok(false);
        }
        self.conn
            .execute(
                "INSERT INTO streams (name, version, digest, envelope) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO UPDATE SET version = ?2, digest = ?3, envelope = ?4",
                params![write.stream.clone(), i(write.version), write.digest.to_vec(), write.envelope.clone()],
            )
            .await?;
        Ok(true)
    }
}
