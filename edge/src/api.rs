//! The checks behind the API routes, shared by both adapters: who may call, and whether what
//! they send is acceptable. Each returns the [`Reply`] to send when it refuses.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::trust::{Expect, StreamState, Trust, verify};
use hearth_shared::wire::{NodeId, UsageReport, decode, stream};
use hearth_shared::{nodeauth, sha256};

use crate::Reply;
use crate::push::{PushError, Target, Write};

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

/// A refused push or archive, with its reason.
pub fn refused(error: &PushError) -> Reply {
    self::error(error.status(), "refused", &error.to_string())
}

/// The answer to a push that applied.
pub fn applied(written: usize, unchanged: usize) -> Reply {
    json(200, &serde_json::json!({ "applied": written, "unchanged": unchanged }))
}

/// Checks that a request on node `node`'s routes is signed by that node's key.
pub fn authorize_node(
    header: Option<&str>,
    trust: &Trust,
    method: &str,
    path_and_query: &str,
    node: NodeId,
    now: u64,
) -> Result<(), Reply> {
    match nodeauth::verify(header, |n| trust.node(n).copied(), method, path_and_query, now) {
        Ok(proven) if proven == node => Ok(()),
        Ok(_) => Err(error(403, "wrong_node", "a node may only use its own routes")),
        Err(e) => Err(error(401, "node_auth", &e.to_string())),
    }
}

/// Checks a node's usage report; gives its sequence number, to queue it under.
pub fn check_usage(body: &[u8], trust: &Trust, node: NodeId, now: u64) -> Result<u64, Reply> {
    let name = stream::usage(node);
    let expect = Expect { kind: Kind::UsageReport, audience: Audience::Control, stream: &name };
    let verified = verify(body, trust, &expect, None, now).map_err(|e| error(400, "bad_report", &e.to_string()))?;
    let report: UsageReport = decode(&verified.envelope.body, "usage report")
        .map_err(|_| error(400, "bad_report", "the body is not a usage report"))?;
    if report.node != node || report.seq != verified.envelope.header.version {
        return Err(error(400, "bad_report", "the report's node or sequence does not match its envelope"));
    }
    Ok(report.seq)
}

/// Checks control's archive against the stored one; gives the write that stores it.
pub fn check_archive(body: &[u8], trust: &Trust, stored: Option<&StreamState>, now: u64) -> Result<Write, Reply> {
    let expect = Expect { kind: Kind::Archive, audience: Audience::Control, stream: stream::ARCHIVE };
    let verified = verify(body, trust, &expect, None, now).map_err(|e| refused(&PushError::Manifest(e)))?;
    let write = Write {
        target: Target::Archive,
        stream: stream::ARCHIVE.to_owned(),
        version: verified.envelope.header.version,
        digest: sha256(body),
        envelope: Some(body.to_vec()),
    };
    crate::push::decide(&write, stored).map_err(|e| refused(&e))?;
    Ok(write)
}
