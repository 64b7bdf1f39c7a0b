//! Files only their owner reads (the account's and the certificate's keys), written whole or
//! not at all.

use std::path::Path;

use crate::settings::AcmeError;

/// Writes `bytes` to `path` whole or not at all, readable by its owner only.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
