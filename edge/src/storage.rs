//! What the edge's API needs of storage, and the plan a push becomes before anything is
//! stored.
//!
//! [`crate::service`] answers every API route over a [`Storage`]: the native edge's libSQL
//! database, or the Worker's Durable Objects (the `Control` object's SQLite, with the links in
//! `Links` shards). A storage only reads and writes rows; every decision (whether a write
//! applies, what a node record does to the trust, what an export page holds) is made in
//! `service`, the same for both.
//!
//! A push is decided whole before anything is stored: [`plan`] turns a checked push and the
//! states its streams hold into a [`Plan`] (the writes that change something, each with the
//! state it was decided against), or refuses it. [`Storage::apply`] then stores the plan all
//! or nothing: nothing, and [`Changed`], if a stream no longer holds the state it was decided
//! against (another push came between; the push is answered 503, to be sent again).

use hearth_shared::nodeauth::{NodeAuthError, Nonce};
use hearth_shared::trust::{StreamState, Trust};
use hearth_shared::wire::{ExportItem, ExportPage, UsageDrain};

use crate::api::NamedFile;
use crate::push::{Checked, PushError, Stored, Write, apply_node_record, decide};

/// A stream's stored state and envelope (`None` envelope: deleted, a tombstone).
pub type StoredStream = (Stored, Option<Vec<u8>>);

/// The edge's storage, as the API uses it.
///
/// The Worker's futures are not `Send` (JavaScript objects, one thread), so the trait cannot
/// require it; the native edge calls it on its concrete store, whose futures are `Send`.
#[allow(async_fn_in_trait)]
pub trait Storage {
    /// Why storage failed (a refusal is never one: refusals are [`PushError`]s or [`Changed`]).
    type Error: std::fmt::Display;

    /// A stream's stored state and envelope. Not for links, nor for the archive's bytes.
    async fn stream(&self, name: &str) -> Result<Option<StoredStream>, Self::Error>;

    /// A stream's stored state alone: what a write is decided against, without reading its
    /// envelope (the archive's is tens of megabytes).
    async fn state(&self, name: &str) -> Result<Option<Stored>, Self::Error>;

    /// A value kept by pushes ([`VALUE_TRUST`], [`VALUE_BATCH`], [`VALUE_KEYS`]).
    async fn value(&self, key: &str) -> Result<Option<Vec<u8>>, Self::Error>;

    /// The stored state of each write's target (a link by its token hash, any other stream by
    /// its name), in the order given.
    async fn states(&self, writes: &[Write]) -> Result<Vec<Option<Stored>>, Self::Error>;

    /// Stores a push's plan: every write (a link's row, or a stream's), then the plan's trust,
    /// batch state and key records as values, all or nothing. Stores nothing and gives
    /// [`Changed`] when a write's stream, or the batch state, no longer holds what it was
    /// decided against.
    async fn apply(&self, plan: &Plan) -> Result<Result<(), Changed>, Self::Error>;

    /// Stores control's archive, as [`Storage::apply`] stores a write.
    async fn put_archive(&self, planned: &Planned) -> Result<Result<(), Changed>, Self::Error>;

    /// The stored archive envelope, whole.
    async fn archive(&self) -> Result<Option<Vec<u8>>, Self::Error>;

    /// Stores the release's manifest (as [`Storage::apply`] stores a write) and its binaries,
    /// in place of the release before.
    async fn put_release(&self, planned: &Planned, files: &[NamedFile]) -> Result<Result<(), Changed>, Self::Error>;

    /// A binary of the stored release, whole.
    async fn release_file(&self, name: &str) -> Result<Option<Vec<u8>>, Self::Error>;

    /// Queues a node's usage report, unless that (node, sequence) is queued already.
    async fn enqueue_usage(&self, node: u64, seq: u64, envelope: &[u8]) -> Result<(), Self::Error>;

    /// Drops the queued reports up to `after` (control has them), then hands the next ones (at
    /// most [`UsageDrain::MAX_REPORTS`]), in queue order, to [`take_report`] until it says the
    /// drain is full.
    async fn drain_usage(&self, after: u64, drain: &mut UsageDrain) -> Result<(), Self::Error>;

    /// Hands the streams named after `after` (in name order, but `except`; at most
    /// `fill.limit`) to [`Fill::take`] until it says the page is full.
    async fn export_streams(&self, after: &str, except: &str, fill: &mut Fill) -> Result<(), Self::Error>;

    /// Takes a node request's nonce, as control's [`Seen`](hearth_shared::nodeauth::Seen) does: keeps (node, nonce) until
    /// `expires` (unix seconds), or refuses it with [`NodeAuthError::Replayed`] when it is kept
    /// and has not expired (`expires >= now`: the request was sent again), or with
    /// [`NodeAuthError::TooMany`] when the node has [`Seen::PER_NODE`](hearth_shared::nodeauth::Seen::PER_NODE) nonces that have not
    /// expired, so a node's key cannot grow the table past that. Expired nonces are dropped
    /// every [`NONCES_PRUNED_EVERY`] seconds, not on every request.
    async fn take_nonce(
        &self,
        node: u64,
        nonce: &Nonce,
        expires: u64,
        now: u64,
    ) -> Result<Result<(), NodeAuthError>, Self::Error>;

    /// How many shards the links are kept in (1 on a native edge).
    fn link_shards(&self) -> u32;

    /// Hands the links of `shard` after the token hash `after` (in hash order; at most
    /// `fill.limit`) to [`Fill::take`] until it says the page is full.
    async fn export_links(&self, shard: u32, after: &[u8], fill: &mut Fill) -> Result<(), Self::Error>;
}

/// How often (seconds) a storage drops the node nonces that have expired.
pub const NONCES_PRUNED_EVERY: u64 = 60;

/// What a storage asks of its `node_nonces` table (node `?1`, nonce `?2`, now `?3`) before it
/// takes a nonce: how many of the node's nonces have not expired (`live`), and whether the
/// nonce is one of them (`seen`, 0 or 1).
pub const NONCES_LIVE: &str = "SELECT COUNT(*) AS live, COALESCE(MAX(nonce = ?2), 0) AS seen \
     FROM node_nonces WHERE node = ?1 AND expires >= ?3";

/// The trust learned from pushes (postcard).
pub const VALUE_TRUST: &str = "trust";
/// The last batch applied (a postcard [`StreamState`]).
pub const VALUE_BATCH: &str = "batch";
/// The key records of the last push that carried any, as a node's pull is answered with them.
pub const VALUE_KEYS: &str = "keys";

/// A stream was changed by someone else between a write's decision and its storing: nothing
/// was stored. Sent between the Worker's objects as it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Changed {
    /// The stream.
    pub stream: String,
}

impl Changed {
    /// The answer to a request whose write was not stored for this: not a refusal of what it
    /// sent (nothing is wrong with it), but a busy edge, to be sent the same again.
    pub fn reply(&self) -> crate::Reply {
        let message = format!("{} changed while this request was stored; send it again", self.stream);
        let mut reply = crate::api::error(503, "changed", &message);
        reply.headers.push(("retry-after", "1".to_owned()));
        reply
    }
}

/// A write that changes its stream, with the state it was decided against.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Planned {
    /// The write.
    pub write: Write,
    /// What its stream held when it was decided (`None`: nothing).
    pub before: Option<Stored>,
}

impl Planned {
    /// Whether the stream still holds what the write was decided against; the storage calls
    /// this with the state it reads inside its transaction.
    pub fn still(&self, current: Option<&Stored>) -> Result<(), Changed> {
        if current == self.before.as_ref() { Ok(()) } else { Err(Changed { stream: self.write.stream.clone() }) }
    }
}

/// A push decided whole, ready to store.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The writes that change their stream, in manifest order.
    pub writes: Vec<Planned>,
    /// How many writes were the stored envelope again.
    pub unchanged: usize,
    /// The trust after the push's key records and node records.
    pub trust: Trust,
    /// The push's key records, when it carried any.
    pub keys_header: Option<String>,
    /// The batch state the push was checked against.
    pub batch_before: Option<StreamState>,
    /// The batch state to store.
    pub batch: StreamState,
}

impl Plan {
    /// Whether the stored batch state is still the one the push was checked against.
    pub fn still(&self, current: Option<&StreamState>) -> Result<(), Changed> {
        if current == self.batch_before.as_ref() {
            Ok(())
        } else {
            Err(Changed { stream: hearth_shared::wire::stream::BATCH.to_owned() })
        }
    }
}

/// Decides every write of a checked push against what its stream holds (`stored`, in the
/// order of `checked.writes`): a refusal of any one refuses the push. Node records that
/// change update the trust's node keys.
pub fn plan(
    checked: Checked,
    stored: Vec<Option<Stored>>,
    batch_before: Option<StreamState>,
) -> Result<Plan, PushError> {
    debug_assert_eq!(checked.writes.len(), stored.len());
    let mut trust = checked.trust;
    let mut writes = Vec::with_capacity(checked.writes.len());
    let mut unchanged = 0;
    for (write, before) in checked.writes.into_iter().zip(stored) {
        if !decide(&write, before.as_ref())? {
            unchanged += 1;
            continue;
        }
        apply_node_record(&mut trust, &write)?;
        writes.push(Planned { write, before });
    }
    Ok(Plan { writes, unchanged, trust, keys_header: checked.keys_header, batch_before, batch: checked.batch })
}

/// Takes a queued report into a drain if it has room; `false` when it has not (the drain is
/// full: stop reading).
pub fn take_report(drain: &mut UsageDrain, id: u64, report: Vec<u8>) -> bool {
    if !drain.room_for(report.len()) {
        return false;
    }
    drain.cursor = id;
    drain.reports.push(report.into());
    true
}

/// An export page being filled: at most `limit` items, and no more bytes than control reads
/// of a page ([`ExportPage::room_for`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    /// The items taken.
    pub items: Vec<ExportItem>,
    /// The most items a page takes.
    pub limit: u32,
    /// Whether the page is full: more may follow its last item.
    pub full: bool,
}

impl Fill {
    /// An empty page of at most `limit` items.
    pub fn new(limit: u32) -> Fill {
        Fill { items: Vec::new(), limit, full: false }
    }

    /// Takes `item` if the page has room for it; `false` when it is full (stop reading).
    pub fn take(&mut self, item: ExportItem) -> bool {
        if self.full || self.items.len() >= self.limit as usize || !ExportPage::room_for(&self.items, &item) {
            self.full = true;
            return false;
        }
        self.items.push(item);
        self.full = self.items.len() >= self.limit as usize;
        true
    }
}
