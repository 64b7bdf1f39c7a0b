//! Hearth's edge: serves subscription links worldwide, takes signed pushes from control,
//! relays node pulls and usage reports, and keeps control's recovery archive.
//!
//! The edge is untrusted storage and transport: everything it holds is signed by control (or
//! by a node), so it cannot forge or roll back anything a node accepts, and user snapshots
//! are sealed so its storage shows no credential. It keeps serving when control is down.
//!
//! The logic here is runtime-free: [`config`] (settings from Worker vars or a file),
//! [`routes`] (what a request asks for), [`push`] (checking a push before storing it),
//! [`api`] (the other API checks), [`service`] (every API route, over the [`storage`] trait:
//! a push decided whole before anything is stored, the export), [`serve`] (answering a
//! subscription fetch, and the decoy), [`isolate`] (what a Worker isolate keeps in memory). Two adapters run it, each only reading and writing
//! rows: the Cloudflare Worker (Durable Objects) and the native edge ([`native`]: axum and an
//! embedded libSQL database), which is also how tests and benchmarks drive it. This crate
//! never depends on control or the node.

pub mod api;
pub mod config;
pub mod isolate;
pub mod push;
pub mod routes;
pub mod serve;
pub mod service;
pub mod storage;

#[cfg(not(target_arch = "wasm32"))]
pub mod native;

/// An HTTP answer in a runtime-neutral form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers, in order.
    pub headers: Vec<(&'static str, String)>,
    /// The body (dropped by the adapter on HEAD).
    pub body: Vec<u8>,
}

impl Reply {
    /// A reply with a plain-text body.
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type", "text/plain; charset=utf-8".to_owned())],
            body: body.into().into_bytes(),
        }
    }

    /// A reply with a binary (postcard or envelope) body.
    pub fn bytes(status: u16, body: Vec<u8>) -> Reply {
        Reply { status, headers: vec![("content-type", "application/octet-stream".to_owned())], body }
    }

    /// The headers in one string, name and value in turn, each ended by a line feed: how the
    /// Worker's synchronous answer hands them to JavaScript. A header with a line feed in it
    /// (none of the edge's has one: each value is printable ASCII) is left out, so that it
    /// cannot turn into headers of its own choosing.
    pub fn header_lines(&self) -> String {
        let mut lines = String::with_capacity(256);
        for (name, value) in &self.headers {
            if !name.contains('\n') && !value.contains('\n') {
                for part in [*name, value.as_str()] {
                    lines.push_str(part);
                    lines.push('\n');
                }
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::Reply;

    #[test]
    fn header_lines_give_each_header_whole_and_leave_out_one_with_a_line_feed() {
        let mut reply = Reply::text(200, "ok");
        reply.headers.push(("profile-title", "base64:aGk=".to_owned()));
        reply.headers.push(("location", "https://a.example/s\nset-cookie\nx=1".to_owned()));
        reply.headers.push(("cache-control", "no-store".to_owned()));
        assert_eq!(
            reply.header_lines(),
            "content-type\ntext/plain; charset=utf-8\nprofile-title\nbase64:aGk=\ncache-control\nno-store\n"
        );
    }
}
