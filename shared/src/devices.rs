//! Devices registered at the edge (HWID): apps that send a device id when they fetch a link
//! are counted per link, and a device over the user's limit gets a profile with no server.
//!
//! What an app sends (see the manual, docs/users/fair-use.md): Happ sends `x-hwid`, `x-device-os`,
//! `x-ver-os` and `x-device-model`; v2RayTun, INCY and Streisand send `x-hwid` (some with the
//! others); Hiddify, v2rayNG, sing-box and mihomo send none, and are not counted here (the
//! node's device limit still holds them).
//!
//! Control puts the user's limit in the sealed snapshot ([`HwidPolicy`]), with the devices the
//! owner deleted; the edge keeps each link's [`Registry`] sealed under a key derived from the
//! link's token (as the snapshot is), so its storage shows no device, and queues a changed
//! registry for control, which opens it with the token it holds. The edge is not trusted:
//! control shows what a registry says and can delete from it, but the limit is control's own
//! and nothing a registry holds grants anything.

use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::wire::{self, SubToken};

pub use crate::wire::{DeviceKey, Forgotten, HwidPolicy};

/// The most devices a registry holds; a user whose limit is over it is not limited at the edge
/// (the node's limit still holds).
pub const MAX_DEVICES: usize = 100;
/// The most devices the owner deleted that a snapshot remembers.
pub const MAX_FORGOTTEN: usize = MAX_DEVICES;
/// The longest `x-hwid` taken; a longer one is not a device id.
pub const MAX_HWID_BYTES: usize = 256;
/// The most characters kept of the OS, its version, the model and the app.
pub const FIELD_CHARS: usize = 64;
/// How often a known device's last fetch is written (seconds): a fetch in between changes
/// nothing stored.
pub const SEEN_EVERY: u64 = 3600;

/// One device a link served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Its key.
    pub key: DeviceKey,
    /// `x-device-os` (Android, iOS, Windows...).
    pub os: String,
    /// `x-ver-os`.
    pub os_version: String,
    /// `x-device-model`.
    pub model: String,
    /// The app, from its User-Agent.
    pub app: String,
    /// First fetch, Unix seconds.
    pub first_seen: u64,
    /// Last fetch (to the hour), Unix seconds.
    pub last_seen: u64,
}

/// A link's devices, as the edge keeps them (sealed) and control reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    /// The devices, in the order they came.
    pub devices: Vec<Device>,
    /// When a device was last turned away over the limit (to the hour; 0: never).
    pub refused_at: u64,
}

/// What an app's headers say of the device fetching.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The device's key.
    pub key: DeviceKey,
    /// `x-device-os`, cleaned (printable, at most [`FIELD_CHARS`]).
    pub os: String,
    /// `x-ver-os`, cleaned.
    pub os_version: String,
    /// `x-device-model`, cleaned.
    pub model: String,
    /// The User-Agent's first word (the app and its version), cleaned.
    pub app: String,
}

/// Keeps printable characters, at most [`FIELD_CHARS`] of them, trimmed.
fn clean(value: &str) -> String {
    let kept: String = value.chars().filter(|c| !c.is_control()).take(FIELD_CHARS).collect();
    kept.trim().to_owned()
}

impl Seen {
    /// The device a fetch comes from, by its headers (`header` gives one by lower-case name);
    /// `None` when there is no usable `x-hwid` (empty or too long).
    pub fn from_headers<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<Seen> {
        let hwid = header("x-hwid")?.trim();
        if hwid.is_empty() || hwid.len() > MAX_HWID_BYTES {
            return None;
        }
        let app = header("user-agent").unwrap_or_default();
        // The app and its version: the User-Agent's first word ("Happ/1.2.3", "v2RayTun/...").
        let app = app.split_whitespace().next().unwrap_or_default();
        Some(Seen {
            key: key_of(hwid),
            os: clean(header("x-device-os").unwrap_or_default()),
            os_version: clean(header("x-ver-os").unwrap_or_default()),
            model: clean(header("x-device-model").unwrap_or_default()),
            app: clean(app),
        })
    }
}

impl Seen {
    /// The device as registered when first seen at `now`.
    pub fn device(&self, now: u64) -> Device {
        Device {
            key: self.key,
            os: self.os.clone(),
            os_version: self.os_version.clone(),
            model: self.model.clone(),
            app: self.app.clone(),
            first_seen: now,
            last_seen: now,
        }
    }
}

/// A device's key, from its `x-hwid`.
pub fn key_of(hwid: &str) -> DeviceKey {
    let digest = crate::sha256(&[b"hearth hwid v1\0".as_slice(), hwid.as_bytes()].concat());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// What the edge does with a fetch from a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// Registered already: served.
    Known,
    /// New, and the link had room: registered and served.
    Added,
    /// New, and the link is full: the profile with no server.
    Refused,
}

impl Registry {
    /// Admits `seen` at `now` under `policy`; the registry is changed when the answer says so
    /// (then the edge stores it and queues it for control). Devices the owner deleted leave
    /// first; a known device's details and last fetch are written at most every
    /// [`SEEN_EVERY`].
    pub fn admit(&mut self, policy: &HwidPolicy, seen: &Seen, now: u64) -> (Admission, bool) {
        let before = self.devices.len();
        self.devices.retain(|device| {
            !policy.forgotten.iter().any(|gone| gone.key == device.key && device.first_seen <= gone.before)
        });
        let mut changed = self.devices.len() != before;
        if let Some(device) = self.devices.iter_mut().find(|device| device.key == seen.key) {
            // At most hourly, whatever the app says in between: a client that varies its
            // headers cannot make every fetch a write.
            if now >= device.last_seen.saturating_add(SEEN_EVERY) {
                device.os.clone_from(&seen.os);
                device.os_version.clone_from(&seen.os_version);
                device.model.clone_from(&seen.model);
                device.app.clone_from(&seen.app);
                device.last_seen = now;
                changed = true;
            }
            return (Admission::Known, changed);
        }
        let room = (policy.limit as usize).min(MAX_DEVICES);
        if self.devices.len() < room {
            self.devices.push(seen.device(now));
            return (Admission::Added, true);
        }
        if self.refused_at == 0 || now >= self.refused_at.saturating_add(SEEN_EVERY) {
            self.refused_at = now;
            changed = true;
        }
        (Admission::Refused, changed)
    }

    /// Whether a registry's contents are within bounds (what control checks of one an edge
    /// sent: it is not trusted).
    pub fn is_well_formed(&self) -> bool {
        self.devices.len() <= MAX_DEVICES
            && self.devices.iter().all(|device| {
                [&device.os, &device.os_version, &device.model, &device.app]
                    .iter()
                    .all(|field| field.chars().count() <= FIELD_CHARS && !field.chars().any(char::is_control))
                    && device.first_seen <= device.last_seen
            })
    }
}

const SALT: &[u8] = b"hearth devices v1";

fn derive(token: &SubToken, info: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(SALT), token.as_bytes())
        .expand_multi_info(info, key.as_mut())
        .expect("32 bytes is a valid HKDF-SHA-256 output length");
    key
}

/// A sealed registry, as stored and queued.
#[derive(Serialize, Deserialize)]
struct SealedRegistry<'a> {
    nonce: [u8; 24],
    #[serde(borrow, with = "serde_bytes")]
    ciphertext: &'a [u8],
}

/// Seals a registry for the holder of `token` (XChaCha20-Poly1305, the token's hash as
/// associated data). The nonce is derived from the registry and a key of its own (a synthetic
/// nonce, as in SIV), so the edge needs no random numbers: the same registry sealed twice gives
/// the same bytes, and nothing else is told.
pub fn seal(registry: &Registry, token: &SubToken) -> Vec<u8> {
    let plaintext = Zeroizing::new(wire::encode(registry));
    let nonce_key = derive(token, &[b"registry nonce", &plaintext]);
    let mut nonce = [0u8; 24];
    nonce.copy_from_slice(&nonce_key[..24]);
    let key = derive(token, &[b"registry"]);
    let aad = token.hash();
    let ciphertext = XChaCha20Poly1305::new(key.as_ref().into())
        .encrypt(XNonce::from_slice(&nonce), Payload { msg: &plaintext, aad: &aad })
        .expect("XChaCha20-Poly1305 encrypts any length a registry can have");
    wire::encode(&SealedRegistry { nonce, ciphertext: &ciphertext })
}

/// The largest sealed registry (all its devices, every field at its longest in 4-byte
/// characters).
pub const MAX_SEALED: usize = 64 + MAX_DEVICES * (16 + 4 * (5 + 4 * FIELD_CHARS) + 2 * 10) + 16;

/// Opens a sealed registry with the link's token; `None` when the bytes are not one, the token
/// does not open them, or what they hold is out of bounds.
pub fn open(bytes: &[u8], token: &SubToken) -> Option<Registry> {
    if bytes.len() > MAX_SEALED {
        return None;
    }
    let sealed: SealedRegistry<'_> = wire::decode_authenticated(bytes, "sealed registry").ok()?;
    let key = derive(token, &[b"registry"]);
    let aad = token.hash();
    let plaintext = Zeroizing::new(
        XChaCha20Poly1305::new(key.as_ref().into())
            .decrypt(XNonce::from_slice(&sealed.nonce), Payload { msg: sealed.ciphertext, aad: &aad })
            .ok()?,
    );
    let registry: Registry = wire::decode(&plaintext, "registry").ok()?;
    registry.is_well_formed().then_some(registry)
}

/// A changed registry the edge queues for control: the link's token hash and the sealed
/// registry. Queued with the nodes' usage reports and drained with them; the first bytes
/// ([`DeviceReport::MAGIC`]) tell it from a report's envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// The link.
    pub token_hash: crate::Digest,
    /// Its registry, sealed.
    #[serde(with = "serde_bytes")]
    pub sealed: Vec<u8>,
}

impl DeviceReport {
    /// What a queued device report starts with (no envelope does).
    pub const MAGIC: &'static [u8; 8] = b"HRTHDEV1";

    /// The bytes queued.
    pub fn encode(&self) -> Vec<u8> {
        [Self::MAGIC.as_slice(), &wire::encode(self)].concat()
    }

    /// A queued item, if it is a device report (strictly decoded, bounded).
    pub fn decode(bytes: &[u8]) -> Option<DeviceReport> {
        let rest = bytes.strip_prefix(Self::MAGIC.as_slice())?;
        if rest.len() > MAX_SEALED + 64 {
            return None;
        }
        wire::decode(rest, "device report").ok()
    }
}

/// The name of the one entry a device over the limit gets.
pub const REFUSED_NAME: &str = "Device limit reached";

/// What a device over the limit is served: one entry named [`REFUSED_NAME`] that connects
/// nowhere (it carries no credential of the user's), and a notice that says why and what to
/// do, in apps that show one and on the page.
pub fn refused(snapshot: &crate::wire::Snapshot) -> crate::wire::Snapshot {
    let limit = snapshot.hwid.limit;
    let notice = format!(
        "Device limit reached: this subscription works on at most {limit} device{}. \
         Ask the person who gave you this link to remove a device you no longer use.",
        if limit == 1 { "" } else { "s" }
    );
    let mut refused = snapshot.clone();
    refused.credential = "device-limit-reached".to_owned();
    refused.endpoints = vec![crate::wire::Endpoint::placeholder(REFUSED_NAME)];
    refused.profile.announce = Some(match snapshot.profile.announce.as_deref() {
        Some(own) if !own.trim().is_empty() => format!("{notice}\n{own}"),
        _ => notice,
    });
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(hwid: &str) -> Seen {
        let headers = [("x-hwid", hwid), ("x-device-os", "Android"), ("x-ver-os", "14"), ("user-agent", "Happ/3.1")];
        Seen::from_headers(|name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap()
    }

    #[test]
    fn a_full_link_refuses_new_devices_and_serves_known_ones() {
        let policy = HwidPolicy { limit: 2, forgotten: Vec::new() };
        let mut registry = Registry::default();
        assert_eq!(registry.admit(&policy, &seen("a"), 1000), (Admission::Added, true));
        assert_eq!(registry.admit(&policy, &seen("b"), 1001), (Admission::Added, true));
        assert_eq!(registry.admit(&policy, &seen("c"), 1002), (Admission::Refused, true), "refusal noted");
        assert_eq!(registry.refused_at, 1002);
        assert_eq!(registry.admit(&policy, &seen("c"), 1003), (Admission::Refused, false), "noted hourly");
        assert_eq!(registry.admit(&policy, &seen("a"), 1004), (Admission::Known, false), "seen within the hour");
        let mut other_os = seen("a");
        other_os.os = "iOS".into();
        assert_eq!(registry.admit(&policy, &other_os, 1005), (Admission::Known, false), "details too, hourly");
        assert_eq!(registry.admit(&policy, &seen("a"), 1000 + SEEN_EVERY), (Admission::Known, true));
        assert_eq!(registry.devices[0].last_seen, 1000 + SEEN_EVERY);
        assert_eq!(registry.devices[0].os, "Android");
        assert_eq!(registry.devices[0].app, "Happ/3.1");

        // The owner deletes "b": it leaves, "c" takes its place; "b" is then refused.
        let forgotten = HwidPolicy { limit: 2, forgotten: vec![Forgotten { key: key_of("b"), before: 5000 }] };
        assert_eq!(registry.admit(&forgotten, &seen("c"), 6000), (Admission::Added, true));
        assert_eq!(registry.admit(&forgotten, &seen("b"), 6001).0, Admission::Refused);
        // A device registered after it was deleted stays.
        let mut again = Registry::default();
        again.admit(&forgotten, &seen("b"), 7000);
        assert_eq!(again.admit(&forgotten, &seen("b"), 7001).0, Admission::Known);

        // A lower limit refuses new devices but keeps the known ones.
        let one = HwidPolicy { limit: 1, forgotten: Vec::new() };
        assert_eq!(registry.admit(&one, &seen("a"), 8000).0, Admission::Known);
        assert_eq!(registry.admit(&one, &seen("d"), 8000).0, Admission::Refused);
    }

    #[test]
    fn headers_without_a_usable_hwid_are_no_device() {
        let none: [(&str, &str); 0] = [];
        assert_eq!(Seen::from_headers(|n| none.iter().find(|(k, _)| *k == n).map(|(_, v)| *v)), None);
        let long = "x".repeat(MAX_HWID_BYTES + 1);
        assert_eq!(Seen::from_headers(|n| (n == "x-hwid").then_some(long.as_str())), None);
        assert_eq!(Seen::from_headers(|n| (n == "x-hwid").then_some("  ")), None);
        let odd = "a\u{0}b".repeat(40);
        let seen = Seen::from_headers(|n| match n {
            "x-hwid" => Some("id"),
            _ => Some(odd.as_str()),
        })
        .unwrap();
        assert_eq!(seen.os.chars().count(), FIELD_CHARS);
        assert!(!seen.os.contains('\u{0}'));
    }

    #[test]
    fn registries_open_only_with_their_token_and_within_bounds() {
        let token = SubToken::from_bytes([7; 32]);
        let mut registry = Registry::default();
        registry.admit(&HwidPolicy { limit: 3, forgotten: Vec::new() }, &seen("a"), 10);
        let sealed = seal(&registry, &token);
        assert_eq!(open(&sealed, &token), Some(registry.clone()));
        assert_eq!(open(&sealed, &SubToken::from_bytes([8; 32])), None);
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(open(&flipped, &token), None);
        // Sealed by someone with the token but out of bounds: refused all the same.
        let mut huge = registry.clone();
        huge.devices[0].model = "m".repeat(FIELD_CHARS + 1);
        assert_eq!(open(&seal(&huge, &token), &token), None);
        let full = Registry {
            devices: (0..MAX_DEVICES as u64)
                .map(|n| Device {
                    key: [n as u8; 16],
                    os: "ж".repeat(FIELD_CHARS),
                    os_version: "ж".repeat(FIELD_CHARS),
                    model: "ж".repeat(FIELD_CHARS),
                    app: "ж".repeat(FIELD_CHARS),
                    first_seen: u64::MAX,
                    last_seen: u64::MAX,
                })
                .collect(),
            refused_at: u64::MAX,
        };
        assert!(seal(&full, &token).len() <= MAX_SEALED);
        assert_eq!(open(&seal(&full, &token), &token), Some(full));

        let report = DeviceReport { token_hash: token.hash(), sealed };
        assert_eq!(DeviceReport::decode(&report.encode()), Some(report.clone()));
        assert_eq!(DeviceReport::decode(&report.encode()[1..]), None);
    }

    #[test]
    fn snapshots_carry_the_policy_only_when_set() {
        let mut snapshot = crate::render::tests::sample_snapshot();
        for endpoint in &mut snapshot.endpoints {
            endpoint.identity = Default::default();
        }
        let plain = snapshot.encode();
        assert_eq!(plain, wire::encode(&snapshot), "no policy: the encoding edges before it read");
        assert_eq!(crate::wire::Snapshot::decode_authenticated(&plain).unwrap(), snapshot);
        snapshot.hwid = HwidPolicy { limit: 2, forgotten: vec![Forgotten { key: [1; 16], before: 9 }] };
        let bytes = snapshot.encode();
        assert_eq!(crate::wire::Snapshot::decode_authenticated(&bytes).unwrap(), snapshot);
        // An edge from before reads the rest, as before.
        let old: crate::wire::Snapshot = wire::decode_authenticated(&bytes, "snapshot").unwrap();
        assert_eq!(old.endpoints, snapshot.endpoints);
        // An alias's snapshot says so (a restore tells it from the user's link by it).
        let mut alias = snapshot.clone();
        alias.alias = Some("/sub/old".into());
        assert_eq!(crate::wire::Snapshot::decode_authenticated(&alias.encode()).unwrap(), alias);
        alias.hwid = HwidPolicy::default();
        assert_eq!(crate::wire::Snapshot::decode_authenticated(&alias.encode()).unwrap(), alias);

        let refused = refused(&snapshot);
        assert_eq!(refused.endpoints.len(), 1);
        assert_eq!(refused.endpoints[0].name, REFUSED_NAME);
        assert_ne!(refused.credential, snapshot.credential, "no credential of the user's");
        assert!(
            refused
                .profile
                .announce
                .unwrap()
                .starts_with("Device limit reached: this subscription works on at most 2 devices.")
        );
    }
}
