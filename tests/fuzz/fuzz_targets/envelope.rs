//! The envelope decoder. Any bytes are refused or give an envelope that encodes back to
//! exactly the input, whose body the hot path's `stored_body` reads the same. And envelopes
//! built from the input field by field (any kind, stream, version, audience, body, signatures)
//! encode to bytes that decode to the same envelope, unless their signatures are out of order
//! or repeated, which decoding refuses.
#![no_main]

use arbitrary::Unstructured;
use hearth_fuzz::{take, variant};
use hearth_shared::envelope::{Audience, Envelope, Header, Kind, Signature};
use hearth_shared::keys::KeyId;
use libfuzzer_sys::fuzz_target;

fn check_decoded(data: &[u8]) {
    let stored = Envelope::stored_body(data);
    let Ok(envelope) = Envelope::decode(data, Kind::Archive.max_len()) else { return };
    assert_eq!(envelope.encode(), data, "one encoding of every envelope");
    assert!(envelope.signatures.windows(2).all(|pair| pair[0].key < pair[1].key));
    if envelope.body_matches() {
        assert_eq!(stored, Some(&envelope.body[..]), "stored_body reads the body decode reads");
    }
    let _ = envelope.digest();
    // Every kind's cap: a smaller cap refuses it, a larger one takes the same envelope.
    for kind in [Kind::KeyRecord, Kind::Snapshot, Kind::CredentialSet, Kind::Batch] {
        match Envelope::decode(data, kind.max_len()) {
            Ok(again) => assert_eq!(again, envelope),
            Err(_) => assert!(data.len() > kind.max_len()),
        }
    }
}

fn built(u: &mut Unstructured<'_>) -> Envelope {
    let kind = variant(u, Kind::Snapshot);
    let audience = match take::<u8>(u) % 6 {
        5 => Audience::Node(take(u)),
        n => variant(&mut Unstructured::new(&[n]), Audience::Any),
    };
    let header = Header {
        kind,
        stream: take(u),
        version: take(u),
        epoch: take(u),
        issued: take(u),
        expires: take(u),
        audience,
        prev: take(u),
        body_len: take(u),
        body_hash: take(u),
    };
    let count = u.int_in_range(0..=3).unwrap_or(0);
    let signatures =
        (0..count).map(|_| Signature { key: KeyId(take(u)), sig: u.arbitrary().unwrap_or([0; 64]) }).collect();
    Envelope { header, body: take(u), signatures }
}

fuzz_target!(|data: &[u8]| {
    check_decoded(data);

    let envelope = built(&mut Unstructured::new(data));
    let bytes = envelope.encode();
    match Envelope::decode(&bytes, usize::MAX) {
        Ok(decoded) => assert_eq!(decoded, envelope, "an envelope decodes to itself"),
        Err(_) => assert!(envelope.signatures.windows(2).any(|pair| pair[0].key >= pair[1].key)),
    }
    check_decoded(&bytes);
});
