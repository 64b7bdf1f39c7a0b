//! Webhooks end to end: the real control binary sends events to a receiver that checks each
//! delivery as the manual (docs/notifications.md) tells receivers to (the HMAC-SHA256 signature over the time and the
//! body, the time within five minutes), in order, retried after failures, and nothing lost
//! while the receiver and control are both down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::eventually;
use hmac::Mac as _;
use reqwest::Method;
use serde_json::{Value, json};

/// One delivery as the receiver took it.
#[derive(Clone, Debug)]
struct Taken {
    delivery: String,
    kind: String,
    event: Value,
}

/// What the receiver has seen, and how it answers.
#[derive(Default)]
struct Receiver {
    secret: String,
    /// Answer 500 to this many requests still.
    fail: usize,
    /// Every request, answered or not: (delivery id, status answered).
    requests: Vec<(String, u16)>,
    taken: Vec<Taken>,
    /// Deliveries whose signature or time was wrong.
    bad: Vec<String>,
}

/// A plain HTTP/1.1 receiver on loopback (one request per connection, as `Connection: close`).
async fn receiver(state: Arc<Mutex<Receiver>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let state = state.clone();
            tokio::spawn(async move {
                let Some((head, body)) = hearth_tests::read_request(&mut stream).await else { return };
                let head = head.to_lowercase();
                let header = |name: &str| {
                    head.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).unwrap_or_default().trim().to_owned()
                };
                let status = {
                    let mut state = state.lock().unwrap();
                    let delivery = header("hearth-delivery");
                    let status = if state.fail > 0 {
                        state.fail -= 1;
                        500
                    } else {
                        200
                    };
                    state.requests.push((delivery.clone(), status));
                    if status == 200 {
                        // The check the manual gives receivers.
                        let signature = header("hearth-signature");
                        let (t, v1) = signature.split_once(',').unwrap_or_default();
                        let t: u64 = t.strip_prefix("t=").and_then(|t| t.parse().ok()).unwrap_or(0);
                        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(state.secret.as_bytes()).unwrap();
                        mac.update(format!("{t}.").as_bytes());
                        mac.update(&body);
                        let good = v1
                            .strip_prefix("v1=")
                            .and_then(|v| hex::decode(v).ok())
                            .is_some_and(|v| mac.verify_slice(&v).is_ok());
                        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
                        if !good || t.abs_diff(now) > 300 {
                            state.bad.push(delivery.clone());
                        }
                        let event: Value = serde_json::from_slice(&body).unwrap();
                        state.taken.push(Taken { delivery, kind: header("hearth-event"), event });
                    }
                    status
                };
                let answer = if status == 200 { "taken" } else { "not now" };
                hearth_tests::write_answer(&mut stream, status, "text/plain", answer.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/hooks/hearth")
}

fn names(taken: &[Taken], kind: &str) -> Vec<String> {
    taken
        .iter()
        .filter(|t| t.kind == kind)
        .map(|t| t.event["data"]["user"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn events_reach_a_webhook_signed_in_order_retried_and_across_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let token = control.setup(&http, "admin").await.unwrap();
    let state = Arc::new(Mutex::new(Receiver { fail: 2, ..Receiver::default() }));
    let url = receiver(state.clone()).await;

    // Bad input changes nothing.
    for bad in [json!({ "url": "ftp://x", "events": ["*"] }), json!({ "url": url, "events": ["users.*"] })] {
        assert!(control.call(&http, &token, Method::POST, "/webhooks", Some(&bad)).await.is_err(), "{bad}");
    }
    let hook = json!({ "url": url, "events": ["user.*"] });
    let made = control.call(&http, &token, Method::POST, "/webhooks", Some(&hook)).await.unwrap();
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{made}");
    state.lock().unwrap().secret = secret.clone();
    let id = made["id"].as_i64().unwrap();
    let listed = control.call(&http, &token, Method::GET, "/webhooks", None).await.unwrap();
    assert!(!listed.to_string().contains(&secret), "the secret is shown once");

    // Three users; the first delivery fails twice and is retried, the rest wait their turn.
    for name in ["ann", "ben", "cat"] {
        control
            .call(&http, &token, Method::POST, "/users", Some(&json!({ "name": name, "quota": 1000 })))
            .await
            .unwrap();
    }
    eventually("three users told", Duration::from_secs(30), || async {
        names(&state.lock().unwrap().taken, "user.created").len() == 3
    })
    .await;
    {
        let state = state.lock().unwrap();
        assert_eq!(names(&state.taken, "user.created"), ["ann", "ben", "cat"], "in order");
        assert!(state.bad.is_empty(), "every signature checks: {:?}", state.bad);
        let first = &state.taken[0].delivery;
        let tries: Vec<u16> = state.requests.iter().filter(|(d, _)| d == first).map(|(_, s)| *s).collect();
        assert_eq!(tries, [500, 500, 200], "the same delivery, retried");
        assert!(state.requests.iter().take(3).all(|(d, _)| d == first), "nothing passes a delivery still failing");
    }
    let path = format!("/webhooks/{id}/deliveries");
    let deliveries = control.call(&http, &token, Method::GET, &path, None).await.unwrap();
    let oldest = deliveries["deliveries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((oldest["state"].as_str(), oldest["attempts"].as_u64()), (Some("delivered"), Some(3)), "{oldest}");
    assert_eq!((oldest["status"].as_u64(), oldest["answer"].as_str()), (Some(200), Some("taken")));

    // A change, a disable and the test event; nothing of another kind (a node) reaches it.
    let ann = control.call(&http, &token, Method::GET, "/users?q=ann", None).await.unwrap()["users"][0]["id"]
        .as_u64()
        .unwrap();
    control.call(&http, &token, Method::POST, &format!("/users/{ann}/disable"), None).await.unwrap();
    control
        .call(&http, &token, Method::POST, "/nodes", Some(&json!({ "name": "n1", "host": "127.0.0.1" })))
        .await
        .unwrap();
    control.call(&http, &token, Method::POST, &format!("/webhooks/{id}/test"), None).await.unwrap();
    eventually("the test event", Duration::from_secs(30), || async {
        state.lock().unwrap().taken.iter().any(|t| t.kind == "test")
    })
    .await;
    {
        let state = state.lock().unwrap();
        let kinds: Vec<&str> = state.taken.iter().map(|t| t.kind.as_str()).collect();
        assert_eq!(&kinds[3..], ["user.changed", "user.disabled", "test"], "{kinds:?}");
        assert_eq!(state.taken[3].event["data"]["fields"], json!(["disabled"]));
        let ids: Vec<i64> = state.taken.iter().map(|t| t.event["id"].as_i64().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "event ids rise: {ids:?}");
    }

    // Control stops; users are added from the shell meanwhile, with the receiver failing: all
    // of it is told once both are back, in order.
    control.stop().unwrap();
    state.lock().unwrap().fail = 1;
    for name in ["dan", "eve"] {
        dir.cli(&["user", "add", name]).unwrap();
    }
    let control = ControlProcess::start(&dir, &[]).unwrap();
    eventually("users added while control was down, told", Duration::from_secs(30), || async {
        names(&state.lock().unwrap().taken, "user.created").len() == 5
    })
    .await;
    {
        let state = state.lock().unwrap();
        assert_eq!(names(&state.taken, "user.created"), ["ann", "ben", "cat", "dan", "eve"]);
        assert!(state.bad.is_empty());
    }
    let events = control.call(&http, &token, Method::GET, "/events?limit=50", None).await.unwrap();
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"user.created") && !kinds.contains(&"node.offline"), "{kinds:?}");
    control.call(&http, &token, Method::DELETE, &format!("/webhooks/{id}"), None).await.unwrap();
    control.stop().unwrap();
}
