//! Files only their owner reads (keys, the master key, a control.toml with its secrets): made
//! new with mode 0600, and read only when no one else can read them.

use std::path::Path;

use anyhow::{Context as _, Result, anyhow, bail};
use zeroize::Zeroizing;

/// Writes a new file only its owner can read.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut file = private_options().create_new(true).open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => anyhow!("{} already exists; refusing to overwrite it", path.display()),
        _ => anyhow!(e).context(format!("creating {}", path.display())),
    })?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", path.display()))
}

/// Opens a file only its owner can read for writing, made new or emptied (one Hearth makes
/// again each time, control's sealed archive).
pub(crate) fn replace_private(path: &Path) -> std::io::Result<std::fs::File> {
    private_options().create(true).truncate(true).open(path)
}

/// Options that write a file made with mode 0600.
fn private_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Reads a file only its owner may read, at most `max` bytes: a secret key or the master key.
pub(crate) fn read_private(path: &Path, max: usize) -> Result<Zeroizing<Vec<u8>>> {
    use std::io::Read as _;
    let reading = || format!("reading {}", path.display());
    // The file checked is the file read: one handle for both.
    let file = std::fs::File::open(path).with_context(reading)?;
    let metadata = file.metadata().with_context(reading)?;
    #[cfg(unix)]
    {
        let mode = std::os::unix::fs::PermissionsExt::mode(&metadata.permissions());
        if mode & 0o077 != 0 {
            bail!("{} is readable by others (mode {:o}); run chmod 600 on it", path.display(), mode & 0o777);
        }
    }
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(max as u64 + 1).read_to_end(&mut bytes).with_context(reading)?;
    if bytes.len() > max {
        bail!("{} is more than a Hearth key file holds ({max} bytes)", path.display());
    }
    Ok(bytes)
}
