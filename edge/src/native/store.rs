//! The native edge's storage: an embedded libSQL database with the schema the Worker's
//! Durable Objects use. One writer at a time; every push is one transaction.
//!
//! Links that were served recently are kept in memory ([`LinkCache`], bounded in bytes), so a
//! busy link is answered without a database read. A push updates the cache after its
//! transaction commits; a read that raced with a push never puts an older envelope back.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use hearth_shared::Digest;
use hearth_shared::devices::{self, Admission, HwidPolicy};
use hearth_shared::nodeauth::{NodeAuthError, Nonce, Seen};
use hearth_shared::trust::{ItemDigest, StreamState, Trust};
use hearth_shared::wire::{ExportItem, SubToken, UsageDrain, decode, encode, stream};
use libsql::{Connection, params};
use tokio::sync::Mutex;

use crate::api::{NamedFile, link_stream};
use crate::push::{Stored, Target, Write};
use crate::serve;
use crate::storage::{
    Changed, Fill, NONCES_LIVE, NONCES_PRUNED_EVERY, Plan, Planned, Storage, StoredStream, VALUE_BATCH, VALUE_KEYS,
    VALUE_TRUST, take_report,
};

/// Unix milliseconds now (the store's times count in them).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

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
CREATE TABLE IF NOT EXISTS release_files (
    name TEXT PRIMARY KEY,
    bytes BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS usage_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    envelope BLOB NOT NULL,
    UNIQUE (node, seq)
) STRICT;
CREATE TABLE IF NOT EXISTS node_nonces (
    node INTEGER NOT NULL,
    nonce BLOB NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (node, nonce)
) STRICT;
CREATE INDEX IF NOT EXISTS node_nonces_expires ON node_nonces (expires);
CREATE TABLE IF NOT EXISTS devices (
    token_hash BLOB PRIMARY KEY,
    registry BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS archive_uploads (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS archive_pieces (
    upload INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (upload, seq)
) STRICT;
";

/// The most bytes of control's archive one row holds: the archive is stored and served a
/// piece at a time, so the edge never holds it whole (it is tens of megabytes).
pub const ARCHIVE_PIECE: usize = 256 * 1024;

/// Which upload's pieces are the stored archive (`state` key).
const VALUE_ARCHIVE_UPLOAD: &str = "archive_upload";

/// An upload that was neither kept nor dropped this long after it began was cut off by a
/// crash: its pieces go when the edge next starts.
const STALE_UPLOAD_SECS: u64 = 3600;

/// The archive the edge holds.
pub enum StoredArchive {
    /// In pieces: the upload they belong to, how many, and their length in all.
    Pieces {
        /// The upload.
        upload: i64,
        /// How many pieces.
        pieces: i64,
        /// Bytes in all.
        len: u64,
    },
    /// Whole, in its stream's row (as edges before pieces stored it).
    Whole(Vec<u8>),
}

/// Why storage failed (as opposed to a push being refused).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database said no.
    #[error("database: {0}")]
    Db(#[from] libsql::Error),
    /// Stored bytes do not decode.
    #[error("stored {0} does not decode")]
    Corrupt(&'static str),
    /// A remote replica was asked of a build without it.
    #[error(
        "this hearth-edge was built without the `remote-replica` feature (cargo build -p hearth-edge --features remote-replica)"
    )]
    NoReplicaSupport,
}

impl StoreError {
    /// Whether the database could not grow: the disk is full (SQLite's `SQLITE_FULL`, or an
    /// `ENOSPC` from the file system).
    pub fn is_disk_full(&self) -> bool {
        let StoreError::Db(error) = self else { return false };
        let text = error.to_string();
        text.contains("database or disk is full") || text.contains("No space left on device")
    }
}

/// A remote libSQL server (sqld, or Turso) this edge's database replicates: reads are served
/// from the local file, writes (pushes, usage reports) go to the server, and changes other
/// edges wrote arrive by [`Store::sync`].
#[derive(Clone)]
pub struct Replica {
    /// The server's URL (`https://...` or `http://...`).
    pub url: String,
    /// The server's auth token (empty for none). Never logged.
    pub auth_token: String,
}

/// Envelopes of links read recently, up to a budget in bytes. When the budget is reached the
/// cache starts over (empty), which keeps it simple and bounded; unknown links are never
/// cached, so scanning tokens cannot fill it.
struct LinkCache {
    links: HashMap<Digest, Arc<[u8]>>,
    bytes: usize,
    budget: usize,
    /// Bumped by every push, after its commit: a read that began before can tell.
    generation: u64,
}

/// What a cached link costs besides its envelope (key, pointer, table slot), roughly.
const ENTRY_OVERHEAD: usize = 96;

impl LinkCache {
    fn get(&self, hash: &Digest) -> Option<Arc<[u8]>> {
        self.links.get(hash).cloned()
    }

    fn insert(&mut self, hash: Digest, envelope: Arc<[u8]>) {
        let cost = envelope.len() + ENTRY_OVERHEAD;
        if cost > self.budget {
            return;
        }
        if self.bytes + cost > self.budget {
            self.links = HashMap::new();
            self.bytes = 0;
        }
        if let Some(old) = self.links.insert(hash, envelope) {
            self.bytes -= old.len() + ENTRY_OVERHEAD;
        }
        self.bytes += cost;
    }

    fn forget(&mut self, hash: &Digest) {
        if let Some(old) = self.links.remove(hash) {
            self.bytes -= old.len() + ENTRY_OVERHEAD;
        }
    }
}

/// The database.
pub struct Store {
    conn: Connection,
    cache: std::sync::RwLock<LinkCache>,
    /// Links a push changed or deleted since the edge last asked ([`Store::take_changed_links`]).
    changed_links: std::sync::Mutex<Vec<Digest>>,
    // The one statement on the hot path, prepared once (parsing it took a large share of an
    // answer's CPU); a statement runs one query at a time, hence the lock.
    link_lookup: Mutex<libsql::Statement>,
    // libSQL connections are shared; writes take this so transactions never interleave.
    writer: Mutex<()>,
    /// When expired node nonces were last dropped (unix seconds).
    nonces_pruned: std::sync::atomic::AtomicU64,
    _reader: Connection,
    db: libsql::Database,
}

fn i(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn u(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn state_of(version: i64, digest: Vec<u8>) -> Result<Stored, StoreError> {
    Ok(Stored {
        version: u64::try_from(version).map_err(|_| StoreError::Corrupt("version"))?,
        digest: ItemDigest(digest.try_into().map_err(|_| StoreError::Corrupt("digest"))?),
    })
}

/// Where a write's row is: its table, key column and key.
fn row_of(write: &Write) -> (&'static str, &'static str, libsql::Value) {
    match &write.target {
        Target::Link(hash) => ("links", "token_hash", hash.to_vec().into()),
        Target::Creds(_)
        | Target::Ack(_)
        | Target::Node(_)
        | Target::Archive
        | Target::Settings
        | Target::Rollout
        | Target::Release => ("streams", "name", write.stream.clone().into()),
    }
}

/// The statements that read and store writes' rows, each prepared once for the writes of one
/// transaction: parsing their SQL for every write of a push (it carries up to 2,000) was
/// about an eighth of the edge's CPU while it took 100,000 users created in bulk.
struct RowStatements<'c> {
    conn: &'c Connection,
    /// For each table a write's row may be in: its state's SELECT and its upsert.
    prepared: Vec<(&'static str, libsql::Statement, libsql::Statement)>,
}

impl<'c> RowStatements<'c> {
    fn new(conn: &'c Connection) -> RowStatements<'c> {
        RowStatements { conn, prepared: Vec::new() }
    }

    /// The statements of `write`'s table, and the row's key.
    async fn of(
        &mut self,
        write: &Write,
    ) -> Result<(&libsql::Statement, &libsql::Statement, libsql::Value), StoreError> {
        let (table, key_column, key) = row_of(write);
        let at = match self.prepared.iter().position(|(t, ..)| *t == table) {
            Some(at) => at,
            None => {
                let select =
                    self.conn.prepare(&format!("SELECT version, digest FROM {table} WHERE {key_column} = ?1")).await?;
                let upsert = self
                    .conn
                    .prepare(&format!(
                        "INSERT INTO {table} ({key_column}, version, digest, envelope) VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT ({key_column}) DO UPDATE SET version = ?2, digest = ?3, envelope = ?4"
                    ))
                    .await?;
                self.prepared.push((table, select, upsert));
                self.prepared.len() - 1
            }
        };
        let (_, select, upsert) = &self.prepared[at];
        select.reset();
        upsert.reset();
        Ok((select, upsert, key))
    }

    /// The stored state of `write`'s row.
    async fn state(&mut self, write: &Write) -> Result<Option<Stored>, StoreError> {
        let (select, _, key) = self.of(write).await?;
        let mut rows = select.query([key]).await?;
        match rows.next().await? {
            Some(row) => Ok(Some(state_of(row.get(0)?, row.get(1)?)?)),
            None => Ok(None),
        }
    }

    /// Stores `write`'s row.
    async fn put(&mut self, write: &Write) -> Result<(), StoreError> {
        let (_, upsert, key) = self.of(write).await?;
        upsert.execute(params![key, i(write.version), write.digest.0.to_vec(), write.envelope.clone()]).await?;
        Ok(())
    }
}

async fn value(conn: &Connection, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let mut rows = conn.query("SELECT value FROM state WHERE key = ?1", params![key]).await?;
    Ok(match rows.next().await? {
        Some(row) => Some(row.get(0)?),
        None => None,
    })
}

impl Store {
    /// The links pushes changed or deleted since the last call (the edge forgets their
    /// windows, so a rotated link is not answered 429 for the rest of its window).
    pub fn take_changed_links(&self) -> Vec<Digest> {
        std::mem::take(&mut *self.changed_links.lock().expect("changed links lock"))
    }

    /// Opens (or creates) the database at `path`, keeping up to `cache_bytes` of recently
    /// served links in memory (0: none); with `replica`, as a replica of a remote server,
    /// first brought up to date with it.
    pub async fn open(path: &Path, cache_bytes: usize, replica: Option<&Replica>) -> Result<Store, StoreError> {
        let db = match replica {
            None => libsql::Builder::new_local(path).build().await?,
            #[cfg(feature = "remote-replica")]
            Some(replica) => {
                let db = libsql::Builder::new_remote_replica(path, replica.url.clone(), replica.auth_token.clone())
                    .read_your_writes(true)
                    .build()
                    .await?;
                db.sync().await?;
                db
            }
            #[cfg(not(feature = "remote-replica"))]
            Some(_) => return Err(StoreError::NoReplicaSupport),
        };
        let conn = db.connect()?;
        if replica.is_none() {
            // journal_mode answers with a row, so it is a query. (A replica's file is the
            // replication library's to set up.)
            conn.query("PRAGMA journal_mode = WAL", ()).await?;
            conn.execute("PRAGMA synchronous = NORMAL", ()).await?;
        }
        conn.execute_batch(SCHEMA).await?;
        // Links are read on a connection of their own, so a read never sees a push's
        // transaction before it commits (WAL gives each read the last committed state).
        let reader = db.connect()?;
        let link_lookup = Mutex::new(reader.prepare("SELECT envelope FROM links WHERE token_hash = ?1").await?);
        let cache = LinkCache { links: HashMap::new(), bytes: 0, budget: cache_bytes, generation: 0 };
        let store = Store {
            conn,
            cache: std::sync::RwLock::new(cache),
            changed_links: std::sync::Mutex::new(Vec::new()),
            link_lookup,
            writer: Mutex::new(()),
            nonces_pruned: std::sync::atomic::AtomicU64::new(0),
            _reader: reader,
            db,
        };
        store.drop_stale_uploads(now_ms() / 1000).await?;
        Ok(store)
    }

    /// The stored envelope of a link, if the link exists and was not deleted.
    pub async fn link(&self, token_hash: &Digest) -> Result<Option<Arc<[u8]>>, StoreError> {
        let generation = {
            let cache = self.cache.read().expect("link cache lock");
            if let Some(envelope) = cache.get(token_hash) {
                return Ok(Some(envelope));
            }
            cache.generation
        };
        let statement = self.link_lookup.lock().await;
        statement.reset();
        let mut rows = statement.query(params![token_hash.to_vec()]).await?;
        let envelope = match rows.next().await? {
            Some(row) => row.get::<Option<Vec<u8>>>(0)?.map(Arc::<[u8]>::from),
            None => None,
        };
        drop(rows);
        statement.reset();
        drop(statement);
        if let Some(envelope) = &envelope {
            let mut cache = self.cache.write().expect("link cache lock");
            // A push that committed since the read began may have replaced this link.
            if cache.generation == generation {
                cache.insert(*token_hash, envelope.clone());
            }
        }
        Ok(envelope)
    }

    /// Admits the device a fetch of the link `token_hash` comes from (see
    /// [`serve::admit_device`]); a registry that changed is stored and queued for control (in
    /// place of the link's report queued before, if control has not taken it yet), together.
    pub async fn admit_device(
        &self,
        token_hash: &Digest,
        token: &SubToken,
        policy: &HwidPolicy,
        seen: &devices::Seen,
        now: u64,
    ) -> Result<Admission, StoreError> {
        let _writer = self.writer.lock().await;
        let mut rows =
            self.conn.query("SELECT registry FROM devices WHERE token_hash = ?1", params![token_hash.to_vec()]).await?;
        let stored: Option<Vec<u8>> = match rows.next().await? {
            Some(row) => Some(row.get(0)?),
            None => None,
        };
        drop(rows);
        let (admission, changed) = serve::admit_device(stored.as_deref(), policy, token, seen, now);
        if let Some(serve::Registered { report, sealed }) = changed {
            let (node, seq) = serve::device_slot(token_hash);
            let tx = self.conn.transaction().await?;
            tx.execute(
                "INSERT INTO devices (token_hash, registry) VALUES (?1, ?2)
                 ON CONFLICT (token_hash) DO UPDATE SET registry = ?2",
                params![token_hash.to_vec(), sealed],
            )
            .await?;
            tx.execute("DELETE FROM usage_queue WHERE node = ?1 AND seq = ?2", params![i(node), i(seq)]).await?;
            tx.execute(
                "INSERT INTO usage_queue (node, seq, envelope) VALUES (?1, ?2, ?3)",
                params![i(node), i(seq), report],
            )
            .await?;
            tx.commit().await?;
        }
        Ok(admission)
    }

    /// Brings a replica up to date with its server; `true` when anything changed (then the
    /// link cache starts over, and the caller reloads the trust). A local database has
    /// nothing to sync.
    pub async fn sync(&self) -> Result<bool, StoreError> {
        #[cfg(feature = "remote-replica")]
        {
            let replicated = self.db.sync().await?;
            if replicated.frames_synced() > 0 {
                let mut cache = self.cache.write().expect("link cache lock");
                cache.generation += 1;
                cache.links = HashMap::new();
                cache.bytes = 0;
                return Ok(true);
            }
        }
        let _ = &self.db;
        Ok(false)
    }

    /// The trust stored by earlier pushes, if any.
    pub async fn trust(&self) -> Result<Option<Trust>, StoreError> {
        self.value(VALUE_TRUST)
            .await?
            .map(|bytes| Trust::from_stored(&bytes).map_err(|_| StoreError::Corrupt("trust")))
            .transpose()
    }
}

/// Control's archive, in pieces ([`ARCHIVE_PIECE`]): an upload's pieces are stored as they
/// arrive, under an upload of their own, and become the archive in one transaction once the
/// whole envelope verified ([`Store::keep_upload`]); a refused upload's pieces are dropped.
impl Store {
    /// Starts an upload at `now` (Unix seconds); gives its id.
    pub async fn begin_upload(&self, now: u64) -> Result<i64, StoreError> {
        let _writer = self.writer.lock().await;
        let mut rows =
            self.conn.query("INSERT INTO archive_uploads (started) VALUES (?1) RETURNING id", params![i(now)]).await?;
        let row = rows.next().await?.ok_or(StoreError::Corrupt("archive upload"))?;
        Ok(row.get(0)?)
    }

    /// Stores piece `seq` of `upload`.
    pub async fn put_piece(&self, upload: i64, seq: i64, bytes: Vec<u8>) -> Result<(), StoreError> {
        let _writer = self.writer.lock().await;
        self.conn
            .execute("INSERT INTO archive_pieces (upload, seq, bytes) VALUES (?1, ?2, ?3)", params![upload, seq, bytes])
            .await?;
        Ok(())
    }

    /// Drops an upload and its pieces.
    pub async fn drop_upload(&self, upload: i64) -> Result<(), StoreError> {
        let _writer = self.writer.lock().await;
        let tx = self.conn.transaction().await?;
        tx.execute("DELETE FROM archive_pieces WHERE upload = ?1", params![upload]).await?;
        tx.execute("DELETE FROM archive_uploads WHERE id = ?1", params![upload]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Makes `upload` (`pieces` pieces, `len` bytes: all of them, as the caller stored them) the
    /// stored archive, as `planned` records it, and drops the archive it replaces.
    pub async fn keep_upload(
        &self,
        upload: i64,
        pieces: i64,
        len: u64,
        planned: &Planned,
    ) -> Result<Result<(), Changed>, StoreError> {
        let _writer = self.writer.lock().await;
        let tx = self.conn.transaction().await?;
        let mut rows = RowStatements::new(&tx);
        if let Err(changed) = planned.still(rows.state(&planned.write).await?.as_ref()) {
            return Ok(Err(changed));
        }
        if count_pieces(&tx, upload).await? != (pieces, len) {
            return Err(StoreError::Corrupt("archive pieces"));
        }
        let old = value(&tx, VALUE_ARCHIVE_UPLOAD).await?;
        rows.put(&Write { envelope: None, ..planned.write.clone() }).await?;
        drop(rows);
        tx.execute(
            "INSERT INTO state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
            params![VALUE_ARCHIVE_UPLOAD, upload.to_be_bytes().to_vec()],
        )
        .await?;
        if let Some(old) = old.as_deref().and_then(upload_id) {
            tx.execute("DELETE FROM archive_pieces WHERE upload = ?1", params![old]).await?;
            tx.execute("DELETE FROM archive_uploads WHERE id = ?1", params![old]).await?;
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// The stored archive, without reading its pieces.
    pub async fn stored_archive(&self) -> Result<Option<StoredArchive>, StoreError> {
        let mut rows = self
            .conn
            .query("SELECT envelope IS NOT NULL FROM streams WHERE name = ?1", params![stream::ARCHIVE])
            .await?;
        let whole = match rows.next().await? {
            None => return Ok(None),
            Some(row) => row.get::<bool>(0)?,
        };
        drop(rows);
        if whole {
            return Ok(self
                .stream(stream::ARCHIVE)
                .await?
                .and_then(|(_, envelope)| envelope)
                .map(StoredArchive::Whole));
        }
        let Some(upload) = self.value(VALUE_ARCHIVE_UPLOAD).await?.as_deref().and_then(upload_id) else {
            return Ok(None);
        };
        let (pieces, len) = count_pieces(&self.conn, upload).await?;
        Ok(Some(StoredArchive::Pieces { upload, pieces, len }))
    }

    /// Piece `seq` of `upload` (`None`: gone, replaced by a newer archive).
    pub async fn archive_piece(&self, upload: i64, seq: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let mut rows = self
            .conn
            .query("SELECT bytes FROM archive_pieces WHERE upload = ?1 AND seq = ?2", params![upload, seq])
            .await?;
        Ok(match rows.next().await? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    /// Drops the pieces of uploads a crash cut off (begun over [`STALE_UPLOAD_SECS`] before
    /// `now`, and not the stored archive).
    async fn drop_stale_uploads(&self, now: u64) -> Result<(), StoreError> {
        let current = self.value(VALUE_ARCHIVE_UPLOAD).await?.as_deref().and_then(upload_id).unwrap_or(0);
        let before = i(now.saturating_sub(STALE_UPLOAD_SECS));
        let _writer = self.writer.lock().await;
        let tx = self.conn.transaction().await?;
        tx.execute(
            "DELETE FROM archive_pieces WHERE upload IN
             (SELECT id FROM archive_uploads WHERE started < ?1 AND id != ?2)",
            params![before, current],
        )
        .await?;
        tx.execute("DELETE FROM archive_uploads WHERE started < ?1 AND id != ?2", params![before, current]).await?;
        tx.commit().await?;
        Ok(())
    }
}

fn upload_id(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

/// How many pieces an upload has, and their bytes in all.
async fn count_pieces(conn: &Connection, upload: i64) -> Result<(i64, u64), StoreError> {
    let mut rows = conn
        .query(
            "SELECT count(*), coalesce(sum(length(bytes)), 0) FROM archive_pieces WHERE upload = ?1",
            params![upload],
        )
        .await?;
    let row = rows.next().await?.ok_or(StoreError::Corrupt("archive pieces"))?;
    Ok((row.get(0)?, u(row.get(1)?)))
}

impl Storage for Store {
    type Error = StoreError;

    async fn stream(&self, name: &str) -> Result<Option<StoredStream>, StoreError> {
        let mut rows =
            self.conn.query("SELECT version, digest, envelope FROM streams WHERE name = ?1", params![name]).await?;
        match rows.next().await? {
            Some(row) => Ok(Some((state_of(row.get(0)?, row.get(1)?)?, row.get::<Option<Vec<u8>>>(2)?))),
            None => Ok(None),
        }
    }

    async fn state(&self, name: &str) -> Result<Option<Stored>, StoreError> {
        let mut rows = self.conn.query("SELECT version, digest FROM streams WHERE name = ?1", params![name]).await?;
        match rows.next().await? {
            Some(row) => Ok(Some(state_of(row.get(0)?, row.get(1)?)?)),
            None => Ok(None),
        }
    }

    async fn value(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        value(&self.conn, key).await
    }

    async fn states(&self, writes: &[Write]) -> Result<Vec<Option<Stored>>, StoreError> {
        let mut rows = RowStatements::new(&self.conn);
        let mut states = Vec::with_capacity(writes.len());
        for write in writes {
            states.push(rows.state(write).await?);
        }
        Ok(states)
    }

    async fn apply(&self, plan: &Plan) -> Result<Result<(), Changed>, StoreError> {
        let _writer = self.writer.lock().await;
        // Dropped without a commit, the transaction rolls back.
        let tx = self.conn.transaction().await?;
        let batch = value(&tx, VALUE_BATCH).await?.and_then(|bytes| decode::<StreamState>(&bytes, "batch").ok());
        if let Err(changed) = plan.still(batch.as_ref()) {
            return Ok(Err(changed));
        }
        let mut rows = RowStatements::new(&tx);
        for planned in &plan.writes {
            if let Err(changed) = planned.still(rows.state(&planned.write).await?.as_ref()) {
                return Ok(Err(changed));
            }
            rows.put(&planned.write).await?;
            // A link deleted (its user deleted, or given a new link) takes its devices along.
            if let (Target::Link(hash), None) = (&planned.write.target, &planned.write.envelope) {
                tx.execute("DELETE FROM devices WHERE token_hash = ?1", params![hash.to_vec()]).await?;
            }
        }
        // Its statements finished before the commit.
        drop(rows);
        let trust = encode(&plan.trust);
        let batch = encode(&plan.batch);
        let keys = plan.keys_header.clone().map(String::into_bytes);
        for (key, value) in [(VALUE_TRUST, Some(trust)), (VALUE_BATCH, Some(batch)), (VALUE_KEYS, keys)] {
            let Some(value) = value else { continue };
            tx.execute(
                "INSERT INTO state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
                params![key, value],
            )
            .await?;
        }
        tx.commit().await?;
        let mut cache = self.cache.write().expect("link cache lock");
        cache.generation += 1;
        let mut changed = self.changed_links.lock().expect("changed links lock");
        for planned in &plan.writes {
            if let Target::Link(hash) = &planned.write.target {
                // Dropped rather than replaced: the next fetch reads the committed row.
                cache.forget(hash);
                changed.push(*hash);
            }
        }
        Ok(Ok(()))
    }

    async fn put_archive(&self, planned: &Planned) -> Result<Result<(), Changed>, StoreError> {
        let bytes = planned.write.envelope.as_deref().unwrap_or_default();
        let upload = self.begin_upload(now_ms() / 1000).await?;
        let kept = async {
            let mut seq = 0;
            for piece in bytes.chunks(ARCHIVE_PIECE) {
                self.put_piece(upload, seq, piece.to_vec()).await?;
                seq += 1;
            }
            self.keep_upload(upload, seq, bytes.len() as u64, planned).await
        }
        .await;
        if !matches!(kept, Ok(Ok(()))) {
            self.drop_upload(upload).await?;
        }
        kept
    }

    async fn archive(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(match self.stored_archive().await? {
            None => None,
            Some(StoredArchive::Whole(bytes)) => Some(bytes),
            Some(StoredArchive::Pieces { upload, pieces, len }) => {
                let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
                for seq in 0..pieces {
                    let piece = self.archive_piece(upload, seq).await?.ok_or(StoreError::Corrupt("archive pieces"))?;
                    bytes.extend_from_slice(&piece);
                }
                Some(bytes)
            }
        })
    }

    async fn put_release(&self, planned: &Planned, files: &[NamedFile]) -> Result<Result<(), Changed>, StoreError> {
        let _writer = self.writer.lock().await;
        let tx = self.conn.transaction().await?;
        let mut rows = RowStatements::new(&tx);
        if let Err(changed) = planned.still(rows.state(&planned.write).await?.as_ref()) {
            return Ok(Err(changed));
        }
        tx.execute("DELETE FROM release_files", ()).await?;
        for (name, bytes) in files {
            tx.execute("INSERT INTO release_files (name, bytes) VALUES (?1, ?2)", params![name.clone(), bytes.clone()])
                .await?;
        }
        rows.put(&planned.write).await?;
        drop(rows);
        tx.commit().await?;
        Ok(Ok(()))
    }

    async fn release_file(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut rows = self.conn.query("SELECT bytes FROM release_files WHERE name = ?1", params![name]).await?;
        Ok(match rows.next().await? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    async fn enqueue_usage(&self, node: u64, seq: u64, envelope: &[u8]) -> Result<(), StoreError> {
        let _writer = self.writer.lock().await;
        self.conn
            .execute(
                "INSERT INTO usage_queue (node, seq, envelope) VALUES (?1, ?2, ?3) ON CONFLICT (node, seq) DO NOTHING",
                params![i(node), i(seq), envelope.to_vec()],
            )
            .await?;
        Ok(())
    }

    async fn drain_usage(&self, after: u64, drain: &mut UsageDrain) -> Result<(), StoreError> {
        {
            let _writer = self.writer.lock().await;
            self.conn.execute("DELETE FROM usage_queue WHERE id <= ?1", params![i(after)]).await?;
        }
        let limit = UsageDrain::MAX_REPORTS as i64;
        let mut rows = self
            .conn
            .query("SELECT id, envelope FROM usage_queue WHERE id > ?1 ORDER BY id LIMIT ?2", params![i(after), limit])
            .await?;
        while let Some(row) = rows.next().await? {
            let id = u64::try_from(row.get::<i64>(0)?).map_err(|_| StoreError::Corrupt("usage id"))?;
            if !take_report(drain, id, row.get(1)?) {
                break;
            }
        }
        Ok(())
    }

    async fn export_streams(&self, after: &str, except: &str, fill: &mut Fill) -> Result<(), StoreError> {
        let mut rows = self
            .conn
            .query(
                "SELECT name, version, envelope FROM streams WHERE name > ?1 AND name != ?2 ORDER BY name LIMIT ?3",
                params![after, except, i64::from(fill.limit)],
            )
            .await?;
        while let Some(row) = rows.next().await? {
            if !fill.take(ExportItem { stream: row.get(0)?, version: u(row.get(1)?), envelope: row.get(2)? }) {
                break;
            }
        }
        Ok(())
    }

    async fn take_nonce(
        &self,
        node: u64,
        nonce: &Nonce,
        expires: u64,
        now: u64,
    ) -> Result<Result<(), NodeAuthError>, StoreError> {
        use std::sync::atomic::Ordering;
        let _writer = self.writer.lock().await;
        if now >= self.nonces_pruned.load(Ordering::Relaxed).saturating_add(NONCES_PRUNED_EVERY) {
            self.conn.execute("DELETE FROM node_nonces WHERE expires < ?1", params![i(now)]).await?;
            self.nonces_pruned.store(now, Ordering::Relaxed);
        }
        let mut rows = self.conn.query(NONCES_LIVE, params![i(node), nonce.to_vec(), i(now)]).await?;
        let row = rows.next().await?.ok_or(StoreError::Corrupt("a count"))?;
        let (live, seen): (i64, i64) = (row.get(0)?, row.get(1)?);
        drop(rows);
        if seen != 0 {
            return Ok(Err(NodeAuthError::Replayed));
        }
        if usize::try_from(live).unwrap_or(usize::MAX) >= Seen::PER_NODE {
            return Ok(Err(NodeAuthError::TooMany));
        }
        self.conn
            .execute(
                "INSERT INTO node_nonces (node, nonce, expires) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (node, nonce) DO UPDATE SET expires = ?3",
                params![i(node), nonce.to_vec(), i(expires)],
            )
            .await?;
        Ok(Ok(()))
    }

    fn link_shards(&self) -> u32 {
        1
    }

    async fn export_links(&self, _shard: u32, after: &[u8], fill: &mut Fill) -> Result<(), StoreError> {
        let mut rows = self
            .conn
            .query(
                "SELECT token_hash, version, envelope FROM links WHERE token_hash > ?1 ORDER BY token_hash LIMIT ?2",
                params![after.to_vec(), i64::from(fill.limit)],
            )
            .await?;
        while let Some(row) = rows.next().await? {
            let stream = link_stream(&row.get::<Vec<u8>>(0)?).ok_or(StoreError::Corrupt("a link's hash"))?;
            if !fill.take(ExportItem { stream, version: u(row.get(1)?), envelope: row.get(2)? }) {
                break;
            }
        }
        Ok(())
    }
}
