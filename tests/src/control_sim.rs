//! What control sends, made in the test: keys made here, snapshots sealed and signed, pushes
//! bundled, with `hearth-shared` exactly as control uses it. It lets the edge and the node be
//! tested on their own, against the real wire format.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use hearth_shared::envelope::{Audience, Draft, Envelope, Kind};
use hearth_shared::keys::{RecoverySecret, Role, SecretKey};
use hearth_shared::trust::{KeyRecord, RoleKeys};
use hearth_shared::wire::{
    self, BatchEntry, BatchManifest, CredentialSet, Endpoint, NodeRecord, Profile, PushBundle, ResetStrategy, Snapshot,
    Status, SubToken, stream,
};
use hearth_shared::{keys::PublicKey, seal};
use rand_core::OsRng;

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs()
}

/// A stand-in for control's keys and version counters.
pub struct ControlSim {
    /// The root key.
    pub root: SecretKey,
    /// The online signing key.
    pub signing: SecretKey,
    /// The owner's recovery key.
    pub recovery: RecoverySecret,
    /// The release key (signs node releases).
    pub release: SecretKey,
    batch: u64,
    versions: HashMap<String, u64>,
    signing_record: Vec<u8>,
    release_record: Vec<u8>,
}

/// One item of a push.
pub struct Item {
    entry: BatchEntry,
    envelope: Option<Vec<u8>>,
}

impl Item {
    /// The envelope's bytes (none for a deletion).
    pub fn envelope(&self) -> Option<&[u8]> {
        self.envelope.as_deref()
    }

    /// Its manifest entry.
    pub fn entry(&self) -> &BatchEntry {
        &self.entry
    }

    /// An item of an envelope made (and signed) in the test as it likes, listed at its
    /// header's stream and version, by the hash of its bytes.
    pub fn of(envelope: Vec<u8>) -> Item {
        let header = Envelope::decode(&envelope, usize::MAX).expect("an envelope").header;
        Item {
            entry: BatchEntry {
                stream: header.stream,
                version: header.version,
                digest: Some(hearth_shared::sha256(&envelope)),
            },
            envelope: Some(envelope),
        }
    }
}

impl Default for ControlSim {
    fn default() -> Self {
        ControlSim::new()
    }
}

impl ControlSim {
    /// New random keys.
    pub fn new() -> ControlSim {
        let root = SecretKey::generate(Role::Root, &mut OsRng).expect("root key");
        let signing = SecretKey::generate(Role::Signing, &mut OsRng).expect("signing key");
        // Made once, as `hearth-control init` writes it once: a record signed again would be
        // the same version with other content, which verifiers refuse.
        let release = SecretKey::generate(Role::Release, &mut OsRng).expect("release key");
        let now = now();
        let record = |role: Role, key: &SecretKey| {
            Draft {
                kind: Kind::KeyRecord,
                stream: stream::keys(role),
                version: 1,
                epoch: 1,
                issued: now,
                expires: now + 10 * 365 * 86_400,
                audience: Audience::Any,
                prev: [0; 32],
            }
            .sign(wire::encode(&KeyRecord { role, keys: RoleKeys::single(key.public()) }), &[&root])
            .encode()
        };
        let signing_record = record(Role::Signing, &signing);
        let release_record = record(Role::Release, &release);
        ControlSim {
            root,
            signing,
            recovery: RecoverySecret::generate(&mut OsRng),
            release,
            batch: 0,
            versions: HashMap::new(),
            signing_record,
            release_record,
        }
    }

    /// The root-signed record that certifies the signing key.
    pub fn signing_record(&self) -> Vec<u8> {
        self.signing_record.clone()
    }

    /// Rotates the signing key as control's `keys rotate --role signing` does: a new key,
    /// certified by the root in the next version of the signing record, which
    /// [`ControlSim::key_records`] hands out from now on. Returns the retired key.
    pub fn rotate_signing(&mut self) -> SecretKey {
        let held = Envelope::decode(&self.signing_record, Kind::KeyRecord.max_len()).expect("the record made here");
        let next = SecretKey::generate(Role::Signing, &mut OsRng).expect("signing key");
        let now = now();
        self.signing_record = Draft {
            kind: Kind::KeyRecord,
            stream: stream::keys(Role::Signing),
            version: held.header.version + 1,
            epoch: 1,
            issued: now,
            expires: now + 10 * 365 * 86_400,
            audience: Audience::Any,
            prev: [0; 32],
        }
        .sign(wire::encode(&KeyRecord { role: Role::Signing, keys: RoleKeys::single(next.public()) }), &[&self.root])
        .encode();
        std::mem::replace(&mut self.signing, next)
    }

    /// The settings an edge needs to trust this control (its root key, the push token and the
    /// API prefix), then `extra`.
    pub fn edge_vars(&self, api_prefix: &str, push_token: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut vars = vec![
            ("HEARTH_ROOT_KEY".to_owned(), self.root.public().to_string()),
            ("HEARTH_PUSH_TOKEN".to_owned(), push_token.to_owned()),
            ("HEARTH_API_PREFIX".to_owned(), api_prefix.to_owned()),
        ];
        vars.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        vars
    }

    /// The records control hands out: the signing key's, then the release key's.
    pub fn key_records(&self) -> Vec<Vec<u8>> {
        vec![self.signing_record.clone(), self.release_record.clone()]
    }

    /// A header expiring in a day.
    pub fn draft(&self, kind: Kind, stream: String, version: u64, audience: Audience) -> Draft {
        let now = now();
        Draft { kind, stream, version, epoch: 1, issued: now, expires: now + 86_400, audience, prev: [0; 32] }
    }

    fn next_version(&mut self, stream: &str) -> u64 {
        let version = self.versions.entry(stream.to_owned()).or_insert(0);
        *version += 1;
        *version
    }

    /// Signs an item for `stream` at its next version.
    pub fn item(&mut self, kind: Kind, stream: String, audience: Audience, body: Vec<u8>) -> Item {
        let version = self.next_version(&stream);
        self.item_at(kind, stream, version, audience, body)
    }

    /// Signs an item at an explicit version (for rollback tests).
    pub fn item_at(&self, kind: Kind, stream: String, version: u64, audience: Audience, body: Vec<u8>) -> Item {
        let envelope = self.draft(kind, stream.clone(), version, audience).sign(body, &[&self.signing]);
        let bytes = envelope.encode();
        Item {
            entry: BatchEntry { stream, version, digest: Some(hearth_shared::sha256(&bytes)) },
            envelope: Some(bytes),
        }
    }

    /// A sealed snapshot for the holder of `token`.
    pub fn snapshot(&mut self, token: &SubToken, snapshot: &Snapshot) -> Item {
        let body = seal::seal(snapshot, token, &self.recovery.public(), &mut OsRng);
        self.item(Kind::Snapshot, stream::snapshot(&token.hash()), Audience::Edge, body)
    }

    /// A node's credential set.
    pub fn creds(&mut self, set: &CredentialSet) -> Item {
        self.item(Kind::CredentialSet, stream::creds(set.node), Audience::Node(set.node), set.encode())
    }

    /// A node's registration.
    pub fn node(&mut self, node: u64, key: Option<PublicKey>) -> Item {
        self.item(Kind::NodeRecord, stream::node(node), Audience::Edge, wire::encode(&NodeRecord { node, key }))
    }

    /// Deletes a link's stream at its next version.
    pub fn delete_link(&mut self, token: &SubToken) -> Item {
        let name = stream::snapshot(&token.hash());
        let version = self.next_version(&name);
        Item { entry: BatchEntry { stream: name, version, digest: None }, envelope: None }
    }

    /// The next batch manifest over `items`.
    pub fn manifest(&mut self, items: &[Item]) -> Envelope {
        self.batch += 1;
        let manifest =
            BatchManifest::new(items.iter().map(|item| item.entry.clone()).collect()).expect("unique streams");
        self.draft(Kind::Batch, stream::BATCH.to_owned(), self.batch, Audience::Edge)
            .sign(manifest.encode(), &[&self.signing])
    }

    /// A whole push: the key records, the next manifest, the items.
    pub fn push(&mut self, items: &[Item]) -> Vec<u8> {
        let manifest = self.manifest(items).encode();
        bundle(self.key_records(), manifest, items.iter().filter_map(|i| i.envelope.clone()).collect())
    }
}

/// Encodes a push bundle from its parts.
pub fn bundle(key_records: Vec<Vec<u8>>, manifest: Vec<u8>, items: Vec<Vec<u8>>) -> Vec<u8> {
    wire::encode(&PushBundle {
        key_records: key_records.into_iter().map(Into::into).collect(),
        manifest,
        items: items.into_iter().map(Into::into).collect(),
    })
}

/// A plausible user with two servers.
pub fn demo_snapshot(user: u64) -> Snapshot {
    Snapshot {
        user,
        name: format!("User {user}"),
        status: Status::Active,
        used_up: user * 1000,
        used_down: user * 50_000,
        quota: 100 << 30,
        expires_at: 1_900_000_000,
        reset: ResetStrategy::Monthly,
        credential: format!("credential-{user}"),
        endpoints: vec![
            Endpoint {
                name: "Home".into(),
                host: "home.example.net".into(),
                port: 443,
                hop: None,
                sni: None,
                cert_sha256: Some([7; 32]),
                spki_sha256: Some([8; 32]),
                insecure: true,
                obfs: Some("obfs-pw".into()),
                // What a node registers: its certificate, for clients before sing-box 1.13.
                identity: hearth_shared::wire::Identity {
                    certificate: Some(include_bytes!("../../shared/tests/golden/node-cert.der").to_vec()),
                    name: Some("home.example.net".into()),
                    unverified: false,
                },
            },
            Endpoint {
                name: "Cloud".into(),
                host: "203.0.113.10".into(),
                port: 8443,
                hop: None,
                sni: Some("cloud.example.net".into()),
                cert_sha256: None,
                spki_sha256: None,
                insecure: false,
                obfs: None,
                identity: Default::default(),
            },
        ],
        profile: Profile {
            title: "Family VPN".into(),
            announce: Some("Welcome".into()),
            support_url: Some("https://example.net/help".into()),
            web_page_url: None,
            update_interval_hours: 12,
        },
        hwid: Default::default(),
        alias: None,
        telegram: None,
    }
}

/// A signed release of `files` (os, arch, bytes) at envelope version `version`, signed by
/// `key`, expiring at `expires`; with the bundle control hands the edge.
pub fn release(
    key: &SecretKey,
    version: u64,
    name: &str,
    files: &[(&str, &str, Vec<u8>)],
    expires: u64,
) -> (Vec<u8>, Vec<u8>) {
    use hearth_shared::release::{ReleaseBundle, ReleaseFile, ReleaseManifest};
    let entries: Vec<ReleaseFile> = files
        .iter()
        .map(|(os, arch, bytes)| ReleaseFile {
            os: (*os).to_owned(),
            arch: (*arch).to_owned(),
            len: bytes.len() as u64,
            sha256: hearth_shared::sha256(bytes),
        })
        .collect();
    let manifest = ReleaseManifest { version: name.to_owned(), built: version, files: entries.clone() };
    let envelope = Draft {
        kind: Kind::Release,
        stream: stream::RELEASE.to_owned(),
        version,
        epoch: 1,
        issued: now().min(expires),
        expires,
        audience: Audience::Any,
        prev: [0; 32],
    }
    .sign(wire::encode(&manifest), &[key])
    .encode();
    let bundle = ReleaseBundle {
        manifest: envelope.clone(),
        files: entries.iter().zip(files).map(|(entry, (_, _, bytes))| (entry.name(), bytes.clone().into())).collect(),
    };
    (envelope, wire::encode(&bundle))
}
