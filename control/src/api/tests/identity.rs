//! A node's TLS identity at control: the certificate a node registers (signed with its key)
//! reaches its users' snapshots, with the pins apps check and the name the certificate is
//! made out to; nobody else can register one; the owner's "allow unverified clients" travels
//! with it.

use axum::http::StatusCode;
use hearth_shared::sha256;
use serde_json::json;

use super::{CONTROL_HOST, Client, enroll, node_request, node_signature, snapshot_of};

/// A self-signed certificate made out to `names`, as PEM, and its DER.
fn certificate(names: &[&str]) -> (String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let cert = rcgen::CertificateParams::new(names).unwrap().self_signed(&key).unwrap();
    (cert.pem(), cert.der().to_vec())
}

#[tokio::test]
async fn a_node_registers_its_certificate_and_users_apps_check_it() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let link = alice["link"].as_str().unwrap().to_owned();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let path = format!("/{}/nodes/{node}/tls", client.app().config.edge.api_prefix);
    let (pem, der) = certificate(&["vpn.example.net", "203.0.113.5"]);
    let body = serde_json::to_vec(&json!({ "certificate": pem })).unwrap();

    // Unsigned, or signed for another body: refused, nothing kept.
    let refused = node_request(&client, CONTROL_HOST, &path, "", body.clone()).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let other = node_signature(node, &key, "POST", &path, b"{}");
    assert_eq!(node_request(&client, CONTROL_HOST, &path, &other, body.clone()).await.status, StatusCode::UNAUTHORIZED);
    let before = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!(before.endpoints[0].identity.certificate, None);

    // Signed by the node: kept, and alice's apps check it.
    let auth = node_signature(node, &key, "POST", &path, &body);
    let answer = node_request(&client, CONTROL_HOST, &path, &auth, body.clone()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    assert_eq!(answer.json()["cert_sha256"], hex::encode(sha256(&der)));
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    let endpoint = &snapshot.endpoints[0];
    assert_eq!(endpoint.cert_sha256, Some(sha256(&der)));
    assert!(endpoint.insecure, "self-signed");
    assert_eq!(endpoint.identity.certificate.as_deref(), Some(der.as_slice()));
    assert_eq!(endpoint.identity.name.as_deref(), Some("203.0.113.5"), "the node's host is in the certificate");
    assert!(!endpoint.identity.unverified);
    let view = client.get(&format!("/nodes/{node}")).await.json();
    assert_eq!(view["cert_sha256"], hex::encode(sha256(&der)));
    assert!(view["cert_expires"].as_u64().unwrap() > 4_000_000_000);

    // The same again changes nothing; a replayed request is refused.
    let again = node_signature(node, &key, "POST", &path, &body);
    assert_eq!(node_request(&client, CONTROL_HOST, &path, &again, body.clone()).await.status, StatusCode::OK);
    assert_eq!(snapshot_of(client.app(), &link).await.unwrap(), snapshot, "signed again for nothing");
    assert_eq!(node_request(&client, CONTROL_HOST, &path, &auth, body).await.status, StatusCode::UNAUTHORIZED);

    // What is no certificate, or names no host, is refused with a reason.
    let (no_name, _) = {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap().self_signed(&key).unwrap();
        (cert.pem(), ())
    };
    for bad in [json!({ "certificate": "nonsense" }), json!({ "certificate": no_name }), json!({ "cert": pem })] {
        let body = serde_json::to_vec(&bad).unwrap();
        let auth = node_signature(node, &key, "POST", &path, &body);
        let refused = node_request(&client, CONTROL_HOST, &path, &auth, body).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(matches!(refused.code().as_str(), "bad_certificate" | "bad_json"), "{}", refused.code());
    }
    assert_eq!(snapshot_of(client.app(), &link).await.unwrap(), snapshot, "nothing changed");

    // The owner's SNI, when the certificate is made out to it, is the name checked; letting
    // unverified apps in is the owner's explicit act, and shows.
    let patched =
        client.patch(&format!("/nodes/{node}"), json!({ "sni": "VPN.example.net", "allow_unverified": true })).await;
    assert_eq!(patched.status, StatusCode::OK);
    assert_eq!(patched.json()["allow_unverified"], true);
    let endpoint = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert_eq!(endpoint.identity.name.as_deref(), Some("vpn.example.net"));
    assert!(endpoint.identity.unverified);
    // A node with a CA's certificate carries none of it.
    client.patch(&format!("/nodes/{node}"), json!({ "tls": "operator" })).await;
    let endpoint = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert!(!endpoint.insecure && endpoint.cert_sha256.is_none());
    assert_eq!(endpoint.identity, Default::default());
}

/// A node of this release sends its certificate when it enrolls: control keeps it and its
/// pins, and refuses pins that are not the certificate's.
#[tokio::test]
async fn an_enrollment_carries_the_certificate() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let (pem, der) = certificate(&["node.example.org"]);
    let enroll_with = async |body: serde_json::Value| {
        let node = client
            .post("/nodes", json!({ "name": format!("n-{}", rand_core::RngCore::next_u32(&mut rand_core::OsRng)), "host": "node.example.org" }))
            .await
            .json();
        let command = node["enroll_command"].as_str().unwrap().to_owned();
        let token = command.split_whitespace().find_map(|w| w.strip_prefix("--token=")).unwrap().to_owned();
        let key =
            hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng).unwrap();
        let mut body = body;
        body["token"] = token.into();
        body["key"] = key.public().to_string().into();
        let path = format!("/{}/enroll", client.app().config.edge.api_prefix);
        client.send(axum::http::Method::POST, &path, Some(body), &[]).await
    };
    let wrong = enroll_with(json!({ "certificate": pem, "cert_sha256": hex::encode([1u8; 32]) })).await;
    assert_eq!(wrong.code(), "bad_pin");
    let enrolled = enroll_with(json!({ "certificate": pem })).await;
    assert_eq!(enrolled.status, StatusCode::OK, "{}", String::from_utf8_lossy(&enrolled.body));
    assert_eq!(enrolled.json()["tls_name"], "node.example.org", "the name the node makes its certificate for");
    let snapshot = snapshot_of(client.app(), alice["link"].as_str().unwrap()).await.unwrap();
    let endpoint = snapshot.endpoints.last().unwrap();
    assert_eq!(endpoint.cert_sha256, Some(sha256(&der)));
    assert_eq!(endpoint.identity.certificate.as_deref(), Some(der.as_slice()));
    assert_eq!(endpoint.identity.name.as_deref(), Some("node.example.org"));
}
