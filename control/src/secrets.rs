//! Secrets at rest and fresh random values.
//!
//! Subscription tokens and Hysteria2 credentials are kept in the database only encrypted
//! (XChaCha20-Poly1305) under the master key, a 256-bit key in `master.key` (mode 0600) beside
//! the database; a stolen database alone therefore leaks no link and no credential. Each
//! ciphertext is bound to what it is (associated data), so one cannot be swapped for another.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand_core::{OsRng, RngCore as _};
use zeroize::Zeroizing;

use crate::error::Error;

/// Encrypts and decrypts secrets at rest.
#[derive(Clone)]
pub(crate) struct Vault {
    cipher: XChaCha20Poly1305,
    /// A key for drawing seeds ([`Vault::seed`]), derived from the master key.
    seeds: Zeroizing<[u8; 32]>,
}

/// What a ciphertext holds; part of its associated data.
#[derive(Clone, Copy)]
pub(crate) enum Purpose {
    /// A subscription token.
    Token,
    /// A Hysteria2 credential.
    Credential,
    /// The owner's TOTP secret.
    Totp,
    /// A webhook's signing secret.
    Webhook,
    /// The Telegram bot's token.
    Telegram,
    /// An outbound proxy's password.
    Outbound,
}

impl Purpose {
    fn aad(self) -> &'static [u8] {
        match self {
            Purpose::Token => b"hearth master v1 token",
            Purpose::Credential => b"hearth master v1 credential",
            Purpose::Totp => b"hearth master v1 totp",
            Purpose::Webhook => b"hearth master v1 webhook",
            Purpose::Telegram => b"hearth master v1 telegram",
            Purpose::Outbound => b"hearth master v1 outbound",
        }
    }
}

impl Vault {
    /// Makes a new master key file; refuses to replace one.
    pub(crate) fn create(path: &Path) -> Result<()> {
        let key = Zeroizing::new(random_bytes::<32>());
        let text = Zeroizing::new(format!("hearth master key v1\n{}\n", hex::encode(*key)));
        crate::private_file::write_private(path, text.as_bytes())
    }

    /// Loads the master key; refuses a file others can read.
    pub(crate) fn load(path: &Path) -> Result<Vault> {
        let text = crate::private_file::read_private(path, 4096)?;
        let text =
            std::str::from_utf8(&text).with_context(|| format!("{} is not a Hearth master key", path.display()))?;
        let mut lines = text.lines();
        if lines.next() != Some("hearth master key v1") {
            bail!("{} is not a Hearth master key", path.display());
        }
        let key = Zeroizing::new(
            lines
                .next()
                .and_then(|line| hex::decode(line.trim()).ok())
                .filter(|key| key.len() == 32)
                .with_context(|| format!("{} is corrupt", path.display()))?,
        );
        let mut seeds = Zeroizing::new([0u8; 32]);
        hkdf::Hkdf::<sha2::Sha256>::new(Some(b"hearth master v1 seeds"), &key)
            .expand(b"seeds", seeds.as_mut())
            .expect("32 bytes is a valid HKDF-SHA-256 output length");
        Ok(Vault { cipher: XChaCha20Poly1305::new_from_slice(&key).expect("32-byte key"), seeds })
    }

    /// Encrypts `plain`: a fresh nonce, then the ciphertext and tag.
    pub(crate) fn seal(&self, purpose: Purpose, plain: &[u8]) -> Vec<u8> {
        let nonce = random_bytes::<24>();
        let mut out = nonce.to_vec();
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad: purpose.aad() })
            .expect("XChaCha20-Poly1305 encrypts any length we use");
        out.extend_from_slice(&sealed);
        out
    }

    /// A seed for `purpose` and `data` that only this master key draws, always the same for
    /// the same data: what a node's routing is sealed from, so one routing has one encoding.
    pub(crate) fn seed(&self, purpose: Purpose, data: &[u8]) -> Zeroizing<[u8; 32]> {
        let mut seed = Zeroizing::new([0u8; 32]);
        hkdf::Hkdf::<sha2::Sha256>::from_prk(self.seeds.as_ref())
            .expect("a 32-byte key is a valid PRK")
            .expand_multi_info(&[purpose.aad(), data], seed.as_mut())
            .expect("32 bytes is a valid HKDF-SHA-256 output length");
        seed
    }

    /// Decrypts what [`Vault::seal`] made for the same purpose.
    pub(crate) fn open(&self, purpose: Purpose, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        if sealed.len() < 24 + 16 {
            return Err(Error::Internal("a secret in the database is truncated".into()));
        }
        let (nonce, body) = sealed.split_at(24);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: body, aad: purpose.aad() })
            .map(Zeroizing::new)
            .map_err(|_| Error::Internal("a secret in the database does not open with this master key".into()))
    }
}

/// `N` random bytes from the OS.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    OsRng.fill_bytes(&mut bytes);
    bytes
}

/// A random secret of 32 bytes in URL-safe base64 (43 characters): API tokens, session ids,
/// enrollment tokens, the setup token.
pub(crate) fn random_token() -> String {
    B64URL.encode(random_bytes::<32>())
}

/// A random Hysteria2 credential: 24 bytes in URL-safe base64 (32 characters).
pub(crate) fn random_credential() -> String {
    B64URL.encode(random_bytes::<24>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        Vault::create(&path).unwrap();
        assert!(Vault::create(&path).is_err(), "never replaces a master key");
        let vault = Vault::load(&path).unwrap();
        let sealed = vault.seal(Purpose::Token, b"secret");
        assert_eq!(&vault.open(Purpose::Token, &sealed).unwrap()[..], b"secret");
        assert!(vault.open(Purpose::Credential, &sealed).is_err(), "bound to its purpose");
        let mut tampered = sealed.clone();
        tampered[30] ^= 1;
        assert!(vault.open(Purpose::Token, &tampered).is_err());
        let other = dir.path().join("other.key");
        Vault::create(&other).unwrap();
        assert!(Vault::load(&other).unwrap().open(Purpose::Token, &sealed).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(Vault::load(&path).err().unwrap().to_string().contains("readable by others"));
        }
    }
}
