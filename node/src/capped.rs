//! Reading an answer from control or the edge with a cap on its size.
//!
//! Every answer the node reads has a most it can legitimately hold (a credential set, an
//! acknowledgement, a release manifest: the largest envelope of its kind; a release binary:
//! the length its signed manifest gives). An answer that says it is longer is refused before
//! any of it is read, and one that turns out longer (a chunked body that never ends) is cut
//! off as soon as it passes the cap: what a peer sends never decides how much memory the
//! node takes, and an answer refused for its size is an error for that request only.

use thiserror::Error;

/// The most of an error answer's body read, to say what the peer said.
const MESSAGE_MAX: usize = 4096;

/// Why an answer's body was not read.
#[derive(Debug, Error)]
pub(crate) enum ReadError {
    /// The answer is longer than what it answers can be.
    #[error("an answer over {max} bytes, more than {what} can be: not read further")]
    TooLarge {
        /// What the answer should hold.
        what: &'static str,
        /// Its cap, in bytes.
        max: usize,
    },
    /// The connection failed or timed out while the body came.
    #[error("reading the answer: {0}")]
    Read(String),
}

/// The body of `response`, which holds `what`, at most `max` bytes long.
pub(crate) async fn read(
    mut response: reqwest::Response,
    max: usize,
    what: &'static str,
) -> Result<Vec<u8>, ReadError> {
    let declared = response.content_length();
    if declared.is_some_and(|len| len > max as u64) {
        return Err(ReadError::TooLarge { what, max });
    }
    let mut body = Vec::with_capacity(declared.map_or(0, |len| len as usize));
    while let Some(chunk) = response.chunk().await.map_err(|e| ReadError::Read(e.without_url().to_string()))? {
        if chunk.len() > max - body.len() {
            return Err(ReadError::TooLarge { what, max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What an error answer says: the start of its body, on one line, or nothing when it is long
/// or unreadable.
pub(crate) async fn message(response: reqwest::Response) -> String {
    match read(response, MESSAGE_MAX, "an error message").await {
        Ok(body) => {
            String::from_utf8_lossy(&body).chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect()
        }
        Err(e) => format!("({e})"),
    }
}

/// Whether a request failed because its answer was longer than it can be: the peer's doing,
/// said at warn (a peer out of reach is usual, behind NAT, and said at debug).
pub(crate) fn refused_for_size(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref(), Some(ReadError::TooLarge { .. }))
}
