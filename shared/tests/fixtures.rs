//! Serialization fixtures: the exact bytes of one envelope of every kind, made from fixed
//! keys and fixed inputs. They must never change: nodes, edges and archives in the field hold
//! envelopes in this encoding. A failure here means the wire format changed; if that is
//! truly meant, it needs a new format version (`MAGIC`), not new fixtures.
//!
//! To write the files the first time: `HEARTH_BLESS=1 cargo test -p hearth-shared --test fixtures`.

use std::path::PathBuf;

use hearth_shared::envelope::{Audience, Draft, Envelope, Kind};
use hearth_shared::keys::{RecoverySecret, Role, SecretKey};
use hearth_shared::seal;
use hearth_shared::trust::{Expect, KeyRecord, RoleKeys, Trust, verify};
use hearth_shared::wire::{
    self, BatchEntry, BatchManifest, CredEntry, CredentialSet, Endpoint, NodeRecord, Profile, ResetStrategy, Snapshot,
    SpeedLimit, Status, SubToken, UsageAck, UsageReport, UserUsage, stream,
};

const NOW: u64 = 1_800_000_000;

/// A counter dressed as an RNG, so that sealing is repeatable in a fixture. Never use it for
/// anything else.
struct FixedRng(u8);

impl rand_core::RngCore for FixedRng {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest {
            self.0 = self.0.wrapping_mul(31).wrapping_add(7);
            *byte = self.0;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for FixedRng {}

fn root() -> SecretKey {
    SecretKey::from_seed(Role::Root, &[1; 32])
}
fn signing() -> SecretKey {
    SecretKey::from_seed(Role::Signing, &[2; 32])
}
fn node() -> SecretKey {
    SecretKey::from_seed(Role::Node, &[4; 32])
}

fn draft(kind: Kind, stream: String, version: u64, audience: Audience) -> Draft {
    Draft { kind, stream, version, epoch: 1, issued: NOW, expires: NOW + 86_400, audience, prev: [0x11; 32] }
}

fn snapshot() -> Snapshot {
    Snapshot {
        user: 7,
        name: "Ana".into(),
        status: Status::Active,
        used_up: 10,
        used_down: 20,
        quota: 0,
        expires_at: 0,
        reset: ResetStrategy::Never,
        credential: "cred".into(),
        endpoints: vec![Endpoint {
            name: "Home".into(),
            host: "vpn.example.net".into(),
            port: 443,
            hop: None,
            sni: None,
            cert_sha256: None,
            spki_sha256: None,
            insecure: false,
            obfs: None,
            identity: Default::default(),
        }],
        profile: Profile {
            title: "Family".into(),
            announce: None,
            support_url: None,
            web_page_url: None,
            update_interval_hours: 24,
        },
        hwid: Default::default(),
        alias: None,
        telegram: None,
    }
}

fn token() -> SubToken {
    SubToken::from_bytes([0x42; 32])
}

/// One envelope of every kind, by fixture name.
fn envelopes() -> Vec<(&'static str, Envelope)> {
    let recovery = RecoverySecret::from_bytes([5; 32]);
    let key_record = KeyRecord { role: Role::Signing, keys: RoleKeys::single(signing().public()) };
    let set = CredentialSet::new(3, vec![CredEntry::new(7, hearth_shared::sha256(b"cred"))]).unwrap();
    // Format 2: user 8 limited to 20 Mbit/s down and 5 up.
    let limited = CredEntry {
        limit: SpeedLimit { up: 625_000, down: 2_500_000 },
        ..CredEntry::new(8, hearth_shared::sha256(b"slow"))
    };
    let set_v2 = CredentialSet::new(3, vec![CredEntry::new(7, hearth_shared::sha256(b"cred")), limited]).unwrap();
    // Format 4: user 9 may have two devices on this node, was kicked once, and may not use
    // BitTorrent; the node drops a user's oldest device for a new one.
    let guarded = CredEntry {
        devices: Some(2),
        kick: 1,
        guard: wire::Guard { torrent: true, smtp: false },
        ..CredEntry::new(9, hearth_shared::sha256(b"family"))
    };
    let set_v4 = CredentialSet::new(3, vec![CredEntry::new(7, hearth_shared::sha256(b"cred")), guarded])
        .unwrap()
        .with_policy(wire::DevicePolicy::DropOldest);
    let sealed = seal::seal(&snapshot(), &token(), &recovery.public(), &mut FixedRng(9));
    let manifest = BatchManifest::new(vec![
        BatchEntry { stream: stream::creds(3), version: 2, digest: Some([0x22; 32]) },
        BatchEntry { stream: stream::snapshot(&token().hash()), version: 2, digest: None },
    ])
    .unwrap();
    let report = UsageReport {
        node: 3,
        seq: 12,
        period_start: NOW - 60,
        period_end: NOW,
        users: vec![UserUsage { user: 7, up: 1000, down: 50_000 }],
        presence: Vec::new(),
        release: None,
        kicked: Vec::new(),
    };
    // With user 7 on two devices, one more refused.
    let present = UsageReport {
        seq: 13,
        presence: vec![wire::Presence {
            user: 7,
            devices: 2,
            connections: 3,
            refused_devices: 1,
            ..Default::default()
        }],
        ..report.clone()
    };
    // After a restart into release 6, having rolled back release 7.
    let released = UsageReport {
        seq: 14,
        release: Some(wire::NodeRelease { running: "0.4.0@6".into(), update: "7 exited at start".into() }),
        ..present.clone()
    };
    // User 7 kicked through the node's traffic stats API.
    let kicked = UsageReport { seq: 15, kicked: vec![7], ..released.clone() };
    vec![
        (
            "key_record",
            draft(Kind::KeyRecord, stream::keys(Role::Signing), 1, Audience::Any)
                .sign(wire::encode(&key_record), &[&root()]),
        ),
        (
            "credential_set",
            draft(Kind::CredentialSet, stream::creds(3), 2, Audience::Node(3)).sign(set.encode(), &[&signing()]),
        ),
        (
            "credential_set_v2",
            draft(Kind::CredentialSet, stream::creds(3), 3, Audience::Node(3)).sign(set_v2.encode(), &[&signing()]),
        ),
        (
            "credential_set_v4",
            draft(Kind::CredentialSet, stream::creds(3), 4, Audience::Node(3)).sign(set_v4.encode(), &[&signing()]),
        ),
        (
            "snapshot",
            draft(Kind::Snapshot, stream::snapshot(&token().hash()), 2, Audience::Edge).sign(sealed, &[&signing()]),
        ),
        ("batch", draft(Kind::Batch, stream::BATCH.into(), 9, Audience::Edge).sign(manifest.encode(), &[&signing()])),
        (
            "node_record",
            draft(Kind::NodeRecord, stream::node(3), 1, Audience::Edge)
                .sign(wire::encode(&NodeRecord { node: 3, key: Some(node().public()) }), &[&signing()]),
        ),
        (
            "usage_report",
            draft(Kind::UsageReport, stream::usage(3), 12, Audience::Control).sign(report.encode(), &[&node()]),
        ),
        (
            "usage_report_presence",
            draft(Kind::UsageReport, stream::usage(3), 13, Audience::Control).sign(present.encode(), &[&node()]),
        ),
        (
            "usage_report_release",
            draft(Kind::UsageReport, stream::usage(3), 14, Audience::Control).sign(released.encode(), &[&node()]),
        ),
        (
            "usage_report_kicked",
            draft(Kind::UsageReport, stream::usage(3), 15, Audience::Control).sign(kicked.encode(), &[&node()]),
        ),
        (
            "usage_ack",
            draft(Kind::UsageAck, stream::usage_ack(3), 12, Audience::Node(3))
                .sign(wire::encode(&UsageAck { node: 3, seq: 12 }), &[&signing()]),
        ),
        (
            // As control signed it before link bases: edges still read it.
            "edge_settings",
            draft(Kind::EdgeSettings, stream::EDGE_SETTINGS.into(), 4, Audience::Edge).sign(
                wire::encode(&RulesOnly {
                    ua_rules: vec![hearth_shared::agent::UaRule {
                        contains: "MyApp".into(),
                        target: hearth_shared::agent::RuleTarget::SingBox,
                    }],
                }),
                &[&signing()],
            ),
        ),
        (
            "edge_settings_links",
            draft(Kind::EdgeSettings, stream::EDGE_SETTINGS.into(), 5, Audience::Edge).sign(
                wire::encode(&hearth_shared::wire::EdgeSettings {
                    ua_rules: Vec::new(),
                    links: vec![
                        wire::LinkBase { base: "https://old.example/s".into(), state: wire::LinkState::Blocked },
                        wire::LinkBase { base: "https://sub.example.org/s".into(), state: wire::LinkState::Active },
                    ],
                    alias_prefixes: Vec::new(),
                }),
                &[&signing()],
            ),
        ),
    ]
}

/// Edge settings as they were before link bases.
#[derive(serde::Serialize)]
struct RulesOnly {
    ua_rules: Vec<hearth_shared::agent::UaRule>,
}

/// Both edge-settings fixtures decode, the older one without link bases.
#[test]
fn edge_settings_from_before_link_bases_still_decode() {
    for (name, links) in [("edge_settings", 0), ("edge_settings_links", 2)] {
        let hex = std::fs::read_to_string(fixture_path(name)).unwrap();
        let bytes = hex::decode(hex.trim()).unwrap();
        let envelope = hearth_shared::envelope::Envelope::decode(&bytes, Kind::EdgeSettings.max_len()).unwrap();
        let settings = wire::EdgeSettings::decode(&envelope.body).unwrap();
        assert_eq!(settings.links.len(), links, "{name}");
    }
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.hex"))
}

#[test]
fn envelopes_encode_to_their_fixtures() {
    let bless = std::env::var_os("HEARTH_BLESS").is_some();
    for (name, envelope) in envelopes() {
        let bytes = envelope.encode();
        let path = fixture_path(name);
        if bless && !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("{}\n", hex::encode(&bytes))).unwrap();
        }
        let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(hex::encode(&bytes), stored.trim(), "fixture {name} changed: the wire format moved");
    }
}

#[test]
fn fixtures_decode_and_verify() {
    let mut trust = Trust::new(RoleKeys::single(root().public()));
    let record = hex::decode(std::fs::read_to_string(fixture_path("key_record")).unwrap().trim()).unwrap();
    trust.accept_key_record(&record, NOW).unwrap();
    trust.set_node(3, node().public());
    let snapshot_stream = stream::snapshot(&token().hash());
    let cases: [(&str, Kind, Audience, &str); 12] = [
        ("credential_set", Kind::CredentialSet, Audience::Node(3), "creds/3"),
        ("credential_set_v2", Kind::CredentialSet, Audience::Node(3), "creds/3"),
        ("credential_set_v4", Kind::CredentialSet, Audience::Node(3), "creds/3"),
        ("usage_report_presence", Kind::UsageReport, Audience::Control, "usage/3"),
        ("usage_report_release", Kind::UsageReport, Audience::Control, "usage/3"),
        ("usage_report_kicked", Kind::UsageReport, Audience::Control, "usage/3"),
        ("snapshot", Kind::Snapshot, Audience::Edge, &snapshot_stream),
        ("batch", Kind::Batch, Audience::Edge, stream::BATCH),
        ("node_record", Kind::NodeRecord, Audience::Edge, "node/3"),
        ("usage_report", Kind::UsageReport, Audience::Control, "usage/3"),
        ("usage_ack", Kind::UsageAck, Audience::Node(3), "ack/3"),
        ("edge_settings", Kind::EdgeSettings, Audience::Edge, stream::EDGE_SETTINGS),
    ];
    for (name, kind, audience, stream) in cases {
        let bytes = hex::decode(std::fs::read_to_string(fixture_path(name)).unwrap().trim()).unwrap();
        let verified = verify(&bytes, &trust, &Expect { kind, audience, stream }, None, NOW)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "credential_set_v4" {
            let set = CredentialSet::decode(&verified.envelope.body).unwrap();
            assert_eq!(set.policy(), wire::DevicePolicy::DropOldest);
            let family = set.users()[1];
            assert_eq!((family.user, family.devices, family.kick, family.guard.torrent), (9, Some(2), 1, true));
        } else if name.starts_with("credential_set") {
            let set = CredentialSet::decode(&verified.envelope.body).unwrap_or_else(|e| panic!("{name}: {e}"));
            let limits: Vec<SpeedLimit> = set.users().iter().map(|entry| entry.limit).collect();
            let slow = SpeedLimit { up: 625_000, down: 2_500_000 };
            let expected = if name == "credential_set" { vec![SpeedLimit::NONE] } else { vec![SpeedLimit::NONE, slow] };
            assert_eq!(limits, expected, "{name}");
        }
        if name.starts_with("usage_report") {
            let report = UsageReport::decode(&verified.envelope.body).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(report.presence.len(), usize::from(name != "usage_report"), "{name}");
            assert_eq!(report.release.is_some(), name.ends_with("release") || name.ends_with("kicked"), "{name}");
            assert_eq!(report.kicked, if name.ends_with("kicked") { vec![7] } else { Vec::new() }, "{name}");
        }
        if name == "snapshot" {
            assert_eq!(seal::open(&verified.envelope.body, &token()).unwrap(), snapshot());
            let (token, _) = seal::recover(&verified.envelope.body, &RecoverySecret::from_bytes([5; 32])).unwrap();
            assert_eq!(token, self::token());
        }
    }
}

/// The plaintext sealed in the archive fixtures.
fn archive_plaintext() -> Vec<u8> {
    b"the state of control, compressed; ".repeat(5)
}

/// An archive sealed whole, as control sealed every archive before chunks (`archive_v1`,
/// made by that code), still opens; one sealed in chunks of 16 bytes keeps its encoding.
#[test]
fn archives_keep_their_sealing_and_open_whole_or_in_chunks() {
    use std::io::Write as _;
    let recovery = RecoverySecret::from_bytes([5; 32]);
    let read = |name: &str| hex::decode(std::fs::read_to_string(fixture_path(name)).unwrap().trim()).unwrap();
    let whole = read("archive_v1");
    assert_eq!(seal::open_archive(&whole, &recovery).unwrap().as_slice(), archive_plaintext().as_slice());

    let mut sealer = seal::ArchiveSealer::with_chunk(Vec::new(), &recovery.public(), 16, &mut FixedRng(13)).unwrap();
    sealer.write_all(&archive_plaintext()).unwrap();
    let chunked = sealer.finish().unwrap();
    let path = fixture_path("archive_chunked");
    if std::env::var_os("HEARTH_BLESS").is_some() && !path.exists() {
        std::fs::write(&path, format!("{}\n", hex::encode(&chunked))).unwrap();
    }
    assert_eq!(hex::encode(&chunked), hex::encode(read("archive_chunked")), "the chunked archive's sealing moved");
    assert_eq!(seal::open_archive(&chunked, &recovery).unwrap().as_slice(), archive_plaintext().as_slice());
    let stranger = RecoverySecret::from_bytes([6; 32]);
    assert!(seal::open_archive(&whole, &stranger).is_err() && seal::open_archive(&chunked, &stranger).is_err());
}
