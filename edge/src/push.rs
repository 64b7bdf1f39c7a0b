//! Checking a push from control before anything is stored.
//!
//! A push is a [`PushBundle`]: key records (rotations) first, then one signed batch manifest,
//! then the item envelopes it lists. [`check`] verifies the manifest (one signature for the
//! whole push) against the trust the edge holds, matches every item to its manifest entry by
//! stream, version and the hash of its whole encoding (so not a byte of what is stored differs
//! from what control signed), and turns the push into [`Write`]s. The store then applies each
//! write with [`decide`] inside one transaction per shard: a higher version replaces, the same
//! envelope again is a no-op, and a lower version or the same version with other content is
//! refused, which rolls the whole shard back. What the edge holds for a stored stream is the
//! [`ItemDigest`] of the item's bytes ([`Stored`]); what it holds for the batch is the
//! manifest's [`EnvelopeDigest`](hearth_shared::trust::EnvelopeDigest), as a verifier does.

use hearth_shared::Digest;
use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::trust::{Arrival, Clash, Expect, ItemDigest, StreamState, Trust, VerifyError, arrival, verify};
use hearth_shared::wire::{self, BatchManifest, NodeId, NodeRecord, PushBundle, Stream, stream};

/// The largest push parsed at all (about 8,000 snapshots).
pub const MAX_PUSH_BYTES: usize = 32 * 1024 * 1024;

/// Where a write lands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Target {
    /// A subscription link's snapshot, by token hash (sharded by it on Cloudflare).
    Link(Digest),
    /// A node's credential set, or its delta to the last full one (`creds-delta/<node>`):
    /// both kept by stream name beside the node's other streams.
    Creds(NodeId),
    /// A node's registration: the edge learns node keys only from these.
    Node(NodeId),
    /// Control's acknowledgement of a node's usage reports (for nodes that reach only the
    /// edge: a control at home behind NAT).
    Ack(NodeId),
    /// Control's recovery archive.
    Archive,
    /// The owner's edge settings (User-Agent rules).
    Settings,
    /// Which nodes are told to run which release.
    Rollout,
    /// The release being rolled out (from `PUT /<api>/release`, never in a push).
    Release,
}

/// What an edge holds for a stored stream: its version and the digest of its item's bytes.
pub type Stored = StreamState<ItemDigest>;

/// One stream's new version, checked against the manifest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Write {
    /// Where it lands.
    pub target: Target,
    /// The stream.
    pub stream: String,
    /// Its new version.
    pub version: u64,
    /// The item's hash (SHA-256 of its encoding), or zeros for a deletion.
    pub digest: ItemDigest,
    /// The item envelope as control signed it; `None` deletes the stream (keeping a
    /// tombstone at this version, so an older envelope can never come back).
    #[serde(with = "serde_bytes")]
    pub envelope: Option<Vec<u8>>,
}

impl Write {
    /// The state the store keeps for the stream after this write.
    pub fn state(&self) -> Stored {
        Stored { version: self.version, digest: self.digest }
    }
}

/// A push that passed every check, ready to store.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The trust after the push's key records.
    pub trust: Trust,
    /// Whether the key records changed it.
    pub trust_changed: bool,
    /// The key records the trust holds after the push's ([`Trust::chain`]), as the header a
    /// node's pull is answered with ([`hearth_shared::nodeauth::KEYS_HEADER`]), when the push
    /// carried any: stored with the trust, so nodes that reach only the edge learn rotations
    /// too.
    pub keys_header: Option<String>,
    /// The manifest's state, to store once the writes are applied.
    pub batch: StreamState,
    /// True when this very batch was applied before: nothing to do.
    pub unchanged: bool,
    /// The writes, in manifest order.
    pub writes: Vec<Write>,
}

/// Why a push was refused. Nothing was stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// Over [`MAX_PUSH_BYTES`].
    #[error("push of {0} bytes is over the limit")]
    Oversized(usize),
    /// Not a push bundle.
    #[error("malformed push: {0}")]
    Malformed(&'static str),
    /// A key record did not verify.
    #[error("key record refused: {0}")]
    KeyRecord(VerifyError),
    /// The batch manifest did not verify (bad signature, replay, rollback, expiry...).
    #[error("batch manifest refused: {0}")]
    Manifest(VerifyError),
    /// An item does not match the manifest or is not what its stream holds.
    #[error("item for {stream} refused: {reason}")]
    Item {
        /// The item's stream.
        stream: String,
        /// Why.
        reason: String,
    },
    /// The manifest lists a stream with no item in the push.
    #[error("the manifest lists {0} but the push has no item for it")]
    MissingItem(String),
    /// A stream's stored version forbids the write.
    #[error("{stream}: {}", stored_clash(clash))]
    Refused {
        /// The stream.
        stream: String,
        /// Why: a rollback or conflicting content.
        clash: Clash,
    },
}

/// A clash with a stored stream, in the edge's words (control shows them to the owner).
fn stored_clash(clash: &Clash) -> String {
    match clash {
        Clash::Conflict { version } => format!("version {version} already stored with other content"),
        Clash::Rollback { have, got } => format!("version {got} is older than the stored {have} (rollback)"),
    }
}

impl PushError {
    /// The one stream this refusal is about, when it is about one (control sets that stream
    /// aside and pushes the rest).
    pub fn stream(&self) -> Option<&str> {
        match self {
            PushError::Item { stream, .. } | PushError::Refused { stream, .. } | PushError::MissingItem(stream) => {
                Some(stream)
            }
            _ => None,
        }
    }

    /// The HTTP status for this refusal: 409 for version conflicts, 413 for size, else 400.
    pub fn status(&self) -> u16 {
        match self {
            PushError::Oversized(_) => 413,
            PushError::Refused { .. }
            | PushError::Manifest(VerifyError::Stale { .. } | VerifyError::Conflict { .. }) => 409,
            _ => 400,
        }
    }
}

fn item_error(stream: &str, reason: impl Into<String>) -> PushError {
    PushError::Item { stream: stream.to_owned(), reason: reason.into() }
}

/// What a stream name is, and what its items must be.
fn target_of(stream: &str) -> Option<(Target, Kind, Audience)> {
    let parsed: Stream = stream.parse().ok()?;
    let (kind, audience) = parsed.pushed()?;
    let target = match parsed {
        Stream::Snapshot(hash) => Target::Link(hash),
        Stream::Creds(node) | Stream::CredsDelta(node) => Target::Creds(node),
        Stream::UsageAck(node) => Target::Ack(node),
        Stream::Node(node) => Target::Node(node),
        Stream::EdgeSettings => Target::Settings,
        Stream::Rollout => Target::Rollout,
        Stream::Usage(_) | Stream::Keys(_) | Stream::Batch | Stream::Archive | Stream::Release => return None,
    };
    Some((target, kind, audience))
}

/// The owner's settings in a stored edge-settings envelope (none if it does not decode: it
/// was verified when pushed).
pub fn stored_settings(envelope: &[u8]) -> wire::EdgeSettings {
    hearth_shared::envelope::Envelope::stored_body(envelope)
        .and_then(|body| wire::EdgeSettings::decode(body).ok())
        .unwrap_or_default()
}

/// Checks a push against the edge's `trust` and the stored batch state, at `now` (Unix s).
pub fn check(bytes: &[u8], trust: &Trust, batch: Option<&StreamState>, now: u64) -> Result<Checked, PushError> {
    if bytes.len() > MAX_PUSH_BYTES {
        return Err(PushError::Oversized(bytes.len()));
    }
    let bundle: PushBundle = wire::decode(bytes, "push").map_err(|_| PushError::Malformed("not a push bundle"))?;
    let mut trust = trust.clone();
    let trust_changed = trust.accept_chain(&bundle.key_records, now).map_err(PushError::KeyRecord)?;
    // Handed on as the trust took the records (each verified, or byte for byte the one it
    // held), never as the push carried them.
    let keys_header = (!bundle.key_records.is_empty()).then(|| hearth_shared::trust::chain_to_header(&trust.chain()));
    let expect = Expect { kind: Kind::Batch, audience: Audience::Edge, stream: stream::BATCH };
    let verified = verify(&bundle.manifest, &trust, &expect, batch, now).map_err(PushError::Manifest)?;
    if verified.unchanged {
        return Ok(Checked {
            trust,
            trust_changed,
            keys_header,
            batch: verified.state(),
            unchanged: true,
            writes: Vec::new(),
        });
    }
    let manifest = BatchManifest::decode(&verified.envelope.body)
        .map_err(|_| PushError::Malformed("the batch body is not a manifest"))?;

    let mut items: Vec<Option<(Envelope, Vec<u8>)>> = vec![None; manifest.entries().len()];
    for bytes in bundle.items {
        let bytes = bytes.into_vec();
        // Decode leniently sized first: the item's own kind caps it below.
        let envelope = Envelope::decode(&bytes, Kind::Snapshot.max_len().max(Kind::CredentialSet.max_len()))
            .map_err(|e| item_error("?", e.to_string()))?;
        let stream_name = envelope.header.stream.clone();
        let at = manifest
            .entries()
            .binary_search_by(|entry| entry.stream.as_str().cmp(&stream_name))
            .map_err(|_| item_error(&stream_name, "not listed in the manifest"))?;
        if items[at].is_some() {
            return Err(item_error(&stream_name, "sent twice"));
        }
        items[at] = Some((envelope, bytes));
    }

    let mut writes = Vec::with_capacity(items.len());
    for (entry, item) in manifest.entries().iter().zip(items) {
        let (target, kind, audience) =
            target_of(&entry.stream).ok_or_else(|| item_error(&entry.stream, "not a stream the edge keeps"))?;
        let Some(digest) = entry.digest else {
            if item.is_some() {
                return Err(item_error(&entry.stream, "a deletion must not carry an item"));
            }
            writes.push(Write {
                target,
                stream: entry.stream.clone(),
                version: entry.version,
                digest: ItemDigest([0; 32]),
                envelope: None,
            });
            continue;
        };
        let (envelope, bytes) = item.ok_or_else(|| PushError::MissingItem(entry.stream.clone()))?;
        let header = &envelope.header;
        if bytes.len() > kind.max_len() {
            return Err(item_error(&entry.stream, "over the size limit for its kind"));
        }
        if header.kind != kind || header.audience != audience {
            return Err(item_error(&entry.stream, "wrong kind or audience for its stream"));
        }
        let digest = ItemDigest(digest);
        if header.version != entry.version || ItemDigest::of(&bytes) != digest {
            return Err(item_error(&entry.stream, "does not match its manifest entry"));
        }
        if !envelope.body_matches() {
            return Err(item_error(&entry.stream, "body does not match its hash"));
        }
        if now > header.expires {
            return Err(item_error(&entry.stream, "expired"));
        }
        if let Target::Node(node) = target {
            let record: NodeRecord = wire::decode(&envelope.body, "node record")
                .map_err(|_| item_error(&entry.stream, "not a node record"))?;
            if record.node != node {
                return Err(item_error(&entry.stream, "node record for another node"));
            }
        }
        writes.push(Write {
            target,
            stream: entry.stream.clone(),
            version: entry.version,
            digest,
            envelope: Some(bytes),
        });
    }
    Ok(Checked { trust, trust_changed, keys_header, batch: verified.state(), unchanged: false, writes })
}

/// Whether a write applies over the stored state: `Ok(true)` to store it, `Ok(false)` for the
/// same envelope again (a no-op), an error for a rollback or conflicting content (decided by
/// [`arrival`], as a verifier decides it).
pub fn decide(write: &Write, stored: Option<&Stored>) -> Result<bool, PushError> {
    match arrival(stored, write.version, &write.digest) {
        Ok(Arrival::New) => Ok(true),
        Ok(Arrival::Same) => Ok(false),
        Err(clash) => Err(PushError::Refused { stream: write.stream.clone(), clash }),
    }
}

/// Updates `trust`'s key for the node of an applied node-record write (a deletion, or a
/// record without a key, forgets the node).
pub fn apply_node_record(trust: &mut Trust, write: &Write) -> Result<(), PushError> {
    let Target::Node(node) = write.target else {
        return Ok(());
    };
    let key = match &write.envelope {
        Some(bytes) => {
            let envelope = Envelope::decode(bytes, Kind::NodeRecord.max_len())
                .map_err(|_| item_error(&write.stream, "not a node record"))?;
            wire::decode::<NodeRecord>(&envelope.body, "node record")
                .map_err(|_| item_error(&write.stream, "not a node record"))?
                .key
        }
        None => None,
    };
    match key {
        Some(key) => trust.set_node(node, key),
        None => trust.remove_node(node),
    }
    Ok(())
}

/// Whether a stored rollout envelope tells `node` to run a release; gives the release.
pub fn release_for(rollout: &[u8], node: NodeId) -> Option<u64> {
    let body = Envelope::stored_body(rollout)?;
    let rollout: hearth_shared::release::Rollout = wire::decode(body, "rollout").ok()?;
    (rollout.release != 0 && rollout.nodes.binary_search(&node).is_ok()).then_some(rollout.release)
}
