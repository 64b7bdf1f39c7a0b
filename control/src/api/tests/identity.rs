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

/// A certificate for `names` valid from now for `days`, as PEM.
fn certificate_for(names: &[&str], days: i64) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    let now = time::OffsetDateTime::from_unix_timestamp(crate::app::now() as i64).unwrap();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
    params.self_signed(&key).unwrap().pem()
}

/// A node with a domain: enrolled with its ACME settings, its own certificate never made out
/// to the domain; once it says it holds a public certificate for it, links check that one the
/// usual way; near its expiry, or with the domain dropped, they pin the node's own again
/// (never asking for the domain, which still gets the public one); a renewal failing near the
/// expiry is told once.
#[tokio::test]
async fn a_node_with_a_domain_is_checked_by_its_public_certificate_once_it_has_one() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let link = alice["link"].as_str().unwrap().to_owned();
    let refused =
        client.post("/nodes", json!({ "name": "n1", "host": "node1.example.net", "domain": "no domain" })).await;
    assert_eq!(refused.code(), "bad_domain");
    let node = client
        .post("/nodes", json!({ "name": "n1", "host": "node1.example.net", "domain": "Node1.Example.net" }))
        .await
        .json();
    assert_eq!(node["domain"], "node1.example.net");
    let command = node["enroll_command"].as_str().unwrap().to_owned();
    let token = command.split_whitespace().find_map(|w| w.strip_prefix("--token=")).unwrap().to_owned();
    let key = hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng).unwrap();
    let path = format!("/{}/enroll", client.app().config.edge.api_prefix);
    let body = json!({ "token": token, "key": key.public().to_string() });
    let enrolled = client.send(axum::http::Method::POST, &path, Some(body), &[]).await.json();
    assert_eq!(enrolled["tls_name"], "", "the host is the domain: the node names its own certificate");
    assert_eq!(enrolled["acme"]["domain"], "node1.example.net");
    assert_eq!(enrolled["acme"]["directory"], hearth_acme::LETS_ENCRYPT);
    let id = enrolled["node"].as_u64().unwrap();

    // Its own certificate, and no public one yet: pinned, and never asking for the domain.
    let tls = format!("/{}/nodes/{id}/tls", client.app().config.edge.api_prefix);
    let (own, _) = certificate(&["vps-7.example"]);
    let send = async |report: serde_json::Value| {
        let body = serde_json::to_vec(&report).unwrap();
        let auth = node_signature(id, &key, "POST", &tls, &body);
        node_request(&client, CONTROL_HOST, &tls, &auth, body).await
    };
    let pending = json!({ "domain": "node1.example.net", "error": "not yet", "error_at": 1, "failures": 1 });
    assert_eq!(send(json!({ "certificate": own, "acme": pending })).await.status, StatusCode::OK);
    let pinned = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert!(pinned.insecure && pinned.cert_sha256.is_some());
    assert_eq!(pinned.sni.as_deref(), Some("vps-7.example"), "the node's own name, not the domain");
    let view = client.get(&format!("/nodes/{id}")).await.json();
    assert_eq!((view["acme"]["public"].as_bool(), view["acme"]["error"].as_str()), (Some(false), Some("not yet")));

    // A public certificate for another domain is refused; one for the domain is taken.
    let other = json!({ "domain": "node1.example.net", "certificate": certificate_for(&["else.example.net"], 60) });
    assert_eq!(send(json!({ "certificate": own, "acme": other })).await.code(), "bad_certificate");
    let public = json!({ "domain": "node1.example.net", "certificate": certificate_for(&["node1.example.net"], 60), "renewed": 5 });
    assert_eq!(send(json!({ "certificate": own, "acme": public })).await.status, StatusCode::OK);
    let checked = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert!(!checked.insecure && checked.cert_sha256.is_none() && checked.spki_sha256.is_none());
    assert_eq!(checked.sni.as_deref(), Some("node1.example.net"));
    assert_eq!(checked.identity, Default::default());
    let view = client.get(&format!("/nodes/{id}")).await.json();
    assert_eq!((view["acme"]["public"].as_bool(), view["acme"]["error"].as_str()), (Some(true), Some("")));

    // Ten days left and renewals failing: still checked (until a day is left), and told once.
    let failing = json!({
        "domain": "node1.example.net",
        "certificate": certificate_for(&["node1.example.net"], 10),
        "error": "the CA: rate limited",
        "error_at": 9,
        "failures": 4,
    });
    assert_eq!(send(json!({ "certificate": own, "acme": failing })).await.status, StatusCode::OK);
    let now = crate::app::now();
    let sweep = async |at: u64| {
        let app = client.app().clone();
        client.app().db.write(move |tx| crate::nodes::sweep_certificates(tx, &app.signer, at)).await.unwrap()
    };
    sweep(now).await;
    sweep(now).await;
    let events = client.get("/events?limit=100").await.json();
    let told: Vec<&serde_json::Value> =
        events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "node.certificate_expiring").collect();
    assert_eq!(told.len(), 1, "{events}");
    assert_eq!(told[0]["data"]["error"], "the CA: rate limited");
    // A day before it expires, the sweep pins the node's own certificate again.
    assert_eq!(sweep(now + 9 * 86_400 + 1).await, 1);
    let again = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert!(again.insecure && again.cert_sha256.is_some());

    // The owner drops the domain (no new enrollment needed): pinned, still never asking for
    // the domain the node holds a certificate for; setting one again needs an enrollment.
    assert_eq!(sweep(now).await, 1);
    assert_eq!(client.patch(&format!("/nodes/{id}"), json!({ "domain": "" })).await.status, StatusCode::OK);
    let dropped = snapshot_of(client.app(), &link).await.unwrap().endpoints[0].clone();
    assert!(dropped.insecure && dropped.cert_sha256.is_some());
    assert_eq!(dropped.sni.as_deref(), Some("vps-7.example"));
    let again = client.patch(&format!("/nodes/{id}"), json!({ "domain": "node2.example.net" })).await;
    assert_eq!(again.code(), "needs_enrollment");
}
