//! Deciding what of the edge's export a restore keeps: envelopes that verify against the root
//! chain for their stream and are not behind or against the archive, deletions above it; and
//! the owner's notes on what was left out, and why.

use std::collections::BTreeMap;

use hearth_shared::Digest;
use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::trust::{Expect, Trust, verify};
use hearth_shared::wire::{ExportItem, Stream, stream};

use super::archive::Archived;

/// Checks an envelope the edge keeps as control signed it (its expiry aside: a restore reads
/// what was last published, however long ago).
fn verified(bytes: &[u8], trust: &Trust, kind: Kind, audience: Audience, name: &str) -> Option<Envelope> {
    let envelope = Envelope::decode(bytes, kind.max_len()).ok()?;
    let at = envelope.header.issued.min(envelope.header.expires);
    let expect = Expect { kind, audience, stream: name };
    verify(bytes, trust, &expect, None, at).ok().map(|v| v.envelope)
}

/// The signed kind and audience of a stream control publishes to the edge, by its name (a
/// node id only in its canonical form, as control writes it).
fn stream_kind(name: &str) -> Option<(Kind, Audience)> {
    name.parse::<Stream>().ok()?.pushed()
}

/// Why an item of the export was left out.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Dropped {
    /// Not a stream control publishes (or not in its canonical name).
    Unknown,
    /// Not signed by control's keys as the root key certified them, for this stream, kind
    /// and audience (or a snapshot the recovery key does not open, or whose link it is not).
    Unverified,
    /// Listed at another version than the one its envelope was signed at.
    Version,
    /// Older than what the archive holds for its stream.
    Older,
    /// The version the archive holds, with other content.
    Conflict,
}

impl Dropped {
    fn describe(self) -> &'static str {
        match self {
            Dropped::Unknown => "are not streams control publishes",
            Dropped::Unverified => "do not verify against the root key for their stream",
            Dropped::Version => "are listed at another version than they were signed at",
            Dropped::Older => "are older than the archive's",
            Dropped::Conflict => "differ from the archive's at the same version",
        }
    }
}

/// What of the edge's export a restore keeps: envelopes that verify against the root chain
/// for their stream, kind and audience, listed at the version they were signed at, and not
/// behind or against the archive; deletions of streams control publishes, above the archive.
/// Everything else is left out and reported.
pub(super) struct Screened {
    /// Kept envelopes, as the edge holds them (verified, so read without copying their body).
    pub(super) kept: Vec<Kept>,
    /// Kept deletions: the stream and the version it was deleted at.
    pub(super) deleted: Vec<(String, u64)>,
    /// What was left out, and why.
    pub(super) dropped: BTreeMap<Dropped, Vec<String>>,
}

/// An envelope a restore keeps.
pub(super) struct Kept {
    pub(super) stream: String,
    pub(super) version: u64,
    pub(super) digest: Digest,
    pub(super) bytes: Vec<u8>,
}

/// Versions above this are no version control signed: a stream at it could never move on.
const MAX_VERSION: u64 = i64::MAX as u64 >> 1;

/// Sorts the edge's export into what a restore keeps and what it leaves out, and why (see
/// [`Screened`]), against the archive's streams (none: nothing to be behind).
pub(super) fn screen(items: Vec<ExportItem>, trust: &Trust, archived: &Archived) -> Screened {
    let mut screened = Screened { kept: Vec::new(), deleted: Vec::new(), dropped: BTreeMap::new() };
    for item in items {
        let name = item.stream;
        if name == stream::RELEASE {
            // Signed by the release key and kept in the archive's releases: nothing to seed.
            continue;
        }
        let Some((kind, audience)) = stream_kind(&name) else {
            screened.dropped.entry(Dropped::Unknown).or_default().push(name);
            continue;
        };
        let archive = archived.get(&name);
        let Some(bytes) = item.envelope else {
            // A deletion is not signed: taken only above the archive's version, for a stream
            // whose next version control could still sign.
            match archive {
                _ if item.version > MAX_VERSION => screened.dropped.entry(Dropped::Version).or_default().push(name),
                Some((version, _)) if item.version <= *version => {
                    screened.dropped.entry(Dropped::Older).or_default().push(name);
                }
                _ => screened.deleted.push((name, item.version)),
            }
            continue;
        };
        let Some(envelope) = verified(&bytes, trust, kind, audience, &name) else {
            screened.dropped.entry(Dropped::Unverified).or_default().push(name);
            continue;
        };
        let version = envelope.header.version;
        let why = match archive {
            _ if version != item.version || version > MAX_VERSION => Some(Dropped::Version),
            Some((at, _)) if version < *at => Some(Dropped::Older),
            Some((at, digest)) if version == *at && *digest != Some(envelope.digest().0) => Some(Dropped::Conflict),
            _ => None,
        };
        match why {
            Some(why) => screened.dropped.entry(why).or_default().push(name),
            None => screened.kept.push(Kept { stream: name, version, digest: envelope.digest().0, bytes }),
        }
    }
    screened
}

/// The owner's notes on what a restore left out of the edge's export.
pub(super) fn dropped_notes(dropped: &BTreeMap<Dropped, Vec<String>>) -> Vec<String> {
    const NAMED: usize = 5;
    dropped
        .iter()
        .filter(|(_, streams)| !streams.is_empty())
        .map(|(why, streams)| {
            let mut named = streams.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
            if streams.len() > NAMED {
                named.push_str(&format!(" and {} more", streams.len() - NAMED));
            }
            format!("{} items of the edge's export {} and were left out: {named}", streams.len(), why.describe())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use hearth_shared::keys::{Role, SecretKey};
    use hearth_shared::trust::RoleKeys;

    use super::*;

    fn item(stream: &str, version: u64, envelope: Option<Vec<u8>>) -> ExportItem {
        ExportItem { stream: stream.to_owned(), version, envelope }
    }

    /// A deletion is kept only above the archive's version and below the versions control
    /// could not sign past; what is no stream control publishes, or does not verify, is left
    /// out; releases are nobody's to seed.
    #[test]
    fn deletions_are_kept_above_the_archive_and_the_rest_is_said() {
        let trust = Trust::new(RoleKeys::single(SecretKey::from_seed(Role::Root, &[7; 32]).public()));
        let archived: Archived = BTreeMap::from([("creds/1".to_owned(), (4, None)), ("node/2".to_owned(), (3, None))]);
        let screened = screen(
            vec![
                item(stream::RELEASE, 9, None),
                item("usage/1", 2, None),
                item("creds/1", 5, None),
                item("node/2", 3, None),
                item("node/3", MAX_VERSION + 1, None),
                item("creds/4", 1, Some(b"not an envelope".to_vec())),
                item("ack/5", 1, None),
            ],
            &trust,
            &archived,
        );
        assert!(screened.kept.is_empty());
        assert_eq!(screened.deleted, [("creds/1".to_owned(), 5), ("ack/5".to_owned(), 1)]);
        assert_eq!(screened.dropped[&Dropped::Unknown], ["usage/1"]);
        assert_eq!(screened.dropped[&Dropped::Older], ["node/2"]);
        assert_eq!(screened.dropped[&Dropped::Version], ["node/3"]);
        assert_eq!(screened.dropped[&Dropped::Unverified], ["creds/4"]);
        assert_eq!(screened.dropped.len(), 4, "nothing else is left out, the release is not even named");
    }

    /// The owner reads why items were left out, the first few of each by name.
    #[test]
    fn what_was_left_out_is_said_the_first_five_by_name() {
        let dropped = BTreeMap::from([
            (Dropped::Older, (1..=7).map(|n| format!("creds/{n}")).collect()),
            (Dropped::Conflict, Vec::new()),
            (Dropped::Unknown, vec!["usage/1".to_owned()]),
        ]);
        assert_eq!(
            dropped_notes(&dropped),
            [
                "1 items of the edge's export are not streams control publishes and were left out: usage/1",
                "7 items of the edge's export are older than the archive's and were left out: creds/1, creds/2, \
                 creds/3, creds/4, creds/5 and 2 more",
            ]
        );
    }
}
