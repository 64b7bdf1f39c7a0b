//! The batch manifest decoder on any bytes: it refuses or returns a manifest that is sorted,
//! unique, encodes back to the input, and finds each of its entries.
#![no_main]

use hearth_shared::wire::BatchManifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = BatchManifest::decode(data) else { return };
    assert_eq!(manifest.encode(), data);
    assert!(manifest.entries().windows(2).all(|pair| pair[0].stream < pair[1].stream));
    for entry in manifest.entries() {
        assert_eq!(manifest.get(&entry.stream), Some(entry));
    }
    assert_eq!(BatchManifest::new(manifest.entries().to_vec()).as_ref(), Ok(&manifest));
});
