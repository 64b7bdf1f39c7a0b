//! `hearth-node enroll`: the one command that joins a node to control.
//!
//! It makes the node's key and TLS identity, registers the key with control in exchange for
//! the one-time token (over TLS pinned to control's certificate), and writes what control
//! answered into the state directory: the node's id and port, the trust (control's root key
//! and the records certifying its signing key, checked here), and where to pull from.
//! Nothing is written before control's answer is read and checked: an enrollment that fails
//! leaves the directory as it was, to be enrolled into again.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use hearth_shared::keys::{PublicKey, Role, SecretKey};
use hearth_shared::trust::{RoleKeys, Trust};
use serde::Deserialize;

use crate::state::StateDir;

/// What the operator passes (the command control printed).
pub(crate) struct Request<'a> {
    pub(crate) control: &'a str,
    pub(crate) api_prefix: &'a str,
    pub(crate) token: &'a str,
    pub(crate) control_pin: Option<&'a str>,
    pub(crate) listen: Option<&'a str>,
    pub(crate) allow_private: bool,
}

/// The longest answer to an enrollment read: its key records in hex and a few short fields.
/// The same records travel base64 in the headers of every answer to a pull, which the node's
/// HTTP client takes only up to 408 KiB, so their hex is at most some 610 KiB.
const ANSWER_MAX: usize = 1024 * 1024;

/// The longest refusal read (a JSON error with a short message).
const ERROR_MAX: usize = 16 * 1024;

#[derive(Deserialize)]
struct Answer {
    node: u64,
    port: u16,
    obfs: Option<String>,
    /// The port range the node also answers on (absent from controls before port hopping).
    #[serde(default)]
    hop: Option<String>,
    /// The web site shown to anyone without a credential (absent: nginx's 404 page).
    #[serde(default)]
    masquerade: Option<String>,
    root_key: String,
    key_records: Vec<String>,
    api_prefix: String,
    edge_url: Option<String>,
    /// The name the node's certificate is made out to (absent from controls before it;
    /// empty: the node names it after its machine).
    #[serde(default)]
    tls_name: Option<String>,
    /// Where the node gets a public certificate for its domain, if it has one.
    #[serde(default)]
    acme: Option<AcmeAnswer>,
}

/// The ACME settings control gives a node with a domain.
#[derive(Deserialize)]
struct AcmeAnswer {
    domain: String,
    directory: String,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    eab_kid: Option<String>,
    #[serde(default)]
    eab_hmac_key: Option<String>,
    /// A root (PEM) to trust for the CA's own HTTPS.
    #[serde(default)]
    ca_root: Option<String>,
}

/// The name of this machine, as a DNS label or name, for a self-signed certificate that
/// names no domain; `localhost` when it has none that can be.
fn machine_name(not: Option<&str>) -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_ascii_lowercase();
    let usable = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        && not.is_none_or(|not| !name.eq_ignore_ascii_case(not));
    if usable { name } else { crate::identity::DEFAULT_NAME.to_owned() }
}

/// Enrolls the node into `dir`.
pub(crate) async fn enroll(dir: &Path, request: &Request<'_>) -> Result<u64> {
    let state = StateDir::new(dir);
    make_dir(dir, &state)?;
    let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng)?;
    let client = crate::pin::control_client(request.control_pin)?;
    let answer = ask_control(&client, request, &key).await?;
    let trust = trust_of(&answer)?;
    // The certificate is made out to the name control gave (the node's SNI or host), then
    // registered with control, signed with the node's new key; when that does not get
    // through, `serve` registers it.
    let tls_name = tls_name(&answer);
    let tls_name = tls_name.as_str();
    state.save_key(&key)?;
    crate::identity::make(&state, tls_name, crate::now())?;
    state.write("trust.bin", &hearth_shared::wire::encode(&trust))?;
    register(&client, request, &answer, &key, &state).await?;
    let settings = settings(request, &answer, tls_name)?;
    if let Some(root) = answer.acme.as_ref().and_then(|acme| acme.ca_root.as_ref()) {
        state.write(ACME_ROOT, root.as_bytes())?;
    }
    // Written last: its presence marks an enrolled node.
    state.write("node.toml", settings.as_bytes())?;
    Ok(answer.node)
}

/// Makes the state directory (the owner's alone), refusing one that holds a node already.
fn make_dir(dir: &Path, state: &StateDir) -> Result<()> {
    if state.path("node.toml").exists() {
        bail!("{} already holds an enrolled node; use a new state directory", dir.display());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Checked before the token is spent: the key is written only once control answered.
    if state.path(crate::state::KEY_FILE).exists() {
        bail!("{} already holds a node key; use a new state directory", dir.display());
    }
    Ok(())
}

/// Registers `key` with control in exchange for the one-time token, and reads control's
/// answer (a refusal is the error, with control's reason).
async fn ask_control(client: &reqwest::Client, request: &Request<'_>, key: &SecretKey) -> Result<Answer> {
    let url = format!("{}/{}/enroll", request.control.trim_end_matches('/'), request.api_prefix);
    let response = client
        .post(url)
        .json(&serde_json::json!({
            "token": request.token,
            "key": key.public().to_string(),
            "version": env!("CARGO_PKG_VERSION"),
        }))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("control did not answer: {:#}", anyhow::Error::from(e.without_url())))?;
    if !response.status().is_success() {
        let status = response.status();
        // A refusal too long to be one is not read on, and said so in place of its reason.
        let message = match crate::capped::read(response, ERROR_MAX, "control's refusal").await {
            Ok(body) => {
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                body["error"]["message"].as_str().unwrap_or("no reason given").to_owned()
            }
            Err(e) => format!("({e})"),
        };
        bail!("control refused the enrollment ({status}): {message}");
    }
    let answer = crate::capped::read(response, ANSWER_MAX, "an enrollment answer").await.context("control's answer")?;
    serde_json::from_slice(&answer).context("control's answer")
}

/// The trust control's answer gives: its root key, and the records certifying its signing
/// key, checked against the root.
fn trust_of(answer: &Answer) -> Result<Trust> {
    let root: PublicKey = answer.root_key.parse().context("control sent a malformed root key")?;
    let mut trust = Trust::new(RoleKeys::single(root));
    let records = answer
        .key_records
        .iter()
        .map(|record| hex::decode(record).context("a key record is not hex"))
        .collect::<Result<Vec<_>>>()?;
    trust.accept_chain(&records, crate::now()).context("a key record does not verify against the root key")?;
    Ok(trust)
}

/// The name the node's certificate is made out to: the one control gave, else this machine's
/// (unless it is the node's domain).
fn tls_name(answer: &Answer) -> String {
    let domain = answer.acme.as_ref().map(|acme| acme.domain.as_str());
    match answer.tls_name.as_deref().filter(|name| !name.is_empty()) {
        Some(name) => name.to_owned(),
        None => machine_name(domain),
    }
}

/// Registers the node's new certificate with control, signed with its key; when that does
/// not get through, `serve` registers it.
async fn register(
    client: &reqwest::Client,
    request: &Request<'_>,
    answer: &Answer,
    key: &SecretKey,
    state: &StateDir,
) -> Result<()> {
    let report = crate::identity::Report {
        certificate: std::fs::read_to_string(state.path(crate::identity::CERT_FILE))?,
        acme: None,
    };
    let control = request.control.trim_end_matches('/');
    match crate::identity::register(client, control, &answer.api_prefix, answer.node, key, &report).await {
        Ok(()) => crate::identity::registered_as(state, &report)?,
        Err(e) => eprintln!("the node's certificate is registered when it starts ({e:#})"),
    }
    Ok(())
}

/// The node's `node.toml`, from what the operator passed and control answered (checked here:
/// the hop range, the masquerade, the domain); the certificate made out to `tls_name`.
fn settings(request: &Request<'_>, answer: &Answer, tls_name: &str) -> Result<String> {
    let listen = request.listen.map_or_else(|| format!("0.0.0.0:{}", answer.port), str::to_owned);
    let mut settings = format!(
        "# Made by `hearth-node enroll`.\nnode = {}\nlisten = \"{listen}\"\ncontrol_url = \"{}\"\napi_prefix = \"{}\"\n",
        answer.node,
        request.control.trim_end_matches('/'),
        answer.api_prefix
    );
    if let Some(pin) = request.control_pin {
        settings.push_str(&format!("control_pin = \"{pin}\"\n"));
    }
    if let Some(edge) = &answer.edge_url {
        settings.push_str(&format!("edge_url = \"{edge}\"\n"));
    }
    if let Some(obfs) = &answer.obfs {
        settings.push_str(&format!("obfs = {}\n", toml_string(obfs)));
    }
    if let Some(hop) = &answer.hop {
        let range = crate::hop::parse_range(hop).context("control's hop range")?;
        settings.push_str(&format!("hop = \"{}-{}\"\n", range.start, range.end));
    }
    if let Some(url) = &answer.masquerade {
        let masquerade = crate::masquerade::Masquerade::Proxy { url: url.clone() };
        crate::masquerade::Site::new(&masquerade).context("control's masquerade")?;
        settings.push_str(&format!("masquerade = {{ type = \"proxy\", url = {} }}\n", toml_string(url)));
    }
    if request.allow_private {
        settings.push_str("allow_private = true\n");
    }
    settings.push_str(&format!("tls_name = {}\n", toml_string(tls_name)));
    if let Some(acme) = &answer.acme {
        acme_settings(&mut settings, acme)?;
    }
    Ok(settings)
}

/// The `[acme]` table of `node.toml`, for a node with a domain (its CA's root, if control
/// gave one, is written beside it as [`ACME_ROOT`]).
fn acme_settings(settings: &mut String, acme: &AcmeAnswer) -> Result<()> {
    if !hearth_acme::is_domain(&acme.domain) {
        bail!("control's domain for the node {:?} is not a DNS name", acme.domain);
    }
    settings.push_str(&format!(
        "\n[acme]\ndomain = {}\ndirectory = {}\n",
        toml_string(&acme.domain),
        toml_string(&acme.directory)
    ));
    if let Some(email) = &acme.email {
        settings.push_str(&format!("email = {}\n", toml_string(email)));
    }
    if let (Some(kid), Some(key)) = (&acme.eab_kid, &acme.eab_hmac_key) {
        settings.push_str(&format!("eab_kid = {}\neab_hmac_key = {}\n", toml_string(kid), toml_string(key)));
    }
    if acme.ca_root.is_some() {
        // Relative: found in the state directory wherever it is moved (the install does).
        settings.push_str(&format!("ca_root = {}\n", toml_string(ACME_ROOT)));
    }
    Ok(())
}

/// The root control gave to trust for the CA's own HTTPS.
const ACME_ROOT: &str = "acme-ca.pem";

/// What the owner must set up for the node's public certificate: its DNS record and the ports
/// the CA and clients reach (said by `enroll`, and so by the one-line install).
pub(crate) fn acme_needs(domain: &str, port: u16, masquerade_tcp: bool) -> String {
    let check = if masquerade_tcp {
        "TCP 443 (the masquerade over HTTPS, where the CA checks the domain: tls-alpn-01)"
    } else {
        "TCP 80 (where the CA checks the domain: http-01)"
    };
    format!(
        "the node gets a certificate for {domain} from the CA: point {domain} at this server (a DNS A or AAAA record) \
         and open UDP {port} and {check}; until then it serves its own, and links pin it"
    )
}

fn toml_string(value: &str) -> String {
    let escaped: String = value
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(listen: Option<&'static str>) -> Request<'static> {
        Request {
            control: "https://control.example:8443/",
            api_prefix: "ignored",
            token: "t",
            control_pin: Some("ab12"),
            listen,
            allow_private: false,
        }
    }

    fn answer(json: serde_json::Value) -> Answer {
        let mut base = serde_json::json!({
            "node": 7, "port": 8443, "obfs": null, "root_key": "", "key_records": [],
            "api_prefix": "api-x", "edge_url": null,
        });
        let serde_json::Value::Object(fields) = json else { panic!("an object") };
        base.as_object_mut().unwrap().extend(fields);
        serde_json::from_value(base).unwrap()
    }

    /// What control answered goes into `node.toml` as the node reads it back.
    #[test]
    fn the_settings_say_what_control_answered() {
        let answer = answer(serde_json::json!({
            "obfs": "pass \"word\"", "edge_url": "https://edge.example", "hop": " 20000:30000 ",
            "masquerade": "https://www.example.org/",
            "acme": { "domain": "node.example.org", "directory": "https://ca.example/dir", "email": "me@example.org",
                      "eab_kid": "kid", "eab_hmac_key": "hmac", "ca_root": "-----BEGIN CERTIFICATE-----" },
        }));
        let text = settings(&request(None), &answer, "node.example.org").unwrap();
        assert_eq!(
            text,
            "# Made by `hearth-node enroll`.\nnode = 7\nlisten = \"0.0.0.0:8443\"\n\
             control_url = \"https://control.example:8443\"\napi_prefix = \"api-x\"\ncontrol_pin = \"ab12\"\n\
             edge_url = \"https://edge.example\"\nobfs = \"pass \\\"word\\\"\"\nhop = \"20000-30000\"\n\
             masquerade = { type = \"proxy\", url = \"https://www.example.org/\" }\ntls_name = \"node.example.org\"\n\
             \n[acme]\ndomain = \"node.example.org\"\ndirectory = \"https://ca.example/dir\"\n\
             email = \"me@example.org\"\neab_kid = \"kid\"\neab_hmac_key = \"hmac\"\nca_root = \"acme-ca.pem\"\n"
        );
        let read: crate::state::Settings = toml::from_str(&text).unwrap();
        assert_eq!((read.node, read.obfs.as_deref()), (7, Some("pass \"word\"")));
        assert_eq!(read.tls_name.as_deref(), Some("node.example.org"));

        let bare =
            settings(&Request { allow_private: true, ..request(Some("127.0.0.1:9")) }, &answer_bare(), "n").unwrap();
        assert!(
            bare.contains("listen = \"127.0.0.1:9\"\n") && bare.ends_with("allow_private = true\ntls_name = \"n\"\n")
        );
        toml::from_str::<crate::state::Settings>(&bare).unwrap();
    }

    fn answer_bare() -> Answer {
        answer(serde_json::json!({}))
    }

    /// A hop range, masquerade or domain that would not serve is refused before `node.toml`.
    #[test]
    fn settings_control_got_wrong_are_refused() {
        for (wrong, said) in [
            (serde_json::json!({ "hop": "30000-20000" }), "control's hop range"),
            (serde_json::json!({ "masquerade": "ftp://x.example" }), "control's masquerade"),
            (serde_json::json!({ "acme": { "domain": "not a name", "directory": "d" } }), "is not a DNS name"),
        ] {
            let error = settings(&request(None), &answer(wrong), "n").unwrap_err();
            assert!(format!("{error:#}").contains(said), "{error:#}");
        }
    }

    /// The certificate is made out to the name control gave, else to the machine's.
    #[test]
    fn the_certificate_names_what_control_gave() {
        assert_eq!(tls_name(&answer(serde_json::json!({ "tls_name": "vpn.example" }))), "vpn.example");
        let machine = machine_name(None);
        assert_eq!(tls_name(&answer(serde_json::json!({ "tls_name": "" }))), machine);
        assert_eq!(tls_name(&answer_bare()), machine);
    }
}
