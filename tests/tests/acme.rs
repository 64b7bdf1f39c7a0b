//! Real certificates by ACME, against a real CA (Debian's Pebble, `hearth_tests::acme`): a
//! node gets one by HTTP-01 and by TLS-ALPN-01, serves it on QUIC and TCP to clients that ask
//! for its domain (its own self-signed one to anyone else), renews it at two thirds of its
//! life and when told (SIGHUP) without dropping a transfer, and keeps serving the one it has
//! when the CA does not answer, saying so.

use std::path::Path;
use std::time::{Duration, Instant};

use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet};
use hearth_tests::acme::Pebble;
use hearth_tests::control_sim::ControlSim;
use hearth_tests::node::{H3Client, NodeProcess, ProxyClient, fetch, fetch_eventually, http_server_paced, metric};

/// The node's domain (Pebble's DNS answers 127.0.0.1 for every name).
const DOMAIN: &str = "node1.hearth.test";
/// The name of the node's own certificate.
const OWN: &str = "own.hearth.test";

/// Whether `chain` (DER, leaf first) is valid for `name` under the root `root` (PEM) now.
fn verifies(chain: &[Vec<u8>], name: &str, root: &str) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(root.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider).build().unwrap();
    let Some((leaf, rest)) = chain.split_first() else { return false };
    let rest: Vec<CertificateDer<'_>> = rest.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    rustls::client::danger::ServerCertVerifier::verify_server_cert(
        verifier.as_ref(),
        &CertificateDer::from(leaf.as_slice()),
        &rest,
        &name,
        &[],
        UnixTime::now(),
    )
    .is_ok()
}

/// The chain the node shows over QUIC to a client asking for `name`.
async fn over_quic(node: &NodeProcess, name: &str) -> Vec<Vec<u8>> {
    H3Client::connect_as(node.addr, std::net::Ipv4Addr::LOCALHOST.into(), name).await.unwrap().certificates.clone()
}

/// Waits (up to `within`) for the node to show, to a client asking for the domain, a chain
/// that `root` vouches for and that is not `before`; returns it.
async fn public_chain(node: &NodeProcess, root: &str, before: Option<&[Vec<u8>]>, within: Duration) -> Vec<Vec<u8>> {
    let started = Instant::now();
    loop {
        let chain = over_quic(node, DOMAIN).await;
        if verifies(&chain, DOMAIN, root) && before.is_none_or(|before| before != chain.as_slice()) {
            return chain;
        }
        assert!(started.elapsed() < within, "no new certificate for {DOMAIN} within {within:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A node holding user 7 (`alice-password`) with `settings` in its `node.toml`.
fn node(dir: &Path, settings: &str) -> NodeProcess {
    let mut sim = ControlSim::new();
    hearth_tests::node::state_dir_with(dir, &sim, 1, &format!("tls_name = \"{OWN}\"\n{settings}")).unwrap();
    let set = CredentialSet::new(1, vec![CredEntry::new(7, sha256(b"alice-password"))]).unwrap();
    std::fs::write(dir.join("creds.envelope"), sim.creds(&set).envelope().unwrap()).unwrap();
    NodeProcess::start(dir).unwrap()
}

fn hup(node: &NodeProcess) {
    assert!(std::process::Command::new("kill").args(["-HUP", &node.pid().to_string()]).status().unwrap().success());
}

/// HTTP-01 on a listener of the node's own; certificates that live 30 s, renewed at two
/// thirds of their life with nothing asked.
#[tokio::test]
async fn a_node_gets_a_certificate_by_http_01_and_renews_it_in_time() {
    let temp = tempfile::tempdir().unwrap();
    let http = hearth_tests::edge::free_port().unwrap();
    let pebble = Pebble::start(http, hearth_tests::edge::free_port().unwrap(), Some(30)).unwrap();
    let node = node(
        &temp.path().join("node"),
        &format!(
            "[acme]\ndomain = \"{DOMAIN}\"\ndirectory = \"{}\"\n\
             challenge = \"http-01\"\nhttp_listen = \"127.0.0.1:{http}\"\nca_root = \"{}\"\n",
            pebble.directory,
            pebble.api_root.display()
        ),
    );
    assert_eq!(node.said("hearth-node ACME HTTP-01 on ").unwrap(), format!("127.0.0.1:{http}"));
    let metrics = node.metrics_url().unwrap();
    let root = pebble.root().await.unwrap();
    let first = public_chain(&node, &root, None, Duration::from_secs(30)).await;
    // Anyone asking for another name, or none, gets the node's own certificate.
    let own = over_quic(&node, OWN).await;
    assert_eq!(own[0], std::fs::read(node.state().join("tls.crt")).map(|pem| der_of(&pem)).unwrap());
    assert!(!verifies(&own, OWN, &root));
    let expiry = metric(&metrics, "hearth_node_certificate_expiry_seconds").await.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((now..now + 40).contains(&expiry), "a 30 s certificate: {expiry}");
    // Kept as keys are kept.
    let key = std::fs::metadata(node.state().join("acme/key.pem")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777, 0o600);
    // Two thirds into its 30 s, a new one, unasked.
    let second = public_chain(&node, &root, Some(&first), Duration::from_secs(40)).await;
    assert_ne!(first[0], second[0]);
    assert_eq!(metric(&metrics, "hearth_node_acme_failures").await.unwrap(), 0);
    node.stop().unwrap();
}

/// TLS-ALPN-01 on the masquerade's TCP port; a renewal asked for (SIGHUP) swaps the
/// certificate while a transfer through a client that checks it the usual way goes on whole;
/// a CA that does not answer leaves the node serving the one it has, and counting failures.
#[tokio::test]
async fn a_node_gets_a_certificate_by_tls_alpn_01_and_swaps_it_live() {
    let temp = tempfile::tempdir().unwrap();
    let tcp = hearth_tests::edge::free_port().unwrap();
    let mut pebble = Pebble::start(hearth_tests::edge::free_port().unwrap(), tcp, None).unwrap();
    let node = node(
        &temp.path().join("node"),
        &format!(
            "masquerade_tcp = \"127.0.0.1:{tcp}\"\n[acme]\ndomain = \"{DOMAIN}\"\n\
             directory = \"{}\"\nca_root = \"{}\"\n",
            pebble.directory,
            pebble.api_root.display()
        ),
    );
    let metrics = node.metrics_url().unwrap();
    let root = pebble.root().await.unwrap();
    let roots = temp.path().join("roots.pem");
    std::fs::write(&roots, &root).unwrap();
    let first = public_chain(&node, &root, None, Duration::from_secs(30)).await;

    // A client checking the domain the usual way, trusting the CA's root as a phone trusts
    // public CAs: through the node, while the certificate is renewed under it.
    let outbound = serde_json::json!({
        "type": "hysteria2",
        "server": "127.0.0.1",
        "server_port": node.addr.port(),
        "password": "alice-password",
        "tls": { "enabled": true, "server_name": DOMAIN, "alpn": ["h3"] }
    });
    let alice = ProxyClient::sing_box_trusting(&hearth_tests::sing_box().unwrap(), outbound, Some(&roots)).unwrap();
    // 8 MB in 16 KiB pieces 10 ms apart: some 5 s.
    let body: Vec<u8> = (0..8_000_000u32).map(|i| (i * 13 + i / 7) as u8).collect();
    let web = http_server_paced(body.clone(), Duration::from_millis(10)).await.unwrap();
    let ready = http_server_paced(b"ready".to_vec(), Duration::ZERO).await.unwrap();
    fetch_eventually(&alice, ready).await.unwrap();
    let transfer = tokio::spawn(async move { fetch(&alice, web).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    hup(&node);
    let second = public_chain(&node, &root, Some(&first), Duration::from_secs(30)).await;
    assert!(!transfer.is_finished(), "the renewal came while the transfer ran");
    let got = transfer.await.unwrap().unwrap();
    assert!(got == body, "the transfer came whole across the renewal");

    // The CA goes away: asked again, the node keeps the certificate it has and says why not.
    pebble.stop();
    hup(&node);
    let started = Instant::now();
    while metric(&metrics, "hearth_node_acme_failures").await.unwrap() == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "the failure was not counted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(over_quic(&node, DOMAIN).await, second, "still the certificate it had");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node.state().join("acme/status.json")).unwrap()).unwrap();
    let error = status["error"].as_str().unwrap();
    assert!(error.starts_with("the CA: ") && error.contains("Connection refused"), "{status}");
    node.stop().unwrap();
}

/// The DER of the first certificate of a PEM file's bytes.
fn der_of(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}
