//! What a request asks for, from its method and path alone.

use hearth_shared::wire::{NodeId, SubToken};

use crate::config::EdgeConfig;

/// A request's meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET`/`HEAD /<sub prefix>/<token>`; `None` when the token is not even well-formed.
    Subscription(Option<SubToken>),
    /// `POST /<api>/push`.
    Push,
    /// `GET /<api>/nodes/<id>/creds?after=<version>&base=<version>`.
    NodeCreds {
        /// The node.
        node: NodeId,
        /// The version it holds.
        after: u64,
        /// The version of the full set under it, from a node that takes deltas.
        base: Option<u64>,
    },
    /// `POST /<api>/nodes/<id>/usage`.
    NodeUsage(NodeId),
    /// `GET /<api>/nodes/<id>/ack`: control's latest acknowledgement of the node's reports.
    NodeAck(NodeId),
    /// `GET /<api>/nodes/<id>/release`: the manifest of the release the node is told to run.
    NodeRelease(NodeId),
    /// `GET /<api>/nodes/<id>/release/<file>`: one of its binaries.
    NodeReleaseFile(NodeId, String),
    /// `PUT /<api>/release`: control hands over the release being rolled out.
    ReleasePut,
    /// `GET /<api>/usage?after=<cursor>`: control drains the usage queue.
    UsageDrain {
        /// Everything up to here was received by control.
        after: u64,
    },
    /// `PUT /<api>/archive`.
    ArchivePut,
    /// `GET /<api>/archive`.
    ArchiveGet,
    /// `GET /<api>/export?after=<cursor>`: a page of everything the edge holds, for a restore
    /// of control.
    Export {
        /// Where the previous page ended ([`crate::api::ExportCursor`]); empty: the start.
        after: String,
    },
    /// `GET /<api>/healthz`: under the secret prefix, so a scanner cannot tell a Hearth edge
    /// by it (`/healthz` gets the decoy like any other unknown path).
    Health,
    /// Anything else: the decoy.
    Unknown,
}

fn query_u64(query: &str, key: &str) -> Option<u64> {
    query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The largest body a route takes, read only once the request is known to be allowed to send
/// it (control's token checked first where it needs one); 0 for routes that take none.
pub fn max_body(route: &Route) -> usize {
    use hearth_shared::envelope::Kind;
    // An envelope's header and signatures, besides the body its kind caps.
    const ENVELOPE: usize = 64 * 1024;
    match route {
        Route::Push => crate::push::MAX_PUSH_BYTES,
        Route::ArchivePut => Kind::Archive.max_len() + ENVELOPE,
        Route::ReleasePut => crate::api::MAX_RELEASE_BYTES,
        Route::NodeUsage(_) => Kind::UsageReport.max_len() + ENVELOPE,
        _ => 0,
    }
}

/// Whether a route is control's, taken only with the push token.
pub fn needs_push_token(route: &Route) -> bool {
    matches!(
        route,
        Route::Push
            | Route::ReleasePut
            | Route::UsageDrain { .. }
            | Route::ArchivePut
            | Route::ArchiveGet
            | Route::Export { .. }
    )
}

/// What the Worker does with a request's body, decided before any of it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRead {
    /// Not read: the route takes none, or it is control's and the request lacks the token.
    Skip,
    /// Refused unread (413): a node's body declared over the route's cap.
    TooLarge,
    /// Read, and refused (413) if over this cap.
    UpTo(usize),
}

/// How the Worker reads the body of a request on `route`, `token` telling whether it carries
/// control's push token and `declared` its `Content-Length`: only for a route that takes one,
/// once the token (where the route needs it) was checked, and only up to the route's cap. A
/// body sent with control's token is read whatever it declares (up to Cloudflare's own cap),
/// so that control is told 413 rather than cut off.
pub fn body_read(route: &Route, token: bool, declared: Option<u64>) -> BodyRead {
    let cap = max_body(route);
    let control = needs_push_token(route);
    if cap == 0 || (control && !token) {
        BodyRead::Skip
    } else if !control && declared.is_some_and(|length| length > cap as u64) {
        BodyRead::TooLarge
    } else {
        BodyRead::UpTo(cap)
    }
}

/// Routes a request.
pub fn route(config: &EdgeConfig, method: &str, path: &str, query: &str) -> Route {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = method == "GET" || method == "HEAD";
    match segments.as_slice() {
        [prefix, token] if get && *prefix == config.sub_prefix => Route::Subscription(SubToken::parse(token)),
        [prefix, rest @ ..] if *prefix == config.api_prefix => match (method, rest) {
            ("POST", ["push"]) => Route::Push,
            ("GET" | "HEAD", ["healthz"]) => Route::Health,
            ("GET", ["nodes", id, "creds"]) => match id.parse() {
                Ok(node) => Route::NodeCreds {
                    node,
                    after: query_u64(query, "after").unwrap_or(0),
                    base: query_u64(query, "base"),
                },
                Err(_) => Route::Unknown,
            },
            ("POST", ["nodes", id, "usage"]) => id.parse().map_or(Route::Unknown, Route::NodeUsage),
            ("GET", ["nodes", id, "ack"]) => id.parse().map_or(Route::Unknown, Route::NodeAck),
            ("GET", ["nodes", id, "release"]) => id.parse().map_or(Route::Unknown, Route::NodeRelease),
            ("GET", ["nodes", id, "release", file]) => {
                id.parse().map_or(Route::Unknown, |node| Route::NodeReleaseFile(node, (*file).to_owned()))
            }
            ("PUT", ["release"]) => Route::ReleasePut,
            ("GET", ["usage"]) => Route::UsageDrain { after: query_u64(query, "after").unwrap_or(0) },
            ("PUT", ["archive"]) => Route::ArchivePut,
            ("GET", ["archive"]) => Route::ArchiveGet,
            ("GET", ["export"]) => Route::Export {
                after: query.split('&').find_map(|pair| pair.strip_prefix("after=")).unwrap_or_default().to_owned(),
            },
            _ => Route::Unknown,
        },
        _ => Route::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::config;

    #[test]
    fn routes() {
        let c = config();
        let token = SubToken::from_bytes([7; 32]);
        let link = format!("/s/{}", token.to_link_form());
        let api = "/api-0123456789abcdef";
        let cases: Vec<(&str, String, &str, Route)> = vec![
            ("GET", link.clone(), "", Route::Subscription(Some(token.clone()))),
            ("HEAD", link.clone(), "", Route::Subscription(Some(token))),
            ("POST", link, "", Route::Unknown),
            ("GET", "/s/short".into(), "", Route::Subscription(None)),
            ("GET", "/healthz".into(), "", Route::Unknown),
            ("GET", format!("{api}/healthz"), "", Route::Health),
            ("POST", format!("{api}/push"), "", Route::Push),
            ("GET", format!("{api}/push"), "", Route::Unknown),
            ("GET", format!("{api}/nodes/4/creds"), "after=9", Route::NodeCreds { node: 4, after: 9, base: None }),
            (
                "GET",
                format!("{api}/nodes/4/creds"),
                "after=9&base=7",
                Route::NodeCreds { node: 4, after: 9, base: Some(7) },
            ),
            ("GET", format!("{api}/nodes/x/creds"), "", Route::Unknown),
            ("GET", format!("{api}/nodes/4/ack"), "", Route::NodeAck(4)),
            ("GET", format!("{api}/nodes/4/release"), "", Route::NodeRelease(4)),
            (
                "GET",
                format!("{api}/nodes/4/release/hearth-node-linux-x86_64"),
                "",
                Route::NodeReleaseFile(4, "hearth-node-linux-x86_64".into()),
            ),
            ("PUT", format!("{api}/release"), "", Route::ReleasePut),
            ("POST", format!("{api}/nodes/4/usage"), "", Route::NodeUsage(4)),
            ("GET", format!("{api}/usage"), "after=12", Route::UsageDrain { after: 12 }),
            ("PUT", format!("{api}/archive"), "", Route::ArchivePut),
            ("GET", format!("{api}/archive"), "", Route::ArchiveGet),
            ("GET", format!("{api}/export"), "", Route::Export { after: String::new() }),
            ("GET", format!("{api}/export"), "after=l.3.ab", Route::Export { after: "l.3.ab".into() }),
            ("GET", "/api-wrong/push".into(), "", Route::Unknown),
            ("GET", "/".into(), "", Route::Unknown),
            ("GET", "/s/a/b".into(), "", Route::Unknown),
        ];
        for (method, path, query, expected) in cases {
            assert_eq!(route(&c, method, &path, query), expected, "{method} {path}?{query}");
        }
    }

    /// A body is read only where the route takes one and the request may send it; a node's
    /// declared over the cap is refused unread, control's read and then judged.
    #[test]
    fn the_worker_reads_a_body_only_where_it_is_taken() {
        let usage = Route::NodeUsage(4);
        let usage_cap = max_body(&usage);
        let over = Some(usage_cap as u64 + 1);
        assert_eq!(body_read(&Route::NodeAck(4), true, Some(10)), BodyRead::Skip, "a route that takes none");
        assert_eq!(body_read(&usage, false, None), BodyRead::UpTo(usage_cap), "a node's needs no token");
        assert_eq!(body_read(&usage, false, Some(usage_cap as u64)), BodyRead::UpTo(usage_cap));
        assert_eq!(body_read(&usage, false, over), BodyRead::TooLarge);
        assert_eq!(body_read(&usage, true, over), BodyRead::TooLarge, "the token does not lift a node's cap");
        let push_cap = max_body(&Route::Push);
        assert_eq!(body_read(&Route::Push, false, Some(10)), BodyRead::Skip, "control's without the token");
        assert_eq!(body_read(&Route::Push, true, Some(10)), BodyRead::UpTo(push_cap));
        assert_eq!(body_read(&Route::Push, true, Some(push_cap as u64 + 1)), BodyRead::UpTo(push_cap));
        assert_eq!(body_read(&Route::ArchiveGet, true, None), BodyRead::Skip);
    }
}
