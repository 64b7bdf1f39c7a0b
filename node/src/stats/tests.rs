use std::sync::Arc;

use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet};
use http_body_util::{BodyExt as _, Full};
use serde_json::Value;

use super::*;

/// An official example from the documentation (`node/tests/fixtures/traffic-stats`).
fn official(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/traffic-stats/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The shape of a JSON value: objects by their keys (maps of ids by their values' shape),
/// arrays by their items', scalars by their type.
fn shape(value: &Value, keyed_by_id: bool) -> Value {
    match value {
        Value::Object(map) if keyed_by_id => {
            let shapes: Vec<Value> = map.values().map(|v| shape(v, false)).collect();
            serde_json::json!({ "<id>": shapes.first() })
        }
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v, false))).collect()),
        Value::Array(items) => Value::Array(items.iter().take(1).map(|v| shape(v, false)).collect()),
        Value::String(_) => "string".into(),
        Value::Number(n) if n.is_u64() => "unsigned".into(),
        other => other.clone(),
    }
}

/// What the node renders has the shape of the official examples, key for key.
#[test]
fn answers_have_the_official_shapes() {
    let parsed = |text: String| serde_json::from_str::<Value>(&text).unwrap();
    let traffic = render_traffic(&[(7, 514, 4017), (12, 7790, 446_623)]);
    assert_eq!(shape(&parsed(traffic.clone()), true), shape(&official("traffic.json"), true));
    assert_eq!(traffic, r#"{"12":{"tx":7790,"rx":446623},"7":{"tx":514,"rx":4017}}"#, "Go's key order");
    assert_eq!(shape(&parsed(render_online(&[(7, 2), (12, 1)])), true), shape(&official("online.json"), true));
    let seen = streams::Seen {
        state: "estab",
        user: 7,
        connection: 3_191_736_581,
        stream: 4,
        req_addr: "192.0.2.1:80".into(),
        tx: 3937,
        rx: 4441,
        initial: 1_731_049_665_956_956_773,
        last_active: 1_731_049_667_121_503_000,
    };
    let ours = parsed(render_streams(std::slice::from_ref(&seen)));
    assert_eq!(shape(&ours, false), shape(&official("streams.json"), false));
    assert_eq!(ours["streams"][0]["initial_at"], "2024-11-08T07:07:45.956956773Z", "the official example's moment");
    assert_eq!(ours["streams"][0]["last_active_at"], "2024-11-08T07:07:47.121503Z");
    assert_eq!(render_streams(&[]), "{\"streams\":[]}\n");
    let kick: Vec<String> = serde_json::from_value(official("kick.json")).unwrap();
    assert_eq!(kick, ["wang", "joe"]);
}

/// The table for people: the official columns and widths, a line per stream.
#[test]
fn the_stream_table_has_the_official_columns() {
    let seen = streams::Seen {
        state: "estab",
        user: 7,
        connection: 0xBE3D_9A05,
        stream: 4,
        req_addr: "192.0.2.1:80".into(),
        tx: 3937,
        rx: 4441,
        initial: 1_000_000_000,
        last_active: 2_500_000_000,
    };
    let table = render_streams_text(&[seen], 3_000_000_000 + 125 * 1_000_000_000);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines,
        [
            "State    Auth           Connection   Stream     TX-Bytes     RX-Bytes     Lifetime  Last-Active Req-Addr         Hooked-Req-Addr",
            "ESTAB    7                BE3D9A05        4         3937         4441         2m7s       2m5.5s 192.0.2.1:80     -",
        ]
    );
}

#[test]
fn times_and_durations_read_as_go_writes_them() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_500_000_000), "1970-01-01T00:00:01.5Z");
    for (nanos, text) in [
        (0, "0s"),
        (400_000, "0s"),
        (450_000_000, "450ms"),
        (1_500_000_000, "1.5s"),
        (60_000_000_000, "1m0s"),
        (123_456_000_000, "2m3.456s"),
        (3_607_400_000_000, "1h0m7s"),
    ] {
        assert_eq!(go_duration(nanos), text, "{nanos}");
    }
    assert!(parse_bool("1") && parse_bool("true") && !parse_bool("yes") && !parse_bool("0"));
}

#[test]
fn settings_refuse_an_open_api_without_a_secret() {
    let settings =
        |listen: &str, secret: &str| crate::state::TrafficStats { listen: listen.into(), secret: secret.into() };
    assert!(settings("127.0.0.1:9999", "").address().is_ok());
    assert!(settings("[::1]:9999", "").address().is_ok());
    let open = settings("0.0.0.0:9999", "").address().unwrap_err().to_string();
    assert!(open.contains("traffic_stats.secret"), "{open}");
    assert!(settings("0.0.0.0:9999", "s3cret").address().is_ok());
    assert!(settings("localhost:9999", "").address().is_err(), "an address, not a name");
    assert!(settings("127.0.0.1:9999", "a\nb").address().is_err());
    assert!(!format!("{:?}", settings("0.0.0.0:1", "s3cret")).contains("s3cret"), "the secret is not logged");
}

async fn ask(live: &Live, secret: &str, request: http::request::Builder, body: &str) -> (StatusCode, String) {
    let request = request.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let response = answer(request, live, secret).await;
    let status = response.status();
    (status, String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

/// Every path answers 401 without the secret, or with another one, and a kick then changes
/// nothing; with it, the paths answer as the official server's do.
#[tokio::test]
async fn a_wrong_secret_gets_401_and_changes_nothing() {
    let live = Arc::new(Live::default());
    live.apply(&CredentialSet::new(1, vec![CredEntry::new(7, sha256(b"seven"))]).unwrap());
    live.counter(7).sent(10);
    let get = |path: &str| Request::get(path.to_owned());
    for header in [None, Some("wrong"), Some("s3cre"), Some("s3cret ")] {
        let with = |request: http::request::Builder| match header {
            Some(value) => request.header("authorization", value),
            None => request,
        };
        for path in ["/", "/traffic?clear=1", "/online", "/dump/streams"] {
            assert_eq!(
                ask(&live, "s3cret", with(get(path)), "").await,
                (StatusCode::UNAUTHORIZED, "unauthorized\n".into())
            );
        }
        let kick = with(Request::post("/kick"));
        assert_eq!(ask(&live, "s3cret", kick, "[\"7\"]").await.0, StatusCode::UNAUTHORIZED);
    }
    assert!(live.take_kicked().is_empty(), "no kick went through");
    assert_eq!(live.traffic(false), vec![(7, 10, 0)], "nothing was cleared");

    let authorized = |request: http::request::Builder| request.header("authorization", "s3cret");
    let (status, body) = ask(&live, "s3cret", authorized(get("/traffic?clear=1")), "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#"{"7":{"tx":10,"rx":0}}"#));
    assert_eq!(ask(&live, "s3cret", authorized(get("/traffic")), "").await.1, "{}");
    assert_eq!(ask(&live, "s3cret", authorized(get("/online")), "").await.1, "{}");
    assert_eq!(ask(&live, "s3cret", authorized(get("/dump/streams")), "").await.1, "{\"streams\":[]}\n");
    assert_eq!(ask(&live, "s3cret", authorized(get("/nope")), "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(ask(&live, "s3cret", authorized(Request::post("/traffic")), "").await.0, StatusCode::NOT_FOUND);
    let (status, said) = ask(&live, "s3cret", authorized(Request::post("/kick")), "{\"7\": 1}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{said}");
    let big = format!("[{}\"7\"]", "\"1\",".repeat(BODY_BYTES / 4));
    assert_eq!(ask(&live, "s3cret", authorized(Request::post("/kick")), &big).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(live.take_kicked().is_empty());
    let (status, body) = ask(&live, "s3cret", authorized(Request::post("/kick")), r#"["7", "x", "99"]"#).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
    assert_eq!(live.take_kicked(), vec![7]);
    // Without a secret (a loopback address), no header is needed.
    assert_eq!(ask(&live, "", get("/online"), "").await, (StatusCode::OK, "{}".into()));
}
