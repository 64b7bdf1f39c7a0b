//! The envelope: the one signed container for everything Hearth signs.
//!
//! An envelope is `MAGIC` followed by the [postcard] encoding of [`Envelope`]: a [`Header`],
//! the body bytes, and a list of signatures sorted by key id. Each signature covers
//! [`SIGNING_DOMAIN`] followed by the encoded header; the header commits to the body through
//! its length and SHA-256, so a verifier checks one signature however large the body is.
//!
//! Decoding is strict: the size is capped before parsing, trailing bytes are refused, the
//! signatures must be in key-id order without repeats, and the input must re-encode to exactly
//! the same bytes (so there is one encoding of every envelope and no malleable variant of a
//! signed one). Checking signatures against keys and the stored version is
//! [`crate::trust::verify`]'s job.
//!
//! The encoding is fixed by fixtures in `shared/tests/fixtures/`: changing a field, its order
//! or an enum's numbering breaks them on purpose. Append new enum variants at the end.

use serde::{Deserialize, Serialize};

use crate::keys::{KeyId, SecretKey};
use crate::{Digest, sha256};

/// The first bytes of every encoded envelope: "HRT" and the format version 1.
pub const MAGIC: [u8; 4] = *b"HRT\x01";

/// The domain tag in front of the encoded header in every signed message, so a Hearth
/// signature can never be taken for a signature over anything else.
pub const SIGNING_DOMAIN: &[u8] = b"hearth envelope v1\0";

/// What an envelope holds. The numbering is part of the wire format: append only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// A root-signed [`crate::trust::KeyRecord`]: which keys hold a role.
    KeyRecord,
    /// A sealed per-user subscription snapshot ([`crate::wire::Snapshot`]).
    Snapshot,
    /// A node's credential set ([`crate::wire::CredentialSet`]).
    CredentialSet,
    /// A batch manifest ([`crate::wire::BatchManifest`]): one signature for a whole push.
    Batch,
    /// A node's registration ([`crate::wire::NodeRecord`]): its id and public key.
    NodeRecord,
    /// A node's usage report ([`crate::wire::UsageReport`]), signed by the node.
    UsageReport,
    /// Control's acknowledgement of a usage report ([`crate::wire::UsageAck`]).
    UsageAck,
    /// Control's encrypted state archive (opaque to everyone but the recovery key).
    Archive,
    /// A node release manifest ([`crate::release::ReleaseManifest`]), signed by the release
    /// key.
    Release,
    /// The operator's edge settings ([`crate::wire::EdgeSettings`]): User-Agent rules.
    EdgeSettings,
    /// Which nodes control told to take a release ([`crate::release::Rollout`]).
    Rollout,
    /// A node's credential set as a change to its last full set ([`crate::wire::CredDelta`]).
    CredDelta,
}

impl Kind {
    /// The largest encoded envelope of this kind that is parsed at all.
    pub fn max_len(self) -> usize {
        const KIB: usize = 1024;
        match self {
            Kind::KeyRecord | Kind::NodeRecord | Kind::UsageAck => 16 * KIB,
            Kind::EdgeSettings | Kind::Rollout => 64 * KIB,
            Kind::Snapshot => 256 * KIB,
            // 100k users at ~40 bytes each.
            Kind::CredentialSet | Kind::CredDelta => 8 * KIB * KIB,
            Kind::Batch | Kind::UsageReport | Kind::Release => 4 * KIB * KIB,
            Kind::Archive => 64 * KIB * KIB,
        }
    }
}

/// Who an envelope is meant for; a verifier refuses envelopes addressed to someone else.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Audience {
    /// Everyone (key records).
    Any,
    /// The edge (snapshots and batches).
    Edge,
    /// Control (usage reports, archives).
    Control,
    /// One node, by id (its credential set, acknowledgements of its reports).
    Node(u64),
    /// Every node (release manifests).
    Nodes,
}

/// The signed part of an envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// What the body holds.
    pub kind: Kind,
    /// The stream this envelope belongs to, e.g. `creds/7`; versions increase per stream.
    pub stream: String,
    /// Strictly increasing within the stream.
    pub version: u64,
    /// Control's incarnation: bumped when control is restored on a new box, so envelopes of
    /// one lineage can be told from another's in logs and audits.
    pub epoch: u32,
    /// When it was signed, in Unix seconds.
    pub issued: u64,
    /// After this Unix second it is no longer accepted.
    pub expires: u64,
    /// Who may accept it.
    pub audience: Audience,
    /// The digest of the previous version of this stream (zeros for the first), which chains
    /// a stream's history for audits.
    pub prev: Digest,
    /// The body's length in bytes.
    pub body_len: u64,
    /// The body's SHA-256.
    pub body_hash: Digest,
}

/// One signature over an envelope's header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The id of the key that made it.
    pub key: KeyId,
    /// The ed25519 signature.
    #[serde(with = "serde_bytes")]
    pub sig: [u8; 64],
}

/// The digest of an envelope's signed header ([`Envelope::digest`]). The header signs the
/// body's length and hash, so it stands for what the envelope says: what a verifier holds for
/// a stream it accepted, and what the next version's `prev` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EnvelopeDigest(pub Digest);

/// A decoded envelope. Decoding checks the form, not the signatures: see
/// [`crate::trust::verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The signed header.
    pub header: Header,
    /// The body, as the header describes it.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// Signatures, sorted by key id, at most one per key.
    pub signatures: Vec<Signature>,
}

/// The header of an envelope before signing: everything but the body's length and hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    /// What the body holds.
    pub kind: Kind,
    /// The stream.
    pub stream: String,
    /// The version within the stream.
    pub version: u64,
    /// Control's incarnation.
    pub epoch: u32,
    /// Unix seconds when signed.
    pub issued: u64,
    /// Unix seconds after which it is refused.
    pub expires: u64,
    /// Who may accept it.
    pub audience: Audience,
    /// The previous version's digest, or zeros.
    pub prev: Digest,
}

impl Draft {
    /// Signs `body` with every key in `keys` (each key once).
    pub fn sign(self, body: Vec<u8>, keys: &[&SecretKey]) -> Envelope {
        let header = self.header(body.len() as u64, sha256(&body));
        let signatures = sign_header(&header, keys);
        Envelope { header, body, signatures }
    }

    /// Signs a body that is kept elsewhere (control's archive, written to a file as it was
    /// sealed), from its length and SHA-256: gives what goes around the body.
    pub fn sign_framed(self, body_len: u64, body_hash: Digest, keys: &[&SecretKey]) -> Framed {
        let header = self.header(body_len, body_hash);
        let signatures = sign_header(&header, keys);
        let head = postcard::to_extend(&(&header, body_len), MAGIC.to_vec()).expect("encoding into a Vec cannot fail");
        let tail = postcard::to_allocvec(&signatures).expect("encoding into a Vec cannot fail");
        Framed { header, head, tail }
    }

    fn header(self, body_len: u64, body_hash: Digest) -> Header {
        Header {
            kind: self.kind,
            stream: self.stream,
            version: self.version,
            epoch: self.epoch,
            issued: self.issued,
            expires: self.expires,
            audience: self.audience,
            prev: self.prev,
            body_len,
            body_hash,
        }
    }
}

/// Every key's signature over `header`, sorted by key id, one per key.
fn sign_header(header: &Header, keys: &[&SecretKey]) -> Vec<Signature> {
    let message = signed_message(header);
    let mut signatures: Vec<Signature> =
        keys.iter().map(|key| Signature { key: key.id(), sig: key.sign(&message) }).collect();
    signatures.sort_by_key(|s| s.key);
    signatures.dedup_by_key(|s| s.key);
    signatures
}

/// An envelope signed around a body kept elsewhere ([`Draft::sign_framed`]): `head`, then the
/// body's bytes, then `tail` are the envelope's encoding, as [`Envelope::encode`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framed {
    /// The signed header.
    pub header: Header,
    /// What comes before the body: the magic, the header and the body's length.
    pub head: Vec<u8>,
    /// What comes after it: the signatures.
    pub tail: Vec<u8>,
}

impl Framed {
    /// The whole encoding's length with a body of the header's length.
    pub fn encoded_len(&self) -> u64 {
        self.head.len() as u64 + self.header.body_len + self.tail.len() as u64
    }
}

/// Why bytes are not a well-formed envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Larger than the cap for its kind; nothing was parsed.
    #[error("envelope of {len} bytes is over the {max}-byte limit")]
    Oversized {
        /// The input's length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Not a well-formed, canonically encoded envelope.
    #[error("malformed envelope: {0}")]
    Malformed(&'static str),
}

/// The bytes a signature covers: the domain tag, then the encoded header.
pub fn signed_message(header: &Header) -> Vec<u8> {
    postcard::to_extend(header, SIGNING_DOMAIN.to_vec()).expect("encoding into a Vec cannot fail")
}

impl Envelope {
    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_extend(self, MAGIC.to_vec()).expect("encoding into a Vec cannot fail")
    }

    /// Decodes `bytes` strictly, refusing anything over `max_len` before parsing.
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Envelope, DecodeError> {
        if bytes.len() > max_len {
            return Err(DecodeError::Oversized { len: bytes.len(), max: max_len });
        }
        let rest = bytes.strip_prefix(&MAGIC).ok_or(DecodeError::Malformed("not a Hearth envelope (bad magic)"))?;
        let (envelope, trailing) =
            postcard::take_from_bytes::<Envelope>(rest).map_err(|_| DecodeError::Malformed("undecodable"))?;
        if !trailing.is_empty() {
            return Err(DecodeError::Malformed("trailing bytes"));
        }
        if envelope.signatures.windows(2).any(|pair| pair[0].key >= pair[1].key) {
            return Err(DecodeError::Malformed("signatures out of order or repeated"));
        }
        if envelope.encode() != bytes {
            return Err(DecodeError::Malformed("not canonically encoded"));
        }
        Ok(envelope)
    }

    /// The body of an envelope this process verified before and stored, without copying it
    /// and without the strict checks (which the envelope passed when it was stored). For
    /// serving a stored snapshot on the hot path; anything received goes through
    /// [`crate::trust::verify`].
    pub fn stored_body(bytes: &[u8]) -> Option<&[u8]> {
        #[derive(Deserialize)]
        struct HeaderRef<'a> {
            _kind: Kind,
            #[serde(borrow)]
            _stream: &'a str,
            _version: u64,
            _epoch: u32,
            _issued: u64,
            _expires: u64,
            _audience: Audience,
            _prev: Digest,
            body_len: u64,
            _body_hash: Digest,
        }
        #[derive(Deserialize)]
        struct Prefix<'a> {
            #[serde(borrow)]
            header: HeaderRef<'a>,
            #[serde(borrow)]
            body: &'a [u8],
        }
        let rest = bytes.strip_prefix(&MAGIC)?;
        let (prefix, _signatures) = postcard::take_from_bytes::<Prefix<'_>>(rest).ok()?;
        (prefix.body.len() as u64 == prefix.header.body_len).then_some(prefix.body)
    }

    /// The digest that names this envelope: SHA-256 of its signed message. Two envelopes with
    /// the same digest have the same header and so the same body.
    pub fn digest(&self) -> EnvelopeDigest {
        EnvelopeDigest(sha256(&signed_message(&self.header)))
    }

    /// Whether the body matches the length and hash in the header.
    pub fn body_matches(&self) -> bool {
        self.body.len() as u64 == self.header.body_len && sha256(&self.body) == self.header.body_hash
    }
}

/// The most bytes around an envelope's body that [`Incoming`] holds: what comes before it
/// (magic, header, the body's length) and what comes after (the signatures). A well-formed
/// envelope has a few hundred.
pub const MAX_FRAME: usize = 16 * 1024;

/// An envelope read as it arrives, in pieces of any size, holding only what surrounds its
/// body: the body is hashed as it passes, so a receiver can store it piece by piece (control's
/// archive is tens of megabytes) and still check it as strictly as [`Envelope::decode`] does.
/// It accepts exactly the inputs `decode` accepts; once [`Incoming::feed`] has refused the
/// input, stop feeding it.
pub struct Incoming {
    max_len: usize,
    len: usize,
    whole: sha2::Sha256,
    part: Part,
}

enum Part {
    /// Before the body: the bytes so far.
    Head(Vec<u8>),
    /// In the body: the header, the body's bytes still to come, the body's hash so far.
    Body { header: Header, len: u64, left: u64, hash: sha2::Sha256 },
    /// After the body: the header, the body's length and hash, the bytes so far.
    Tail { header: Header, len: u64, hash: Digest, bytes: Vec<u8> },
}

/// An envelope [`Incoming`] read to its end: everything but the body, which the receiver kept
/// where it wanted. Its signatures are still to be checked: [`crate::trust::verify_received`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The signed header.
    pub header: Header,
    /// The signatures, sorted by key id.
    pub signatures: Vec<Signature>,
    /// The body's length as it arrived.
    pub body_len: u64,
    /// The body's SHA-256 as it arrived.
    pub body_hash: Digest,
    /// The SHA-256 of the whole encoding (what an edge names a stored item by).
    pub sha256: Digest,
    /// The whole encoding's length.
    pub len: usize,
}

impl Received {
    /// The envelope's digest, as [`Envelope::digest`] gives it.
    pub fn digest(&self) -> EnvelopeDigest {
        EnvelopeDigest(sha256(&signed_message(&self.header)))
    }

    /// Whether the body that arrived is the one the header describes.
    pub fn body_matches(&self) -> bool {
        self.body_len == self.header.body_len && self.body_hash == self.header.body_hash
    }
}

impl Incoming {
    /// Starts reading an envelope of at most `max_len` bytes.
    pub fn new(max_len: usize) -> Incoming {
        Incoming { max_len, len: 0, whole: sha2::Sha256::default(), part: Part::Head(Vec::new()) }
    }

    /// The bytes fed so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes the next bytes. Refuses at once what can no longer become an envelope: more than
    /// `max_len` bytes, a wrong magic, a header that does not decode or is not canonical.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        use sha2::Digest as _;
        let len = self.len.saturating_add(bytes.len());
        if len > self.max_len {
            return Err(DecodeError::Oversized { len, max: self.max_len });
        }
        self.len = len;
        self.whole.update(bytes);
        self.take(bytes)
    }

    /// Moves `bytes` through the parts: head, body, tail.
    fn take(&mut self, mut bytes: &[u8]) -> Result<(), DecodeError> {
        use sha2::Digest as _;
        while !bytes.is_empty() {
            match &mut self.part {
                Part::Head(head) => {
                    let take = bytes.len().min(MAX_FRAME - head.len());
                    head.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    let Some((header, len, used)) = read_head(head)? else {
                        if head.len() == MAX_FRAME {
                            return Err(DecodeError::Malformed("undecodable"));
                        }
                        continue;
                    };
                    // What came after the head is the body's start (or more): it goes first.
                    let after = head.split_off(used);
                    self.part = Part::Body { header, len, left: len, hash: sha2::Sha256::default() };
                    self.end_body();
                    self.take(&after)?;
                }
                Part::Body { left, hash, .. } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len());
                    hash.update(&bytes[..take]);
                    *left -= take as u64;
                    bytes = &bytes[take..];
                    self.end_body();
                }
                Part::Tail { bytes: tail, .. } => {
                    if tail.len() + bytes.len() > MAX_FRAME {
                        return Err(DecodeError::Malformed("undecodable"));
                    }
                    tail.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
        Ok(())
    }

    /// Moves on to the tail once the whole body went by.
    fn end_body(&mut self) {
        use sha2::Digest as _;
        if let Part::Body { left: 0, .. } = self.part
            && let Part::Body { header, len, hash, .. } = std::mem::replace(&mut self.part, Part::Head(Vec::new()))
        {
            self.part = Part::Tail { header, len, hash: hash.finalize().into(), bytes: Vec::new() };
        }
    }

    /// The envelope read whole, or why it is not one (what [`Envelope::decode`] would say).
    pub fn finish(self) -> Result<Received, DecodeError> {
        use sha2::Digest as _;
        let (header, body_len, body_hash, tail) = match self.part {
            Part::Head(head) if !head.starts_with(&MAGIC) => {
                return Err(DecodeError::Malformed("not a Hearth envelope (bad magic)"));
            }
            Part::Head(_) | Part::Body { .. } => return Err(DecodeError::Malformed("undecodable")),
            Part::Tail { header, len, hash, bytes } => (header, len, hash, bytes),
        };
        let (signatures, trailing) =
            postcard::take_from_bytes::<Vec<Signature>>(&tail).map_err(|_| DecodeError::Malformed("undecodable"))?;
        if !trailing.is_empty() {
            return Err(DecodeError::Malformed("trailing bytes"));
        }
        if signatures.windows(2).any(|pair| pair[0].key >= pair[1].key) {
            return Err(DecodeError::Malformed("signatures out of order or repeated"));
        }
        if postcard::to_allocvec(&signatures).ok().as_deref() != Some(&tail[..]) {
            return Err(DecodeError::Malformed("not canonically encoded"));
        }
        Ok(Received { header, signatures, body_len, body_hash, sha256: self.whole.finalize().into(), len: self.len })
    }
}

/// The header and the body's length at the front of `head`, and how many bytes they took;
/// `None` while more bytes are needed.
fn read_head(head: &[u8]) -> Result<Option<(Header, u64, usize)>, DecodeError> {
    if head.len() < MAGIC.len() {
        return match MAGIC.starts_with(head) {
            true => Ok(None),
            false => Err(DecodeError::Malformed("not a Hearth envelope (bad magic)")),
        };
    }
    let rest = head.strip_prefix(&MAGIC).ok_or(DecodeError::Malformed("not a Hearth envelope (bad magic)"))?;
    let ((header, len), after) = match postcard::take_from_bytes::<(Header, u64)>(rest) {
        Ok(read) => read,
        Err(postcard::Error::DeserializeUnexpectedEnd) => return Ok(None),
        Err(_) => return Err(DecodeError::Malformed("undecodable")),
    };
    let used = head.len() - after.len();
    let canonical = postcard::to_extend(&(&header, len), MAGIC.to_vec()).expect("encoding into a Vec cannot fail");
    if canonical != head[..used] {
        return Err(DecodeError::Malformed("not canonically encoded"));
    }
    Ok(Some((header, len, used)))
}

#[cfg(test)]
mod stored_body_tests {
    use super::*;
    use crate::keys::Role;

    #[test]
    fn the_stored_body_is_the_envelopes_body() {
        let key = SecretKey::from_seed(Role::Signing, &[3; 32]);
        let draft = Draft {
            kind: Kind::Snapshot,
            stream: "sub/00".into(),
            version: 7,
            epoch: 1,
            issued: 10,
            expires: 20,
            audience: Audience::Node(5),
            prev: [1; 32],
        };
        let envelope = draft.sign(b"sealed body bytes".to_vec(), &[&key]);
        let bytes = envelope.encode();
        assert_eq!(Envelope::stored_body(&bytes), Some(&b"sealed body bytes"[..]));
        assert_eq!(Envelope::stored_body(&bytes[..bytes.len() / 2]), None);
        assert_eq!(Envelope::stored_body(b"nonsense"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Role;

    fn sample() -> Envelope {
        let key = SecretKey::from_seed(Role::Signing, &[3; 32]);
        Draft {
            kind: Kind::CredentialSet,
            stream: "creds/1".into(),
            version: 5,
            epoch: 1,
            issued: 1_700_000_000,
            expires: 1_700_086_400,
            audience: Audience::Node(1),
            prev: [0; 32],
        }
        .sign(b"body".to_vec(), &[&key])
    }

    /// A body signed where it is kept: the head, the body and the tail are the encoding of the
    /// same envelope signed whole (the signatures too: ed25519 signs the same header), and
    /// [`Incoming`] reads them as it reads that one, a body of any length.
    #[test]
    fn an_envelope_framed_around_a_body_encodes_as_one_signed_whole() {
        let keys = [SecretKey::from_seed(Role::Signing, &[3; 32]), SecretKey::from_seed(Role::Root, &[4; 32])];
        let keys: Vec<&SecretKey> = keys.iter().collect();
        for len in [0usize, 1, 127, 128, 70_000] {
            let body: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let whole = sample_draft().sign(body.clone(), &keys);
            let framed = sample_draft().sign_framed(len as u64, sha256(&body), &keys);
            let joined = [framed.head.as_slice(), &body, &framed.tail].concat();
            assert_eq!(joined, whole.encode(), "a body of {len} bytes");
            assert_eq!(framed.encoded_len(), joined.len() as u64);
            assert_eq!(framed.header, whole.header);
            let mut incoming = Incoming::new(1 << 20);
            incoming.feed(&joined).unwrap();
            assert!(incoming.finish().unwrap().body_matches());
        }
    }

    fn sample_draft() -> Draft {
        Draft {
            kind: Kind::Archive,
            stream: "archive".into(),
            version: 9,
            epoch: 2,
            issued: 1_700_000_000,
            expires: 1_700_086_400,
            audience: Audience::Control,
            prev: [0; 32],
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let envelope = sample();
        let bytes = envelope.encode();
        assert_eq!(Envelope::decode(&bytes, 1024).unwrap(), envelope);
        assert!(envelope.body_matches());
    }

    #[test]
    fn strict_decoding_refuses_variants() {
        let bytes = sample().encode();
        let oversized = Envelope::decode(&bytes, bytes.len() - 1);
        assert_eq!(oversized, Err(DecodeError::Oversized { len: bytes.len(), max: bytes.len() - 1 }));

        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(Envelope::decode(&trailing, 1024), Err(DecodeError::Malformed("trailing bytes")));

        let mut magic = bytes.clone();
        magic[3] = 2;
        assert!(matches!(Envelope::decode(&magic, 1024), Err(DecodeError::Malformed(_))));

        // A non-minimal varint for the version (5 written as 0x85 0x00) decodes to the same
        // value in postcard, but is not the canonical form.
        let envelope = sample();
        let canonical_prefix = {
            let mut b = MAGIC.to_vec();
            b.push(envelope.header.kind as u8);
            b.push(envelope.header.stream.len() as u8);
            b.extend_from_slice(envelope.header.stream.as_bytes());
            b
        };
        assert!(bytes.starts_with(&canonical_prefix));
        let at = canonical_prefix.len();
        assert_eq!(bytes[at], 5);
        let mut padded = bytes[..at].to_vec();
        padded.extend_from_slice(&[0x85, 0x00]);
        padded.extend_from_slice(&bytes[at + 1..]);
        assert_eq!(Envelope::decode(&padded, 1024), Err(DecodeError::Malformed("not canonically encoded")));
    }

    #[test]
    fn signatures_must_be_sorted_and_unique() {
        let a = SecretKey::from_seed(Role::Root, &[1; 32]);
        let b = SecretKey::from_seed(Role::Root, &[2; 32]);
        let mut envelope = Draft {
            kind: Kind::KeyRecord,
            stream: "keys/root".into(),
            version: 1,
            epoch: 0,
            issued: 0,
            expires: u64::MAX,
            audience: Audience::Any,
            prev: [0; 32],
        }
        .sign(vec![], &[&a, &b, &a]);
        assert_eq!(envelope.signatures.len(), 2);
        assert!(Envelope::decode(&envelope.encode(), 1024).is_ok());
        envelope.signatures.reverse();
        assert_eq!(
            Envelope::decode(&envelope.encode(), 1024),
            Err(DecodeError::Malformed("signatures out of order or repeated"))
        );
        envelope.signatures[1] = envelope.signatures[0].clone();
        assert!(Envelope::decode(&envelope.encode(), 1024).is_err());
    }
}
