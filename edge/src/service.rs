//! The edge's API, written once over a [`Storage`]: control's push, archive, release, usage
//! drain and export, and the nodes' pulls, acknowledgements, releases and usage reports. The
//! native edge calls [`handle`] on its libSQL store; the Worker's `Control` Durable Object on
//! its own SQLite and the `Links` shards.

use hearth_shared::envelope::Envelope;
use hearth_shared::nodeauth;
use hearth_shared::trust::{StreamState, Trust};
use hearth_shared::wire::{self, CredsAnswer, ExportPage, Stream, UsageDrain, decode, encode, stream};

use crate::Reply;
use crate::api::{self, ExportCursor};
use crate::config::EdgeConfig;
use crate::push;
use crate::routes::Route;
use crate::serve::decoy;
use crate::storage::{Fill, Planned, Storage, VALUE_BATCH, VALUE_KEYS, plan};

/// The authority a request URL names, as a node signs it: its host, with the port when the
/// URL names one ([`Call::host`] on the Worker, which sees the URL rather than a `Host`).
pub fn authority(host: Option<&str>, port: Option<u16>) -> String {
    match (host, port) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (host, None) => host.unwrap_or_default().to_owned(),
        (None, Some(_)) => String::new(),
    }
}

/// An API request, as the edge needs it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// GET, POST, PUT...
    pub method: &'a str,
    /// The path.
    pub path: &'a str,
    /// The query, without `?`.
    pub query: &'a str,
    /// The `Authorization` header (control's push token).
    pub authorization: Option<&'a str>,
    /// The node's signature header ([`nodeauth::HEADER`]).
    pub node_signature: Option<&'a str>,
    /// The authority the request reached: natively its `Host` header, on the Worker the
    /// request URL's host and port (a node's signature covers it).
    pub host: &'a str,
    /// The body.
    pub body: &'a [u8],
    /// Unix seconds.
    pub now: u64,
}

/// Answers an API route with the edge's `trust` (the subscription, health and unknown routes
/// are the adapter's: they get the decoy here). `Err` is storage failing; the adapter answers
/// it with [`api::unavailable`]. A node's routes are taken only signed by that node, control's
/// only with the push token; each route's answer is its own step below.
pub async fn handle<S: Storage>(
    store: &S,
    config: &EdgeConfig,
    trust: &Trust,
    route: Route,
    call: &Call<'_>,
) -> Result<Reply, S::Error> {
    let node_auth = |node| node_auth(store, trust, call, node);
    Ok(match route {
        Route::Subscription(_) | Route::Health | Route::Unknown => decoy(),
        Route::NodeCreds { node, after, base } => match node_auth(node).await? {
            Err(reply) => reply,
            Ok(()) => node_pull(store, node, after, base).await?,
        },
        Route::NodeAck(node) => match node_auth(node).await? {
            Err(reply) => reply,
            Ok(()) => node_ack(store, node).await?,
        },
        Route::NodeUsage(node) => match node_auth(node).await? {
            Err(reply) => reply,
            Ok(()) => node_usage(store, trust, call, node).await?,
        },
        Route::NodeRelease(node) => match node_auth(node).await? {
            Err(reply) => reply,
            Ok(()) => node_release(store, node, None).await?,
        },
        Route::NodeReleaseFile(node, name) => match node_auth(node).await? {
            Err(reply) => reply,
            Ok(()) => node_release(store, node, Some(&name)).await?,
        },
        _ if !config.push_token.matches(call.authorization) => {
            api::error(401, "unauthorized", "a valid push token is required")
        }
        Route::Push => with_deltas(push(store, trust, call.body, call.now).await?),
        Route::UsageDrain { after } => usage_drain(store, after).await?,
        Route::ArchivePut => archive_put(store, trust, call).await?,
        Route::ArchiveGet => archive_get(store).await?,
        Route::ReleasePut => release_put(store, trust, call).await?,
        Route::Export { after } => export_answer(store, &after).await?,
    })
}

/// The answer to a node's pull: what it should take ([`node_creds`]; 204 when nothing), with
/// the key records and the release it is told to run in headers.
async fn node_pull<S: Storage>(store: &S, node: u64, after: u64, base: Option<u64>) -> Result<Reply, S::Error> {
    let mut reply = match node_creds(store, node, after, base).await? {
        Some(envelope) => Reply::bytes(200, envelope),
        None => no_content(),
    };
    if let Some(keys) = store.value(VALUE_KEYS).await?.and_then(|bytes| String::from_utf8(bytes).ok()) {
        reply.headers.push((nodeauth::KEYS_HEADER, keys));
    }
    if let Some(release) = release_for(store, node).await? {
        reply.headers.push((nodeauth::RELEASE_HEADER, release.to_string()));
    }
    Ok(reply)
}

/// Control's latest acknowledgement of a node's usage reports (204 when none).
async fn node_ack<S: Storage>(store: &S, node: u64) -> Result<Reply, S::Error> {
    Ok(match store.stream(&stream::usage_ack(node)).await? {
        Some((_, Some(envelope))) => Reply::bytes(200, envelope),
        _ => no_content(),
    })
}

/// Queues a node's usage report for control, once checked as that node's.
async fn node_usage<S: Storage>(store: &S, trust: &Trust, call: &Call<'_>, node: u64) -> Result<Reply, S::Error> {
    Ok(match api::check_usage(call.body, trust, node, call.now) {
        Err(reply) => reply,
        Ok(seq) => {
            store.enqueue_usage(node, seq, call.body).await?;
            Reply::text(202, "queued\n")
        }
    })
}

/// A 204 with nothing in it.
fn no_content() -> Reply {
    Reply { status: 204, headers: Vec::new(), body: Vec::new() }
}

/// A push's answer, telling control (when the push applied) that this edge takes deltas.
fn with_deltas(mut reply: Reply) -> Reply {
    if reply.status == 200 {
        reply.headers.push((wire::DELTAS_HEADER, "1".to_owned()));
    }
    reply
}

/// Hands control the usage reports queued after its cursor `after` (dropping those up to it).
async fn usage_drain<S: Storage>(store: &S, after: u64) -> Result<Reply, S::Error> {
    let mut drain = UsageDrain { cursor: after, reports: Vec::new() };
    store.drain_usage(after, &mut drain).await?;
    Ok(Reply::bytes(200, encode(&drain)))
}

/// Stores control's archive, once checked against the one held.
async fn archive_put<S: Storage>(store: &S, trust: &Trust, call: &Call<'_>) -> Result<Reply, S::Error> {
    let before = store.state(stream::ARCHIVE).await?;
    Ok(match api::check_archive(call.body, trust, before.as_ref(), call.now) {
        Err(reply) => reply,
        Ok(write) if before == Some(write.state()) => Reply::text(200, "unchanged\n"),
        Ok(write) => match store.put_archive(&Planned { write, before }).await? {
            Ok(()) => Reply::text(200, "stored\n"),
            Err(changed) => changed.reply(),
        },
    })
}

/// Control's archive, as pushed.
async fn archive_get<S: Storage>(store: &S) -> Result<Reply, S::Error> {
    Ok(match store.archive().await? {
        Some(bytes) => Reply::bytes(200, bytes),
        None => api::error(404, "no_archive", "no archive has been pushed yet"),
    })
}

/// Stores the release control rolls out (its manifest and binaries), once checked against
/// the one held.
async fn release_put<S: Storage>(store: &S, trust: &Trust, call: &Call<'_>) -> Result<Reply, S::Error> {
    if call.body.len() > api::MAX_RELEASE_BYTES {
        return Ok(api::error(413, "too_large", "the release is over the size limit"));
    }
    let before = store.state(stream::RELEASE).await?;
    Ok(match api::check_release(call.body, trust, before.as_ref(), call.now) {
        Err(reply) => reply,
        Ok((write, _)) if before == Some(write.state()) => Reply::text(200, "unchanged\n"),
        Ok((write, files)) => match store.put_release(&Planned { write, before }, &files).await? {
            Ok(()) => Reply::text(200, "stored\n"),
            Err(changed) => changed.reply(),
        },
    })
}

/// The export's page after cursor `after` ([`export`]), refused for a cursor no page gave.
async fn export_answer<S: Storage>(store: &S, after: &str) -> Result<Reply, S::Error> {
    Ok(match ExportCursor::parse(after) {
        None => api::bad_cursor(),
        Some(cursor) => match export(store, cursor, api::EXPORT_PAGE).await? {
            Some(page) => Reply::bytes(200, encode(&page)),
            None => api::bad_cursor(),
        },
    })
}

/// Checks that a request on node `node`'s routes is signed by that node, over this request
/// (method, host, path with query, body), and takes its nonce: a request sent again is
/// refused, and so is a node over its requests in the time window. A request signed the old way has no nonce ([`nodeauth::verify`] takes it for a
/// read only); the adapters log it ([`signed_the_old_way`]).
async fn node_auth<S: Storage>(
    store: &S,
    trust: &Trust,
    call: &Call<'_>,
    node: u64,
) -> Result<Result<(), Reply>, S::Error> {
    let path = if call.query.is_empty() { call.path.to_owned() } else { format!("{}?{}", call.path, call.query) };
    let request = nodeauth::Request { method: call.method, host: call.host, path_and_query: &path, body: call.body };
    let verified = match api::authorize_node(call.node_signature, trust, &request, node, call.now) {
        Ok(verified) => verified,
        Err(reply) => return Ok(Err(reply)),
    };
    if let Some(nonce) = verified.nonce
        && let Err(refusal) = store.take_nonce(node, &nonce, verified.expires(), call.now).await?
    {
        return Ok(Err(api::node_refused(refusal)));
    }
    Ok(Ok(()))
}

/// The node whose request on its routes was taken though signed the old way (no nonce): the
/// adapters log it, as the node runs a release from before nonces and should update.
pub fn signed_the_old_way(route: &Route, call: &Call<'_>, reply: &Reply) -> Option<u64> {
    let node = match route {
        Route::NodeCreds { node, .. }
        | Route::NodeAck(node)
        | Route::NodeUsage(node)
        | Route::NodeRelease(node)
        | Route::NodeReleaseFile(node, _) => *node,
        _ => return None,
    };
    let header = call.node_signature?;
    (reply.status < 400 && nodeauth::is_old_form(header)).then_some(node)
}

/// A node's release manifest (`file` `None`) or one of its binaries, if the rollout tells it
/// to run that release.
async fn node_release<S: Storage>(store: &S, node: u64, file: Option<&str>) -> Result<Reply, S::Error> {
    if release_for(store, node).await?.is_none() {
        return Ok(api::error(404, "no_release", "this node is not told to run a release"));
    }
    Ok(match file {
        None => match store.stream(stream::RELEASE).await? {
            Some((_, Some(manifest))) => Reply::bytes(200, manifest),
            _ => api::error(404, "no_release", "no release is held"),
        },
        Some(name) => match store.release_file(name).await? {
            Some(bytes) => Reply::bytes(200, bytes),
            None => api::error(404, "no_release", "the release has no such file"),
        },
    })
}

/// What answers a node's pull (see [`wire::creds_answer`]): its latest delta when the node
/// holds the full set under it, else the full set when newer than what the node holds. The
/// full set (megabytes at 100,000 users) is read only when it is the answer.
async fn node_creds<S: Storage>(
    store: &S,
    node: u64,
    after: u64,
    base: Option<u64>,
) -> Result<Option<Vec<u8>>, S::Error> {
    let full = store.state(&stream::creds(node)).await?.filter(|state| state.digest.0 != [0; 32]);
    let delta = match store.stream(&stream::creds_delta(node)).await? {
        Some((state, Some(envelope))) => Envelope::stored_body(&envelope)
            .and_then(wire::CredDelta::base_of)
            .filter(|(of, _)| *of == node)
            .map(|(_, on)| (state.version, on, envelope)),
        _ => None,
    };
    let versions = delta.as_ref().map(|(version, on, _)| (*version, *on));
    Ok(match wire::creds_answer(after, base, full.map(|state| state.version), versions) {
        Some(CredsAnswer::Delta) => delta.map(|(_, _, envelope)| envelope),
        Some(CredsAnswer::Full) => store.stream(&stream::creds(node)).await?.and_then(|(_, envelope)| envelope),
        None => None,
    })
}

/// The release the rollout tells `node` to run, when the edge holds that release.
async fn release_for<S: Storage>(store: &S, node: u64) -> Result<Option<u64>, S::Error> {
    let Some((_, Some(rollout))) = store.stream(stream::ROLLOUT).await? else { return Ok(None) };
    let Some(release) = push::release_for(&rollout, node) else { return Ok(None) };
    let held = store.state(stream::RELEASE).await?.map(|state| state.version);
    Ok((held == Some(release)).then_some(release))
}

/// The last batch applied.
pub async fn batch<S: Storage>(store: &S) -> Result<Option<StreamState>, S::Error> {
    Ok(store.value(VALUE_BATCH).await?.and_then(|bytes| decode(&bytes, "batch state").ok()))
}

/// Checks a push, decides every write against what its stream holds, and stores it if all
/// of it applies: a refusal of any part stores nothing.
async fn push<S: Storage>(store: &S, trust: &Trust, body: &[u8], now: u64) -> Result<Reply, S::Error> {
    let before = batch(store).await?;
    let checked = match push::check(body, trust, before.as_ref(), now) {
        Ok(checked) => checked,
        Err(e) => return Ok(api::refused(&e)),
    };
    if checked.unchanged {
        return Ok(api::json(200, &serde_json::json!({ "applied": 0, "unchanged": "batch" })));
    }
    let stored = store.states(&checked.writes).await?;
    let plan = match plan(checked, stored, before) {
        Ok(plan) => plan,
        Err(e) => return Ok(api::refused(&e)),
    };
    Ok(match store.apply(&plan).await? {
        Ok(()) => api::applied(plan.writes.len(), plan.unchanged),
        Err(changed) => changed.reply(),
    })
}

/// A page of everything the edge holds, for a restore of control: its streams but the
/// archive (fetched on its own), then each shard's links in turn. `None` for a cursor no page
/// gave (a shard that does not exist).
pub async fn export<S: Storage>(store: &S, cursor: ExportCursor, limit: u32) -> Result<Option<ExportPage>, S::Error> {
    let keys = store.value(VALUE_KEYS).await?.and_then(|bytes| String::from_utf8(bytes).ok());
    let batch = batch(store).await?.map_or(0, |state| state.version);
    let mut fill = Fill::new(limit);
    let next = match cursor {
        ExportCursor::Streams(after) => {
            store.export_streams(&after, stream::ARCHIVE, &mut fill).await?;
            Some(match fill.items.last() {
                Some(last) if fill.full => ExportCursor::Streams(last.stream.clone()),
                _ => ExportCursor::Links { shard: 0, after: Vec::new() },
            })
        }
        ExportCursor::Links { shard, after } => {
            let shards = store.link_shards().max(1);
            if shard >= shards {
                return Ok(None);
            }
            store.export_links(shard, &after, &mut fill).await?;
            match fill.items.last().and_then(|last| link_hash(&last.stream)) {
                Some(last) if fill.full => Some(ExportCursor::Links { shard, after: last }),
                _ if shard + 1 < shards => Some(ExportCursor::Links { shard: shard + 1, after: Vec::new() }),
                _ => None,
            }
        }
    };
    Ok(Some(ExportPage { keys, batch, items: fill.items, next: next.map(|cursor| cursor.to_text()) }))
}

/// The token hash in a link's stream name.
fn link_hash(name: &str) -> Option<Vec<u8>> {
    match name.parse() {
        Ok(Stream::Snapshot(hash)) => Some(hash.to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_the_host_with_its_port_when_named() {
        assert_eq!(authority(Some("edge.example"), Some(8443)), "edge.example:8443");
        assert_eq!(authority(Some("edge.example"), None), "edge.example");
        assert_eq!(authority(None, None), "");
        assert_eq!(authority(None, Some(8443)), "", "no host, no authority");
    }

    #[test]
    fn only_a_push_that_applied_says_the_edge_takes_deltas() {
        let deltas =
            |status| with_deltas(Reply::text(status, "x")).headers.contains(&(wire::DELTAS_HEADER, "1".into()));
        assert!(deltas(200));
        for refused in [400, 401, 409, 413, 503] {
            assert!(!deltas(refused), "{refused}");
        }
    }
}
