//! The node's state directory: its settings, TLS identity, trust, and the last good
//! credential set, each written atomically (a temporary file, fsync, rename), so a crash
//! or power cut leaves the old file or the new one, never a torn one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::{MAX_KEY_FILE, Role, SecretKey};
use hearth_shared::trust::{self, Expect, StreamState, Trust, VerifyError};
use hearth_shared::wire::{self, CredDelta, CredDiff, CredentialSet, NodeId, Touched, stream};
use hearth_shared::{Digest, Rate};
use serde::Deserialize;
use zeroize::Zeroizing;

/// The node's own secret key, made at enrollment: it signs the node's usage reports.
pub(crate) const KEY_FILE: &str = "node.key";

/// The node's settings (`node.toml`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settings {
    /// This node's id at control.
    pub(crate) node: NodeId,
    /// The UDP address the Hysteria2 server listens on.
    #[serde(default = "default_listen")]
    pub(crate) listen: String,
    /// Let clients reach private and loopback addresses (tests on loopback only).
    #[serde(default)]
    pub(crate) allow_private: bool,
    /// Control's URL, for long polls and usage reports (none: the edge only).
    #[serde(default)]
    pub(crate) control_url: Option<String>,
    /// A v2fly `geoip.dat` for rules that name `geoip:` (read when a rule set needs it).
    #[serde(default)]
    pub(crate) geoip: Option<PathBuf>,
    /// A v2fly `geosite.dat` for rules that name `geosite:`.
    #[serde(default)]
    pub(crate) geosite: Option<PathBuf>,
    /// SHA-256 of control's TLS certificate (hex), when it is self-signed.
    #[serde(default)]
    pub(crate) control_pin: Option<String>,
    /// The edge's URL, used when control does not answer.
    #[serde(default)]
    pub(crate) edge_url: Option<String>,
    /// The secret API path both serve the node API under.
    #[serde(default)]
    pub(crate) api_prefix: String,
    /// Seconds between two pulls from the edge (control is long-polled).
    #[serde(default = "default_poll")]
    pub(crate) edge_poll_secs: u64,
    /// Seconds between two usage reports.
    #[serde(default = "default_report")]
    pub(crate) report_secs: u64,
    /// The Salamander obfuscation password (none: plain QUIC).
    #[serde(default)]
    pub(crate) obfs: Option<String>,
    /// Port hopping: the range of UDP ports the node also answers on (`"20000-30000"`).
    #[serde(default)]
    pub(crate) hop: Option<String>,
    /// Where the masquerade also answers over HTTPS on TCP (`"0.0.0.0:443"`; none: nowhere).
    #[serde(default)]
    pub(crate) masquerade_tcp: Option<String>,
    /// Where `/healthz` and `/metrics` answer (empty: nowhere).
    #[serde(default = "default_metrics")]
    pub(crate) metrics_listen: String,
    /// The official server's Traffic Stats API (`[traffic_stats]`; none: off).
    #[serde(default)]
    pub(crate) traffic_stats: Option<TrafficStats>,
    /// How long a new release must run healthy before it is kept (else the supervisor puts
    /// the previous binary back).
    #[serde(default = "default_health")]
    pub(crate) update_health_secs: u64,
    /// How much longer than `update_health_secs` a new release may take to get there (its
    /// start, its first answered pulls) before the supervisor puts the previous binary back.
    #[serde(default = "default_grace")]
    pub(crate) update_grace_secs: u64,
    /// With a new release in place, how long the node keeps serving the transfers under way
    /// before it restarts into it: it restarts once they go quiet, or after this long.
    #[serde(default = "default_drain")]
    pub(crate) update_drain_secs: u64,
    /// How the node paces what it sends to clients who do not announce a receive rate.
    #[serde(default)]
    pub(crate) congestion: Congestion,
    /// The node's own rates (`bandwidth.up`, `bandwidth.down`).
    #[serde(default)]
    pub(crate) bandwidth: Bandwidth,
    /// Ignore the receive rates clients announce: no Brutal, the `congestion` controller for
    /// everyone, and `Hysteria-CC-RX: auto` so clients use their own controller too.
    #[serde(default)]
    pub(crate) ignore_client_bandwidth: bool,
    /// What anyone who does not authenticate gets over HTTP/3.
    #[serde(default)]
    pub(crate) masquerade: crate::masquerade::Masquerade,
    /// The name the node's self-signed certificate is made out to when it makes one (set by
    /// `enroll`: the node's SNI, else its host).
    #[serde(default)]
    pub(crate) tls_name: Option<String>,
    /// A certificate from a public CA for the node's domain, by ACME.
    #[serde(default)]
    pub(crate) acme: Option<Acme>,
}

/// The `[traffic_stats]` table of `node.toml`: the official server's Traffic Stats API
/// ([`crate::stats`]).
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrafficStats {
    /// Where the API listens (`"127.0.0.1:9999"`).
    pub(crate) listen: String,
    /// What requests must carry as their `Authorization` header (empty: nothing, which only
    /// a loopback address allows).
    #[serde(default)]
    pub(crate) secret: String,
}

impl std::fmt::Debug for TrafficStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = if self.secret.is_empty() { "none" } else { "set" };
        f.debug_struct("TrafficStats").field("listen", &self.listen).field("secret", &secret).finish()
    }
}

impl TrafficStats {
    /// The address to listen on, once the settings are known to be safe.
    pub(crate) fn address(&self) -> Result<std::net::SocketAddr> {
        let Ok(address) = self.listen.parse::<std::net::SocketAddr>() else {
            bail!("traffic_stats.listen {:?} is not an address and port (\"127.0.0.1:9999\")", self.listen);
        };
        if self.secret.is_empty() && !address.ip().is_loopback() {
            bail!(
                "traffic_stats.listen {address} is reachable from other machines: set traffic_stats.secret too, or \
                 anyone who reaches it could see who uses the node and kick them"
            );
        }
        if self.secret.len() > 1024 || self.secret.chars().any(|c| c.is_control()) {
            bail!("traffic_stats.secret must be at most 1,024 characters, none of them control characters");
        }
        Ok(address)
    }
}

/// The `[acme]` table of `node.toml`: where and how the node gets a public certificate.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Acme {
    /// The domain (its DNS points at the node).
    pub(crate) domain: String,
    /// The CA's directory URL.
    #[serde(default = "lets_encrypt")]
    pub(crate) directory: String,
    /// Where the CA may write about the account.
    #[serde(default)]
    pub(crate) email: Option<String>,
    /// `tls-alpn-01` (on `masquerade_tcp`, which must then be TCP 443 as the CA sees it) or
    /// `http-01` (on `http_listen`, TCP 80 as the CA sees it). Default: `tls-alpn-01` with
    /// `masquerade_tcp`, else `http-01`.
    #[serde(default)]
    pub(crate) challenge: Option<hearth_acme::Challenge>,
    /// Where HTTP-01 listens.
    #[serde(default = "default_http")]
    pub(crate) http_listen: String,
    /// External Account Binding's key id, for CAs that ask for it.
    #[serde(default)]
    pub(crate) eab_kid: Option<String>,
    /// External Account Binding's HMAC key (base64url).
    #[serde(default)]
    pub(crate) eab_hmac_key: Option<String>,
    /// A root (PEM file, relative to the state directory or absolute) to trust for the CA's
    /// own HTTPS, in place of the system's.
    #[serde(default)]
    pub(crate) ca_root: Option<PathBuf>,
}

fn lets_encrypt() -> String {
    hearth_acme::LETS_ENCRYPT.to_owned()
}

fn default_http() -> String {
    "0.0.0.0:80".to_owned()
}

impl Settings {
    /// The GeoIP and GeoSite files routing rules may need.
    pub(crate) fn geo_files(&self) -> crate::route::GeoFiles {
        crate::route::GeoFiles { geoip: self.geoip.clone(), geosite: self.geosite.clone() }
    }

    /// What ACME works with, checked: a domain a CA issues for, unlike the self-signed
    /// certificate's name; TLS-ALPN-01 only with `masquerade_tcp`; EAB whole or not at all.
    pub(crate) fn acme(&self, dir: &Path) -> Result<Option<hearth_acme::Settings>> {
        let Some(acme) = &self.acme else { return Ok(None) };
        if !hearth_acme::is_domain(&acme.domain) {
            bail!("acme.domain {:?} is not a DNS name a CA issues certificates for", acme.domain);
        }
        if self.tls_name.as_deref().is_some_and(|name| name.eq_ignore_ascii_case(&acme.domain)) {
            bail!(
                "acme.domain is the self-signed certificate's name (tls_name): pinned clients would get the public one"
            );
        }
        let challenge = acme.challenge.unwrap_or(if self.masquerade_tcp.is_some() {
            hearth_acme::Challenge::TlsAlpn01
        } else {
            hearth_acme::Challenge::Http01
        });
        if challenge == hearth_acme::Challenge::TlsAlpn01 && self.masquerade_tcp.is_none() {
            bail!("acme.challenge tls-alpn-01 is answered on masquerade_tcp (TCP 443): set it, or use http-01");
        }
        let eab = match (&acme.eab_kid, &acme.eab_hmac_key) {
            (Some(kid), Some(key)) => Some((kid.clone(), key.clone())),
            (None, None) => None,
            _ => bail!("acme.eab_kid and acme.eab_hmac_key go together"),
        };
        Ok(Some(hearth_acme::Settings {
            domain: acme.domain.to_ascii_lowercase(),
            directory: acme.directory.clone(),
            email: acme.email.clone(),
            eab,
            challenge,
            ca_root: acme.ca_root.as_ref().map(|root| dir.join(root)),
        }))
    }
}

/// The node's rates (`node.toml` writes them as Hysteria does: `bandwidth.up = "200 mbps"`,
/// or a number of Mbit/s; see [`Rate::parse_hysteria`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Bandwidth {
    /// The most the node sends one client with Brutal, however much the client announces.
    #[serde(default, deserialize_with = "rate")]
    pub(crate) up: Option<Rate>,
    /// What the node announces it can receive (`Hysteria-CC-RX`): a Brutal client sends no
    /// faster. None: 0, no limit asked.
    #[serde(default, deserialize_with = "rate")]
    pub(crate) down: Option<Rate>,
}

/// A rate of `node.toml`: a string in Hysteria's syntax, or a whole number of Mbit/s.
fn rate<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Rate>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Mbps(u64),
        Text(String),
    }
    let text = match Written::deserialize(deserializer)? {
        Written::Mbps(mbps) => mbps.to_string(),
        Written::Text(text) => text,
    };
    Rate::parse_hysteria(&text).map(Some).map_err(serde::de::Error::custom)
}

/// The congestion controller of the node's QUIC connections (`congestion` in `node.toml`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Congestion {
    /// Hearth's own BBR (`congestion::bbr`), as Hysteria2 servers use when clients do not
    /// announce a bandwidth: it keeps its rate through random loss (mobile networks,
    /// throttled or filtered paths).
    #[default]
    Bbr,
    /// quinn's BBR (experimental upstream, its estimate inflated by acknowledgements that come
    /// in bursts), kept for comparison.
    #[serde(rename = "quinn-bbr")]
    QuinnBbr,
    /// CUBIC: backs off at every loss, so it suits clean paths only, where it costs less CPU
    /// per byte than quinn's BBR (docs/benchmarks.md: a 1 vCPU box short of CPU).
    Cubic,
}

fn default_health() -> u64 {
    60
}

fn default_grace() -> u64 {
    60
}

fn default_drain() -> u64 {
    300
}

fn default_metrics() -> String {
    "127.0.0.1:9464".to_owned()
}

fn default_poll() -> u64 {
    5
}

fn default_report() -> u64 {
    10
}

fn default_listen() -> String {
    "0.0.0.0:443".to_owned()
}

/// The files of a state directory.
pub(crate) struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    pub(crate) fn new(dir: &Path) -> StateDir {
        StateDir { dir: dir.to_owned() }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Reads `node.toml`.
    pub(crate) fn settings(&self) -> Result<Settings> {
        let path = self.path("node.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (enroll the node first)", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
    }

    /// Reads the trust the node holds (root, certified roles).
    pub(crate) fn trust(&self) -> Result<Trust> {
        self.read_trust("trust.bin")
    }

    /// The trust held before the last key rotation, if there was one: the set on disk may
    /// still be signed by the retired key when the node stopped between the two writes.
    pub(crate) fn previous_trust(&self) -> Option<Trust> {
        self.path("trust.prev.bin").exists().then(|| self.read_trust("trust.prev.bin").ok()).flatten()
    }

    fn read_trust(&self, name: &str) -> Result<Trust> {
        let path = self.path(name);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Trust::from_stored(&bytes).with_context(|| format!("{} is corrupt", path.display()))
    }

    /// Writes the node's own key to `node.key`, a new file only its owner may read; refuses
    /// to replace one.
    pub(crate) fn save_key(&self, key: &SecretKey) -> Result<()> {
        use std::io::Write as _;
        let path = self.path(KEY_FILE);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path).with_context(|| format!("creating {}", path.display()))?;
        file.write_all(key.to_file_text().as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Reads the node's own key; refuses a file others may read.
    pub(crate) fn key(&self) -> Result<SecretKey> {
        let path = self.path(KEY_FILE);
        use std::io::Read as _;
        let reading = || format!("reading {}", path.display());
        // The file checked is the file read: one handle for both.
        let file = std::fs::File::open(&path).with_context(reading)?;
        #[cfg(unix)]
        if std::os::unix::fs::PermissionsExt::mode(&file.metadata().with_context(reading)?.permissions()) & 0o077 != 0 {
            bail!("{} is readable by others; run chmod 600 on it", path.display());
        }
        // One byte past the most a key file holds: the parser refuses a longer one.
        let mut text = Zeroizing::new(Vec::new());
        file.take(MAX_KEY_FILE as u64 + 1).read_to_end(&mut text).with_context(reading)?;
        SecretKey::from_file_text(&text, Role::Node).with_context(|| format!("key file {}", path.display()))
    }

    /// Writes `bytes` to `name` atomically.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.path(name), bytes)
    }

    /// The last good credential set: the full set in `creds.envelope`, with the delta in
    /// `creds.delta` applied when it is on that set, each checked again against the trust (a
    /// file altered on disk is refused; a delta that does not apply is left out, and the next
    /// pull brings it again). An expired set is kept: the node serves it and says so, as a
    /// node cut off from control and edge must keep its users online.
    pub(crate) fn last_good(&self, trust: &Trust, node: NodeId, now: u64) -> Result<Option<LastGood>> {
        let Some((verified, expires)) = self.stored(CREDS_FILE, trust, Kind::CredentialSet, node, now)? else {
            return Ok(None);
        };
        let set = CredentialSet::decode(&verified.envelope.body).context("the stored credential set's body")?;
        if set.node != node {
            bail!("{} holds node {}'s set, not node {node}'s", self.path(CREDS_FILE).display(), set.node);
        }
        let basis = Basis {
            version: verified.envelope.header.version,
            digest: verified.envelope.header.body_hash,
            set: Arc::new(set),
            served: None,
        };
        let full = LastGood { held: verified.state(), expires, set: basis.set.clone(), basis };
        let delta = self.stored(DELTA_FILE, trust, Kind::CredDelta, node, now);
        Ok(Some(match delta {
            Ok(None) => full,
            Ok(Some((verified, expires))) => match full.basis.take(&verified.envelope.body) {
                Ok((set, diff)) => LastGood {
                    held: verified.state(),
                    expires,
                    set: Arc::new(set),
                    basis: Basis { served: Some(Arc::new(diff)), ..full.basis },
                },
                // A delta on an older full set (a crash between writing the set and removing
                // the delta) is no longer news; one that does not apply is no delta of ours.
                Err(e) => {
                    if e.base() != Some(full.basis.version) {
                        tracing::warn!(error = %e, "ignoring the stored credential delta");
                    }
                    full
                }
            },
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "ignoring the stored credential delta");
                full
            }
        }))
    }

    /// A stored envelope of `kind` (a set or a delta) for `node`, verified, and its expiry
    /// (`None`: no such file).
    fn stored(
        &self,
        file: &str,
        trust: &Trust,
        kind: Kind,
        node: NodeId,
        now: u64,
    ) -> Result<Option<(trust::Verified, u64)>> {
        let path = self.path(file);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let name = if kind == Kind::CredDelta { stream::creds_delta(node) } else { stream::creds(node) };
        let expect = Expect { kind, audience: Audience::Node(node), stream: &name };
        let verified = match trust::verify(&bytes, trust, &expect, None, now) {
            Ok(verified) => verified,
            Err(VerifyError::Expired { expires, .. }) => {
                tracing::warn!(
                    expires,
                    file,
                    "the last good credential set has expired; serving it until a new one arrives"
                );
                trust::verify(&bytes, trust, &expect, None, expires).with_context(|| format!("{}", path.display()))?
            }
            Err(e) => bail!("{} does not verify: {e}", path.display()),
        };
        let expires = verified.envelope.header.expires;
        Ok(Some((verified, expires)))
    }
}

/// The file that keeps the last full credential set's envelope.
pub(crate) const CREDS_FILE: &str = "creds.envelope";
/// The file that keeps the last delta applied to it (none after a full set).
pub(crate) const DELTA_FILE: &str = "creds.delta";

/// What the node serves at start: the set, the state of the envelope it came from last (for
/// rollback checks), its expiry, and the full set under it.
pub(crate) struct LastGood {
    pub(crate) held: StreamState,
    pub(crate) expires: u64,
    pub(crate) set: Arc<CredentialSet>,
    pub(crate) basis: Basis,
}

/// The full set under what a node serves: control's deltas apply to it.
#[derive(Clone, Debug)]
pub(crate) struct Basis {
    /// Its version on the node's `creds/<node>` stream.
    pub(crate) version: u64,
    /// SHA-256 of its encoding (the body hash its envelope signs).
    pub(crate) digest: Digest,
    /// The set.
    pub(crate) set: Arc<CredentialSet>,
    /// The change of the delta on it that the node serves (`None`: it serves this set).
    pub(crate) served: Option<Arc<CredDiff>>,
}

/// Why a delta was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeltaError {
    /// Its body is not a delta this node reads.
    #[error("bad body: not a credential delta: {0}")]
    Body(wire::WireError),
    /// It applies to a full set this node does not hold (the next pull brings that set).
    #[error("a delta on the full set of version {base}, not on the one held")]
    OtherBase {
        /// The version it applies to.
        base: u64,
    },
    /// It does not make the set control signed, or names another node.
    #[error("a delta that does not apply: {0}")]
    Apply(wire::WireError),
}

impl DeltaError {
    /// The base version it named, when it was a delta for another full set.
    pub(crate) fn base(&self) -> Option<u64> {
        match self {
            DeltaError::OtherBase { base } => Some(*base),
            _ => None,
        }
    }
}

impl Basis {
    /// The set a delta's body makes of this full set, and the change it names.
    pub(crate) fn take(&self, body: &[u8]) -> Result<(CredentialSet, CredDiff), DeltaError> {
        let delta = CredDelta::decode(body).map_err(DeltaError::Body)?;
        if !delta.is_on(self.version, &self.digest) {
            return Err(DeltaError::OtherBase { base: delta.base });
        }
        let set = self.set.patched(&delta).map_err(DeltaError::Apply)?;
        Ok((set, delta.diff))
    }

    /// The users whose entries differ between the set served now and the one the change
    /// `diff` (of a delta on this set) makes.
    pub(crate) fn touched(&self, diff: &CredDiff) -> Vec<Touched> {
        self.set.touched(self.served.as_deref(), diff)
    }
}

/// Writes a file atomically: a temporary file beside it, fsync, rename, fsync the folder.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let dir = path.parent().context("a file in a folder")?;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(extra: &str) -> Result<Settings, toml::de::Error> {
        toml::from_str(&format!("node = 3\n{extra}"))
    }

    #[test]
    fn the_node_key_is_private_and_written_once() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
        state.save_key(&key).unwrap();
        assert_eq!(state.key().unwrap().public(), key.public());
        assert!(state.save_key(&key).is_err(), "enrollment never replaces the node's key");
        let path = state.path(KEY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(format!("{:#}", state.key().unwrap_err()).contains("readable by others"));
        std::fs::remove_file(&path).unwrap();
        crate::state::write_atomic(
            &path,
            SecretKey::generate(Role::Release, &mut rand_core::OsRng).unwrap().to_file_text().as_bytes(),
        )
        .unwrap();
        let err = format!("{:#}", state.key().unwrap_err());
        assert!(err.contains("node.key") && err.contains("holds a release key"), "{err}");
    }

    #[test]
    fn congestion_defaults_to_bbr_and_refuses_unknown_names() {
        assert_eq!(settings("").unwrap().congestion, Congestion::Bbr);
        assert_eq!(settings("congestion = \"bbr\"").unwrap().congestion, Congestion::Bbr);
        assert_eq!(settings("congestion = \"cubic\"").unwrap().congestion, Congestion::Cubic);
        assert_eq!(settings("congestion = \"quinn-bbr\"").unwrap().congestion, Congestion::QuinnBbr);
        let error = settings("congestion = \"reno\"").unwrap_err().to_string();
        assert!(error.contains("unknown variant `reno`, expected one of `bbr`, `quinn-bbr`, `cubic`"), "{error}");
    }

    #[test]
    fn rates_are_read_in_bits_and_kept_in_bytes() {
        let read = settings("ignore_client_bandwidth = true\nbandwidth.up = \"1 gbps\"\nbandwidth.down = 100").unwrap();
        let bytes = |rate: Option<Rate>| rate.map(Rate::bytes_per_sec);
        assert_eq!((bytes(read.bandwidth.up), bytes(read.bandwidth.down)), (Some(125_000_000), Some(12_500_000)));
        assert!(read.ignore_client_bandwidth);
        let plain = settings("").unwrap();
        assert_eq!((plain.bandwidth, plain.ignore_client_bandwidth), (Bandwidth::default(), false));
        let error = settings("bandwidth.up = \"fast\"").unwrap_err().to_string();
        assert!(error.contains("\"fast\" is not a rate such as \"200 mbps\""), "{error}");
        let error = settings("bandwidth.down = 0").unwrap_err().to_string();
        assert!(error.contains("\"0\" is not a rate between 8 bps and 100 tbps"), "{error}");
        let error = settings("bandwidth.down = \"5 furlongs\"").unwrap_err().to_string();
        assert!(error.contains("\"furlongs\" is not a unit of rate (bps, kbps, mbps, gbps, tbps)"), "{error}");
        assert!(settings("bandwidth.up = 1.5").is_err());
        assert!(settings("bandwidth.sideways = 5").is_err());
    }

    /// What `hearth-node enroll` writes for control's hop range and masquerade reads back.
    #[test]
    fn enrollments_hop_and_masquerade_lines_read_back() {
        let read =
            settings("hop = \"20000-20099\"\nmasquerade = { type = \"proxy\", url = \"https://example.net/\" }\n")
                .unwrap();
        assert_eq!(read.hop.as_deref(), Some("20000-20099"));
        let proxy = crate::masquerade::Masquerade::Proxy { url: "https://example.net/".into() };
        assert_eq!(read.masquerade, proxy);
    }
}
