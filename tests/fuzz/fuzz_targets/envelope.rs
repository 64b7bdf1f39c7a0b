//! The envelope decoder on any bytes: it refuses or returns an envelope that encodes back to
//! exactly the input, and the hot path's `stored_body` agrees with it.
#![no_main]

use hearth_shared::envelope::{Envelope, Kind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
});
