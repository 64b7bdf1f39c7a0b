//! What control and the edge hand each other in bulk: a push (key records, the signed
//! [`BatchManifest`] and the items it lists) and the headers and words of the edge's answers,
//! a page of an export for a restore of control, and a drain of queued usage reports.

use serde::{Deserialize, Serialize};

use super::codec::WireError;
use crate::Digest;

/// One entry of a batch manifest: a stream's new version and the hash of its item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry {
    /// The stream.
    pub stream: String,
    /// Its new version.
    pub version: u64,
    /// SHA-256 of the item envelope's whole encoding, signatures included (so the edge
    /// stores exactly what control signed without checking every item's signature), or
    /// `None` to delete the stream at this version (a rotated link).
    pub digest: Option<Digest>,
}

/// The body of a batch envelope: one signature covers every item of a push. Entries are
/// sorted by stream, one per stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchManifest {
    entries: Vec<BatchEntry>,
}

impl BatchManifest {
    /// Builds a manifest; refuses a stream listed twice.
    pub fn new(mut entries: Vec<BatchEntry>) -> Result<BatchManifest, WireError> {
        entries.sort_by(|a, b| a.stream.cmp(&b.stream));
        if entries.windows(2).any(|pair| pair[0].stream == pair[1].stream) {
            return Err(WireError::Malformed("batch manifest (a stream listed twice)"));
        }
        Ok(BatchManifest { entries })
    }

    /// The entries, sorted by stream.
    pub fn entries(&self) -> &[BatchEntry] {
        &self.entries
    }

    /// The entry for a stream.
    pub fn get(&self, stream: &str) -> Option<&BatchEntry> {
        self.entries.binary_search_by(|entry| entry.stream.as_str().cmp(stream)).ok().map(|at| &self.entries[at])
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding into a Vec cannot fail")
    }

    /// Decodes strictly: sorted, unique, canonical.
    pub fn decode(bytes: &[u8]) -> Result<BatchManifest, WireError> {
        let manifest: BatchManifest =
            postcard::from_bytes(bytes).map_err(|_| WireError::Malformed("batch manifest"))?;
        if manifest.entries.windows(2).any(|pair| pair[0].stream >= pair[1].stream) {
            return Err(WireError::Malformed("batch manifest (entries out of order)"));
        }
        if manifest.encode() != bytes {
            return Err(WireError::Malformed("batch manifest (not canonical)"));
        }
        Ok(manifest)
    }
}

/// What control sends the edge in one push: key records first (rotations, applied before
/// anything else), then the signed batch manifest, then the item envelopes it lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushBundle {
    /// Encoded [`crate::envelope::Kind::KeyRecord`] envelopes.
    pub key_records: Vec<serde_bytes::ByteBuf>,
    /// The encoded [`crate::envelope::Kind::Batch`] envelope.
    #[serde(with = "serde_bytes")]
    pub manifest: Vec<u8>,
    /// The encoded item envelopes, in any order.
    pub items: Vec<serde_bytes::ByteBuf>,
}

/// A header of a native edge's answer to a push: the address of a peer it does not trust that
/// sent forwarding headers (`X-Forwarded-For`, `CF-Connecting-IP`...): a proxy in front of the
/// edge that is not in its `HEARTH_TRUSTED_PROXIES`, so every client looks like that proxy.
pub const UNTRUSTED_FORWARDING_HEADER: &str = "hearth-untrusted-forwarding";

/// The words an edge answers a write with when its disk is full (HTTP 507, code `disk_full`),
/// which control looks for to say so and tell the owner.
pub const EDGE_DISK_FULL: &str = "the edge's disk is full";

/// One stream as an edge holds it, for a restore of control.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportItem {
    /// The stream (a link's is `sub/<token hash>`).
    pub stream: String,
    /// Its version.
    pub version: u64,
    /// Its envelope; `None` for a deleted stream (kept so versions continue above it).
    #[serde(with = "serde_bytes")]
    pub envelope: Option<Vec<u8>>,
}

/// A page of everything an edge holds (`GET /<api>/export?after=<cursor>`), for
/// `hearth-control restore`: streams first, then links, in a stable order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportPage {
    /// The streams of this page.
    pub items: Vec<ExportItem>,
    /// Pass this as `after` for the next page; `None` after the last.
    pub next: Option<String>,
    /// The key records of the last push, as nodes get them
    /// ([`crate::trust::chain_to_header`]).
    pub keys: Option<String>,
    /// The version of the last batch manifest the edge applied (a restored control numbers
    /// its pushes above it).
    pub batch: u64,
}

impl ExportItem {
    /// What it takes of a page's [`ExportPage::ITEM_BYTES`]: its stream's name and envelope.
    pub fn size(&self) -> usize {
        self.stream.len() + self.envelope.as_ref().map_or(0, Vec::len)
    }
}

const MIB: usize = 1024 * 1024;

impl ExportPage {
    /// The most items one page holds.
    pub const MAX_ITEMS: usize = 500;
    /// The most bytes of items ([`ExportItem::size`]) one page holds: an edge adds no item
    /// that would take a page past it (but the first, so every page makes way). The largest
    /// envelope an edge exports, a credential set ([`crate::envelope::Kind::max_len`]: 8 MiB),
    /// is half of it.
    pub const ITEM_BYTES: usize = 16 * MIB;
    /// The longest page control reads: the items' bytes and 1 MiB for the rest (at most 32
    /// bytes of framing an item, the cursor, which names a stream or a link's hash in hex,
    /// and the key records, which nodes take in the headers of a pull's answer and are far
    /// smaller).
    pub const MAX_LEN: usize = Self::ITEM_BYTES + MIB;
    /// The most pages one export takes: an edge holding the 100k users one control is built
    /// for (a link each, the deleted links kept as tombstones) and its nodes' streams fits in
    /// a few hundred pages, some 1,600 if every snapshot were as large as one can be. A
    /// restore stops an export that goes on past this.
    pub const MAX_PAGES: usize = 10_000;

    /// Whether a page that holds `items` has room for `next` (a page always has room for one).
    pub fn room_for(items: &[ExportItem], next: &ExportItem) -> bool {
        items.is_empty()
            || (items.len() < Self::MAX_ITEMS
                && items.iter().map(ExportItem::size).sum::<usize>() + next.size() <= Self::ITEM_BYTES)
    }
}

/// What the edge hands control when it drains queued usage reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageDrain {
    /// Pass this as `after` next time; everything up to it is then dropped from the queue.
    pub cursor: u64,
    /// Encoded [`crate::envelope::Kind::UsageReport`] envelopes, oldest first.
    pub reports: Vec<serde_bytes::ByteBuf>,
}

impl UsageDrain {
    /// The most reports one drain hands out.
    pub const MAX_REPORTS: usize = 500;
    /// The most bytes of reports one drain hands out: an edge adds no report that would take
    /// it past this (but the first). A report is at most 4 MiB
    /// ([`crate::envelope::Kind::max_len`]), so each fits.
    pub const REPORT_BYTES: usize = 8 * MIB;
    /// The longest drain control reads: the reports and their framing (at most 10 bytes a
    /// report, and the cursor).
    pub const MAX_LEN: usize = Self::REPORT_BYTES + 16 * 1024;

    /// Whether this drain has room for a report of `len` bytes (it always has for one).
    pub fn room_for(&self, len: usize) -> bool {
        self.reports.is_empty()
            || (self.reports.len() < Self::MAX_REPORTS
                && self.reports.iter().map(|r| r.len()).sum::<usize>() + len <= Self::REPORT_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode;

    #[test]
    fn pages_filled_to_their_budget_stay_under_what_control_reads() {
        use crate::envelope::Kind;
        // Envelopes as large as an edge exports, and as many small ones as a page takes; key
        // records as long as a pull's headers can carry.
        let keys = Some("k".repeat(408 * 1024));
        for size in [Kind::CredentialSet.max_len(), Kind::Snapshot.max_len(), 200] {
            let mut page = ExportPage { keys: keys.clone(), batch: u64::MAX, ..ExportPage::default() };
            loop {
                let stream = format!("creds/{}", u64::MAX - page.items.len() as u64);
                let item = ExportItem { stream, version: u64::MAX, envelope: Some(vec![7; size]) };
                if !ExportPage::room_for(&page.items, &item) {
                    break;
                }
                page.items.push(item);
            }
            let fit = if size == 200 { ExportPage::MAX_ITEMS } else { ExportPage::ITEM_BYTES / (size + 64) };
            assert_eq!(page.items.len(), fit, "{size}-byte items a page");
            page.next = page.items.last().map(|last| format!("s.{}", hex::encode(&last.stream)));
            let len = encode(&page).len();
            assert!(len <= ExportPage::MAX_LEN, "a page of {size}-byte items is {len} bytes");
        }
        for size in [Kind::UsageReport.max_len(), 100] {
            let mut drain = UsageDrain { cursor: u64::MAX, reports: Vec::new() };
            while drain.room_for(size) {
                drain.reports.push(vec![7; size].into());
            }
            assert!(drain.reports.len() >= 2, "{size}-byte reports: {} a drain", drain.reports.len());
            let len = encode(&drain).len();
            assert!(len <= UsageDrain::MAX_LEN, "a drain of {size}-byte reports is {len} bytes");
        }
    }

    #[test]
    fn batch_manifests_are_canonical() {
        let e = |s: &str| BatchEntry { stream: s.into(), version: 1, digest: Some([1; 32]) };
        let manifest = BatchManifest::new(vec![e("b"), e("a")]).unwrap();
        assert_eq!(manifest.entries()[0].stream, "a");
        assert_eq!(manifest.get("b").unwrap().stream, "b");
        assert!(manifest.get("c").is_none());
        assert_eq!(BatchManifest::decode(&manifest.encode()).unwrap(), manifest);
        assert!(BatchManifest::new(vec![e("a"), e("a")]).is_err());
        let unsorted = BatchManifest { entries: vec![e("b"), e("a")] };
        assert!(BatchManifest::decode(&unsorted.encode()).is_err());
    }
}
