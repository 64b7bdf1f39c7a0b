//! Reading an answer from the edge with a cap on its size.
//!
//! Every answer control reads from the edge has a most it can legitimately hold (a drain of
//! usage reports, a page of an export: the limits in `hearth_shared::wire` the edge builds
//! them within; the archive: the largest envelope of its kind). An answer that says it is
//! longer is refused before any of it is read, and one that turns out longer (a chunked body
//! that never ends) is cut off as soon as it passes the cap: what an edge sends never decides
//! how much memory control takes.

use thiserror::Error;

/// The most of an error answer's body read, to say what the edge said.
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
    while let Some(chunk) = response.chunk().await.map_err(|e| ReadError::Read(without_url(&e)))? {
        if chunk.len() > max - body.len() {
            return Err(ReadError::TooLarge { what, max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What an error answer says: the start of its body, on one line, or why it was not read.
pub(crate) async fn message(response: reqwest::Response) -> String {
    refusal(response).await.0
}

/// What an error answer says (its `message` when it is Hearth's JSON error, else the start of
/// its body, on one line), and the stream it names, when it names one.
pub(crate) async fn refusal(response: reqwest::Response) -> (String, Option<String>) {
    let body = match read(response, MESSAGE_MAX, "an error message").await {
        Ok(body) => body,
        Err(e) => return (format!("({e})"), None),
    };
    let json = serde_json::from_slice::<serde_json::Value>(&body).ok();
    let field = |name: &str| json.as_ref().and_then(|json| json[name].as_str()).map(one_line);
    match field("message") {
        Some(message) => (message, field("stream")),
        None => (one_line(&String::from_utf8_lossy(&body)), None),
    }
}

/// The start of `text`, on one line.
fn one_line(text: &str) -> String {
    text.chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// A reqwest error without its URL, which holds a secret: an edge's API path, a bot's token.
pub(crate) fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<its address>");
    }
    text
}
