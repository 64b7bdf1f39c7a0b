//! Reading a peer's answer (an edge's, control's, another panel's, Telegram's) with a cap on
//! its size.
//!
//! Every answer a program reads has a most it can legitimately hold (a credential set, a drain
//! of usage reports, a page of an export, an archive: the largest envelope of its kind; a
//! release binary: the length its signed manifest gives). An answer that says it is longer is
//! refused before any of it is read, and one that turns out longer (a chunked body that never
//! ends) is cut off as soon as it passes the cap: what a peer sends never decides how much
//! memory a program takes, and an answer refused for its size is an error for that request
//! only.

use thiserror::Error;

/// The most of an error answer's body read, to say what the peer said.
const MESSAGE_MAX: usize = 4096;

/// Why an answer's body was not read.
#[derive(Debug, Error)]
pub enum ReadError {
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
pub async fn read(mut response: reqwest::Response, max: usize, what: &'static str) -> Result<Vec<u8>, ReadError> {
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
pub async fn message(response: reqwest::Response) -> String {
    refusal(response).await.0
}

/// What an error answer says (its `message` when it is Hearth's JSON error, else the start of
/// its body, on one line), and the stream it names, when it names one.
pub async fn refusal(response: reqwest::Response) -> (String, Option<String>) {
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
pub fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    // What lies under it (a refused connection, a request body that failed) says why.
    let mut cause = std::error::Error::source(e);
    while let Some(under) = cause {
        text.push_str(": ");
        text.push_str(&under.to_string());
        cause = under.source();
    }
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<its address>");
    }
    text
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// A client for plain HTTP (a crypto provider installed, as the workspace's reqwest, built
    /// with `rustls-no-provider`, asks one of every client).
    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    /// A server that answers every request with `answer` (the whole HTTP response).
    async fn answering(answer: &'static [u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(answer).await;
            }
        });
        format!("http://{address}/secret-path")
    }

    #[tokio::test]
    async fn an_answer_over_its_cap_is_refused_declared_or_not() {
        let client = client();
        let fits = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello").await;
        assert_eq!(read(client.get(&fits).send().await.unwrap(), 5, "a greeting").await.unwrap(), b"hello");
        let declared = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nhello!").await;
        let refused = read(client.get(&declared).send().await.unwrap(), 5, "a greeting").await.unwrap_err();
        assert!(matches!(refused, ReadError::TooLarge { max: 5, .. }), "{refused}");
        let chunked = answering(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
        )
        .await;
        let cut = read(client.get(&chunked).send().await.unwrap(), 5, "a greeting").await.unwrap_err();
        assert!(matches!(cut, ReadError::TooLarge { .. }), "{cut}");
    }

    #[tokio::test]
    async fn an_error_answer_says_its_message_on_one_line() {
        let client = client();
        let json = answering(
            b"HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: 55\r\nconnection: close\r\n\r\n{\"message\":\"out of\\norder\",\"stream\":\"usage/3\",\"x\":\"yz\"}",
        )
        .await;
        let (said, stream) = refusal(client.get(&json).send().await.unwrap()).await;
        assert_eq!((said.as_str(), stream.as_deref()), ("out of order", Some("usage/3")));
        let plain =
            answering(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 9\r\nconnection: close\r\n\r\nbad\r\ngate").await;
        assert_eq!(message(client.get(&plain).send().await.unwrap()).await, "bad  gate");
    }

    #[tokio::test]
    async fn an_error_names_no_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let url = format!("http://{address}/bot123:SECRET/getMe");
        let e = client().get(&url).send().await.unwrap_err();
        let said = without_url(&e);
        assert!(!said.contains("SECRET") && !said.contains("bot123"), "{said}");
        assert!(said.contains("refused"), "the cause is said: {said}");
    }
}
