//! Tamper conformance: every kind of signed object the edge takes (in a push: the batch
//! manifest, snapshots, credential sets, node records, usage acknowledgements, edge settings,
//! rollouts and key records; on their own: the archive and the release) and every kind a node
//! takes from the edge (its credential set, the key records sent with it, an acknowledgement,
//! a release manifest), damaged on the way (a bit flipped in its header, body or signatures,
//! cut short, a byte added), replayed, older, in conflict with what is held, signed by a key
//! nobody certified, expired, addressed to another or on another stream, or with items
//! missing, extra or twice in a batch. Each is refused with its reason, and nothing of it is
//! kept or handed on: the edge's whole export, what a link, a node's pull, its
//! acknowledgement and its release answer, and the node's files, are byte for byte what they
//! were. One edge process per backend (the native edge, the Worker in workerd) and one node
//! take every case, one after another.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_shared::envelope::{Audience, Draft, Envelope, Kind, MAGIC};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::nodeauth;
use hearth_shared::release::{ReleaseBundle, Rollout};
use hearth_shared::trust::{KeyRecord, RoleKeys, chain_to_header};
use hearth_shared::wire::{
    self, BatchEntry, BatchManifest, CredEntry, CredentialSet, EdgeSettings, ExportPage, SubToken, UsageAck, stream,
};
use hearth_tests::control_sim::{ControlSim, Item, bundle, demo_snapshot, now, release};
use hearth_tests::edge::{Backend, EdgeProcess};
use hearth_tests::node::{NodeProcess, metric};
use hearth_tests::stand_in::{Answer, stand_in};
use rand_core::OsRng;

const API: &str = "api-tamper-0123456789";
const PUSH_TOKEN: &str = "push-token-tamper-0123456789-0123456789-01";

/// Where the header (with the magic before it), the body and the signatures of an envelope's
/// encoding lie.
fn regions(bytes: &[u8]) -> [(&'static str, Range<usize>); 3] {
    let envelope = Envelope::decode(bytes, usize::MAX).expect("an envelope made here");
    let header_end = MAGIC.len() + wire::encode(&envelope.header).len();
    let signatures_start = bytes.len() - wire::encode(&envelope.signatures).len();
    [("header", 0..header_end), ("body", header_end..signatures_start), ("signatures", signatures_start..bytes.len())]
}

/// An envelope damaged on the way, each way: a bit flipped at the first, middle and last byte
/// of its header, body and signatures (a different bit each time), its last byte cut off, a
/// byte added.
fn damaged(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (region, range) in regions(bytes) {
        for (i, at) in [range.start, (range.start + range.end) / 2, range.end - 1].into_iter().enumerate() {
            let mut flipped = bytes.to_vec();
            flipped[at] ^= 1 << ((at + 3 * i) % 8);
            out.push((format!("a bit flipped in its {region} (byte {at})"), flipped));
        }
    }
    out.push(("its last byte cut off".to_owned(), bytes[..bytes.len() - 1].to_vec()));
    let mut longer = bytes.to_vec();
    longer.push(0);
    out.push(("a byte added".to_owned(), longer));
    out
}

/// The envelope `bytes` signed again by `key`, its header changed by `change` (its body kept).
fn resign(bytes: &[u8], key: &SecretKey, change: impl FnOnce(&mut Draft)) -> Vec<u8> {
    resign_body(bytes, key, None, change)
}

/// [`resign`] with another body.
fn resign_body(bytes: &[u8], key: &SecretKey, body: Option<Vec<u8>>, change: impl FnOnce(&mut Draft)) -> Vec<u8> {
    let envelope = Envelope::decode(bytes, usize::MAX).expect("an envelope made here");
    let header = envelope.header;
    let mut draft = Draft {
        kind: header.kind,
        stream: header.stream,
        version: header.version,
        epoch: header.epoch,
        issued: header.issued,
        expires: header.expires,
        audience: header.audience,
        prev: header.prev,
    };
    change(&mut draft);
    draft.sign(body.unwrap_or(envelope.body), &[key]).encode()
}

/// Expired an hour ago.
fn expired(draft: &mut Draft) {
    draft.issued = now() - 7200;
    draft.expires = now() - 3600;
}

/// A root-signed key record for `role` at `version`, certifying `key`.
fn key_record(sim: &ControlSim, role: Role, version: u64, key: &SecretKey, signer: &SecretKey) -> Vec<u8> {
    let mut draft = sim.draft(Kind::KeyRecord, stream::keys(role), version, Audience::Any);
    draft.expires = now() + 365 * 86_400;
    draft.sign(wire::encode(&KeyRecord { role, keys: RoleKeys::single(key.public()) }), &[signer]).encode()
}

// ---------------------------------------------------------------------------------------------
// The edge.

/// The kinds of item a push carries.
#[derive(Clone, Copy, Debug)]
enum Obj {
    Snapshot,
    Creds,
    Delta,
    Node,
    Ack,
    Settings,
    Rollout,
}

const OBJS: [Obj; 7] = [Obj::Snapshot, Obj::Creds, Obj::Delta, Obj::Node, Obj::Ack, Obj::Settings, Obj::Rollout];

/// What a case sends the edge.
enum Send {
    Push(Vec<u8>),
    Archive(Vec<u8>),
    Release(Vec<u8>),
}

/// One case: what is sent, and the answer it must get (the status, and words of the reason).
struct Case {
    what: String,
    send: Send,
    status: u16,
    reason: &'static str,
}

fn case(what: impl Into<String>, send: Send, status: u16, reason: &'static str) -> Case {
    Case { what: what.into(), send, status, reason }
}

/// An edge that took two pushes of every kind of item (a signing key rotation between them),
/// two archives and two releases, and the control that made them.
struct Edge {
    _dir: tempfile::TempDir,
    process: EdgeProcess,
    sim: ControlSim,
    http: reqwest::Client,
    token: SubToken,
    node_key: SecretKey,
    /// The signing key the rotation retired.
    retired: SecretKey,
    /// The key records from before the rotation.
    first_keys: Vec<Vec<u8>>,
    pushes: Vec<Vec<u8>>,
    archives: Vec<Vec<u8>>,
    releases: Vec<Vec<u8>>,
}

impl Edge {
    async fn start(backend: Backend) -> Edge {
        let dir = tempfile::tempdir().unwrap();
        let sim = ControlSim::new();
        let state = dir.path().join(if backend == Backend::Native { "edge.db" } else { "worker" });
        let limits = [
            ("HEARTH_LINK_LIMIT", "1000000"),
            ("HEARTH_NETWORK_BURST", "1000000"),
            ("HEARTH_NETWORK_PER_MINUTE", "1000000"),
        ];
        let process = EdgeProcess::start(backend, &state, &sim.edge_vars(API, PUSH_TOKEN, &limits)).unwrap();
        let first_keys = sim.key_records();
        // Set by the rotation below.
        let retired = SecretKey::generate(Role::Signing, &mut OsRng).unwrap();
        let mut edge = Edge {
            _dir: dir,
            process,
            http: hearth_tests::http().timeout(Duration::from_secs(30)).build().unwrap(),
            token: SubToken::generate(&mut OsRng),
            node_key: SecretKey::generate(Role::Node, &mut OsRng).unwrap(),
            retired,
            first_keys,
            sim,
            pushes: Vec::new(),
            archives: Vec::new(),
            releases: Vec::new(),
        };
        for round in 0..2 {
            if round == 1 {
                edge.retired = edge.sim.rotate_signing();
            }
            let items: Vec<Item> = OBJS.iter().map(|&obj| edge.item(obj)).collect();
            let push = edge.sim.push(&items);
            let (status, body) = edge.send(&Send::Push(push.clone())).await;
            assert_eq!(status, 200, "push {round}: {body}");
            edge.pushes.push(push);
        }
        for version in 1..=2 {
            let archive = edge
                .sim
                .draft(Kind::Archive, stream::ARCHIVE.into(), version, Audience::Control)
                .sign(format!("archive {version}").into_bytes(), &[&edge.sim.signing])
                .encode();
            let (status, body) = edge.send(&Send::Archive(archive.clone())).await;
            assert_eq!(status, 200, "archive {version}: {body}");
            edge.archives.push(archive);
        }
        for version in [100, 101] {
            let (_, bundle) = edge.release(version);
            let (status, body) = edge.send(&Send::Release(bundle.clone())).await;
            assert_eq!(status, 200, "release {version}: {body}");
            edge.releases.push(bundle);
        }
        edge
    }

    /// What `obj`'s item holds: its kind, stream, audience and body.
    fn spec(&self, obj: Obj) -> (Kind, String, Audience, Vec<u8>) {
        match obj {
            Obj::Snapshot => (
                Kind::Snapshot,
                stream::snapshot(&self.token.hash()),
                Audience::Edge,
                hearth_shared::seal::seal(&demo_snapshot(1), &self.token, &self.sim.recovery.public(), &mut OsRng),
            ),
            Obj::Creds => (
                Kind::CredentialSet,
                stream::creds(1),
                Audience::Node(1),
                CredentialSet::new(1, vec![CredEntry::new(5, [5; 32])]).unwrap().encode(),
            ),
            Obj::Delta => {
                let base = CredentialSet::new(1, vec![CredEntry::new(5, [5; 32])]).unwrap();
                let new = CredentialSet::new(1, vec![CredEntry::new(6, [6; 32])]).unwrap();
                let digest = |set: &CredentialSet| hearth_shared::sha256(&set.encode());
                let delta = wire::CredDelta::between(&base, 1, digest(&base), &new, digest(&new)).unwrap();
                (Kind::CredDelta, stream::creds_delta(1), Audience::Node(1), delta.encode())
            }
            Obj::Node => (
                Kind::NodeRecord,
                stream::node(1),
                Audience::Edge,
                wire::encode(&wire::NodeRecord { node: 1, key: Some(self.node_key.public()) }),
            ),
            Obj::Ack => {
                (Kind::UsageAck, stream::usage_ack(1), Audience::Node(1), wire::encode(&UsageAck { node: 1, seq: 3 }))
            }
            Obj::Settings => {
                (Kind::EdgeSettings, stream::EDGE_SETTINGS.into(), Audience::Edge, EdgeSettings::default().encode())
            }
            Obj::Rollout => (
                Kind::Rollout,
                stream::ROLLOUT.into(),
                Audience::Edge,
                wire::encode(&Rollout { release: 101, nodes: vec![1] }),
            ),
        }
    }

    /// `obj`'s item at its stream's next version.
    fn item(&mut self, obj: Obj) -> Item {
        let (kind, stream, audience, body) = self.spec(obj);
        self.sim.item(kind, stream, audience, body)
    }

    /// `obj`'s item as control would sign it at `version`, its header then changed by `change`.
    fn item_with(&self, obj: Obj, version: u64, change: impl FnOnce(&mut Draft)) -> Item {
        let (kind, stream, audience, body) = self.spec(obj);
        let mut draft = self.sim.draft(kind, stream, version, audience);
        change(&mut draft);
        Item::of(draft.sign(body, &[&self.sim.signing]).encode())
    }

    /// A push of `items` (their envelopes as given) under a manifest listing `entries`, signed
    /// as control signs it at the next batch.
    fn push_of(&mut self, entries: Vec<BatchEntry>, envelopes: Vec<Vec<u8>>) -> Vec<u8> {
        let manifest = self.manifest(entries);
        bundle(self.sim.key_records(), manifest, envelopes)
    }

    /// The next batch manifest over `entries`, signed by control's signing key.
    fn manifest(&mut self, entries: Vec<BatchEntry>) -> Vec<u8> {
        let items: Vec<Item> = Vec::new();
        let made = self.sim.manifest(&items).encode();
        let manifest = BatchManifest::new(entries).expect("unique streams");
        resign_body(&made, &self.sim.signing, Some(manifest.encode()), |_| {})
    }

    /// A push of these items as control makes it.
    fn push_items(&mut self, items: &[Item]) -> Vec<u8> {
        let entries = items.iter().map(|item| item.entry().clone()).collect();
        let envelopes = items.iter().filter_map(|item| item.envelope().map(<[u8]>::to_vec)).collect();
        self.push_of(entries, envelopes)
    }

    /// Release `version`'s manifest and bundle, signed by the release key.
    fn release(&self, version: u64) -> (Vec<u8>, Vec<u8>) {
        release(&self.sim.release, version, "0.9.0", &[("linux", "x86_64", vec![7; 1000])], now() + 86_400)
    }

    /// `bundle` (a release) with its manifest replaced.
    fn with_manifest(bundle: &[u8], manifest: Vec<u8>) -> Vec<u8> {
        let mut bundle: ReleaseBundle = wire::decode(bundle, "release bundle").unwrap();
        bundle.manifest = manifest;
        wire::encode(&bundle)
    }

    async fn send(&self, send: &Send) -> (u16, String) {
        let url = &self.process.url;
        let request = match send {
            Send::Push(bytes) => self.http.post(format!("{url}/{API}/push")).body(bytes.clone()),
            Send::Archive(bytes) => self.http.put(format!("{url}/{API}/archive")).body(bytes.clone()),
            Send::Release(bytes) => self.http.put(format!("{url}/{API}/release")).body(bytes.clone()),
        };
        let response = request.bearer_auth(PUSH_TOKEN).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn get(&self, path: &str, node: bool) -> (u16, Option<String>, Vec<u8>) {
        let mut request = self.http.get(format!("{}{path}", self.process.url));
        request = if node {
            let url = format!("{}{path}", self.process.url);
            request.header(nodeauth::HEADER, hearth_tests::node_signature(&self.node_key, 1, "GET", &url, b""))
        } else {
            request.bearer_auth(PUSH_TOKEN).header("user-agent", "v2rayN/7.12.5")
        };
        let response = request.send().await.unwrap();
        let keys = response.headers().get(nodeauth::KEYS_HEADER).map(|v| v.to_str().unwrap().to_owned());
        (response.status().as_u16(), keys, response.bytes().await.unwrap().to_vec())
    }

    /// Everything the edge holds and hands out, part by part: every page of its export, the
    /// archive, what the link answers, node 1's pull (with the key records), acknowledgement
    /// and release manifest.
    async fn state(&self) -> Vec<(String, Vec<u8>)> {
        let mut parts = Vec::new();
        let mut after = String::new();
        for page in 0.. {
            let (status, _, body) = self.get(&format!("/{API}/export?after={after}"), false).await;
            assert_eq!(status, 200, "export page {page}");
            let next = wire::decode::<ExportPage>(&body, "export page").unwrap().next;
            parts.push((format!("export page {page}"), body));
            match next {
                Some(next) => after = next,
                None => break,
            }
        }
        let node = format!("/{API}/nodes/1");
        for (what, path, node) in [
            ("the archive", format!("/{API}/archive"), false),
            ("the link", format!("/s/{}", self.token.to_link_form()), false),
            ("node 1's pull", format!("{node}/creds?after=0"), true),
            ("node 1's acknowledgement", format!("{node}/ack"), true),
            ("node 1's release", format!("{node}/release"), true),
        ] {
            let (status, keys, body) = self.get(&path, node).await;
            let mut part = format!("{status} {keys:?} ").into_bytes();
            part.extend(body);
            parts.push((what.to_owned(), part));
        }
        parts
    }

    /// The table: every case, built against what the edge holds now.
    fn cases(&mut self) -> Vec<Case> {
        let mut cases = Vec::new();
        let mut stranger = ControlSim::new();

        // Every kind of item, damaged, older, in conflict, expired, misaddressed, on a stream
        // the edge does not keep, or of another kind than its stream holds.
        for obj in OBJS {
            let good = self.item(obj);
            let bytes = good.envelope().unwrap().to_vec();
            for (how, damaged) in damaged(&bytes) {
                let push = self.push_of(vec![good.entry().clone()], vec![damaged]);
                cases.push(case(format!("{obj:?} with {how}"), Send::Push(push), 400, "item for "));
            }
            let older = self.item_with(obj, 1, |_| {});
            let push = self.push_items(&[older]);
            cases.push(case(format!("{obj:?} at an older version"), Send::Push(push), 409, "rollback"));
            let conflict = self.item_with(obj, 2, |draft| draft.issued -= 1);
            let push = self.push_items(&[conflict]);
            cases.push(case(
                format!("{obj:?} at the version held, other content"),
                Send::Push(push),
                409,
                "already stored with other content",
            ));
            let version = good.entry().version;
            let push = self.push_items(&[self.item_with(obj, version, expired)]);
            cases.push(case(format!("{obj:?} expired"), Send::Push(push), 400, "expired"));
            let push = self.push_items(&[self.item_with(obj, version, |d| d.audience = Audience::Node(2))]);
            cases.push(case(format!("{obj:?} to another audience"), Send::Push(push), 400, "wrong kind or audience"));
            let push = self.push_items(&[self.item_with(obj, version, |d| d.kind = Kind::Archive)]);
            cases.push(case(format!("{obj:?} of another kind"), Send::Push(push), 400, "wrong kind or audience"));
            let push = self.push_items(&[self.item_with(obj, version, |d| d.stream = format!("x{}", d.stream))]);
            cases.push(case(
                format!("{obj:?} on a stream the edge does not keep"),
                Send::Push(push),
                400,
                "not a stream the edge keeps",
            ));
            // A whole push made by a control the edge never learned.
            let (kind, name, audience, body) = self.spec(obj);
            let foreign = stranger.item(kind, name, audience, body);
            let push = bundle(
                vec![],
                stranger.manifest(std::slice::from_ref(&foreign)).encode(),
                vec![foreign.envelope().unwrap().to_vec()],
            );
            cases.push(case(
                format!("{obj:?} pushed by an unknown key"),
                Send::Push(push),
                400,
                "signed by a key this verifier does not know",
            ));
        }
        // A node record for another node than its stream's.
        let other = self.item_with(Obj::Node, 9, |_| {});
        let other = resign_body(
            other.envelope().unwrap(),
            &self.sim.signing,
            Some(wire::encode(&wire::NodeRecord { node: 2, key: Some(self.node_key.public()) })),
            |_| {},
        );
        let push = self.push_items(&[Item::of(other)]);
        cases.push(case("a node record for another node", Send::Push(push), 400, "node record for another node"));

        // The batch manifest.
        let good = self.item(Obj::Creds);
        let manifest = self.manifest(vec![good.entry().clone()]);
        let items = vec![good.envelope().unwrap().to_vec()];
        for (how, damaged) in damaged(&manifest) {
            let push = bundle(self.sim.key_records(), damaged, items.clone());
            cases.push(case(format!("the manifest with {how}"), Send::Push(push), 400, "batch manifest refused"));
        }
        let with = |change: &dyn Fn(&mut Draft), key: &SecretKey| {
            let manifest = resign(&manifest, key, change);
            Send::Push(bundle(self.sim.key_records(), manifest, items.clone()))
        };
        let signing = &self.sim.signing;
        cases.extend([
            // Refused for its key records, which a rotation made older than the ones held.
            case(
                "the first push again (a replay)",
                Send::Push(self.pushes[0].clone()),
                400,
                "key record refused: signing key record version 1 is older than the one held (2)",
            ),
            case("a manifest at an older version", with(&|d| d.version = 1, signing), 409, "stale version 1"),
            case(
                "a manifest at the version held, other content",
                with(&|d| d.version = 2, signing),
                409,
                "seen before with different content",
            ),
            case("a manifest expired", with(&expired, signing), 400, "expired at"),
            case("a manifest to a node", with(&|d| d.audience = Audience::Node(1), signing), 400, "addressed to"),
            case("a manifest on another stream", with(&|d| d.stream = "batch2".into(), signing), 400, "from stream"),
            case("a manifest of another kind", with(&|d| d.kind = Kind::Archive, signing), 400, "expected a Batch"),
            case(
                "a manifest signed by the retired key",
                with(&|_| {}, &self.retired),
                400,
                "signed by a key this verifier does not know",
            ),
            case(
                "a manifest signed by the release key",
                with(&|_| {}, &self.sim.release),
                400,
                "does not hold the signing role",
            ),
        ]);
        // Items missing, extra, twice; the whole push cut short or with a byte added.
        let second = self.item(Obj::Snapshot);
        let both = vec![good.entry().clone(), second.entry().clone()];
        let push = self.push_of(both, items.clone());
        cases.push(case("an item missing", Send::Push(push), 400, "has no item for it"));
        let extra = vec![good.envelope().unwrap().to_vec(), second.envelope().unwrap().to_vec()];
        let push = self.push_of(vec![good.entry().clone()], extra);
        cases.push(case("an item extra", Send::Push(push), 400, "not listed in the manifest"));
        let twice = vec![good.envelope().unwrap().to_vec(), good.envelope().unwrap().to_vec()];
        let push = self.push_of(vec![good.entry().clone()], twice);
        cases.push(case("an item twice", Send::Push(push), 400, "sent twice"));
        let push = self.push_items(std::slice::from_ref(&good));
        cases.push(case("a push cut short", Send::Push(push[..push.len() - 1].to_vec()), 400, "malformed push"));
        let mut longer = push.clone();
        longer.push(0);
        cases.push(case("a push with a byte added", Send::Push(longer), 400, "malformed push"));

        // Key records: the ones held (which nothing held can verify again), a new one, an
        // older one, and ones the root did not sign as they must be.
        let held = self.sim.key_records();
        let keys_push = |this: &mut Edge, keys: Vec<Vec<u8>>, signer: Option<&SecretKey>| {
            let manifest = this.manifest(vec![good.entry().clone()]);
            let manifest = match signer {
                Some(key) => resign(&manifest, key, |_| {}),
                None => manifest,
            };
            Send::Push(bundle(keys, manifest, items.clone()))
        };
        for (at, role) in [(0, "signing"), (1, "release")] {
            for (how, damaged) in damaged(&held[at]) {
                let mut keys = held.clone();
                keys[at] = damaged;
                let send = keys_push(self, keys, None);
                cases.push(case(format!("the held {role} key record with {how}"), send, 400, "key record refused"));
            }
        }
        let next = SecretKey::generate(Role::Signing, &mut OsRng).unwrap();
        let rotation = key_record(&self.sim, Role::Signing, 3, &next, &self.sim.root);
        for (how, damaged) in damaged(&rotation) {
            let send = keys_push(self, vec![damaged, held[1].clone()], Some(&next));
            cases.push(case(format!("a new signing key record with {how}"), send, 400, "key record refused"));
        }
        let record_by = |this: &Edge, signer: &SecretKey, change: &dyn Fn(&mut Draft)| {
            resign(&key_record(&this.sim, Role::Signing, 3, &next, signer), signer, change)
        };
        let variants: Vec<(&str, Vec<u8>, &'static str)> = vec![
            ("older than the one held", self.first_keys[0].clone(), "signing key record version 1 is older"),
            (
                "at the version held, other content",
                key_record(&self.sim, Role::Signing, 2, &next, &self.sim.root),
                "seen before with different content",
            ),
            (
                "signed by an unknown root",
                record_by(self, &stranger.root, &|_| {}),
                "signed by a key this verifier does not know",
            ),
            ("signed by the signing key", record_by(self, &self.sim.signing, &|_| {}), "does not hold the root role"),
            ("expired", record_by(self, &self.sim.root, &expired), "expired at"),
            ("to the edge only", record_by(self, &self.sim.root, &|d| d.audience = Audience::Edge), "addressed to"),
            (
                "on the release stream",
                record_by(self, &self.sim.root, &|d| d.stream = stream::keys(Role::Release)),
                "from stream",
            ),
        ];
        for (how, record, reason) in variants {
            let send = keys_push(self, vec![record, held[1].clone()], Some(&next));
            cases.push(case(format!("a signing key record {how}"), send, 400, reason));
        }

        // The archive.
        let signing = &self.sim.signing;
        let archive = resign(&self.archives[1], &self.sim.signing, |d| d.version = 3);
        for (how, damaged) in damaged(&archive) {
            cases.push(case(format!("an archive with {how}"), Send::Archive(damaged), 400, "refused"));
        }
        let archive_with = |key: &SecretKey, change: &dyn Fn(&mut Draft)| Send::Archive(resign(&archive, key, change));
        cases.extend([
            case("the first archive again", Send::Archive(self.archives[0].clone()), 409, "rollback"),
            case(
                "an archive at the version held, other content",
                archive_with(signing, &|d| {
                    d.version = 2;
                    d.issued -= 1;
                }),
                409,
                "already stored with other content",
            ),
            case("an archive expired", archive_with(signing, &expired), 400, "expired at"),
            case(
                "an archive to the edge",
                archive_with(signing, &|d| d.audience = Audience::Edge),
                400,
                "addressed to",
            ),
            case("an archive on another stream", archive_with(signing, &|d| d.stream = "a".into()), 400, "from stream"),
            case("an archive of another kind", archive_with(signing, &|d| d.kind = Kind::Batch), 400, "expected a"),
            case(
                "an archive signed by the retired key",
                archive_with(&self.retired, &|_| {}),
                400,
                "signed by a key this verifier does not know",
            ),
            case(
                "an archive signed by an unknown key",
                archive_with(&stranger.signing, &|_| {}),
                400,
                "signed by a key this verifier does not know",
            ),
        ]);

        // The release.
        let (manifest, good_bundle) = self.release(102);
        for (how, damaged) in damaged(&manifest) {
            let send = Send::Release(Edge::with_manifest(&good_bundle, damaged));
            cases.push(case(format!("a release manifest with {how}"), send, 400, "the manifest"));
        }
        let release_with = |key: &SecretKey, change: &dyn Fn(&mut Draft)| {
            Send::Release(Edge::with_manifest(&good_bundle, resign(&manifest, key, change)))
        };
        let (signing, release_key) = (&self.sim.signing, &self.sim.release);
        let mut altered: ReleaseBundle = wire::decode(&good_bundle, "release bundle").unwrap();
        altered.files[0].1[10] ^= 4;
        let mut missing: ReleaseBundle = wire::decode(&good_bundle, "release bundle").unwrap();
        missing.files.clear();
        let mut longer = good_bundle.clone();
        longer.push(0);
        cases.extend([
            case("the first release again", Send::Release(self.releases[0].clone()), 409, "rollback"),
            case(
                "a release at the version held, other content",
                release_with(release_key, &|d| d.version = 101),
                409,
                "already stored with other content",
            ),
            case("a release expired", release_with(release_key, &expired), 400, "expired at"),
            case(
                "a release to a node",
                release_with(release_key, &|d| d.audience = Audience::Node(1)),
                400,
                "addressed to",
            ),
            case(
                "a release on another stream",
                release_with(release_key, &|d| d.stream = "r".into()),
                400,
                "from stream",
            ),
            case(
                "a release signed by an unknown key",
                release_with(&stranger.release, &|_| {}),
                400,
                "signed by a key this verifier does not know",
            ),
            case("a release signed by the signing key", release_with(signing, &|_| {}), 400, "release role"),
            case("a release whose file was altered", Send::Release(wire::encode(&altered)), 400, "does not match"),
            case("a release without its file", Send::Release(wire::encode(&missing)), 400, "is missing"),
            case("a release bundle with a byte added", Send::Release(longer), 400, "not a release bundle"),
            case(
                "a release bundle cut short",
                Send::Release(good_bundle[..good_bundle.len() - 1].to_vec()),
                400,
                "not a release bundle",
            ),
        ]);
        cases
    }
}

/// The parts of two states that differ.
fn changed(before: &[(String, Vec<u8>)], after: &[(String, Vec<u8>)]) -> Vec<String> {
    if before.len() != after.len() {
        return vec![format!("{} parts, then {}", before.len(), after.len())];
    }
    before.iter().zip(after).filter(|(b, a)| b != a).map(|(b, _)| b.0.clone()).collect()
}

async fn every_tampered_object_is_refused_and_changes_nothing(backend: Backend) {
    let started = Instant::now();
    let mut edge = Edge::start(backend).await;
    let cases = edge.cases();
    let mut before = edge.state().await;
    // The same push again is a no-op, not a change.
    let (status, body) = edge.send(&Send::Push(edge.pushes[1].clone())).await;
    assert_eq!((status, body.contains("unchanged")), (200, true), "the last push again: {body}");
    let mut failures = Vec::new();
    for case in &cases {
        let (status, body) = edge.send(&case.send).await;
        if status != case.status || !body.contains(case.reason) {
            failures
                .push(format!("{}: answered {status} {body}, not {} with {:?}", case.what, case.status, case.reason));
        }
        let after = edge.state().await;
        let parts = changed(&before, &after);
        if !parts.is_empty() {
            failures.push(format!("{}: changed {}", case.what, parts.join(", ")));
            before = after;
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));

    // What was refused was refused for what was done to it: the same objects, as control
    // makes them, are taken (and change what the edge holds).
    let items: Vec<Item> = OBJS.iter().map(|&obj| edge.item(obj)).collect();
    let push = edge.sim.push(&items);
    let (status, body) = edge.send(&Send::Push(push)).await;
    assert_eq!(status, 200, "{body}");
    let archive = resign(&edge.archives[1], &edge.sim.signing, |d| d.version = 3);
    assert_eq!(edge.send(&Send::Archive(archive)).await.0, 200);
    assert_eq!(edge.send(&Send::Release(edge.release(102).1)).await.0, 200);
    let after = edge.state().await;
    assert!(changed(&before, &after).len() >= 5, "the good objects changed {:?}", changed(&before, &after));
    eprintln!("{} cases against the {backend:?} edge in {:?}", cases.len(), started.elapsed());
}

#[tokio::test]
async fn the_native_edge_refuses_every_tampered_object() {
    every_tampered_object_is_refused_and_changes_nothing(Backend::Native).await;
}

#[tokio::test]
async fn the_worker_refuses_every_tampered_object() {
    every_tampered_object_is_refused_and_changes_nothing(Backend::Workerd).await;
}

// ---------------------------------------------------------------------------------------------
// The node.

/// What the stand-in edge answers node 1 with, and how often it was asked.
#[derive(Default)]
struct Offer {
    creds: Vec<u8>,
    /// The set is answered (200) unless the node says it holds this version (204).
    creds_version: u64,
    keys: String,
    release: Option<u64>,
    manifest: Vec<u8>,
    ack: Option<Vec<u8>>,
    pulls: u64,
    acks: u64,
    manifests: u64,
    reports: u64,
}

/// An edge that answers node 1's API from `offer`, over plain HTTP/1.1.
async fn stand_in_edge(offer: Arc<Mutex<Offer>>) -> String {
    let prefix = format!("/{API}/nodes/1");
    let (url, _) = stand_in(move |request| {
        let after: u64 = request.param("after").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut o = offer.lock().unwrap();
        let answer = |status, headers, body: Vec<u8>| Answer { headers, ..Answer::bytes(status, &body) };
        match request.path.strip_prefix(&prefix).unwrap_or("") {
            "/creds" => {
                o.pulls += 1;
                let mut headers = vec![(nodeauth::KEYS_HEADER, o.keys.clone())];
                if let Some(release) = o.release {
                    headers.push((nodeauth::RELEASE_HEADER, release.to_string()));
                }
                if after == o.creds_version {
                    answer(204, headers, Vec::new())
                } else {
                    answer(200, headers, o.creds.clone())
                }
            }
            "/ack" => {
                o.acks += 1;
                match &o.ack {
                    Some(ack) => answer(200, Vec::new(), ack.clone()),
                    None => answer(204, Vec::new(), Vec::new()),
                }
            }
            "/release" if o.release.is_some() => {
                o.manifests += 1;
                answer(200, Vec::new(), o.manifest.clone())
            }
            "/usage" => {
                o.reports += 1;
                answer(202, Vec::new(), b"queued\n".to_vec())
            }
            _ => answer(404, Vec::new(), b"not here\n".to_vec()),
        }
    })
    .await;
    url
}

/// Which of its answers the stand-in edge damages.
enum NodeSend {
    /// The credential set (answered as new).
    Creds(Vec<u8>),
    /// The key records sent with "nothing new".
    Keys(String),
    /// The acknowledgement of the node's usage reports.
    Ack(Vec<u8>),
    /// The release named in the pull (a number of its own each time: a node tries a release
    /// once), and its manifest.
    Release(u64, Vec<u8>),
}

/// A case for the node: what is sent, and the words one of which its refusal must say.
struct NodeCase {
    what: String,
    send: NodeSend,
    reasons: &'static [&'static str],
}

/// What a verifier says of an envelope damaged on the way, depending on where.
const DAMAGED: &[&str] = &[
    "altered",
    "bad signature",
    "malformed envelope",
    "body does not match",
    "does not know",
    "bad body",
    "does not hold",
    "conflicting",
];

/// Fewer samples of [`damaged`] for the node (each case waits on its polls): every region
/// still, and both ends of the encoding.
fn damaged_sample(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    damaged(bytes).into_iter().enumerate().filter(|(i, _)| [0, 1, 4, 6, 8, 9, 10].contains(i)).map(|(_, d)| d).collect()
}

/// The node's files that a refusal must leave as they were, and its set version.
async fn node_state(dir: &std::path::Path, metrics: &str) -> Vec<(String, Vec<u8>)> {
    let mut parts: Vec<(String, Vec<u8>)> =
        ["creds.envelope", "trust.bin", "trust.prev.bin", "usage.acked", "usage/1.report"]
            .iter()
            .map(|file| (file.to_string(), std::fs::read(dir.join(file)).unwrap_or_else(|_| b"(none)".to_vec())))
            .collect();
    let pending = dir.join("update.pending").exists()
        || std::fs::read_dir(dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains("pending"));
    parts.push(("a pending update".into(), vec![u8::from(pending)]));
    let version = metric(metrics, "hearth_node_set_version").await.unwrap();
    parts.push(("the set version served".into(), version.to_string().into_bytes()));
    parts
}

#[tokio::test]
async fn a_node_refuses_every_tampered_object_from_the_edge() {
    let started = Instant::now();
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let stranger = ControlSim::new();
    let first_keys = sim.key_records();
    let set = |users: &[u64], node: u64| {
        CredentialSet::new(node, users.iter().map(|&user| CredEntry::new(user, [user as u8; 32])).collect())
            .unwrap()
            .encode()
    };
    let signed = |sim: &ControlSim, key: &SecretKey, version: u64, body: Vec<u8>| {
        sim.draft(Kind::CredentialSet, stream::creds(1), version, Audience::Node(1)).sign(body, &[key]).encode()
    };
    let v2 = signed(&sim, &sim.signing, 2, set(&[1], 1));
    let offer = Arc::new(Mutex::new(Offer {
        creds: v2.clone(),
        creds_version: 2,
        keys: chain_to_header(&first_keys),
        ..Offer::default()
    }));
    let url = stand_in_edge(offer.clone()).await;
    let dir = temp.path().join("node");
    let settings = format!("edge_url = \"{url}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\nreport_secs = 1\n");
    hearth_tests::node::state_dir_with(&dir, &sim, 1, &settings).unwrap();
    hearth_tests::node::save_node_key(&dir, &SecretKey::generate(Role::Node, &mut OsRng).unwrap()).unwrap();
    std::fs::write(dir.join("creds.envelope"), &v2).unwrap();
    // A usage report waiting for control: the node leaves it at the edge, then asks the edge
    // for control's acknowledgement.
    std::fs::create_dir_all(dir.join("usage")).unwrap();
    std::fs::write(dir.join("usage/1.report"), b"a report control has not acknowledged").unwrap();
    let (node, log) =
        NodeProcess::start_logged_at(&dir, "warn,hearth_node::agent=debug,hearth_node::usage=debug").unwrap();
    let metrics = node.metrics_url().unwrap();

    // The signing key rotates; the node takes the rotation with the set the new key signs.
    let retired = sim.rotate_signing();
    let rotated = sim.key_records();
    let v3 = signed(&sim, &sim.signing, 3, set(&[1, 2], 1));
    {
        let mut o = offer.lock().unwrap();
        (o.creds, o.creds_version, o.keys) = (v3.clone(), 3, chain_to_header(&rotated));
    }
    let waited = Instant::now();
    while metric(&metrics, "hearth_node_set_version").await.unwrap() != 3 || offer.lock().unwrap().acks == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the node took no rotation, or asked for no acknowledgement"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut cases = Vec::new();
    let case = |what: String, send: NodeSend, reasons: &'static [&'static str]| NodeCase { what, send, reasons };
    // Its credential set.
    let v4 = signed(&sim, &sim.signing, 4, set(&[1, 2, 3], 1));
    for (how, damaged) in damaged_sample(&v4) {
        cases.push(case(format!("a set with {how}"), NodeSend::Creds(damaged), DAMAGED));
    }
    let creds = |key: &SecretKey, change: &dyn Fn(&mut Draft)| NodeSend::Creds(resign(&v4, key, change));
    cases.extend([
        case("an older set".into(), creds(&sim.signing, &|d| d.version = 2), &["stale version 2 (holding 3)"]),
        case(
            "a set at the version held, other content".into(),
            creds(&sim.signing, &|d| d.version = 3),
            &["version 3 seen before with different content"],
        ),
        case("a set signed by the retired key".into(), creds(&retired, &|_| {}), &["does not know"]),
        case("a set signed by an unknown key".into(), creds(&stranger.signing, &|_| {}), &["does not know"]),
        case(
            "a set signed by the release key".into(),
            creds(&sim.release, &|_| {}),
            &["does not hold the signing role"],
        ),
        case("a set expired".into(), creds(&sim.signing, &expired), &["expired at"]),
        case(
            "a set to another node".into(),
            creds(&sim.signing, &|d| d.audience = Audience::Node(2)),
            &["addressed to"],
        ),
        case("a set on another stream".into(), creds(&sim.signing, &|d| d.stream = stream::creds(2)), &["from stream"]),
        case("a set of another kind".into(), creds(&sim.signing, &|d| d.kind = Kind::UsageAck), &["expected a"]),
        case(
            "a set for another node in its body".into(),
            NodeSend::Creds(resign_body(&v4, &sim.signing, Some(set(&[1], 2)), |_| {})),
            &["a set for another node"],
        ),
    ]);
    // A delta on the set held (version 3), damaged, on another full set, making another set,
    // or not control's.
    let decoded = |users: &[u64]| CredentialSet::decode(&set(users, 1)).unwrap();
    let (held, grown) = (decoded(&[1, 2]), decoded(&[1, 2, 3]));
    let digest = |set: &CredentialSet| hearth_shared::sha256(&set.encode());
    let delta = wire::CredDelta::between(&held, 3, digest(&held), &grown, digest(&grown)).unwrap();
    let signed_delta = |key: &SecretKey, delta: &wire::CredDelta, change: &dyn Fn(&mut Draft)| {
        let mut draft = sim.draft(Kind::CredDelta, stream::creds_delta(1), 4, Audience::Node(1));
        change(&mut draft);
        NodeSend::Creds(draft.sign(delta.encode(), &[key]).encode())
    };
    let d4 =
        sim.draft(Kind::CredDelta, stream::creds_delta(1), 4, Audience::Node(1)).sign(delta.encode(), &[&sim.signing]);
    for (how, damaged) in damaged_sample(&d4.encode()) {
        cases.push(case(format!("a delta with {how}"), NodeSend::Creds(damaged), DAMAGED));
    }
    let on_older = wire::CredDelta { base: 2, ..delta.clone() };
    let lying = wire::CredDelta { result: digest(&held), ..delta.clone() };
    let elsewhere = wire::CredDelta { node: 2, ..delta.clone() };
    cases.extend([
        case(
            "a delta on another full set".into(),
            signed_delta(&sim.signing, &on_older, &|_| {}),
            &["a delta on the full set of version 2"],
        ),
        case(
            "a delta that makes another set than it names".into(),
            signed_delta(&sim.signing, &lying, &|_| {}),
            &["it does not make the set control signed"],
        ),
        case(
            "a delta for another node in its body".into(),
            signed_delta(&sim.signing, &elsewhere, &|_| {}),
            &["for another node"],
        ),
        case("a delta signed by the retired key".into(), signed_delta(&retired, &delta, &|_| {}), &["does not know"]),
        case(
            "a delta on another node's stream".into(),
            signed_delta(&sim.signing, &delta, &|d| d.stream = stream::creds_delta(2)),
            &["from stream"],
        ),
        case("a delta expired".into(), signed_delta(&sim.signing, &delta, &expired), &["expired at"]),
    ]);
    // The key records sent with "nothing new".
    let keys = |records: Vec<Vec<u8>>| NodeSend::Keys(chain_to_header(&records));
    for (at, role) in [(0, "signing"), (1, "release")] {
        for (how, damaged) in damaged_sample(&rotated[at]) {
            let mut records = rotated.clone();
            records[at] = damaged;
            cases.push(case(format!("the held {role} key record with {how}"), keys(records), DAMAGED));
        }
    }
    let next = SecretKey::generate(Role::Signing, &mut OsRng).unwrap();
    let rotation = key_record(&sim, Role::Signing, 3, &next, &sim.root);
    for (how, damaged) in damaged_sample(&rotation) {
        cases.push(case(
            format!("a new signing key record with {how}"),
            keys(vec![damaged, rotated[1].clone()]),
            DAMAGED,
        ));
    }
    let by = |signer: &SecretKey, change: &dyn Fn(&mut Draft)| {
        keys(vec![resign(&key_record(&sim, Role::Signing, 3, &next, signer), signer, change), rotated[1].clone()])
    };
    cases.extend([
        case(
            "a signing key record older than the one held".into(),
            keys(first_keys.clone()),
            &["signing key record version 1 is older than the one held (2)"],
        ),
        case(
            "a signing key record at the version held, other content".into(),
            keys(vec![key_record(&sim, Role::Signing, 2, &next, &sim.root), rotated[1].clone()]),
            &["version 2 seen before with different content"],
        ),
        case("a key record signed by an unknown root".into(), by(&stranger.root, &|_| {}), &["does not know"]),
        case(
            "a key record signed by the signing key".into(),
            by(&sim.signing, &|_| {}),
            &["does not hold the root role"],
        ),
        case("a key record expired".into(), by(&sim.root, &expired), &["expired at"]),
        case("a key record to the edge".into(), by(&sim.root, &|d| d.audience = Audience::Edge), &["addressed to"]),
        case(
            "a key record on another stream".into(),
            by(&sim.root, &|d| d.stream = stream::keys(Role::Release)),
            &["from stream"],
        ),
    ]);
    // Control's acknowledgement (the node says only that it does not verify).
    let ack = sim
        .draft(Kind::UsageAck, stream::usage_ack(1), 1, Audience::Node(1))
        .sign(wire::encode(&UsageAck { node: 1, seq: 1 }), &[&sim.signing])
        .encode();
    for (how, damaged) in damaged_sample(&ack) {
        cases.push(case(format!("an acknowledgement with {how}"), NodeSend::Ack(damaged), &["does not verify"]));
    }
    let acks = |key: &SecretKey, change: &dyn Fn(&mut Draft)| NodeSend::Ack(resign(&ack, key, change));
    const NOT: &[&str] = &["does not verify"];
    cases.extend([
        case("an acknowledgement signed by the retired key".into(), acks(&retired, &|_| {}), NOT),
        case("an acknowledgement signed by an unknown key".into(), acks(&stranger.signing, &|_| {}), NOT),
        case("an acknowledgement expired".into(), acks(&sim.signing, &expired), NOT),
        case("an acknowledgement to another node".into(), acks(&sim.signing, &|d| d.audience = Audience::Node(2)), NOT),
        case("an acknowledgement on another stream".into(), acks(&sim.signing, &|d| d.stream = "ack/2".into()), NOT),
        case(
            "an acknowledgement for another node in its body".into(),
            NodeSend::Ack(resign_body(&ack, &sim.signing, Some(wire::encode(&UsageAck { node: 2, seq: 1 })), |_| {})),
            &["an acknowledgement for another node"],
        ),
    ]);
    // Release manifests, each under a number of its own.
    let manifest = |number: u64| {
        release(
            &sim.release,
            number,
            "9.9.9",
            &[(std::env::consts::OS, std::env::consts::ARCH, vec![9; 100])],
            now() + 86_400,
        )
        .0
    };
    let mut number = 200;
    for (how, damaged) in damaged_sample(&manifest(number)) {
        cases.push(case(
            format!("a release manifest with {how}"),
            NodeSend::Release(number, damaged),
            &["the manifest does not verify"],
        ));
        number += 1;
    }
    let mut releases = |key: &SecretKey, change: &dyn Fn(&mut Draft)| {
        number += 1;
        NodeSend::Release(number, resign(&manifest(number), key, change))
    };
    cases.extend([
        case("a release signed by an unknown key".into(), releases(&stranger.release, &|_| {}), &["does not know"]),
        case("a release signed by the signing key".into(), releases(&sim.signing, &|_| {}), &["release role"]),
        case("a release expired".into(), releases(&sim.release, &expired), &["the manifest expired"]),
        case(
            "a release to another node".into(),
            releases(&sim.release, &|d| d.audience = Audience::Node(2)),
            &["addressed to"],
        ),
        case(
            "a release on another stream".into(),
            releases(&sim.release, &|d| d.stream = "r".into()),
            &["from stream"],
        ),
        case(
            "an older release's manifest offered as a newer one".into(),
            releases(&sim.release, &|d| d.version -= 1),
            &["the manifest is release"],
        ),
    ]);

    let before = node_state(&dir, &metrics).await;
    let mut failures = Vec::new();
    for case in &cases {
        // Offered until the node has asked for it once, then the good answers again; every
        // time it was asked, it said why it refused.
        let (marker, count): (String, fn(&Offer) -> u64) = match &case.send {
            NodeSend::Creds(_) => ("refused a credential set".into(), |o| o.pulls),
            NodeSend::Keys(_) => ("refused the key records sent with the pull".into(), |o| o.pulls),
            NodeSend::Ack(_) => ("no acknowledgement from the edge".into(), |o| o.acks),
            NodeSend::Release(number, _) => (format!("release={number}"), |o| o.manifests),
        };
        let from = {
            let mut o = offer.lock().unwrap();
            match &case.send {
                NodeSend::Creds(bytes) => (o.creds, o.creds_version) = (bytes.clone(), u64::MAX),
                NodeSend::Keys(header) => o.keys = header.clone(),
                NodeSend::Ack(bytes) => o.ack = Some(bytes.clone()),
                NodeSend::Release(number, bytes) => (o.release, o.manifest) = (Some(*number), bytes.clone()),
            }
            count(&o)
        };
        let waited = Instant::now();
        while count(&offer.lock().unwrap()) == from {
            assert!(waited.elapsed() < Duration::from_secs(30), "{}: the node never asked for it", case.what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (asked, next) = {
            let mut o = offer.lock().unwrap();
            let asked = count(&o) - from;
            (o.creds, o.creds_version, o.keys, o.ack, o.release) =
                (v3.clone(), 3, chain_to_header(&rotated), None, None);
            // An acknowledgement is asked for on its own round; the rest come with a pull.
            let next: fn(&Offer) -> u64 = if matches!(case.send, NodeSend::Ack(_)) { |o| o.acks } else { |o| o.pulls };
            (asked, (next, next(&o)))
        };
        // The node deals with one answer at a time: once it asked again, it has dealt with
        // what it was sent.
        while (next.0)(&offer.lock().unwrap()) == next.1 {
            assert!(waited.elapsed() < Duration::from_secs(30), "{}: the node stopped asking", case.what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..asked {
            match hearth_tests::node::until_logged(&log, &marker, Duration::from_secs(10)).await {
                Ok(line) if case.reasons.iter().any(|reason| line.contains(reason)) => {}
                Ok(line) => failures.push(format!("{}: said {line:?}, not one of {:?}", case.what, case.reasons)),
                Err(e) => {
                    failures.push(format!("{}: {e:#}", case.what));
                    break;
                }
            }
        }
        let after = node_state(&dir, &metrics).await;
        let parts = changed(&before, &after);
        if !parts.is_empty() {
            failures.push(format!("{}: changed {}", case.what, parts.join(", ")));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));

    // The same acknowledgement and key records, as control makes them, are taken.
    let next_set = signed(&sim, &sim.signing, 4, set(&[1, 2, 3], 1));
    {
        let mut o = offer.lock().unwrap();
        (o.creds, o.creds_version, o.ack) = (next_set, 4, Some(ack));
    }
    let waited = Instant::now();
    while metric(&metrics, "hearth_node_set_version").await.unwrap() != 4 || dir.join("usage/1.report").exists() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the good set and acknowledgement were not taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    node.stop().unwrap();
    eprintln!("{} cases against the node in {:?}", cases.len(), started.elapsed());
}
