//! Real SOCKS5 servers for the node's outbounds: Dante (Debian's `dante-server`, which also
//! relays UDP through UDP ASSOCIATE), on a port chosen at run time, logging every connection
//! and association it passes, so a test sees what went through it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

/// A running Dante, killed when dropped.
pub struct Dante {
    child: Child,
    /// Its `127.0.0.1:port`.
    pub server: String,
    log: PathBuf,
}

impl Dante {
    /// Starts Dante on a free port of 127.0.0.1 (no authentication; CONNECT and UDP
    /// ASSOCIATE to anywhere), its files in `dir`.
    pub fn start(dir: &Path) -> Result<Dante> {
        let program = Path::new("/usr/sbin/danted");
        if !program.exists() {
            bail!("{} is missing: tests/tools/toolchain.sh's hearth_install_socks installs it", program.display());
        }
        let root = std::fs::read_to_string("/proc/self/status")?.lines().any(|l| l.starts_with("Uid:\t0\t"));
        let users = if root { "user.privileged: root\nuser.unprivileged: nobody\n" } else { "" };
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let (conf, log, pid) =
                (dir.join(format!("dante-{port}.conf")), dir.join(format!("dante-{port}.log")), dir.join("dante.pid"));
            let text = format!(
                "logoutput: {log}\ninternal: 127.0.0.1 port = {port}\nexternal: 127.0.0.1\nsocksmethod: none\n\
                 clientmethod: none\n{users}client pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}\n\
                 socks pass {{\n  from: 0.0.0.0/0 to: 0.0.0.0/0\n  command: connect udpassociate udpreply\n  log: connect iooperation\n}}\n",
                log = log.display()
            );
            std::fs::write(&conf, text)?;
            let mut child = Command::new(program)
                .args(["-f".as_ref(), conf.as_os_str(), "-p".as_ref(), pid.as_os_str()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting danted")?;
            for _ in 0..100 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(Dante { child, server: format!("127.0.0.1:{port}"), log });
                }
                if child.try_wait()?.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        bail!("danted did not start listening")
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The TCP connections it passed to `port` (a CONNECT's log line ends with the target).
    pub fn connected_to(&self, port: u16) -> usize {
        let to = format!(".{port}");
        self.log().lines().filter(|line| line.contains("tcp/connect [") && line.trim_end().ends_with(&to)).count()
    }

    /// The UDP datagrams it relayed to or from `port`.
    pub fn relayed_udp(&self, port: u16) -> usize {
        let at = format!(".{port}");
        let relayed = |line: &&str| line.contains("udp/udpassociate -:") || line.contains("udp/udpreply -:");
        self.log().lines().filter(relayed).filter(|line| line.contains(&at)).count()
    }
}

impl Drop for Dante {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
