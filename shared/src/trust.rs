//! Trust: which keys hold which role, and the checks every envelope goes through.
//!
//! A verifier (the edge, a node, control itself) starts from the root public key it was given
//! at enrollment and learns the other roles from root-signed [`KeyRecord`]s: version 1 of the
//! stream `keys/signing` certifies control's first signing key, and every later version
//! rotates it. Rotating the root itself needs the old root and the new one to sign (as TUF
//! does), so a stolen online key can never take over the root.
//!
//! [`verify`] runs the checks in the order of the design: size, strict decoding, type, signer
//! role and threshold, audience and stream, version against what the caller stored, expiry,
//! and the body's length and hash. Each refusal is its own [`VerifyError`] variant, so a node
//! can log a rollback as a rollback and a tampered body as a tampered body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Digest;
pub use crate::envelope::EnvelopeDigest;
use crate::envelope::{Audience, DecodeError, Envelope, Header, Kind, Received, Signature, signed_message};
use crate::keys::{KeyId, PublicKey, Role};
use crate::wire::stream;

/// A set of keys and how many of them must sign.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleKeys {
    /// The keys, at most one entry per key.
    pub keys: Vec<PublicKey>,
    /// How many distinct keys of `keys` must sign (at least 1).
    pub threshold: u8,
}

impl RoleKeys {
    /// One key, threshold one.
    pub fn single(key: PublicKey) -> RoleKeys {
        RoleKeys { keys: vec![key], threshold: 1 }
    }

    fn find(&self, id: &KeyId) -> Option<&PublicKey> {
        self.keys.iter().find(|key| key.id() == *id)
    }

    fn is_sane(&self) -> bool {
        let mut ids: Vec<KeyId> = self.keys.iter().map(PublicKey::id).collect();
        ids.sort();
        ids.dedup();
        self.threshold >= 1 && ids.len() == self.keys.len() && usize::from(self.threshold) <= ids.len()
    }
}

/// The body of a [`Kind::KeyRecord`] envelope: from its version on, these keys hold `role`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The role (root, signing or release).
    pub role: Role,
    /// The keys that hold it.
    pub keys: RoleKeys,
}

/// SHA-256 of an item's whole encoding, byte for byte (header, signatures and body): what a
/// batch manifest lists for an item and what an edge holds for a stream it stores, so not a
/// byte of what it serves differs from what control signed.
///
/// The two digests never mix: a state held as one is not compared with the other.
///
/// ```compile_fail
/// use hearth_shared::trust::{EnvelopeDigest, ItemDigest, StreamState, arrival};
/// let held = StreamState { version: 1, digest: EnvelopeDigest([0; 32]) };
/// let _ = arrival(Some(&held), 1, &ItemDigest([0; 32]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ItemDigest(pub Digest);

impl ItemDigest {
    /// The digest of `bytes`, an item's encoding.
    pub fn of(bytes: &[u8]) -> ItemDigest {
        ItemDigest(crate::sha256(bytes))
    }
}

/// The version last accepted on a stream and its digest: an [`EnvelopeDigest`] where a
/// verifier holds it, an [`ItemDigest`] where an edge stores the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamState<D = EnvelopeDigest> {
    /// The version.
    pub version: u64,
    /// The digest.
    pub digest: D,
}

/// How an offered version stands against what its stream holds, when it may be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Newer than what is held (or nothing is held): to be taken.
    New,
    /// The very version held, with the same digest: nothing to do.
    Same,
}

/// Why an offered version may not be taken over what its stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Clash {
    /// The version held, with another digest: the signer forked the stream. An alarm.
    #[error("version {version} seen before with different content: conflicting envelopes")]
    Conflict {
        /// The version.
        version: u64,
    },
    /// Older than the version held: a rollback or a replay.
    #[error("stale version {got} (holding {have}): rollback or replay")]
    Rollback {
        /// The version held.
        have: u64,
        /// The version offered.
        got: u64,
    },
}

/// Decides whether `version` with `digest` is new, the same again, a conflict or a rollback
/// against what a stream holds (`held`). The one place this is decided: envelopes that a
/// verifier checks ([`verify`]) and items that an edge stores go through it alike.
pub fn arrival<D: PartialEq>(held: Option<&StreamState<D>>, version: u64, digest: &D) -> Result<Arrival, Clash> {
    match held {
        None => Ok(Arrival::New),
        Some(held) if version > held.version => Ok(Arrival::New),
        Some(held) if version < held.version => Err(Clash::Rollback { have: held.version, got: version }),
        Some(held) if held.digest == *digest => Ok(Arrival::Same),
        Some(held) => Err(Clash::Conflict { version: held.version }),
    }
}

impl From<Clash> for VerifyError {
    fn from(clash: Clash) -> VerifyError {
        match clash {
            Clash::Conflict { version } => VerifyError::Conflict { version },
            Clash::Rollback { have, got } => VerifyError::Stale { have, got },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    keys: RoleKeys,
    state: StreamState,
    /// The key record that gave the role these keys, byte for byte as it verified (none for a
    /// root given out of band).
    record: Option<serde_bytes::ByteBuf>,
}

/// What a verifier trusts: the root, the roles the root certified, and the nodes' keys that
/// control registered. It serializes, so a node or the edge keeps it on disk.
///
/// It keeps the key records it took, byte for byte, and hands on only those ([`Trust::chain`]):
/// a record no newer than the one held cannot be verified again (an older root record is
/// signed by roots no longer held, and a signature by a key outside the role is never
/// checked), so it is taken only as the very bytes taken before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    root: Held,
    signing: Option<Held>,
    release: Option<Held>,
    nodes: BTreeMap<u64, RoleKeys>,
    /// The root records before the one held, oldest first, byte for byte as they verified.
    past_roots: Vec<serde_bytes::ByteBuf>,
}

/// A trust as builds before key records were kept stored it (a node's `trust.bin`, the
/// edge's stored trust): read by [`Trust::from_stored`] and stored again in today's form.
#[derive(Serialize, Deserialize)]
struct LegacyHeld {
    keys: RoleKeys,
    state: StreamState,
}

#[derive(Serialize, Deserialize)]
struct LegacyTrust {
    root: LegacyHeld,
    signing: Option<LegacyHeld>,
    release: Option<LegacyHeld>,
    nodes: BTreeMap<u64, RoleKeys>,
}

impl From<LegacyHeld> for Held {
    fn from(held: LegacyHeld) -> Held {
        Held { keys: held.keys, state: held.state, record: None }
    }
}

impl Trust {
    /// Reads a stored trust: today's form, or the form of builds that kept no key records. A
    /// trust read from that form holds its roles' keys and versions but none of their
    /// records; it takes each again from the next chain control hands on, when the record
    /// verifies and its header is the one held (see [`Trust::accept_key_record`]).
    pub fn from_stored(bytes: &[u8]) -> Result<Trust, crate::wire::WireError> {
        crate::wire::decode::<Trust>(bytes, "trust").or_else(|error| {
            let legacy: LegacyTrust = crate::wire::decode(bytes, "trust").map_err(|_| error)?;
            Ok(Trust {
                root: legacy.root.into(),
                signing: legacy.signing.map(Into::into),
                release: legacy.release.map(Into::into),
                nodes: legacy.nodes,
                past_roots: Vec::new(),
            })
        })
    }

    /// Starts from the root keys given out of band (at `init` or enrollment).
    pub fn new(root: RoleKeys) -> Trust {
        Trust {
            root: Held { keys: root, state: StreamState { version: 0, digest: EnvelopeDigest([0; 32]) }, record: None },
            signing: None,
            release: None,
            nodes: BTreeMap::new(),
            past_roots: Vec::new(),
        }
    }

    /// The key records this trust took, byte for byte as they verified, in the order a
    /// verifier takes them: every root record oldest first, then the signing and release
    /// records held. This, and never a chain as it was received, is what is stored and handed
    /// on ([`chain_to_header`]).
    pub fn chain(&self) -> Vec<&[u8]> {
        let held = [Some(&self.root), self.signing.as_ref(), self.release.as_ref()];
        self.past_roots
            .iter()
            .chain(held.into_iter().flatten().filter_map(|held| held.record.as_ref()))
            .map(|record| record.as_slice())
            .collect()
    }

    /// The record taken for `role` at `version`, if this trust keeps it.
    fn taken(&self, role: Role, version: u64) -> Option<&[u8]> {
        let held = self.held(role)?;
        if held.state.version == version {
            return held.record.as_deref().map(|record| record.as_slice());
        }
        if role != Role::Root {
            return None;
        }
        self.past_roots
            .iter()
            .find(|record| {
                Envelope::decode(record, Kind::KeyRecord.max_len()).is_ok_and(|e| e.header.version == version)
            })
            .map(|record| record.as_slice())
    }

    /// The keys that hold `role` now, if any are known.
    pub fn role(&self, role: Role) -> Option<&RoleKeys> {
        self.held(role).map(|held| &held.keys)
    }

    /// The version of the key record behind `role` (0 for a root given out of band).
    pub fn role_version(&self, role: Role) -> Option<u64> {
        self.held(role).map(|held| held.state.version)
    }

    /// A node's registered key.
    pub fn node(&self, node: u64) -> Option<&PublicKey> {
        self.nodes.get(&node).and_then(|keys| keys.keys.first())
    }

    /// Records a node's key, taken from a verified [`Kind::NodeRecord`] (never from the node).
    pub fn set_node(&mut self, node: u64, key: PublicKey) {
        self.nodes.insert(node, RoleKeys::single(key));
    }

    /// Forgets a node's key (the node was removed).
    pub fn remove_node(&mut self, node: u64) {
        self.nodes.remove(&node);
    }

    fn held(&self, role: Role) -> Option<&Held> {
        match role {
            Role::Root => Some(&self.root),
            Role::Signing => self.signing.as_ref(),
            Role::Release => self.release.as_ref(),
            Role::Node | Role::Recovery => None,
        }
    }

    /// Takes a root-signed key record: one newer than the record held for its role is
    /// verified and its keys then hold the role (a root rotation must also be signed by the new
    /// root's threshold); one no newer must be, byte for byte, the record taken at its version,
    /// and changes nothing. Anything else is refused and changes nothing.
    pub fn accept_key_record(&mut self, bytes: &[u8], now: u64) -> Result<KeyRecord, VerifyError> {
        let envelope = Envelope::decode(bytes, Kind::KeyRecord.max_len())?;
        let record: KeyRecord =
            postcard::from_bytes(&envelope.body).map_err(|_| VerifyError::Body("undecodable key record"))?;
        if !matches!(record.role, Role::Root | Role::Signing | Role::Release) {
            return Err(VerifyError::Body("key records are for the root, signing and release roles"));
        }
        if !record.keys.is_sane() {
            return Err(VerifyError::Body("key record with a bad threshold or repeated keys"));
        }
        let expected_stream = stream::keys(record.role);
        let header = &envelope.header;
        if header.kind == Kind::KeyRecord
            && header.stream == expected_stream
            && let Some(held) = self.held(record.role)
            && header.version <= held.state.version
        {
            let have = held.state.version;
            // A trust read from the form that kept no records (see [`Trust::from_stored`])
            // takes the record of the version it holds again when its header is the one held
            // and it verifies against the keys held now; it cannot verify older root records
            // (their signers are no longer held), so it passes them over: it neither takes
            // nor hands them on.
            if held.record.is_none() && header.version == have && have > 0 {
                if envelope.digest() != held.state.digest {
                    return Err(VerifyError::Conflict { version: have });
                }
                let held_keys = held.keys.clone();
                if record.role == Role::Root {
                    check_signatures(&envelope.header, &envelope.signatures, Role::Root, &held_keys, self)?;
                } else {
                    let expect = Expect { kind: Kind::KeyRecord, audience: Audience::Any, stream: &expected_stream };
                    verify(bytes, self, &expect, None, now)?;
                }
                if record.keys != held_keys {
                    return Err(VerifyError::Conflict { version: have });
                }
                let kept = Some(serde_bytes::ByteBuf::from(bytes.to_vec()));
                match record.role {
                    Role::Root => self.root.record = kept,
                    Role::Signing => self.signing.as_mut().expect("held").record = kept,
                    _ => self.release.as_mut().expect("held").record = kept,
                }
                return Ok(record);
            }
            if record.role == Role::Root && header.version < have && self.past_roots.is_empty() && have > 1 {
                return Ok(record);
            }
            return match self.taken(record.role, header.version) {
                Some(taken) if taken == bytes => Ok(record),
                Some(taken) => {
                    let same_header = Envelope::decode(taken, Kind::KeyRecord.max_len())
                        .is_ok_and(|taken| taken.digest() == envelope.digest());
                    Err(if same_header {
                        VerifyError::KeyRecordAltered { role: record.role, version: header.version }
                    } else {
                        VerifyError::Conflict { version: header.version }
                    })
                }
                None => Err(VerifyError::KeyRecordStale { role: record.role, have, got: header.version }),
            };
        }
        let stored = self.held(record.role).map(|held| held.state);
        let expect = Expect { kind: Kind::KeyRecord, audience: Audience::Any, stream: &expected_stream };
        let verified = verify(bytes, self, &expect, stored.as_ref(), now)?;
        if record.role == Role::Root {
            check_signatures(&verified.envelope.header, &verified.envelope.signatures, Role::Root, &record.keys, self)?;
        }
        let held = Held {
            keys: record.keys.clone(),
            state: verified.state(),
            record: Some(serde_bytes::ByteBuf::from(bytes.to_vec())),
        };
        match record.role {
            Role::Root => {
                let past = std::mem::replace(&mut self.root, held);
                self.past_roots.extend(past.record);
            }
            Role::Signing => self.signing = Some(held),
            _ => self.release = Some(held),
        }
        Ok(record)
    }

    /// Takes a chain of key records as control hands it out (every root record oldest first,
    /// then the latest signing and release records), each as [`Trust::accept_key_record`]
    /// takes it: the first one refused stops the chain, and then nothing of it is taken.
    /// Returns whether the trust changed.
    pub fn accept_chain<B: AsRef<[u8]>>(&mut self, records: &[B], now: u64) -> Result<bool, VerifyError> {
        let mut next = self.clone();
        for record in records {
            next.accept_key_record(record.as_ref(), now)?;
        }
        let changed = next != *self;
        *self = next;
        Ok(changed)
    }

    fn knows(&self, id: &KeyId) -> bool {
        [Role::Root, Role::Signing, Role::Release]
            .iter()
            .filter_map(|role| self.role(*role))
            .any(|keys| keys.find(id).is_some())
            || self.nodes.values().any(|keys| keys.find(id).is_some())
    }
}

/// Key records in an HTTP header ([`crate::nodeauth::KEYS_HEADER`]): control and the edge
/// send the chain with every answer to a node's pull, so a rotation reaches nodes that talk
/// only to the edge. Base64url (no padding) of the postcard list.
pub fn chain_to_header<B: AsRef<[u8]>>(records: &[B]) -> String {
    use base64::Engine as _;
    let list: Vec<&serde_bytes::Bytes> = records.iter().map(|r| serde_bytes::Bytes::new(r.as_ref())).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(crate::wire::encode(&list))
}

/// The key records of a [`chain_to_header`] value; `None` when it is not one.
pub fn chain_from_header(value: &str) -> Option<Vec<Vec<u8>>> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value.trim()).ok()?;
    let list: Vec<serde_bytes::ByteBuf> = crate::wire::decode(&bytes, "key records").ok()?;
    Some(list.into_iter().map(serde_bytes::ByteBuf::into_vec).collect())
}

/// What the caller expects of an envelope.
#[derive(Clone, Debug)]
pub struct Expect<'a> {
    /// Its kind.
    pub kind: Kind,
    /// The caller's own identity: the envelope must be addressed to it (or to [`Audience::Any`]).
    pub audience: Audience,
    /// The stream it must belong to.
    pub stream: &'a str,
}

/// An envelope that passed every check.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The envelope.
    pub envelope: Envelope,
    /// Its digest.
    pub digest: EnvelopeDigest,
    /// True when it is the very envelope already stored (same version, same digest): a no-op.
    pub unchanged: bool,
}

impl Verified {
    /// The state to persist for its stream (before applying it).
    pub fn state(&self) -> StreamState {
        StreamState { version: self.envelope.header.version, digest: self.digest }
    }
}

/// Why an envelope was refused. Nothing was changed in any case.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Over the size cap for its kind; not parsed.
    #[error("envelope of {len} bytes is over the {max}-byte limit")]
    Oversized {
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Not a well-formed, canonical envelope.
    #[error("malformed envelope: {0}")]
    Malformed(&'static str),
    /// Another kind than expected.
    #[error("expected a {expected:?} envelope, got a {found:?}")]
    WrongType {
        /// Expected.
        expected: Kind,
        /// Found.
        found: Kind,
    },
    /// No signature from any key this verifier knows.
    #[error("signed by a key this verifier does not know")]
    UnknownKey,
    /// Signed by a known key that does not hold the role this kind needs.
    #[error("signed by a key that does not hold the {needed} role")]
    WrongRole {
        /// The role the kind needs.
        needed: Role,
    },
    /// A signature by a key of the right role does not verify: the header was altered.
    #[error("bad signature")]
    BadSignature,
    /// Valid signatures, but fewer than the role's threshold.
    #[error("{have} valid signatures of {need} needed")]
    Threshold {
        /// Valid signatures from the role.
        have: usize,
        /// The threshold.
        need: usize,
    },
    /// Addressed to someone else.
    #[error("addressed to {found:?}, not to {expected:?}")]
    WrongAudience {
        /// This verifier.
        expected: Audience,
        /// The envelope's audience.
        found: Audience,
    },
    /// From another stream than expected.
    #[error("from stream {found:?}, expected {expected:?}")]
    WrongStream {
        /// Expected.
        expected: String,
        /// Found.
        found: String,
    },
    /// Older than the stored version: a rollback or a replay.
    #[error("stale version {got} (holding {have}): rollback or replay")]
    Stale {
        /// The version held.
        have: u64,
        /// The version offered.
        got: u64,
    },
    /// A key record older than the one held for its role: a rollback or a replay (older
    /// signing and release records are not kept, so it cannot be the very one taken before).
    #[error("{role} key record version {got} is older than the one held ({have}): rollback or replay")]
    KeyRecordStale {
        /// Its role.
        role: Role,
        /// The version held.
        have: u64,
        /// The version offered.
        got: u64,
    },
    /// A key record at a version taken before, with the same signed header as the record
    /// taken then but not byte for byte the same: its body or signatures were altered.
    #[error("{role} key record version {version} is not byte for byte the one held: altered")]
    KeyRecordAltered {
        /// Its role.
        role: Role,
        /// The version.
        version: u64,
    },
    /// Same version as stored, different content: the signer forked a stream. An alarm.
    #[error("version {version} seen before with different content: conflicting envelopes")]
    Conflict {
        /// The version.
        version: u64,
    },
    /// Past its expiry.
    #[error("expired at {expires} (now {now})")]
    Expired {
        /// Its expiry.
        expires: u64,
        /// The verifier's clock.
        now: u64,
    },
    /// The body does not match the length and hash the header signs.
    #[error("body does not match its signed length and hash: tampered")]
    BodyMismatch,
    /// The body is not what its kind should hold.
    #[error("bad body: {0}")]
    Body(&'static str),
}

impl From<DecodeError> for VerifyError {
    fn from(e: DecodeError) -> VerifyError {
        match e {
            DecodeError::Oversized { len, max } => VerifyError::Oversized { len, max },
            DecodeError::Malformed(why) => VerifyError::Malformed(why),
        }
    }
}

/// Runs every check on `bytes`, in the order of the design, against `trust`, the caller's
/// expectation, the state stored for the stream (if any) and the clock `now` (Unix seconds).
pub fn verify(
    bytes: &[u8],
    trust: &Trust,
    expect: &Expect<'_>,
    stored: Option<&StreamState>,
    now: u64,
) -> Result<Verified, VerifyError> {
    let envelope = Envelope::decode(bytes, expect.kind.max_len())?;
    let (digest, unchanged) =
        check(&envelope.header, &envelope.signatures, || envelope.body_matches(), trust, expect, stored, now)?;
    Ok(Verified { envelope, digest, unchanged })
}

/// Runs [`verify`]'s checks on an envelope read in pieces ([`crate::envelope::Incoming`]):
/// its digest, and whether it is the very envelope already stored.
pub fn verify_received(
    received: &Received,
    trust: &Trust,
    expect: &Expect<'_>,
    stored: Option<&StreamState>,
    now: u64,
) -> Result<(EnvelopeDigest, bool), VerifyError> {
    let max = expect.kind.max_len();
    if received.len > max {
        return Err(VerifyError::Oversized { len: received.len, max });
    }
    check(&received.header, &received.signatures, || received.body_matches(), trust, expect, stored, now)
}

/// Everything [`verify`] checks past the decoding, in its order.
fn check(
    header: &Header,
    signatures: &[Signature],
    body_matches: impl FnOnce() -> bool,
    trust: &Trust,
    expect: &Expect<'_>,
    stored: Option<&StreamState>,
    now: u64,
) -> Result<(EnvelopeDigest, bool), VerifyError> {
    if header.kind != expect.kind {
        return Err(VerifyError::WrongType { expected: expect.kind, found: header.kind });
    }
    let (needed, keys) = signer(trust, header.kind, &header.stream);
    match keys {
        Some(keys) => check_signatures(header, signatures, needed, keys, trust)?,
        None if signatures.iter().any(|s| trust.knows(&s.key)) => {
            return Err(VerifyError::WrongRole { needed });
        }
        None => return Err(VerifyError::UnknownKey),
    }
    if header.audience != expect.audience && header.audience != Audience::Any {
        return Err(VerifyError::WrongAudience { expected: expect.audience.clone(), found: header.audience.clone() });
    }
    if header.stream != expect.stream {
        return Err(VerifyError::WrongStream { expected: expect.stream.to_owned(), found: header.stream.clone() });
    }
    let digest = EnvelopeDigest(crate::sha256(&signed_message(header)));
    let unchanged = arrival(stored, header.version, &digest)? == Arrival::Same;
    if now > header.expires {
        return Err(VerifyError::Expired { expires: header.expires, now });
    }
    if !body_matches() {
        return Err(VerifyError::BodyMismatch);
    }
    Ok((digest, unchanged))
}

/// The role a kind must be signed by, and the keys that hold it for this stream.
fn signer<'t>(trust: &'t Trust, kind: Kind, stream_name: &str) -> (Role, Option<&'t RoleKeys>) {
    let role = match kind {
        Kind::KeyRecord => Role::Root,
        Kind::Release => Role::Release,
        Kind::UsageReport => Role::Node,
        Kind::Snapshot
        | Kind::CredentialSet
        | Kind::CredDelta
        | Kind::Batch
        | Kind::NodeRecord
        | Kind::UsageAck
        | Kind::Archive
        | Kind::EdgeSettings
        | Kind::Rollout => Role::Signing,
    };
    if role != Role::Node {
        return (role, trust.role(role));
    }
    // A usage report must be signed by the very node it is from.
    let keys = stream::parse_usage(stream_name).and_then(|node| trust.nodes.get(&node));
    (role, keys)
}

fn check_signatures(
    header: &Header,
    signatures: &[Signature],
    needed: Role,
    keys: &RoleKeys,
    trust: &Trust,
) -> Result<(), VerifyError> {
    let message = signed_message(header);
    let (mut valid, mut bad, mut other) = (0usize, false, false);
    for signature in signatures {
        match keys.find(&signature.key) {
            Some(key) if key.verify(&message, &signature.sig) => valid += 1,
            Some(_) => bad = true,
            None => other |= trust.knows(&signature.key),
        }
    }
    let need = usize::from(keys.threshold.max(1));
    if valid >= need {
        Ok(())
    } else if bad {
        Err(VerifyError::BadSignature)
    } else if valid > 0 {
        Err(VerifyError::Threshold { have: valid, need })
    } else if other {
        Err(VerifyError::WrongRole { needed })
    } else {
        Err(VerifyError::UnknownKey)
    }
}

#[cfg(test)]
mod chain_tests {
    use super::*;
    use crate::envelope::Draft;
    use crate::keys::SecretKey;

    const NOW: u64 = 1_800_000_000;

    fn record(role: Role, key: &SecretKey, version: u64, signers: &[&SecretKey]) -> Vec<u8> {
        Draft {
            kind: Kind::KeyRecord,
            stream: stream::keys(role),
            version,
            epoch: 1,
            issued: NOW - 10,
            expires: NOW + 3600,
            audience: Audience::Any,
            prev: [0; 32],
        }
        .sign(crate::wire::encode(&KeyRecord { role, keys: RoleKeys::single(key.public()) }), signers)
        .encode()
    }

    /// Two root rotations, a signing record by the newest root and a release record: what
    /// control hands out, and a verifier that took it.
    fn taken() -> (Vec<Vec<u8>>, Trust) {
        let root = SecretKey::from_seed(Role::Root, &[1; 32]);
        let root2 = SecretKey::from_seed(Role::Root, &[2; 32]);
        let root3 = SecretKey::from_seed(Role::Root, &[3; 32]);
        let chain = vec![
            record(Role::Root, &root2, 1, &[&root, &root2]),
            record(Role::Root, &root3, 2, &[&root2, &root3]),
            record(Role::Signing, &SecretKey::from_seed(Role::Signing, &[4; 32]), 1, &[&root3]),
            record(Role::Release, &SecretKey::from_seed(Role::Release, &[5; 32]), 1, &[&root3]),
        ];
        let mut trust = Trust::new(RoleKeys::single(root.public()));
        assert_eq!(trust.accept_chain(&chain, NOW), Ok(true));
        (chain, trust)
    }

    #[test]
    fn arrival_decides_new_same_conflict_and_rollback() {
        let held = StreamState { version: 5, digest: ItemDigest([1; 32]) };
        assert_eq!(arrival(None, 1, &ItemDigest([9; 32])), Ok(Arrival::New));
        assert_eq!(arrival(Some(&held), 6, &ItemDigest([9; 32])), Ok(Arrival::New));
        assert_eq!(arrival(Some(&held), 5, &ItemDigest([1; 32])), Ok(Arrival::Same));
        assert_eq!(arrival(Some(&held), 5, &ItemDigest([2; 32])), Err(Clash::Conflict { version: 5 }));
        assert_eq!(arrival(Some(&held), 4, &ItemDigest([1; 32])), Err(Clash::Rollback { have: 5, got: 4 }));
        // A verifier's refusals are the same decisions, in its words.
        assert_eq!(VerifyError::from(Clash::Rollback { have: 5, got: 4 }), VerifyError::Stale { have: 5, got: 4 });
        assert_eq!(VerifyError::from(Clash::Conflict { version: 5 }), VerifyError::Conflict { version: 5 });
    }

    /// The digests keep the wire form of the bare 32 bytes they replaced: a node's
    /// `trust.bin` and an edge's stored batch state read the same.
    #[test]
    fn digests_encode_as_their_bytes() {
        let state = StreamState { version: 7, digest: EnvelopeDigest([3; 32]) };
        let mut bare = crate::wire::encode(&7u64);
        bare.extend(crate::wire::encode(&[3u8; 32]));
        assert_eq!(crate::wire::encode(&state), bare);
        assert_eq!(crate::wire::encode(&ItemDigest([3; 32])), crate::wire::encode(&[3u8; 32]));
    }

    #[test]
    fn the_chain_handed_on_is_the_one_taken_byte_for_byte() {
        let (chain, mut trust) = taken();
        assert_eq!(trust.chain(), chain.iter().map(Vec::as_slice).collect::<Vec<_>>());
        // The same chain again, or a part of it, is no change.
        assert_eq!(trust.accept_chain(&chain, NOW), Ok(false));
        assert_eq!(trust.accept_chain(&chain[2..], NOW), Ok(false));
        // The trust keeps its records through a round trip (the edge and nodes store it).
        let stored: Trust = crate::wire::decode(&crate::wire::encode(&trust), "trust").unwrap();
        assert_eq!(stored.chain(), trust.chain());
    }

    #[test]
    fn a_trust_stored_before_records_were_kept_takes_them_again_from_the_chain() {
        let (chain, trust) = taken();
        let legacy = |held: &Held| LegacyHeld { keys: held.keys.clone(), state: held.state };
        let stored = crate::wire::encode(&LegacyTrust {
            root: legacy(&trust.root),
            signing: trust.signing.as_ref().map(legacy),
            release: trust.release.as_ref().map(legacy),
            nodes: trust.nodes.clone(),
        });
        let migrated = Trust::from_stored(&stored).unwrap();
        assert_eq!(migrated.role(Role::Signing), trust.role(Role::Signing));
        assert!(migrated.chain().is_empty(), "a record it never kept is handed on");
        assert!(Trust::from_stored(&stored[..stored.len() - 1]).is_err());
        // A held record altered (a bit in its last signature) is still refused.
        for at in 1..chain.len() {
            let mut altered = chain.clone();
            *altered[at].last_mut().unwrap() ^= 0x01;
            let mut after = migrated.clone();
            assert!(after.accept_chain(&altered, NOW).is_err(), "record {at} altered: taken");
            assert_eq!(after, migrated, "record {at} altered: the trust changed");
        }
        // The chain as control hands it on: the held records are taken again, the older root
        // (its signer is no longer held) is passed over.
        let mut after = migrated.clone();
        assert_eq!(after.accept_chain(&chain, NOW), Ok(true));
        assert_eq!(after.chain(), chain[1..].iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(after.clone().accept_chain(&chain, NOW), Ok(false));
        let mut altered = chain.clone();
        *altered[2].last_mut().unwrap() ^= 0x01;
        let refused = after.clone().accept_chain(&altered, NOW);
        assert_eq!(refused, Err(VerifyError::KeyRecordAltered { role: Role::Signing, version: 1 }));
        // Stored again, it is today's form.
        assert_eq!(Trust::from_stored(&crate::wire::encode(&after)).unwrap(), after);
    }

    #[test]
    fn a_record_no_newer_than_the_one_held_must_be_it_byte_for_byte() {
        let (chain, trust) = taken();
        // A bit flipped in each record's last signature or in its body (the signed header
        // stays the same): every record of the chain, the older roots (which nothing held can
        // verify again) included.
        for (at, record) in chain.iter().enumerate() {
            let envelope = Envelope::decode(record, usize::MAX).unwrap();
            let version = envelope.header.version;
            let role = [Role::Root, Role::Root, Role::Signing, Role::Release][at];
            let mut in_signature = record.clone();
            *in_signature.last_mut().unwrap() ^= 0x01;
            let mut in_body = envelope.clone();
            in_body.body[3] ^= 0x80;
            for (what, tampered, expected) in [
                ("a signature", in_signature, VerifyError::KeyRecordAltered { role, version }),
                ("the body", in_body.encode(), VerifyError::KeyRecordAltered { role, version }),
            ] {
                let mut offered = chain.clone();
                offered[at] = tampered;
                let mut after = trust.clone();
                let refused = after.accept_chain(&offered, NOW).err();
                let refused = refused.unwrap_or_else(|| panic!("record {at}, {what}: taken"));
                // A body that no longer decodes as a key record is refused before anything.
                assert!(
                    refused == expected || matches!(refused, VerifyError::Body(_) | VerifyError::Malformed(_)),
                    "record {at}, {what}: {refused}"
                );
                assert_eq!(after, trust, "record {at}, {what}: the trust changed");
            }
        }
        // The same version signed again with other content is a conflict; an older signing
        // record than the one held is a rollback.
        let root3 = SecretKey::from_seed(Role::Root, &[3; 32]);
        let other = SecretKey::from_seed(Role::Signing, &[9; 32]);
        let mut after = trust.clone();
        let fork = record(Role::Signing, &other, 1, &[&root3]);
        assert_eq!(after.accept_chain(&[fork], NOW), Err(VerifyError::Conflict { version: 1 }));
        let mut newer = trust.clone();
        newer.accept_key_record(&record(Role::Signing, &other, 2, &[&root3]), NOW).unwrap();
        let old = chain[2].clone();
        assert_eq!(
            newer.clone().accept_chain(&[old], NOW),
            Err(VerifyError::KeyRecordStale { role: Role::Signing, have: 2, got: 1 })
        );
        assert_eq!(after, trust);
    }
}
