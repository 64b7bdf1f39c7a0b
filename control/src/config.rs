//! Control's configuration: `control.toml` in the data directory (written by `init`), with
//! environment overrides, validated once at start with clear errors.
//!
//! Every setting (its key, its variable, its default and what it means) is listed in
//! `config/settings.rs`, which the manual's table is made from
//! (docs/reference/generated/control-settings.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use hearth_shared::keys::PublicKey;
use hearth_shared::wire::Profile;
use serde::Deserialize;

/// The file in the data directory.
pub(crate) const FILE: &str = "control.toml";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    public_url: Option<String>,
    admin_prefix: Option<String>,
    edge_url: Option<String>,
    sub_url: Option<String>,
    tls: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    log_format: Option<String>,
    metrics_token: Option<String>,
    telegram_api: Option<String>,
    archive_after_secs: Option<u64>,
    archive_every_secs: Option<u64>,
    release_timeout_secs: Option<u64>,
    edge_failover_secs: Option<u64>,
    node_binaries: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    profile: ProfileConfig,
    #[serde(default)]
    acme: AcmeConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcmeConfig {
    directory: Option<String>,
    email: Option<String>,
    eab_kid: Option<String>,
    eab_hmac_key: Option<String>,
    ca_root: Option<String>,
    domain: Option<String>,
    challenge: Option<String>,
    http_listen: Option<String>,
}

/// Certificates by ACME: the CA, for nodes with a domain and for the panel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Acme {
    /// The CA's directory URL.
    pub(crate) directory: String,
    /// Where the CA may write about accounts.
    pub(crate) email: Option<String>,
    /// External Account Binding (key id, HMAC key), for CAs that ask for it.
    pub(crate) eab: Option<(String, String)>,
    /// A root to trust for the CA's own HTTPS (PEM file), given to nodes too.
    pub(crate) ca_root: Option<PathBuf>,
    /// The panel's own certificate, when it has a domain, and where HTTP-01 listens.
    pub(crate) panel: Option<(hearth_acme::Settings, SocketAddr)>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileConfig {
    #[serde(default = "default_title")]
    title: String,
    #[serde(default)]
    announce: String,
    #[serde(default)]
    support_url: String,
    #[serde(default = "default_interval")]
    update_interval_hours: u32,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            title: default_title(),
            announce: String::new(),
            support_url: String::new(),
            update_interval_hours: default_interval(),
        }
    }
}

fn default_title() -> String {
    "Hearth".to_owned()
}

fn default_interval() -> u32 {
    12
}

/// The edge's settings (`edge.toml`, made by `init`), shared by control and its edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EdgeSettings {
    /// The root key (the edge's trust anchor).
    pub(crate) root_key: String,
    /// The bearer token control pushes with.
    pub(crate) push_token: String,
    /// The secret path of the edge's API (also control's node API).
    pub(crate) api_prefix: String,
    /// The path of subscription links.
    pub(crate) sub_prefix: String,
}

/// How control serves HTTPS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tls {
    /// From PEM files (the self-signed pair `init` made, or the operator's).
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key.
        key: PathBuf,
    },
    /// Plain HTTP, for a reverse proxy in front that terminates TLS.
    Off,
}

/// The validated configuration.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) listen: SocketAddr,
    pub(crate) public_url: String,
    pub(crate) admin_prefix: String,
    pub(crate) edge_url: Option<String>,
    pub(crate) sub_url: String,
    pub(crate) tls: Tls,
    pub(crate) log_json: bool,
    pub(crate) metrics_token: Option<String>,
    /// Where the Telegram Bot API is.
    pub(crate) telegram_api: String,
    /// Quiet time after a change before the state archive is pushed to the edge.
    pub(crate) archive_after_secs: u64,
    /// The longest time between two archives.
    pub(crate) archive_every_secs: u64,
    /// How long a node told to run a release has to run it.
    pub(crate) release_timeout_secs: u64,
    /// How long the primary edge may fail while another takes pushes before links move to the
    /// other (0: never; see [`crate::tasks::fail_over`]).
    pub(crate) edge_failover_secs: u64,
    /// Where the node binaries shipped with control are (see [`crate::releases::shipped`]).
    pub(crate) node_binaries: PathBuf,
    /// The reverse proxies whose `CF-Connecting-IP` and `X-Forwarded-For` name the client.
    pub(crate) trusted_proxies: Vec<hearth_shared::forwarded::Cidr>,
    pub(crate) profile: Profile,
    /// Certificates by ACME.
    pub(crate) acme: Acme,
    pub(crate) edge: EdgeSettings,
    pub(crate) root: PublicKey,
    /// The data directory the settings came from.
    pub(crate) data_dir: std::path::PathBuf,
    /// Whether `public_url` was derived from `listen` (then [`Config::bound`] fixes it, and
    /// the link base derived from it, once the real port is known).
    derived_public: bool,
    /// `sub_url` as set (file, environment or the owner), when it is not derived.
    explicit_sub: Option<String>,
}

fn pick(env: &dyn Fn(&str) -> Option<String>, name: &str, file: Option<String>) -> Option<String> {
    env(name).filter(|v| !v.is_empty()).or(file)
}

pub(crate) fn check_url(what: &str, url: &str) -> Result<String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => Ok(url.to_owned()),
        _ => bail!("{what} must be an http:// or https:// URL, not {url:?}"),
    }
}

/// A secret path segment: 16 to 64 characters of letters, digits, `-` and `_`.
pub(crate) fn check_prefix(what: &str, prefix: &str) -> Result<()> {
    if !(16..=64).contains(&prefix.len())
        || !prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        bail!("{what} must be 16 to 64 letters, digits, '-' or '_'");
    }
    Ok(())
}

impl Config {
    /// Loads `control.toml` and `edge.toml` from `data_dir`, applies environment overrides
    /// (through `env`), and validates everything.
    pub(crate) fn load(data_dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let path = data_dir.join(FILE);
        let file = read_file(&path)?;
        let (edge, root) = read_edge(data_dir)?;

        let listen = listen(env, file.listen)?;
        let tls = tls(env, data_dir, file.tls, file.tls_cert, file.tls_key)?;
        let scheme = if tls == Tls::Off { "http" } else { "https" };
        let public_url = pick(env, "HEARTH_PUBLIC_URL", file.public_url);
        let derived_public = public_url.is_none();
        let public_url = match public_url {
            Some(url) => check_url("public_url", &url)?,
            None => format!("{scheme}://{listen}"),
        };
        let admin_prefix = admin_prefix(env, file.admin_prefix, &path, &edge)?;
        let edge_url = pick(env, "HEARTH_EDGE_URL", file.edge_url)
            .filter(|u| !u.trim().is_empty())
            .map(|u| check_url("edge_url", &u))
            .transpose()?;
        let explicit_sub =
            pick(env, "HEARTH_SUB_URL", file.sub_url).map(|url| check_url("sub_url", &url)).transpose()?;
        let sub_url = link_base(&public_url, &edge.sub_prefix, edge_url.as_deref(), explicit_sub.as_deref());
        let log_json = log_json(env, file.log_format)?;
        let metrics_token = pick(env, "HEARTH_METRICS_TOKEN", file.metrics_token);
        if metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
            bail!("metrics_token must be at least 16 characters");
        }
        let telegram_api = check_url(
            "telegram_api",
            &pick(env, "HEARTH_TELEGRAM_API", file.telegram_api)
                .unwrap_or_else(|| "https://api.telegram.org".to_owned()),
        )?;
        let archive_after_secs = seconds(env, "HEARTH_ARCHIVE_AFTER_SECS", file.archive_after_secs, 30)?.max(1);
        let archive_every_secs = seconds(env, "HEARTH_ARCHIVE_EVERY_SECS", file.archive_every_secs, 3600)?.max(60);
        let release_timeout_secs = seconds(env, "HEARTH_RELEASE_TIMEOUT_SECS", file.release_timeout_secs, 900)?.max(10);
        let edge_failover_secs = seconds(env, "HEARTH_EDGE_FAILOVER_SECS", file.edge_failover_secs, 600)?;
        let node_binaries = node_binaries(env, file.node_binaries, data_dir);
        let trusted_proxies = trusted_proxies(env, file.trusted_proxies.as_deref())?;
        let acme = acme(env, file.acme, data_dir, tls == Tls::Off)?;
        let profile = profile(file.profile)?;
        Ok(Config {
            listen,
            public_url,
            admin_prefix,
            edge_url,
            sub_url,
            tls,
            log_json,
            metrics_token,
            telegram_api,
            archive_after_secs,
            archive_every_secs,
            release_timeout_secs,
            edge_failover_secs,
            node_binaries,
            trusted_proxies,
            profile,
            acme,
            edge,
            root,
            data_dir: data_dir.to_path_buf(),
            derived_public,
            explicit_sub,
        })
    }

    /// Fixes the URLs derived from `listen` once the listener is bound (`listen` may name
    /// port 0).
    pub(crate) fn bound(&mut self, local: SocketAddr) {
        let scheme = if self.tls == Tls::Off { "http" } else { "https" };
        if self.derived_public {
            self.public_url = format!("{scheme}://{local}");
            self.sub_url = self.link_base(self.edge_url.as_deref(), self.explicit_sub.as_deref());
        }
    }
}

/// Reads `control.toml` at `path`.
fn read_file(path: &Path) -> Result<FileConfig> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("{} is not valid", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{} is missing (run `hearth-control init` first)", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Reads `edge.toml` from `data_dir`, checked, with the root key it holds.
fn read_edge(data_dir: &Path) -> Result<(EdgeSettings, PublicKey)> {
    let edge_path = data_dir.join("edge.toml");
    let edge: EdgeSettings = toml::from_str(
        &std::fs::read_to_string(&edge_path).with_context(|| format!("reading {}", edge_path.display()))?,
    )
    .with_context(|| format!("{} is not valid", edge_path.display()))?;
    check_prefix("the edge's api_prefix", &edge.api_prefix)?;
    let root: PublicKey =
        edge.root_key.parse().with_context(|| format!("root_key in {} is not a public key", edge_path.display()))?;
    Ok((edge, root))
}

/// The address and port control listens on (`listen`, `HEARTH_LISTEN`).
fn listen(env: &dyn Fn(&str) -> Option<String>, file: Option<String>) -> Result<SocketAddr> {
    let listen = pick(env, "HEARTH_LISTEN", file).unwrap_or_else(|| "127.0.0.1:8443".to_owned());
    listen.parse().with_context(|| format!("listen must be an address and port like 0.0.0.0:8443, not {listen:?}"))
}

/// How control serves HTTPS (`tls`, with `tls_cert` and `tls_key` relative to `data_dir`),
/// the files checked to be there.
fn tls(
    env: &dyn Fn(&str) -> Option<String>,
    data_dir: &Path,
    tls: Option<String>,
    cert: Option<String>,
    key: Option<String>,
) -> Result<Tls> {
    Ok(match pick(env, "HEARTH_TLS", tls).as_deref().unwrap_or("self-signed") {
        "self-signed" | "files" => {
            let at = |p: Option<String>, default: &str| {
                let p = PathBuf::from(p.unwrap_or_else(|| default.to_owned()));
                if p.is_absolute() { p } else { data_dir.join(p) }
            };
            let cert = at(pick(env, "HEARTH_TLS_CERT", cert), "tls.crt");
            let key = at(pick(env, "HEARTH_TLS_KEY", key), "tls.key");
            for path in [&cert, &key] {
                if !path.exists() {
                    bail!("{} is missing (tls = \"off\" serves plain HTTP behind a proxy)", path.display());
                }
            }
            Tls::Files { cert, key }
        }
        "off" => Tls::Off,
        other => bail!("tls must be self-signed, files or off, not {other:?}"),
    })
}

/// The admin panel's secret path, which `control.toml` at `path` must hold, unlike the edge's
/// prefixes.
fn admin_prefix(
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<String>,
    path: &Path,
    edge: &EdgeSettings,
) -> Result<String> {
    let admin_prefix = pick(env, "HEARTH_ADMIN_PREFIX", file)
        .with_context(|| format!("admin_prefix is missing from {}", path.display()))?;
    check_prefix("admin_prefix", &admin_prefix)?;
    if admin_prefix == edge.api_prefix || admin_prefix == edge.sub_prefix {
        bail!("admin_prefix must differ from the edge's prefixes");
    }
    Ok(admin_prefix)
}

/// Whether logs are JSON (`log_format`: text or json).
fn log_json(env: &dyn Fn(&str) -> Option<String>, file: Option<String>) -> Result<bool> {
    match pick(env, "HEARTH_LOG_FORMAT", file).as_deref().unwrap_or("text") {
        "text" => Ok(false),
        "json" => Ok(true),
        other => bail!("log_format must be text or json, not {other:?}"),
    }
}

/// A number of seconds: the variable `name`, else the file's, else `default`.
fn seconds(env: &dyn Fn(&str) -> Option<String>, name: &str, file: Option<u64>, default: u64) -> Result<u64> {
    match env(name).filter(|v| !v.is_empty()) {
        Some(value) => value.parse().with_context(|| format!("{name} must be a number of seconds")),
        None => Ok(file.unwrap_or(default)),
    }
}

/// Where the node binaries shipped with control are: as set (relative to `data_dir`), else
/// beside `hearth-control` itself.
fn node_binaries(env: &dyn Fn(&str) -> Option<String>, file: Option<String>, data_dir: &Path) -> PathBuf {
    match pick(env, "HEARTH_NODE_BINARIES", file) {
        Some(dir) => data_dir.join(dir),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("/usr/local/bin")),
    }
}

/// The reverse proxies in front (comma-separated in the variable, a list in the file).
fn trusted_proxies(
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<&[String]>,
) -> Result<Vec<hearth_shared::forwarded::Cidr>> {
    match env("HEARTH_TRUSTED_PROXIES").filter(|v| !v.is_empty()) {
        Some(list) => hearth_shared::forwarded::parse_list([list.as_str()]),
        None => hearth_shared::forwarded::parse_list(file.into_iter().flatten().map(String::as_str)),
    }
    .map_err(|problem| anyhow::anyhow!("trusted_proxies {problem}"))
}

/// The `[profile]` table, checked: what apps show.
fn profile(profile: ProfileConfig) -> Result<Profile> {
    if profile.title.trim().is_empty() || profile.title.len() > 100 {
        bail!("profile.title must be 1 to 100 bytes");
    }
    let optional = |s: String| (!s.trim().is_empty()).then_some(s);
    Ok(Profile {
        title: profile.title,
        announce: optional(profile.announce),
        support_url: url("support_url", &profile.support_url).map_err(|e| anyhow::anyhow!("[profile] {e}"))?,
        web_page_url: None,
        update_interval_hours: profile.update_interval_hours.clamp(1, 168),
    })
}

/// The `[acme]` table with its environment overrides, checked.
fn acme(env: &dyn Fn(&str) -> Option<String>, file: AcmeConfig, data_dir: &Path, plain: bool) -> Result<Acme> {
    let directory = check_url(
        "acme.directory",
        &pick(env, "HEARTH_ACME_DIRECTORY", file.directory).unwrap_or_else(|| hearth_acme::LETS_ENCRYPT.to_owned()),
    )?;
    let email = pick(env, "HEARTH_ACME_EMAIL", file.email).filter(|e| !e.trim().is_empty());
    if email.as_ref().is_some_and(|e| !e.contains('@') || e.contains(char::is_whitespace) || e.len() > 254) {
        bail!("acme.email must be an email address");
    }
    let eab = match (file.eab_kid, file.eab_hmac_key) {
        (Some(kid), Some(key)) => Some((kid, key)),
        (None, None) => None,
        _ => bail!("acme.eab_kid and acme.eab_hmac_key go together"),
    };
    let ca_root = pick(env, "HEARTH_ACME_CA_ROOT", file.ca_root).map(|p| {
        let p = PathBuf::from(p);
        if p.is_absolute() { p } else { data_dir.join(p) }
    });
    if let Some(root) = &ca_root {
        let pem = std::fs::read(root).with_context(|| format!("reading acme.ca_root {}", root.display()))?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") || pem.len() > 64 * 1024 {
            bail!("acme.ca_root {} is not a PEM certificate", root.display());
        }
    }
    let panel = match pick(env, "HEARTH_ACME_DOMAIN", file.domain).filter(|d| !d.trim().is_empty()) {
        None => None,
        Some(domain) => {
            let domain = domain.trim().to_ascii_lowercase();
            if !hearth_acme::is_domain(&domain) {
                bail!("acme.domain {domain:?} is not a DNS name a CA issues certificates for");
            }
            if plain {
                bail!(
                    "acme.domain needs control to serve HTTPS (tls is off: the proxy in front holds the certificate)"
                );
            }
            let challenge = match pick(env, "HEARTH_ACME_CHALLENGE", file.challenge).as_deref().unwrap_or("tls-alpn-01")
            {
                "tls-alpn-01" => hearth_acme::Challenge::TlsAlpn01,
                "http-01" => hearth_acme::Challenge::Http01,
                other => bail!("acme.challenge must be tls-alpn-01 or http-01, not {other:?}"),
            };
            let http = pick(env, "HEARTH_ACME_HTTP_LISTEN", file.http_listen).unwrap_or_else(|| "0.0.0.0:80".into());
            let http: SocketAddr =
                http.parse().with_context(|| format!("acme.http_listen must be an address and port, not {http:?}"))?;
            let settings = hearth_acme::Settings {
                domain,
                directory: directory.clone(),
                email: email.clone(),
                eab: eab.clone(),
                challenge,
                ca_root: ca_root.clone(),
            };
            Some((settings, http))
        }
    };
    Ok(Acme { directory, email, eab, ca_root, panel })
}

/// The base of links: the one set, else the edge's (or control's public URL) and the links'
/// path segment.
fn link_base(public_url: &str, sub_prefix: &str, edge_url: Option<&str>, explicit: Option<&str>) -> String {
    match explicit {
        Some(url) => url.to_owned(),
        None => format!("{}/{sub_prefix}", edge_url.unwrap_or(public_url)),
    }
}

impl Config {
    /// The base of links for these addresses (see [`link_base`]).
    pub(crate) fn link_base(&self, edge_url: Option<&str>, explicit: Option<&str>) -> String {
        link_base(&self.public_url, &self.edge.sub_prefix, edge_url, explicit)
    }

    /// Sets the edge and the explicit link base (`None`: derived from the edge, else from
    /// `public_url`), as the owner set them.
    pub(crate) fn set_addresses(&mut self, edge_url: Option<String>, sub_url: Option<String>) {
        self.sub_url = self.link_base(edge_url.as_deref(), sub_url.as_deref());
        self.explicit_sub = sub_url;
        self.edge_url = edge_url;
    }

    /// The link base the owner set (`None`: derived).
    pub(crate) fn explicit_sub(&self) -> Option<&str> {
        self.explicit_sub.as_deref()
    }

    /// The SHA-256 of control's certificate (hex), for nodes to pin.
    fn pin(&self) -> Option<String> {
        match &self.tls {
            Tls::Files { cert, .. } => crate::tls::pin_of(cert).ok().map(hex::encode),
            Tls::Off => None,
        }
    }

    /// The one-line command that enrolls a node with a one-time `token` (the node binary
    /// installed by hand).
    pub(crate) fn enroll_command(&self, token: &str) -> String {
        let pin = self.pin().map(|pin| format!(" --control-pin {pin}")).unwrap_or_default();
        format!(
            // `--token=`: a token may start with '-', which must not read as an option.
            "hearth-node enroll --control {} --api-prefix {} --token={token}{pin}",
            self.public_url, self.edge.api_prefix
        )
    }

    /// The one-line command that installs, enrolls and starts a node listening on `port` on a
    /// fresh Linux server, from `release` (the release in force); `None` without one.
    pub(crate) fn install_command(
        &self,
        token: &str,
        port: u16,
        release: Option<&hearth_shared::release::ReleaseManifest>,
    ) -> Option<String> {
        let pin = self.pin();
        crate::install::command(&self.public_url, &self.edge.api_prefix, token, pin.as_deref(), port, release)
    }
}

/// The `control.toml` that `init` writes.
pub(crate) fn initial_file(admin_prefix: &str) -> String {
    format!(
        "# Hearth control's settings, made by `hearth-control init`. Every key can also be set from\n\
         # the environment (HEARTH_LISTEN, HEARTH_EDGE_URL, ...); see docs/reference/settings.md.\n\
         listen = \"127.0.0.1:8443\"\n\
         # public_url = \"https://panel.example.net:8443\"\n\
         admin_prefix = \"{admin_prefix}\"\n\
         # edge_url = \"https://hearth-edge.example.workers.dev\"\n\
         tls = \"self-signed\"\n\
         log_format = \"text\"\n\
         # A reverse proxy in front (nginx, Caddy): name it, so limits per address see clients.\n\
         # trusted_proxies = [\"127.0.0.1\"]\n\
         # Where the hearth-node binaries shipped with control are (default: beside hearth-control):\n\
         # the panel signs them as a node release in one click.\n\
         # node_binaries = \"/usr/local/lib/hearth\"\n\
         \n\
         [profile]\n\
         title = \"Hearth\"\n\
         update_interval_hours = 12\n"
    )
}

/// A web address the owner gives (a help link, a web page, an edge): checked, as apps get it
/// (its domain in ASCII, the rest percent-encoded); `None` when empty.
pub(crate) fn url(field: &'static str, value: &str) -> Result<Option<String>, crate::error::Error> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    // Apps get it in a header, ASCII only: a domain beyond ASCII is asked for in its ASCII
    // form, and the rest of the address is kept percent-encoded, as a browser sends it.
    let host = value.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if !host.is_ascii() {
        return Err(crate::error::Error::invalid(
            "bad_url",
            format!(
                "{field}: write the domain {host:?} in its ASCII form (xn--...), as the browser's address bar shows it"
            ),
        ));
    }
    let value = &hearth_shared::encode_beyond_ascii(value);
    if !hearth_shared::is_web_address(value) {
        return Err(crate::error::Error::invalid(
            "bad_url",
            format!("{field} must be an http:// or https:// address without spaces"),
        ));
    }
    Ok(Some(value.to_owned()))
}

/// Every setting as data, for the tests and the manual.
#[cfg(test)]
mod settings;

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(control: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), control).unwrap();
        std::fs::write(
            dir.path().join("edge.toml"),
            format!(
                "root_key = \"{}\"\npush_token = \"{}\"\napi_prefix = \"api-0123456789abcdef\"\nsub_prefix = \"s\"\n",
                hearth_shared::keys::SecretKey::from_seed(hearth_shared::keys::Role::Root, &[1; 32]).public(),
                "t".repeat(64)
            ),
        )
        .unwrap();
        dir
    }

    #[test]
    fn defaults_overrides_and_errors() {
        let dir = setup(&initial_file("admin-0123456789abcdef"));
        std::fs::write(dir.path().join("tls.crt"), "").unwrap();
        std::fs::write(dir.path().join("tls.key"), "").unwrap();
        let config = Config::load(dir.path(), &|_| None).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8443");
        assert_eq!(config.public_url, "https://127.0.0.1:8443");
        assert_eq!(config.sub_url, "https://127.0.0.1:8443/s");
        assert!(config.edge_url.is_none());

        let env = |name: &str| match name {
            "HEARTH_EDGE_URL" => Some("http://127.0.0.1:8787/".to_owned()),
            "HEARTH_TLS" => Some("off".to_owned()),
            "HEARTH_LOG_FORMAT" => Some("json".to_owned()),
            _ => None,
        };
        let config = Config::load(dir.path(), &env).unwrap();
        assert_eq!(config.edge_url.as_deref(), Some("http://127.0.0.1:8787"));
        assert_eq!(config.sub_url, "http://127.0.0.1:8787/s");
        assert_eq!(config.public_url, "http://127.0.0.1:8443");
        assert!(config.log_json);
        assert!(config.trusted_proxies.is_empty());

        let env = |name: &str| (name == "HEARTH_TRUSTED_PROXIES").then(|| "10.0.0.5, 2001:db8::/32".to_owned());
        let config = Config::load(dir.path(), &env).unwrap();
        assert_eq!(config.trusted_proxies, ["10.0.0.5".parse().unwrap(), "2001:db8::/32".parse().unwrap()]);

        for (name, value, expected) in [
            ("HEARTH_LISTEN", "nowhere", "listen must be"),
            ("HEARTH_EDGE_URL", "ftp://x", "edge_url must be"),
            ("HEARTH_TLS", "maybe", "tls must be"),
            ("HEARTH_ADMIN_PREFIX", "short", "admin_prefix must be"),
            ("HEARTH_TRUSTED_PROXIES", "10.0.0.0/8, proxy.example", "trusted_proxies \"proxy.example\""),
            ("HEARTH_TRUSTED_PROXIES", "10.0.0.0/33", "trusted_proxies \"10.0.0.0/33\""),
        ] {
            let env = |n: &str| (n == name).then(|| value.to_owned());
            let err = format!("{:#}", Config::load(dir.path(), &env).unwrap_err());
            assert!(err.contains(expected), "{name}: {err}");
        }
        let file = initial_file("admin-0123456789abcdef")
            .replace("[profile]", "trusted_proxies = [\"127.0.0.1\", \"::1\"]\n[profile]");
        std::fs::write(dir.path().join(FILE), file).unwrap();
        let config = Config::load(dir.path(), &|_| None).unwrap();
        assert_eq!(config.trusted_proxies, ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]);
        let dir = setup("listen = \"127.0.0.1:1\"\nbogus = 1\n");
        let err = format!("{:#}", Config::load(dir.path(), &|_| None).unwrap_err());
        assert!(err.contains("bogus"), "{err}");
    }
}
