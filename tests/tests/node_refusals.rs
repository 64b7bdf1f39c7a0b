//! A running node against a control or an edge that sends it what it must refuse (as a
//! compromised or broken one would): a set signed by the signing key a rotation retired, a
//! rollback to an older version, an expired set. Each time the node keeps serving the set it
//! holds (its users stay in, nobody the refused set adds gets in) and logs why; a good set
//! sent afterwards is taken. Control is stood in for over HTTPS pinned to a certificate made
//! here, the edge over plain HTTP, as the node reaches each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet, stream};
use hearth_tests::control_sim::ControlSim;
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, fetch_eventually, http_server, metric, until_logged};
use hearth_tests::stand_in::{Answer, Request};

const API: &str = "api-refusals-0123456789";

/// What the stand-in answers a pull with.
struct Offer {
    /// The credential set envelope, and its version.
    creds: Vec<u8>,
    version: u64,
    /// The key records sent with it ([`hearth_shared::nodeauth::KEYS_HEADER`]).
    keys: String,
}

/// Answers a request of the node API: a pull gets the offered set unless the node says it
/// holds that version (then, after a second's long poll, "nothing new"); anything else (usage
/// reports) a 404.
fn answer(request: &Request, offer: &Mutex<Offer>) -> Answer {
    if request.path != format!("/{API}/nodes/1/creds") {
        return Answer::bytes(404, b"not here\n");
    }
    let after: Option<u64> = request.param("after").and_then(|v| v.parse().ok());
    let offer = offer.lock().unwrap();
    let headers = vec![(hearth_shared::nodeauth::KEYS_HEADER, offer.keys.clone())];
    if after == Some(offer.version) {
        Answer { headers, ..Answer::bytes(204, b"") }.after(Duration::from_secs(1))
    } else {
        Answer { headers, ..Answer::bytes(200, &offer.creds) }
    }
}

/// A stand-in for control (HTTPS, with a self-signed certificate: its URL and the pin the node
/// checks) or for the edge (plain HTTP: its URL).
async fn stand_in(offer: Arc<Mutex<Offer>>, tls: bool) -> (String, Option<String>) {
    let handle = move |request: &Request| answer(request, &offer);
    if tls {
        let (url, pin, _) = hearth_tests::stand_in::stand_in_tls(handle).await;
        (url, Some(pin))
    } else {
        (hearth_tests::stand_in::stand_in(handle).await.0, None)
    }
}

fn set(users: &[(u64, &str)]) -> Vec<u8> {
    CredentialSet::new(1, users.iter().map(|(user, cred)| CredEntry::new(*user, sha256(cred.as_bytes()))).collect())
        .unwrap()
        .encode()
}

/// Node 1's set at `version`, signed by `key`, expiring in a day unless `expired`.
fn signed(sim: &ControlSim, key: &SecretKey, version: u64, users: &[(u64, &str)], expired: bool) -> Vec<u8> {
    let mut draft = sim.draft(Kind::CredentialSet, stream::creds(1), version, Audience::Node(1));
    if expired {
        draft.issued -= 7200;
        draft.expires = draft.issued + 3600;
    }
    draft.sign(set(users), &[key]).encode()
}

async fn refuses_and_keeps_serving(from_control: bool) {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let first_keys = sim.key_records();
    let alice = [(1, "alice-pw")];
    let with_mallory = [(1, "alice-pw"), (2, "mallory-pw")];
    let v1 = signed(&sim, &sim.signing, 1, &alice, false);
    let offer = Arc::new(Mutex::new(Offer {
        creds: v1.clone(),
        version: 1,
        keys: hearth_shared::trust::chain_to_header(&first_keys),
    }));
    let (url, pin) = stand_in(offer.clone(), from_control).await;
    let settings = match pin {
        Some(pin) => {
            format!("control_url = \"{url}\"\ncontrol_pin = \"{pin}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\n")
        }
        None => format!("edge_url = \"{url}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\n"),
    };
    let dir = temp.path().join("node");
    hearth_tests::node::state_dir_with(&dir, &sim, 1, &settings).unwrap();
    hearth_tests::node::save_node_key(&dir, &SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap()).unwrap();
    std::fs::write(dir.join("creds.envelope"), &v1).unwrap();
    // Its log as JSON, one object a line (`HEARTH_LOG_FORMAT=json`).
    let (node, log) = NodeProcess::start_logged_as(&dir, "warn", "json").unwrap();
    let metrics = node.metrics_url().unwrap();
    let web = http_server(b"through the node".to_vec()).await.unwrap();
    let alice_client = ProxyClient::sing_box(node.outbound("alice-pw")).unwrap();
    let mallory_client = ProxyClient::sing_box(node.outbound("mallory-pw")).unwrap();
    assert_eq!(fetch(&alice_client, web).await.unwrap(), b"through the node");

    // The signing key rotates; the node takes the rotation with the set the new key signed.
    let retired = sim.rotate_signing();
    let rotated_keys = hearth_shared::trust::chain_to_header(&sim.key_records());
    let v2 = signed(&sim, &sim.signing, 2, &alice, false);
    {
        let mut offer = offer.lock().unwrap();
        (offer.creds, offer.version, offer.keys) = (v2.clone(), 2, rotated_keys.clone());
    }
    let started = std::time::Instant::now();
    while metric(&metrics, "hearth_node_set_version").await.unwrap() != 2 {
        assert!(started.elapsed() < Duration::from_secs(60), "the node did not take the rotated set");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hearth_tests::node::held_set(&dir).unwrap().0, sim.signing.public().id().to_string());

    let old_keys = hearth_shared::trust::chain_to_header(&first_keys);
    let refusals = [
        // Signed by the retired key, sent with the records from before the rotation.
        (
            "a set signed by the retired key",
            signed(&sim, &retired, 3, &with_mallory, false),
            3,
            old_keys,
            "signed by a key this verifier does not know",
        ),
        (
            "a rollback",
            signed(&sim, &sim.signing, 1, &with_mallory, false),
            1,
            rotated_keys.clone(),
            "stale version 1 (holding 2): rollback or replay",
        ),
        ("an expired set", signed(&sim, &sim.signing, 3, &with_mallory, true), 3, rotated_keys.clone(), "expired at"),
    ];
    for (what, creds, version, keys, reason) in refusals {
        {
            let mut offer = offer.lock().unwrap();
            (offer.creds, offer.version, offer.keys) = (creds, version, keys);
        }
        let said = until_logged(&log, reason, Duration::from_secs(60)).await;
        let said = said.unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let said: serde_json::Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{what}: {e}: {said}"));
        assert_eq!(said["level"], "WARN", "{what}: {said}");
        assert!(said["fields"]["message"].as_str().unwrap().contains("refused a credential set"), "{what}: {said}");
        assert_eq!(metric(&metrics, "hearth_node_set_version").await.unwrap(), 2, "{what} replaced the set held");
        assert_eq!(hearth_tests::node::held_set(&dir).unwrap().1, vec![1], "{what} was written to disk");
        assert_eq!(fetch(&alice_client, web).await.unwrap(), b"through the node", "alice was cut off by {what}");
        assert!(fetch(&mallory_client, web).await.is_err(), "mallory got in with {what}");
    }

    // A good set is taken: mallory's client was refused for the sets, not for itself.
    {
        let mut offer = offer.lock().unwrap();
        (offer.creds, offer.version, offer.keys) =
            (signed(&sim, &sim.signing, 3, &with_mallory, false), 3, rotated_keys);
    }
    assert_eq!(fetch_eventually(&mallory_client, web).await.unwrap(), b"through the node");
    assert_eq!(metric(&metrics, "hearth_node_set_version").await.unwrap(), 3);
    assert_eq!(fetch(&alice_client, web).await.unwrap(), b"through the node");
    node.stop().unwrap();
}

#[tokio::test]
async fn a_running_node_refuses_a_retired_key_a_rollback_and_an_expired_set_from_the_edge() {
    refuses_and_keeps_serving(false).await;
}

#[tokio::test]
async fn a_running_node_refuses_a_retired_key_a_rollback_and_an_expired_set_from_control() {
    refuses_and_keeps_serving(true).await;
}
