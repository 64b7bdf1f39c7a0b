//! Sends events to the owner's webhooks: each webhook's deliveries in order, one at a time,
//! retried with backoff for a day (`store::events`), across restarts of control (they wait in
//! the database).
//!
//! A delivery is a `POST` of the event as JSON (`{"id", "kind", "at", "subject", "data"}`)
//! with the headers `Hearth-Event` (its kind), `Hearth-Delivery` (the delivery's id, the same
//! on every retry) and `Hearth-Signature: t=<unix seconds>,v1=<hex>`, the HMAC-SHA256 under
//! the webhook's secret of `<t>.<body>`. A receiver checks the signature in constant time and
//! refuses a `t` more than five minutes from its clock (a replayed delivery), and may drop a
//! `Hearth-Delivery` it has taken already (a retry after an answer that was lost). Any 2xx
//! answer takes the delivery; anything else, or none within 10 seconds, is retried.

use std::sync::Arc;
use std::time::Duration;

use hmac::Mac as _;
use tokio::sync::watch;

use crate::app::{App, now};
use crate::store::events::{self, Due};

/// How long a receiver has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait with nothing queued (a commit control makes, or notices from another
/// process, ends it at once).
const IDLE: Duration = Duration::from_secs(60);

/// The `Hearth-Signature` value for `body` sent at `at`.
pub(crate) fn signature(secret: &str, at: u64, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(at.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={at},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Sends one delivery; the receiver's status (0: no answer) and what it said.
async fn send(http: &reqwest::Client, due: &Due) -> (u16, String) {
    let body = serde_json::to_vec(&due.event).expect("an event serializes");
    let request = http
        .post(&due.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, concat!("Hearth/", env!("CARGO_PKG_VERSION")))
        .header("hearth-event", &due.event.kind)
        .header("hearth-delivery", due.delivery.to_string())
        .header("hearth-signature", signature(&due.secret, now(), &body))
        .body(body);
    match request.send().await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // The first bytes of the answer, for the panel; the rest is not read.
            let mut answer = Vec::new();
            while answer.len() < events::ANSWER_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            answer.truncate(events::ANSWER_BYTES);
            (status, String::from_utf8_lossy(&answer).into_owned())
        }
        Err(e) => (0, format!("no answer: {}", hearth_io::capped::without_url(&e))),
    }
}

/// Delivers what is due, every second, until shutdown.
pub(crate) async fn deliverer(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    // Made when the first delivery is due: an install without webhooks keeps no client (its
    // TLS roots and pool) in memory.
    let mut client: Option<reqwest::Client> = None;
    let mut changes = app.published.subscribe();
    loop {
        let state = app.clone();
        match app.db.read(move |c| events::due(c, &state.signer.vault, now())).await {
            Ok(due) if !due.is_empty() => {
                let http = match &client {
                    Some(http) => http.clone(),
                    None => match reqwest::Client::builder()
                        .timeout(TIMEOUT)
                        .redirect(reqwest::redirect::Policy::none())
                        .build()
                    {
                        Ok(http) => client.insert(http).clone(),
                        Err(e) => {
                            tracing::error!(error = %e, "webhooks: no HTTP client");
                            return;
                        }
                    },
                };
                let mut sending = tokio::task::JoinSet::new();
                for due in due {
                    let http = http.clone();
                    sending.spawn(async move {
                        let (status, answer) = send(&http, &due).await;
                        (due, status, answer)
                    });
                }
                let mut outcomes = Vec::new();
                while let Some(done) = sending.join_next().await {
                    if let Ok(done) = done {
                        outcomes.push(done);
                    }
                }
                let settled = app
                    .db
                    .write(move |tx| {
                        let now = now();
                        for (due, status, answer) in &outcomes {
                            if !(200..300).contains(status) {
                                tracing::warn!(webhook = %due.url, status, attempt = due.attempts + 1, "a webhook delivery failed");
                            }
                            events::settle(tx, due.delivery, *status, answer, now)?;
                        }
                        Ok(())
                    })
                    .await;
                match settled {
                    // Each webhook's next delivery goes at once (one that failed waits its turn).
                    Ok(()) if !*shutdown.borrow() => continue,
                    Ok(()) => return,
                    Err(e) => tracing::error!(error = %e, "webhooks: recording deliveries failed"),
                }
            }
            Ok(_) => {
                // Nothing due: what is queued next comes with a commit, or is a retry waiting.
                let next = app.db.read(events::next_retry).await.ok().flatten();
                let wait =
                    next.map_or(IDLE, |at| Duration::from_secs(at.saturating_sub(now()).clamp(1, IDLE.as_secs())));
                if crate::tasks::nudged(&mut shutdown, &mut changes, wait).await {
                    return;
                }
                continue;
            }
            Err(e) => tracing::error!(error = %e, "webhooks: reading what is due failed"),
        }
        if crate::tasks::stopped(&mut shutdown, Duration::from_secs(1)).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_of_the_time_and_the_body() {
        // HMAC-SHA256("whsec_test", "1700000000.{}"), as Python's hmac module computes it.
        let expected = "35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91";
        assert_eq!(signature("whsec_test", 1_700_000_000, b"{}"), format!("t=1700000000,v1={expected}"));
        assert_ne!(signature("whsec_other", 1_700_000_000, b"{}"), signature("whsec_test", 1_700_000_000, b"{}"));
    }
}
