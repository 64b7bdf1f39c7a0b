//! Routing per user at the node, with real processes: the sing-box client, a Hearth node
//! pulling from a native edge, and Dante (a real SOCKS5 server) as the owner's outbound. One
//! user's traffic to a name goes through Dante, TCP and UDP, and the rest straight out;
//! another user's same requests go straight out; `reject` refuses as the official server
//! does; a changed rule set holds from the next connection while another user's transfer
//! runs on untouched; and no rule reaches what the node's safety policy refuses.

use std::time::Duration;

use hearth_shared::acl::{Outbound, OutboundKind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::routing::{Routing, RuleSet};
use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet};
use hearth_tests::control_sim::ControlSim;
use hearth_tests::edge::{Backend, EdgeProcess};
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, fetch_eventually, http_server, metric};
use hearth_tests::socks::Dante;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const API: &str = "api-routing-test-0123456789";
const PUSH_TOKEN: &str = "routing-test-push-token-0123456789-0123456789";

/// Alice (user 1) is routed by rule set 1; Bob (user 2) by none.
fn set(node: &SecretKey, routing: &Routing) -> CredentialSet {
    let alice = CredEntry { rules: 1, ..CredEntry::new(1, sha256(b"alice-pw")) };
    let bob = CredEntry::new(2, sha256(b"bob-pw"));
    let sealed = hearth_shared::routing::seal(routing, &node.public(), &[42; 32]).unwrap();
    CredentialSet::new(1, vec![alice, bob]).unwrap().with_routing(Some(sealed)).unwrap()
}

fn routing(dante: &Dante, rules: &str) -> Routing {
    Routing {
        outbounds: vec![Outbound {
            name: "warp".into(),
            kind: OutboundKind::Socks5 { server: dante.server.clone(), login: None },
        }],
        sets: vec![RuleSet { id: 1, name: "family".into(), text: rules.into() }],
    }
}

async fn push(http: &reqwest::Client, edge: &EdgeProcess, body: Vec<u8>) {
    let response =
        http.post(format!("{}/{API}/push", edge.url)).bearer_auth(PUSH_TOKEN).body(body).send().await.unwrap();
    let status = response.status();
    assert!(status.is_success(), "{}", response.text().await.unwrap());
}

/// A GET of `/` from `host:port` through the tunnel by name.
async fn fetch_by_name(client: &ProxyClient, host: &str, port: u16) -> anyhow::Result<Vec<u8>> {
    let mut stream = client.connect_to(host, port).await?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await??;
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| anyhow::anyhow!("no HTTP head"))? + 4;
    anyhow::ensure!(response.starts_with(b"HTTP/1.1 200"), "not a 200");
    Ok(response[at..].to_vec())
}

#[tokio::test]
async fn a_users_rules_send_matched_traffic_through_a_real_socks5_server_and_change_live() {
    let temp = tempfile::tempdir().unwrap();
    let dante = Dante::start(temp.path()).unwrap();
    let mut sim = ControlSim::new();
    let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    let web = http_server(b"web".to_vec()).await.unwrap();
    let blocked = http_server(b"blocked".to_vec()).await.unwrap();
    let echo = hearth_tests::node::udp_echo().await.unwrap();
    // The name `localhost` and UDP to the echo go through the proxy; the blocked server's
    // port is refused; everything else straight out.
    let rules = format!(
        "warp(localhost)\nwarp(127.0.0.1, udp/{})\nreject(127.0.0.1, tcp/{})\ndirect(all)",
        echo.port(),
        blocked.port()
    );
    let first = sim.creds(&set(&key, &routing(&dante, &rules)));

    let vars = sim.edge_vars(API, PUSH_TOKEN, &[]);
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &vars).unwrap();
    let http = hearth_tests::http().build().unwrap();
    let record = sim.node(1, Some(key.public()));
    push(&http, &edge, sim.push(&[record, first])).await;
    let dir = temp.path().join("node");
    let settings = format!("edge_url = \"{}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\n", edge.url);
    hearth_tests::node::state_dir_with(&dir, &sim, 1, &settings).unwrap();
    hearth_tests::node::save_node_key(&dir, &key).unwrap();
    let node = NodeProcess::start(&dir).unwrap();
    let metrics = node.metrics_url().unwrap();
    let alice = ProxyClient::sing_box(node.outbound("alice-pw")).unwrap();
    let bob = ProxyClient::sing_box(node.outbound("bob-pw")).unwrap();
    assert_eq!(fetch_eventually(&alice, web).await.unwrap(), b"web");

    // Alice by address: straight out, nothing through Dante.
    assert_eq!(dante.connected_to(web.port()), 0, "{}", dante.log());
    // Alice by name: through Dante, which logs the connection.
    assert_eq!(fetch_by_name(&alice, "localhost", web.port()).await.unwrap(), b"web");
    assert_eq!(dante.connected_to(web.port()), 1, "Dante did not carry alice's request by name:\n{}", dante.log());
    // Alice's UDP to the echo: through Dante's UDP relay.
    assert_eq!(alice.udp_round_trip(echo, b"ping").await.unwrap(), b"ping");
    assert!(dante.relayed_udp(echo.port()) >= 1, "Dante did not relay alice's UDP:\n{}", dante.log());
    let carried = "hearth_node_outbound_bytes_total{outbound=\"warp\",direction=\"down\"}";
    assert!(metric(&metrics, carried).await.unwrap() >= 7, "the outbound's bytes are counted");

    // Bob's same requests: straight out.
    // (Dante logs a datagram's answer a moment after relaying it.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (tcp_before, udp_before) = (dante.connected_to(web.port()), dante.relayed_udp(echo.port()));
    assert_eq!(fetch_by_name(&bob, "localhost", web.port()).await.unwrap(), b"web");
    assert_eq!(bob.udp_round_trip(echo, b"pong").await.unwrap(), b"pong");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(dante.connected_to(web.port()), tcp_before, "bob's TCP went through Dante");
    assert_eq!(dante.relayed_udp(echo.port()), udp_before, "bob's UDP went through Dante");

    // Reject: alice is refused, the server never sees her; bob is not.
    assert!(fetch(&alice, blocked).await.is_err(), "a reject rule let alice through");
    assert_eq!(fetch(&bob, blocked).await.unwrap(), b"blocked");
    assert!(metric(&metrics, "hearth_node_refused_total{reason=\"routing\"}").await.unwrap() >= 1);

    // A long transfer of bob's runs while alice's rules change: hers hold from her next
    // connection, his transfer ends whole.
    let body: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 251) as u8).collect();
    let slow = hearth_tests::node::http_server_paced(body.clone(), Duration::from_millis(20)).await.unwrap();
    let (progress, mut received) = tokio::sync::watch::channel(0);
    let transfer = tokio::spawn(async move { (hearth_tests::node::fetch_watched(&bob, slow, progress).await, bob) });
    // (The guard `wait_for` returns is dropped at once: held, it would block the sender.)
    let started = tokio::time::timeout(Duration::from_secs(60), received.wait_for(|n| *n >= 64 << 10))
        .await
        .map(|seen| seen.map(drop));
    assert!(matches!(started, Ok(Ok(()))), "bob's transfer did not start");
    let everything_through = format!("reject(127.0.0.1, tcp/{})\nwarp(all)", web.port());
    let second = sim.creds(&set(&key, &routing(&dante, &everything_through)));
    push(&http, &edge, sim.push(&[second])).await;
    let refused = tokio::time::timeout(Duration::from_secs(30), async {
        while fetch(&alice, web).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "alice's new rules did not take hold");
    let before = dante.connected_to(blocked.port());
    assert_eq!(fetch(&alice, blocked).await.unwrap(), b"blocked");
    assert_eq!(dante.connected_to(blocked.port()), before + 1, "warp(all) did not send alice through Dante");
    let (bob_result, _bob) = transfer.await.unwrap();
    assert!(bob_result.unwrap() == body, "bob's transfer must complete byte for byte");
    node.stop().unwrap();
}

/// A rule cannot reach what the node's safety policy refuses: on a node without
/// `allow_private`, `direct(127.0.0.0/8)` and a proxy on the node's own loopback are both
/// refused for loopback targets (the proxy never gets the request), while a node that allows
/// private addresses carries the same rules.
#[tokio::test]
async fn no_rule_reaches_what_the_safety_policy_refuses() {
    use std::sync::atomic::Ordering;
    let temp = tempfile::tempdir().unwrap();
    let dante = Dante::start(temp.path()).unwrap();
    let sim = ControlSim::new();
    let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    let (web, accepted) =
        hearth_tests::node::http_server_at([127, 0, 0, 1], b"inside".to_vec(), Duration::ZERO).await.unwrap();
    let rules = format!("warp(localhost)\ndirect(127.0.0.0/8, tcp/{})\nreject(all)", web.port());
    let mut sim = sim;
    let item = sim.creds(&set(&key, &routing(&dante, &rules)));
    let (strict_dir, open_dir) = (temp.path().join("strict"), temp.path().join("open"));
    hearth_tests::node::state_dir_public_only(&strict_dir, &sim, 1, "").unwrap();
    hearth_tests::node::state_dir(&open_dir, &sim, 1).unwrap();
    for dir in [&strict_dir, &open_dir] {
        std::fs::write(dir.join("creds.envelope"), item.envelope().unwrap()).unwrap();
        hearth_tests::node::save_node_key(dir, &key).unwrap();
    }
    let strict = NodeProcess::start(&strict_dir).unwrap();
    let open = NodeProcess::start(&open_dir).unwrap();
    let through_strict = ProxyClient::sing_box(strict.outbound("alice-pw")).unwrap();
    assert!(fetch(&through_strict, web).await.is_err(), "direct(127.0.0.0/8) reached loopback");
    assert!(fetch_by_name(&through_strict, "localhost", web.port()).await.is_err(), "the proxy reached loopback");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "the target was reached");
    assert_eq!(dante.connected_to(web.port()), 0, "the proxy was asked:\n{}", dante.log());

    let through_open = ProxyClient::sing_box(open.outbound("alice-pw")).unwrap();
    assert_eq!(fetch_eventually(&through_open, web).await.unwrap(), b"inside");
    assert_eq!(fetch_by_name(&through_open, "localhost", web.port()).await.unwrap(), b"inside");
    assert_eq!(dante.connected_to(web.port()), 1);
    strict.stop().unwrap();
    open.stop().unwrap();
}

/// A network namespace joined to this one by a veth pair, removed when dropped: the host side
/// holds `.1` and `.3` of a /24 of globally routed addresses (the safety policy lets them
/// through), the namespace `.2`.
struct Namespace {
    name: String,
    host_if: String,
    net: String,
}

impl Namespace {
    fn new() -> Namespace {
        let tag = std::process::id() % 100_000;
        let ns = Namespace {
            name: format!("hearth-rt-{tag}"),
            host_if: format!("hrt{tag}a"),
            net: format!("11.{}.{}", 100 + tag % 100, tag % 200),
        };
        let peer = format!("hrt{tag}b");
        let run = |args: &str| {
            let out = std::process::Command::new("ip").args(args.split_whitespace()).output().unwrap();
            assert!(out.status.success(), "ip {args}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&format!("netns add {}", ns.name));
        run(&format!("link add {} type veth peer name {peer}", ns.host_if));
        run(&format!("link set {peer} netns {}", ns.name));
        run(&format!("addr add {}.1/24 dev {}", ns.net, ns.host_if));
        run(&format!("addr add {}.3/24 dev {}", ns.net, ns.host_if));
        run(&format!("link set {} up", ns.host_if));
        run(&format!("netns exec {} ip addr add {}.2/24 dev {peer}", ns.name, ns.net));
        run(&format!("netns exec {} ip link set {peer} up", ns.name));
        run(&format!("netns exec {} ip link set lo up", ns.name));
        ns
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["link", "del", &self.host_if]).output();
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A direct outbound in a namespace the test makes: one bound to the veth's interface and a
/// source address reaches the server there from that address; one bound to another interface
/// (loopback) does not get there; a user without rules goes out the way the kernel routes,
/// from the interface's first address.
#[tokio::test]
async fn a_direct_outbound_leaves_by_its_interface_and_source_address() {
    use std::io::BufRead as _;
    let ns = Namespace::new();
    // A web server in the namespace that answers with the address it was reached from.
    let server = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('{net}.2',8080))\ns.listen(16)\nprint('ready',flush=True)\n\
         while True:\n  c,a=s.accept()\n  c.recv(4096)\n  b=a[0].encode()\n  \
         c.sendall(b'HTTP/1.1 200 OK\\r\\ncontent-length: %d\\r\\nconnection: close\\r\\n\\r\\n'%len(b)+b)\n  c.close()\n",
        net = ns.net
    );
    let mut web = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c", &server])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(web.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let target: std::net::SocketAddr = format!("{}.2:8080", ns.net).parse().unwrap();

    let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    let direct = |interface: &str, source: Option<std::net::Ipv4Addr>| OutboundKind::Direct {
        mode: hearth_shared::acl::IpMode::V4,
        interface: Some(interface.into()),
        source_v4: source,
        source_v6: None,
    };
    let routing = Routing {
        outbounds: vec![
            Outbound { name: "wan2".into(), kind: direct(&ns.host_if, Some(format!("{}.3", ns.net).parse().unwrap())) },
            Outbound { name: "nowhere".into(), kind: direct("lo", None) },
        ],
        sets: vec![
            RuleSet { id: 1, name: "second-line".into(), text: "wan2(all)".into() },
            RuleSet { id: 2, name: "wrong-way".into(), text: "nowhere(all)".into() },
        ],
    };
    let users = vec![
        CredEntry { rules: 1, ..CredEntry::new(1, sha256(b"alice-pw")) },
        CredEntry { rules: 2, ..CredEntry::new(2, sha256(b"bob-pw")) },
        CredEntry::new(3, sha256(b"carol-pw")),
    ];
    let sealed = hearth_shared::routing::seal(&routing, &key.public(), &[5; 32]).unwrap();
    let set = CredentialSet::new(1, users).unwrap().with_routing(Some(sealed)).unwrap();
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let item = sim.creds(&set);
    let dir = temp.path().join("node");
    // The node's default policy: the namespace's addresses are globally routed ones.
    hearth_tests::node::state_dir_public_only(&dir, &sim, 1, "").unwrap();
    std::fs::write(dir.join("creds.envelope"), item.envelope().unwrap()).unwrap();
    hearth_tests::node::save_node_key(&dir, &key).unwrap();
    let node = NodeProcess::start(&dir).unwrap();

    let alice = ProxyClient::sing_box(node.outbound("alice-pw")).unwrap();
    let seen = fetch_eventually(&alice, target).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&seen), format!("{}.3", ns.net), "not from the outbound's source address");
    let bob = ProxyClient::sing_box(node.outbound("bob-pw")).unwrap();
    assert!(fetch(&bob, target).await.is_err(), "an outbound bound to loopback reached the namespace");
    let carol = ProxyClient::sing_box(node.outbound("carol-pw")).unwrap();
    assert_eq!(String::from_utf8_lossy(&fetch(&carol, target).await.unwrap()), format!("{}.1", ns.net));
    node.stop().unwrap();
    let _ = web.kill();
    let _ = web.wait();
}
