//! A real ACME CA for a test: Debian's `pebble` (RFC 8555, test-only), with its companion
//! `pebble-challtestsrv` as the DNS server it looks names up in (every name is 127.0.0.1), on
//! loopback ports chosen at run time. Pebble checks HTTP-01 and TLS-ALPN-01 on the ports the
//! test gives it (where the program under test answers), serves its own API over HTTPS with a
//! certificate made here (the program trusts that file), and makes a new root at each start,
//! read from its management API.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

/// A running Pebble and its DNS.
pub struct Pebble {
    pebble: Child,
    dns: Child,
    /// The directory URL.
    pub directory: String,
    /// The file of the certificate Pebble serves its API with (what clients of the API trust).
    pub api_root: PathBuf,
    management: u16,
    _dir: tempfile::TempDir,
}

impl Pebble {
    /// Starts Pebble checking HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port` (of the
    /// names it is asked for, all 127.0.0.1), issuing certificates valid `validity` seconds
    /// (`None`: Pebble's five years).
    pub fn start(http_port: u16, tls_port: u16, validity: Option<u64>) -> Result<Pebble> {
        Pebble::start_with(http_port, tls_port, validity, None)
    }

    /// [`Pebble::start`] asking new accounts for External Account Binding with the key id
    /// and HMAC key (base64url) `eab`, as ZeroSSL does.
    pub fn start_with(
        http_port: u16,
        tls_port: u16,
        validity: Option<u64>,
        eab: Option<(&str, &str)>,
    ) -> Result<Pebble> {
        let dir = tempfile::tempdir()?;
        let (api, management, dns_port) =
            (crate::edge::free_port()?, crate::edge::free_port()?, crate::edge::free_port()?);
        let key = rcgen::KeyPair::generate()?;
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let cert = rcgen::CertificateParams::new(names)?.self_signed(&key)?;
        let api_root = dir.path().join("api.crt");
        std::fs::write(&api_root, cert.pem())?;
        std::fs::write(dir.path().join("api.key"), key.serialize_pem())?;
        let mut config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{api}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": dir.path().join("api.crt"),
            "privateKey": dir.path().join("api.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        if let Some(validity) = validity {
            config["pebble"]["certificateValidityPeriod"] = validity.into();
        }
        if let Some((kid, key)) = eab {
            config["pebble"]["externalAccountBindingRequired"] = true.into();
            config["pebble"]["externalAccountMACKeys"] = serde_json::json!({ kid: key });
        }
        std::fs::write(dir.path().join("pebble.json"), serde_json::to_vec_pretty(&config)?)?;
        let dns = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
            .args(["-management", &format!("127.0.0.1:{}", crate::edge::free_port()?)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting pebble-challtestsrv (Debian's pebble package)")?;
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(dir.path().join("pebble.json"))
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            // No random waits before checking; no nonce refused at random.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting pebble (Debian's pebble package)")?;
        let mut pebble =
            Pebble { pebble, dns, directory: format!("https://127.0.0.1:{api}/dir"), api_root, management, _dir: dir };
        pebble.wait_ready([api, management])?;
        Ok(pebble)
    }

    fn client(&self) -> Result<reqwest::Client> {
        let root = reqwest::Certificate::from_pem(&std::fs::read(&self.api_root)?)?;
        Ok(crate::http().tls_certs_only([root]).build()?)
    }

    /// Waits until Pebble takes connections on its API and management ports.
    fn wait_ready(&mut self, ports: [u16; 2]) -> Result<()> {
        let started = std::time::Instant::now();
        while !ports.iter().all(|port| std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok()) {
            if let Some(status) = self.pebble.try_wait()? {
                bail!("pebble exited ({status})");
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("pebble did not listen at {}", self.directory);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The root Pebble issues under now (PEM), from its management API.
    pub async fn root(&self) -> Result<String> {
        let url = format!("https://127.0.0.1:{}/roots/0", self.management);
        let answer = self.client()?.get(url).send().await?.error_for_status()?;
        Ok(answer.text().await?)
    }

    /// Writes [`Pebble::root`] to `path`.
    pub async fn write_root(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.root().await?)?;
        Ok(())
    }

    /// Stops Pebble: a CA that does not answer.
    pub fn stop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}
