//! The Telegram Bot API, as the bot calls it: JSON in, JSON out, Telegram's 429 and 5xx waited
//! out, and never the token (part of every request's path) in a log or an error.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::Error;

/// The most bytes of an answer from the Bot API read.
const ANSWER_BYTES: usize = 4 << 20;
/// How many times a call Telegram answers 429 or 5xx (or does not answer) is made, at most.
const ATTEMPTS: u32 = 4;
/// The longest wait before a call is made again.
const MOST_WAIT: Duration = Duration::from_secs(30);

/// Why a Bot API call came to nothing. Never holds the URL (it holds the token).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// No answer (no connection, a timeout): the reason, without the URL.
    #[error("Telegram did not answer: {0}")]
    NoAnswer(String),
    /// An answer that could not be read (too long, cut short).
    #[error(transparent)]
    Read(#[from] hearth_io::capped::ReadError),
    /// An answer that is not JSON.
    #[error("Telegram answered {0}, not JSON")]
    NotJson(reqwest::StatusCode),
    /// Telegram refused the call, saying why.
    #[error("Telegram refused {method}: {said}")]
    Refused {
        /// The method called.
        method: String,
        /// Telegram's description.
        said: String,
    },
}

/// The Bot API at `base`.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    pub(crate) fn new(base: &str, timeout: Duration) -> Result<Api, Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Internal(format!("an HTTP client: {e}")))?;
        Ok(Api { http, base: base.trim_end_matches('/').to_owned() })
    }

    /// Calls `method` with a JSON body; its `result`, or Telegram's description of why not
    /// (never the URL, which holds the token). Telegram's 429 is waited out as it says
    /// (`retry_after`), and a 5xx or no answer is tried again after a growing pause, up to
    /// [`ATTEMPTS`] calls.
    pub(crate) async fn call(&self, token: &str, method: &str, body: &Value) -> Result<Value, ApiError> {
        let mut pause = Duration::from_millis(500);
        for attempt in 1.. {
            match self.call_once(token, method, body).await {
                Ok(result) => return Ok(result),
                Err((said, Some(wait))) if attempt < ATTEMPTS => {
                    tracing::warn!(method, error = %said, wait_ms = wait.max(pause).as_millis() as u64, "telegram: calling again");
                    tokio::time::sleep(wait.max(pause).min(MOST_WAIT)).await;
                    pause *= 2;
                }
                Err((said, _)) => return Err(said),
            }
        }
        unreachable!("the loop returns")
    }

    /// One call: its `result`, or why not and, when it is worth trying again, after how long
    /// at least.
    async fn call_once(&self, token: &str, method: &str, body: &Value) -> Result<Value, (ApiError, Option<Duration>)> {
        let response = self
            .http
            .post(format!("{}/bot{token}/{method}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| (ApiError::NoAnswer(hearth_io::capped::without_url(&e)), Some(Duration::ZERO)))?;
        let status = response.status();
        let again =
            (status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS).then_some(Duration::ZERO);
        let bytes = hearth_io::capped::read(response, ANSWER_BYTES, "a Bot API answer")
            .await
            .map_err(|e| (ApiError::Read(e), again))?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| (ApiError::NotJson(status), again))?;
        if answer["ok"] == true {
            return Ok(answer["result"].clone());
        }
        let said = answer["description"].as_str().unwrap_or("no description").to_owned();
        let wait = answer.pointer("/parameters/retry_after").and_then(Value::as_u64).map(Duration::from_secs);
        Err((ApiError::Refused { method: method.to_owned(), said }, wait.or(again)))
    }

    /// Sends `html` to `chat`.
    pub(super) async fn send(&self, token: &str, chat: i64, html: &str) -> Result<(), ApiError> {
        let body = json!({
            "chat_id": chat,
            "text": html,
            "parse_mode": "HTML",
            "link_preview_options": { "is_disabled": true },
        });
        self.call(token, "sendMessage", &body).await.map(|_| ())
    }
}
