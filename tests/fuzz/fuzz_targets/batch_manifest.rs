//! The batch manifest decoder. Any bytes are refused or give a manifest that is sorted,
//! unique, encodes back to the input and finds each of its entries; and a manifest built from
//! the input's entries (a stream twice is refused) decodes from its encoding to itself.
#![no_main]

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::wire::{BatchEntry, BatchManifest};
use libfuzzer_sys::fuzz_target;

fn check_decoded(data: &[u8]) {
    let Ok(manifest) = BatchManifest::decode(data) else { return };
    assert_eq!(manifest.encode(), data);
    assert!(manifest.entries().windows(2).all(|pair| pair[0].stream < pair[1].stream));
    for entry in manifest.entries() {
        assert_eq!(manifest.get(&entry.stream), Some(entry));
    }
    assert_eq!(BatchManifest::new(manifest.entries().to_vec()).as_ref(), Ok(&manifest));
}

fuzz_target!(|data: &[u8]| {
    check_decoded(data);

    let mut u = Unstructured::new(data);
    let count = u.int_in_range(0..=8).unwrap_or(0);
    let entries: Vec<BatchEntry> =
        (0..count).map(|_| BatchEntry { stream: take(&mut u), version: take(&mut u), digest: take(&mut u) }).collect();
    let mut streams: Vec<&str> = entries.iter().map(|entry| entry.stream.as_str()).collect();
    streams.sort_unstable();
    let repeated = streams.windows(2).any(|pair| pair[0] == pair[1]);
    match BatchManifest::new(entries.clone()) {
        Ok(manifest) => {
            assert!(!repeated);
            assert_eq!(BatchManifest::decode(&manifest.encode()).as_ref(), Ok(&manifest));
            check_decoded(&manifest.encode());
        }
        Err(_) => assert!(repeated, "only a stream listed twice is refused"),
    }
});
