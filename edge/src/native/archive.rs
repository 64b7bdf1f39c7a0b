//! Control's archive on the native edge, a piece at a time. An upload is checked as it streams
//! in (shared's [`Incoming`]) and stored in pieces of [`ARCHIVE_PIECE`] bytes, which become the
//! archive only once the whole envelope verified; a download streams the pieces out. However
//! large the archive (tens of megabytes at 100,000 users), the edge holds a few pieces of it.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response, StatusCode, header};
use hearth_shared::envelope::{Incoming, Kind};
use hearth_shared::wire::stream;

use super::store::{ARCHIVE_PIECE, StoredArchive, now_ms};
use super::{Edge, Shared, body_time, declared_over, discard, internal, to_response, too_large};
use crate::routes::{Route, max_body};
use crate::storage::{Planned, Storage as _};
use crate::{Reply, api};

impl Shared {
    /// Takes control's archive from `body`: the answer, and whether the connection must close
    /// (the body was not read to its end).
    pub(super) async fn receive_archive<B>(&self, headers: &HeaderMap, mut body: B) -> (Reply, bool)
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let cap = max_body(&Route::ArchivePut);
        if declared_over(headers, cap) {
            discard(body);
            return (too_large(), true);
        }
        let Ok(_permit) = self.bodies.acquire().await else {
            return (api::unavailable(), true);
        };
        let edge = &self.edge;
        let upload = match edge.store.begin_upload(now_ms() / 1000).await {
            Ok(upload) => upload,
            Err(e) => return (internal(&e), true),
        };
        let (reply, read, kept) = match tokio::time::timeout(body_time(cap), take(edge, upload, &mut body, cap)).await {
            Err(_) => (api::error(408, "timeout", "the body did not arrive in time"), false, false),
            Ok(Err(Stop::Refused(reply, read))) => (reply, read, false),
            Ok(Err(Stop::Store(e))) => (internal(&e), false, false),
            Ok(Ok((reply, kept))) => (reply, true, kept),
        };
        if !kept && let Err(e) = edge.store.drop_upload(upload).await {
            tracing::error!(%e, "dropping a refused archive upload failed (it goes at the next start)");
        }
        if matches!(reply.status, 400 | 408 | 409 | 413) {
            tracing::warn!(route = ?Route::ArchivePut, answer = %String::from_utf8_lossy(&reply.body), "refused");
        }
        if !read {
            discard(body);
        }
        (reply, !read)
    }
}

/// Why an upload stopped: refused (with whether its body was read to the end), or storage
/// failed.
enum Stop {
    Refused(Reply, bool),
    Store(super::StoreError),
}

impl From<super::StoreError> for Stop {
    fn from(e: super::StoreError) -> Stop {
        Stop::Store(e)
    }
}

/// Reads the body into `upload`'s pieces, checking it as it comes; keeps it when it verifies
/// and is new (the answer, and whether the upload was kept).
async fn take<B>(edge: &Edge, upload: i64, body: &mut B, cap: usize) -> Result<(Reply, bool), Stop>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    use http_body_util::BodyExt as _;
    let mut incoming = Incoming::new(Kind::Archive.max_len());
    let mut piece = Vec::with_capacity(ARCHIVE_PIECE);
    let mut pieces = 0i64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(Stop::Refused(api::error(400, "bad_body", "the body could not be read"), true));
        };
        let Ok(data) = frame.into_data() else { continue };
        if incoming.len() + data.len() > cap {
            return Err(Stop::Refused(too_large(), false));
        }
        incoming.feed(&data).map_err(|e| Stop::Refused(api::archive_refused(e), false))?;
        let mut data = &data[..];
        while !data.is_empty() {
            let n = data.len().min(ARCHIVE_PIECE - piece.len());
            piece.extend_from_slice(&data[..n]);
            data = &data[n..];
            if piece.len() == ARCHIVE_PIECE {
                let full = std::mem::replace(&mut piece, Vec::with_capacity(ARCHIVE_PIECE));
                edge.store.put_piece(upload, pieces, full).await?;
                pieces += 1;
            }
        }
    }
    if !piece.is_empty() {
        edge.store.put_piece(upload, pieces, piece).await?;
        pieces += 1;
    }
    let len = incoming.len() as u64;
    let received = incoming.finish().map_err(|e| Stop::Refused(api::archive_refused(e), true))?;
    let before = edge.store.state(stream::ARCHIVE).await?;
    let write = api::check_archive_received(&received, &edge.trust(), before.as_ref(), now_ms() / 1000)
        .map_err(|reply| Stop::Refused(reply, true))?;
    if before == Some(write.state()) {
        return Ok((Reply::text(200, "unchanged\n"), false));
    }
    Ok(match edge.store.keep_upload(upload, pieces, len, &Planned { write, before }).await? {
        Ok(()) => (Reply::text(200, "stored\n"), true),
        Err(changed) => (changed.reply(), false),
    })
}

impl Edge {
    /// The stored archive, streamed a piece at a time.
    pub(super) async fn send_archive(self: &std::sync::Arc<Self>) -> Response<Body> {
        let edge = self;
        let (upload, pieces, len) = match edge.store.stored_archive().await {
            Err(e) => return to_response(internal(&e), false),
            Ok(None) => return to_response(api::error(404, "no_archive", "no archive has been pushed yet"), false),
            Ok(Some(StoredArchive::Whole(bytes))) => return to_response(Reply::bytes(200, bytes), false),
            Ok(Some(StoredArchive::Pieces { upload, pieces, len })) => (upload, pieces, len),
        };
        // Two pieces in flight at most: the reader waits for the client.
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let edge = edge.clone();
        tokio::spawn(async move {
            for seq in 0..pieces {
                let piece = match edge.store.archive_piece(upload, seq).await {
                    Ok(Some(piece)) => Ok(Bytes::from(piece)),
                    // Replaced by a newer archive while it was being read: the client sees the
                    // body end short of its length, and asks again.
                    Ok(None) => Err(std::io::Error::other("the archive was replaced while it was sent")),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                };
                let failed = piece.is_err();
                if sender.send(piece).await.is_err() || failed {
                    break;
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, len)
            .body(Body::new(Pieces { receiver }))
            .unwrap_or_else(|_| Response::new(Body::from("internal error")))
    }
}

/// A body of pieces read by a task of their own.
struct Pieces {
    receiver: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        self.receiver.poll_recv(cx).map(|piece| piece.map(|piece| piece.map(http_body::Frame::data)))
    }
}
