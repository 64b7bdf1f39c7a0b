//! A conformance suite for envelope verification, in the manner of TUF's and Uptane's: every
//! attack the design names (rollback, freeze, mix-and-match, cross-target replay, endless
//! data, key compromise) is a case with the one refusal it must get, plus property tests that
//! no tampered, re-ordered or re-encoded envelope ever verifies.

use hearth_shared::envelope::{Audience, Draft, Envelope, EnvelopeDigest, Incoming, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::trust::{Expect, KeyRecord, RoleKeys, StreamState, Trust, VerifyError, verify, verify_received};
use hearth_shared::wire::{self, BatchEntry, BatchManifest, CredEntry, CredentialSet, NodeRecord, stream};
use proptest::prelude::*;

const NOW: u64 = 1_800_000_000;

struct Keys {
    root: SecretKey,
    signing: SecretKey,
    node: SecretKey,
}

fn keys() -> Keys {
    Keys {
        root: SecretKey::from_seed(Role::Root, &[1; 32]),
        signing: SecretKey::from_seed(Role::Signing, &[2; 32]),
        node: SecretKey::from_seed(Role::Node, &[4; 32]),
    }
}

fn record(role: Role, key: &SecretKey, version: u64, signers: &[&SecretKey]) -> Vec<u8> {
    draft(Kind::KeyRecord, &stream::keys(role), version, Audience::Any)
        .sign(wire::encode(&KeyRecord { role, keys: RoleKeys::single(key.public()) }), signers)
        .encode()
}

fn draft(kind: Kind, stream: &str, version: u64, audience: Audience) -> Draft {
    Draft {
        kind,
        stream: stream.to_owned(),
        version,
        epoch: 1,
        issued: NOW - 10,
        expires: NOW + 3600,
        audience,
        prev: [0; 32],
    }
}

/// A node's trust: the root, the signing role, and node 1's key.
fn trust(k: &Keys) -> Trust {
    let mut trust = Trust::new(RoleKeys::single(k.root.public()));
    trust.accept_key_record(&record(Role::Signing, &k.signing, 1, &[&k.root]), NOW).unwrap();
    trust.set_node(1, k.node.public());
    trust
}

fn creds(version: u64, users: u64) -> Envelope {
    let set = CredentialSet::new(1, (0..users).map(|user| CredEntry::new(user, [user as u8; 32])).collect()).unwrap();
    draft(Kind::CredentialSet, "creds/1", version, Audience::Node(1)).sign(set.encode(), &[&keys().signing])
}

fn expect_creds() -> Expect<'static> {
    Expect { kind: Kind::CredentialSet, audience: Audience::Node(1), stream: "creds/1" }
}

#[test]
fn a_good_envelope_verifies_and_a_repeat_is_a_no_op() {
    let k = keys();
    let trust = trust(&k);
    let bytes = creds(5, 3).encode();
    let verified = verify(&bytes, &trust, &expect_creds(), None, NOW).unwrap();
    assert!(!verified.unchanged);
    assert_eq!(CredentialSet::decode(&verified.envelope.body).unwrap().users().len(), 3);
    let again = verify(&bytes, &trust, &expect_creds(), Some(&verified.state()), NOW).unwrap();
    assert!(again.unchanged);
    let newer = verify(&creds(6, 4).encode(), &trust, &expect_creds(), Some(&verified.state()), NOW);
    assert!(!newer.unwrap().unchanged);
}

#[test]
fn every_refusal_is_told_apart() {
    let k = keys();
    let trust = trust(&k);
    let stored = StreamState { version: 5, digest: creds(5, 3).digest() };
    let stranger = SecretKey::from_seed(Role::Signing, &[9; 32]);
    let expect = expect_creds();

    let signed_by =
        |key: &SecretKey| draft(Kind::CredentialSet, "creds/1", 6, Audience::Node(1)).sign(vec![1, 2], &[key]).encode();
    let altered_header = {
        let mut e = creds(6, 3);
        e.header.version = 7;
        e.encode()
    };
    let altered_body = {
        let mut e = creds(6, 3);
        e.body[0] ^= 1;
        e.encode()
    };
    let longer_body = {
        let mut e = creds(6, 3);
        e.body.push(0);
        e.encode()
    };
    let expired = draft(Kind::CredentialSet, "creds/1", 6, Audience::Node(1));
    let expired = Draft { expires: NOW - 1, ..expired }.sign(vec![], &[&k.signing]).encode();
    let other_node = draft(Kind::CredentialSet, "creds/1", 6, Audience::Node(2)).sign(vec![], &[&k.signing]);
    let other_stream = draft(Kind::CredentialSet, "creds/2", 6, Audience::Node(1)).sign(vec![], &[&k.signing]);
    let snapshot = draft(Kind::Snapshot, "creds/1", 6, Audience::Node(1)).sign(vec![], &[&k.signing]);
    let oversized = draft(Kind::CredentialSet, "creds/1", 6, Audience::Node(1))
        .sign(vec![0; Kind::CredentialSet.max_len()], &[&k.signing])
        .encode();
    let mut truncated = creds(6, 3).encode();
    truncated.pop();

    let cases: Vec<(&str, Vec<u8>, Option<StreamState>, VerifyError)> = vec![
        (
            "endless data",
            oversized.clone(),
            None,
            VerifyError::Oversized { len: oversized.len(), max: Kind::CredentialSet.max_len() },
        ),
        ("truncated", truncated, None, VerifyError::Malformed("undecodable")),
        (
            "wrong type",
            snapshot.encode(),
            None,
            VerifyError::WrongType { expected: Kind::CredentialSet, found: Kind::Snapshot },
        ),
        ("unknown key", signed_by(&stranger), None, VerifyError::UnknownKey),
        ("root key used online", signed_by(&k.root), None, VerifyError::WrongRole { needed: Role::Signing }),
        ("node key forging control", signed_by(&k.node), None, VerifyError::WrongRole { needed: Role::Signing }),
        ("altered header", altered_header, None, VerifyError::BadSignature),
        (
            "cross-target replay",
            other_node.encode(),
            None,
            VerifyError::WrongAudience { expected: Audience::Node(1), found: Audience::Node(2) },
        ),
        (
            "mix and match",
            other_stream.encode(),
            None,
            VerifyError::WrongStream { expected: "creds/1".into(), found: "creds/2".into() },
        ),
        ("rollback", creds(4, 3).encode(), Some(stored), VerifyError::Stale { have: 5, got: 4 }),
        ("fork", creds(5, 4).encode(), Some(stored), VerifyError::Conflict { version: 5 }),
        ("freeze", expired, None, VerifyError::Expired { expires: NOW - 1, now: NOW }),
        ("tampered body", altered_body, None, VerifyError::BodyMismatch),
        ("extended body", longer_body, None, VerifyError::BodyMismatch),
    ];
    for (name, bytes, stored, expected) in cases {
        let got = verify(&bytes, &trust, &expect, stored.as_ref(), NOW);
        assert_eq!(got.err(), Some(expected), "{name}");
    }
}

#[test]
fn usage_reports_must_come_from_their_own_node() {
    let k = keys();
    let mut trust = trust(&k);
    let other = SecretKey::from_seed(Role::Node, &[5; 32]);
    trust.set_node(2, other.public());
    let report = |stream: &str, key: &SecretKey| {
        draft(Kind::UsageReport, stream, 1, Audience::Control).sign(vec![], &[key]).encode()
    };
    let expect = |stream: &'static str| Expect { kind: Kind::UsageReport, audience: Audience::Control, stream };
    assert!(verify(&report("usage/1", &k.node), &trust, &expect("usage/1"), None, NOW).is_ok());
    // Node 2 cannot report as node 1, nor can control's own key.
    assert_eq!(
        verify(&report("usage/1", &other), &trust, &expect("usage/1"), None, NOW).err(),
        Some(VerifyError::WrongRole { needed: Role::Node })
    );
    assert_eq!(
        verify(&report("usage/1", &k.signing), &trust, &expect("usage/1"), None, NOW).err(),
        Some(VerifyError::WrongRole { needed: Role::Node })
    );
    assert_eq!(
        verify(&report("usage/3", &k.node), &trust, &expect("usage/3"), None, NOW).err(),
        Some(VerifyError::WrongRole { needed: Role::Node })
    );
}

#[test]
fn signing_key_rotation() {
    let k = keys();
    let mut trust = trust(&k);
    let new_signing = SecretKey::from_seed(Role::Signing, &[6; 32]);

    // Only the root may rotate, and an old record cannot be replayed.
    let by_signing = record(Role::Signing, &new_signing, 2, &[&k.signing]);
    assert_eq!(trust.accept_key_record(&by_signing, NOW).err(), Some(VerifyError::WrongRole { needed: Role::Root }));
    let rotation = record(Role::Signing, &new_signing, 2, &[&k.root]);
    trust.accept_key_record(&rotation, NOW).unwrap();
    assert_eq!(trust.role_version(Role::Signing), Some(2));
    let replay = record(Role::Signing, &k.signing, 1, &[&k.root]);
    assert_eq!(
        trust.accept_key_record(&replay, NOW).err(),
        Some(VerifyError::KeyRecordStale { role: Role::Signing, have: 2, got: 1 })
    );

    // From now on only the new key signs.
    let old = creds(6, 1).encode();
    assert_eq!(verify(&old, &trust, &expect_creds(), None, NOW).err(), Some(VerifyError::UnknownKey));
    let new = draft(Kind::CredentialSet, "creds/1", 7, Audience::Node(1)).sign(vec![], &[&new_signing]);
    assert!(verify(&new.encode(), &trust, &expect_creds(), None, NOW).is_ok());
}

#[test]
fn root_rotation_needs_the_old_and_the_new_root() {
    let k = keys();
    let mut trust = trust(&k);
    let new_root = SecretKey::from_seed(Role::Root, &[7; 32]);

    let old_only = record(Role::Root, &new_root, 1, &[&k.root]);
    assert!(trust.accept_key_record(&old_only, NOW).is_err());
    let new_only = record(Role::Root, &new_root, 1, &[&new_root]);
    assert_eq!(trust.accept_key_record(&new_only, NOW).err(), Some(VerifyError::UnknownKey));
    assert_eq!(trust.role(Role::Root).unwrap().keys, vec![k.root.public()]);

    let both = record(Role::Root, &new_root, 1, &[&k.root, &new_root]);
    trust.accept_key_record(&both, NOW).unwrap();
    assert_eq!(trust.role(Role::Root).unwrap().keys, vec![new_root.public()]);

    let next_signing = SecretKey::from_seed(Role::Signing, &[8; 32]);
    let by_old_root = record(Role::Signing, &next_signing, 2, &[&k.root]);
    assert!(trust.accept_key_record(&by_old_root, NOW).is_err());
    let by_new_root = record(Role::Signing, &next_signing, 2, &[&new_root]);
    trust.accept_key_record(&by_new_root, NOW).unwrap();
}

#[test]
fn a_key_chain_brings_a_late_verifier_up_to_date() {
    let k = keys();
    let root2 = SecretKey::from_seed(Role::Root, &[7; 32]);
    let root3 = SecretKey::from_seed(Role::Root, &[9; 32]);
    let signing2 = SecretKey::from_seed(Role::Signing, &[8; 32]);
    // Two root rotations, then a signing rotation by the newest root: what control hands out.
    let chain = vec![
        record(Role::Root, &root2, 1, &[&k.root, &root2]),
        record(Role::Root, &root3, 2, &[&root2, &root3]),
        record(Role::Signing, &signing2, 3, &[&root3]),
    ];
    let mut late = trust(&k);
    assert_eq!(late.accept_chain(&chain, NOW), Ok(true));
    assert_eq!(late.role(Role::Root).unwrap().keys, vec![root3.public()]);
    assert_eq!(late.role(Role::Signing).unwrap().keys, vec![signing2.public()]);
    // The same chain again (older root records are skipped) changes nothing.
    assert_eq!(late.accept_chain(&chain, NOW), Ok(false));
    let header = hearth_shared::trust::chain_to_header(&chain);
    assert_eq!(hearth_shared::trust::chain_from_header(&header), Some(chain.clone()));
    assert_eq!(hearth_shared::trust::chain_from_header("not base64!"), None);

    // A record not signed by the root stops the chain, and nothing of it is taken.
    let mut fresh = trust(&k);
    let before = fresh.clone();
    let forged = vec![chain[0].clone(), record(Role::Signing, &signing2, 3, &[&k.signing])];
    assert_eq!(fresh.accept_chain(&forged, NOW), Err(VerifyError::WrongRole { needed: Role::Root }));
    assert_eq!(fresh, before);
}

#[test]
fn thresholds_count_distinct_valid_signatures() {
    let roots: Vec<SecretKey> = (10..13).map(|seed| SecretKey::from_seed(Role::Root, &[seed; 32])).collect();
    let mut trust = Trust::new(RoleKeys { keys: roots.iter().map(SecretKey::public).collect(), threshold: 2 });
    let signing = SecretKey::from_seed(Role::Signing, &[2; 32]);
    let one = record(Role::Signing, &signing, 1, &[&roots[0]]);
    assert_eq!(trust.accept_key_record(&one, NOW).err(), Some(VerifyError::Threshold { have: 1, need: 2 }));
    let two = record(Role::Signing, &signing, 1, &[&roots[0], &roots[2]]);
    trust.accept_key_record(&two, NOW).unwrap();
}

#[test]
fn a_batch_manifest_binds_its_items() {
    let k = keys();
    let trust = trust(&k);
    let item = draft(Kind::NodeRecord, &stream::node(1), 3, Audience::Edge)
        .sign(wire::encode(&NodeRecord { node: 1, key: Some(k.node.public()) }), &[&k.signing]);
    let manifest = BatchManifest::new(vec![BatchEntry {
        stream: stream::node(1),
        version: 3,
        digest: Some(hearth_shared::sha256(&item.encode())),
    }])
    .unwrap();
    let batch = draft(Kind::Batch, stream::BATCH, 1, Audience::Edge).sign(manifest.encode(), &[&k.signing]);
    let expect = Expect { kind: Kind::Batch, audience: Audience::Edge, stream: stream::BATCH };
    let verified = verify(&batch.encode(), &trust, &expect, None, NOW).unwrap();
    let manifest = BatchManifest::decode(&verified.envelope.body).unwrap();
    let entry = manifest.get(&stream::node(1)).unwrap();
    assert_eq!(entry.digest, Some(hearth_shared::sha256(&item.encode())));
    // An item altered after signing, even in its signature alone, no longer matches its entry.
    let mut altered = item.clone();
    altered.signatures[0].sig[0] ^= 1;
    assert_ne!(entry.digest, Some(hearth_shared::sha256(&altered.encode())));
}

fn multi_signed() -> (Trust, Vec<u8>) {
    let roots: Vec<SecretKey> = (20..23).map(|seed| SecretKey::from_seed(Role::Root, &[seed; 32])).collect();
    let trust = Trust::new(RoleKeys { keys: roots.iter().map(SecretKey::public).collect(), threshold: 3 });
    let signing = SecretKey::from_seed(Role::Signing, &[2; 32]);
    let signers: Vec<&SecretKey> = roots.iter().collect();
    (trust, record(Role::Signing, &signing, 1, &signers))
}

/// What [`verify`] says of `bytes`, and what the same bytes say fed to [`Incoming`] in pieces
/// of the sizes in `pieces` (taken in turn, over and over), then [`verify_received`].
type Said = Result<(EnvelopeDigest, bool), VerifyError>;
fn whole_and_in_pieces(bytes: &[u8], pieces: &[usize]) -> (Said, Said) {
    let trust = trust(&keys());
    let whole = verify(bytes, &trust, &expect_creds(), None, NOW).map(|v| (v.digest, v.unchanged));
    let mut incoming = Incoming::new(Kind::CredentialSet.max_len());
    let mut rest = bytes;
    let mut sizes = pieces.iter().cycle();
    let fed = loop {
        if rest.is_empty() {
            break Ok(());
        }
        let (piece, after) = rest.split_at((*sizes.next().unwrap()).clamp(1, rest.len()));
        rest = after;
        if let Err(e) = incoming.feed(piece) {
            break Err(VerifyError::from(e));
        }
    };
    let in_pieces = fed.and_then(|()| incoming.finish().map_err(VerifyError::from)).and_then(|received| {
        assert_eq!(received.sha256, hearth_shared::sha256(bytes));
        assert_eq!(received.len, bytes.len());
        verify_received(&received, &trust, &expect_creds(), None, NOW)
    });
    (whole, in_pieces)
}

#[test]
fn an_envelope_read_in_pieces_is_checked_as_strictly_as_a_whole_one() {
    // A body larger than the frame the reader holds, in pieces from one byte up.
    let envelope = creds(6, 2000);
    let bytes = envelope.encode();
    assert!(envelope.body.len() > hearth_shared::envelope::MAX_FRAME * 4);
    for pieces in [&[1][..], &[7, 1, 300], &[65536], &[bytes.len()]] {
        let (whole, in_pieces) = whole_and_in_pieces(&bytes, pieces);
        assert!(whole.is_ok());
        assert_eq!(whole, in_pieces, "pieces {pieces:?}");
    }
    // Cut short anywhere, or with bytes after the end: refused, as decoding refuses it.
    for cut in [0, 3, 4, 40, 200, bytes.len() / 2, bytes.len() - 70, bytes.len() - 1] {
        let (whole, in_pieces) = whole_and_in_pieces(&bytes[..cut], &[4096]);
        assert!(whole.is_err() && in_pieces.is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    let (whole, in_pieces) = whole_and_in_pieces(&longer, &[4096]);
    assert_eq!((whole, in_pieces.clone()), (Err(VerifyError::Malformed("trailing bytes")), in_pieces));
    // Over the kind's cap: refused as soon as the bytes go past it.
    let mut incoming = Incoming::new(bytes.len() - 1);
    assert!(matches!(incoming.feed(&bytes), Err(hearth_shared::envelope::DecodeError::Oversized { .. })));
    // Anything but an envelope is refused from its first bytes.
    let mut incoming = Incoming::new(1 << 20);
    assert!(incoming.feed(b"<html>").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Read in pieces, a tampered or re-encoded envelope is refused exactly when the whole
    /// one is, and a good one gives the same digest.
    #[test]
    fn pieces_say_what_the_whole_says(
        at in any::<prop::sample::Index>(),
        change in 0u8..4,
        byte in any::<u8>(),
        pieces in prop::collection::vec(1usize..200, 1..6),
    ) {
        let mut bytes = creds(6, 5).encode();
        let at = at.index(bytes.len());
        match change {
            0 => bytes[at] ^= byte | 1,
            1 => bytes.insert(at, byte),
            2 => { bytes.remove(at); }
            _ => {}
        }
        let (whole, in_pieces) = whole_and_in_pieces(&bytes, &pieces);
        prop_assert_eq!(whole.is_ok(), in_pieces.is_ok(), "{:?} / {:?}", whole, in_pieces);
        if whole.is_ok() {
            prop_assert_eq!(whole, in_pieces);
        }
    }

    /// Flipping any bit of an envelope makes it fail verification.
    #[test]
    fn no_bit_flip_verifies(at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let k = keys();
        let trust = trust(&k);
        let mut bytes = creds(6, 5).encode();
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        prop_assert!(verify(&bytes, &trust, &expect_creds(), None, NOW).is_err());
    }

    /// Inserting or deleting bytes anywhere (a re-encoding) never verifies.
    #[test]
    fn no_reencoding_verifies(at in any::<prop::sample::Index>(), insert in prop::option::of(any::<u8>())) {
        let k = keys();
        let trust = trust(&k);
        let mut bytes = creds(6, 5).encode();
        let at = at.index(bytes.len());
        match insert {
            Some(byte) => bytes.insert(at, byte),
            None => { bytes.remove(at); }
        }
        prop_assert!(verify(&bytes, &trust, &expect_creds(), None, NOW).is_err());
    }

    /// Arbitrary bytes, with or without the magic in front, never verify.
    #[test]
    fn random_bytes_never_verify(mut bytes in prop::collection::vec(any::<u8>(), 0..600), magic in any::<bool>()) {
        let k = keys();
        let trust = trust(&k);
        if magic {
            bytes.splice(0..0, hearth_shared::envelope::MAGIC);
        }
        prop_assert!(verify(&bytes, &trust, &expect_creds(), None, NOW).is_err());
    }

    /// Any re-ordering of a multi-signed envelope's signatures is refused as malformed.
    #[test]
    fn reordered_signatures_are_refused(order in Just(vec![0usize, 1, 2]).prop_shuffle()) {
        let (mut trust, bytes) = multi_signed();
        let mut envelope = Envelope::decode(&bytes, usize::MAX).unwrap();
        let sorted = envelope.signatures.clone();
        envelope.signatures = order.iter().map(|&i| sorted[i].clone()).collect();
        let result = trust.accept_key_record(&envelope.encode(), NOW);
        if order == [0, 1, 2] {
            prop_assert!(result.is_ok());
        } else {
            prop_assert_eq!(result.err(), Some(VerifyError::Malformed("signatures out of order or repeated")));
        }
    }
}
