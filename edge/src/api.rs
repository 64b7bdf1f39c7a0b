//! The checks behind the API routes, shared by both adapters: who may call, and whether what
//! they send is acceptable. Each returns the [`Reply`] to send when it refuses.

use hearth_shared::envelope::{Audience, DecodeError, Incoming, Kind, Received};
use hearth_shared::nodeauth;
use hearth_shared::trust::{Expect, ItemDigest, Trust, verify, verify_received};
use hearth_shared::wire::{NodeId, UsageReport, decode, stream};

use crate::Reply;
use crate::push::{PushError, Stored, Target, Write};

/// A JSON error: a stable code and a message safe to show.
pub fn error(status: u16, code: &str, message: &str) -> Reply {
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    Reply { status, headers: vec![("content-type", "application/json".to_owned())], body: body.into_bytes() }
}

/// A JSON answer.
pub fn json(status: u16, value: &serde_json::Value) -> Reply {
    Reply {
        status,
        headers: vec![("content-type", "application/json".to_owned())],
        body: value.to_string().into_bytes(),
    }
}

/// Storage is down: the client should retry (and limits fail closed).
pub fn unavailable() -> Reply {
    let mut reply = error(503, "unavailable", "storage is unavailable; try again shortly");
    reply.headers.push(("retry-after", "5".to_owned()));
    reply
}

/// The edge's disk (or its database's cap) is full: nothing more is stored until space is
/// freed; links it holds are still served.
pub fn disk_full() -> Reply {
    error(
        507,
        "disk_full",
        &format!(
            "{}: free space on the edge's server (what it holds is still served)",
            hearth_shared::wire::EDGE_DISK_FULL
        ),
    )
}

/// A refused push or archive, with its reason, and the stream it is about when it is about one.
pub fn refused(error: &PushError) -> Reply {
    let mut body = serde_json::json!({ "error": "refused", "message": error.to_string() });
    if let Some(stream) = error.stream() {
        body["stream"] = stream.into();
    }
    json(error.status(), &body)
}

/// The answer to a push that applied.
pub fn applied(written: usize, unchanged: usize) -> Reply {
    json(200, &serde_json::json!({ "applied": written, "unchanged": unchanged }))
}

/// API requests refused for their push token or node signature: counted for the health
/// answer, and logged at most once a minute, so a flood of bad tokens cannot flood the log.
#[derive(Debug, Default)]
pub struct RefusalLog {
    total: u64,
    unlogged: u64,
    logged_ms: u64,
}

impl RefusalLog {
    /// Counts a refusal at `now_ms`; when a log line is due, gives how many it tells of (this
    /// one and those since the last line).
    pub fn count(&mut self, now_ms: u64) -> Option<u64> {
        self.total += 1;
        self.unlogged += 1;
        if now_ms < self.logged_ms + 60_000 {
            return None;
        }
        self.logged_ms = now_ms;
        Some(std::mem::take(&mut self.unlogged))
    }

    /// The health answer: `ok`, and how many requests were refused.
    pub fn health(&self) -> Reply {
        Reply::text(200, format!("ok\npush token refusals: {}\n", self.total))
    }
}

/// Checks that a request on node `node`'s routes is signed by that node's key; gives what
/// verified (the caller then takes its nonce once).
pub fn authorize_node(
    header: Option<&str>,
    trust: &Trust,
    request: &nodeauth::Request<'_>,
    node: NodeId,
    now: u64,
) -> Result<nodeauth::Verified, Reply> {
    match nodeauth::verify(header, |n| trust.node(n).copied(), request, now) {
        Ok(verified) if verified.node == node => Ok(verified),
        Ok(_) => Err(error(403, "wrong_node", "a node may only use its own routes")),
        Err(e) => Err(node_refused(e)),
    }
}

/// The answer to a node request refused for its authentication: 401 with the reason (a
/// replay says so), 429 for a node over its requests.
pub fn node_refused(e: nodeauth::NodeAuthError) -> Reply {
    match e {
        nodeauth::NodeAuthError::Replayed => error(401, "replayed", &e.to_string()),
        nodeauth::NodeAuthError::TooMany => error(429, "too_many", &e.to_string()),
        _ => error(401, "node_auth", &e.to_string()),
    }
}

/// Checks a node's usage report; gives its sequence number, to queue it under.
pub fn check_usage(body: &[u8], trust: &Trust, node: NodeId, now: u64) -> Result<u64, Reply> {
    let name = stream::usage(node);
    let expect = Expect { kind: Kind::UsageReport, audience: Audience::Control, stream: &name };
    let verified = verify(body, trust, &expect, None, now).map_err(|e| error(400, "bad_report", &e.to_string()))?;
    let report = UsageReport::decode(&verified.envelope.body)
        .map_err(|_| error(400, "bad_report", "the body is not a usage report"))?;
    if report.node != node || report.seq != verified.envelope.header.version {
        return Err(error(400, "bad_report", "the report's node or sequence does not match its envelope"));
    }
    Ok(report.seq)
}

/// Checks control's archive against the stored one; gives the write that stores it.
pub fn check_archive(body: &[u8], trust: &Trust, stored: Option<&Stored>, now: u64) -> Result<Write, Reply> {
    let mut incoming = Incoming::new(Kind::Archive.max_len());
    let received = incoming.feed(body).and_then(|()| incoming.finish()).map_err(archive_refused)?;
    let mut write = check_archive_received(&received, trust, stored, now)?;
    write.envelope = Some(body.to_vec());
    Ok(write)
}

/// Checks control's archive, read in pieces ([`Incoming`]), against the stored one; gives the
/// write that records it. The archive's bytes are wherever the caller kept them as they came:
/// the write holds none.
pub fn check_archive_received(
    received: &Received,
    trust: &Trust,
    stored: Option<&Stored>,
    now: u64,
) -> Result<Write, Reply> {
    let expect = Expect { kind: Kind::Archive, audience: Audience::Control, stream: stream::ARCHIVE };
    verify_received(received, trust, &expect, None, now).map_err(|e| refused(&PushError::Manifest(e)))?;
    let write = Write {
        target: Target::Archive,
        stream: stream::ARCHIVE.to_owned(),
        version: received.header.version,
        digest: ItemDigest(received.sha256),
        envelope: None,
    };
    crate::push::decide(&write, stored).map_err(|e| refused(&e))?;
    Ok(write)
}

/// The refusal of an archive that is not a well-formed envelope (or too large to be one).
pub fn archive_refused(error: DecodeError) -> Reply {
    refused(&PushError::Manifest(error.into()))
}

/// A release binary by its name.
pub type NamedFile = (String, Vec<u8>);

/// Checks the release control hands over: its manifest verifies against the release key the
/// root certified, is not older than the stored one, and every binary matches it. Gives the
/// manifest's write and the files to store.
pub fn check_release(
    body: &[u8],
    trust: &Trust,
    stored: Option<&Stored>,
    now: u64,
) -> Result<(Write, Vec<NamedFile>), Reply> {
    use hearth_shared::release::{ReleaseBundle, ReleaseManifest};
    let bad = |why: &str| error(400, "bad_release", why);
    let bundle: ReleaseBundle = decode(body, "release bundle").map_err(|_| bad("not a release bundle"))?;
    let expect = Expect { kind: Kind::Release, audience: Audience::Any, stream: stream::RELEASE };
    let verified =
        verify(&bundle.manifest, trust, &expect, None, now).map_err(|e| bad(&format!("the manifest: {e}")))?;
    let manifest = ReleaseManifest::decode(&verified.envelope.body).map_err(|e| bad(&e.to_string()))?;
    let mut files = Vec::with_capacity(manifest.files.len());
    for file in &manifest.files {
        let bytes = bundle
            .files
            .iter()
            .find(|(name, _)| *name == file.name())
            .map(|(_, bytes)| bytes.to_vec())
            .ok_or_else(|| bad(&format!("{} is missing", file.name())))?;
        if !file.matches(&bytes) {
            return Err(bad(&format!("{} does not match the manifest", file.name())));
        }
        files.push((file.name(), bytes));
    }
    let write = Write {
        target: Target::Release,
        stream: stream::RELEASE.to_owned(),
        version: verified.envelope.header.version,
        digest: ItemDigest::of(&bundle.manifest),
        envelope: Some(bundle.manifest),
    };
    crate::push::decide(&write, stored).map_err(|e| refused(&e))?;
    Ok((write, files))
}

/// The largest release bundle taken (a few binaries).
pub const MAX_RELEASE_BYTES: usize = hearth_shared::release::MAX_BUNDLE_BYTES;

/// How many streams one export page holds (fewer when their bytes fill it first).
pub const EXPORT_PAGE: u32 = hearth_shared::wire::ExportPage::MAX_ITEMS as u32;

/// Where an export page ended: in the streams (after a name), or in a shard of links (after
/// a token hash). Written into the page as text for the next request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportCursor {
    /// Streams after this name (empty: from the first).
    Streams(String),
    /// Links of `shard` after this token hash (empty: from the first).
    Links {
        /// The shard (always 0 on a native edge).
        shard: u32,
        /// The last token hash given.
        after: Vec<u8>,
    },
}

impl ExportCursor {
    /// Parses a cursor from a request; `None` when it is not one.
    pub fn parse(text: &str) -> Option<ExportCursor> {
        if text.is_empty() {
            return Some(ExportCursor::Streams(String::new()));
        }
        let mut parts = text.split('.');
        match (parts.next()?, parts.next(), parts.next(), parts.next()) {
            ("s", Some(name), None, None) => {
                Some(ExportCursor::Streams(String::from_utf8(hex::decode(name).ok()?).ok()?))
            }
            ("l", Some(shard), Some(after), None) => {
                Some(ExportCursor::Links { shard: shard.parse().ok()?, after: hex::decode(after).ok()? })
            }
            _ => None,
        }
    }

    /// The cursor as text.
    pub fn to_text(&self) -> String {
        match self {
            ExportCursor::Streams(name) => format!("s.{}", hex::encode(name)),
            ExportCursor::Links { shard, after } => format!("l.{shard}.{}", hex::encode(after)),
        }
    }
}

/// A bad export cursor.
pub fn bad_cursor() -> Reply {
    error(400, "bad_cursor", "the export cursor is malformed; start again without one")
}

/// The stream name of a link in an export.
pub fn link_stream(token_hash: &[u8]) -> Option<String> {
    let hash: hearth_shared::Digest = token_hash.try_into().ok()?;
    Some(stream::snapshot(&hash))
}

#[cfg(test)]
mod export_tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for cursor in [
            ExportCursor::Streams(String::new()),
            ExportCursor::Streams("creds/12".into()),
            ExportCursor::Links { shard: 0, after: Vec::new() },
            ExportCursor::Links { shard: 15, after: vec![0xab; 32] },
        ] {
            assert_eq!(ExportCursor::parse(&cursor.to_text()), Some(cursor.clone()));
        }
        assert_eq!(ExportCursor::parse(""), Some(ExportCursor::Streams(String::new())));
        for bad in ["x", "s.zz", "l.1", "l.x.00", "s.00.00"] {
            assert_eq!(ExportCursor::parse(bad), None, "{bad}");
        }
    }
}
