//! Running the native edge as a real process for a test.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

/// A running `hearth-edge`, stopped when dropped.
pub struct EdgeProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    db: PathBuf,
    vars: Vec<(String, String)>,
}

impl EdgeProcess {
    /// Starts the edge on a free loopback port with `vars` as its settings.
    pub fn start(db: &Path, vars: &[(String, String)]) -> Result<EdgeProcess> {
        let mut command = Command::new(crate::binary("hearth-edge")?);
        command
            .args(["--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HEARTH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command.spawn().context("starting hearth-edge")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the edge never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                bail!("hearth-edge did not say where it listens within 30 s");
            }
        };
        let url = line
            .strip_prefix("hearth-edge listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(EdgeProcess { child, url, db: db.to_owned(), vars: vars.to_vec() })
    }

    /// Stops the edge (SIGTERM, as systemd would) and waits for it.
    pub fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill()?;
        self.child.wait()?;
        bail!("hearth-edge did not stop within 5 s of SIGTERM")
    }

    /// Stops the edge and starts it again on the same database and settings.
    pub fn restart(mut self) -> Result<EdgeProcess> {
        self.terminate()?;
        EdgeProcess::start(&self.db.clone(), &self.vars.clone())
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
