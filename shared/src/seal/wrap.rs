//! Wrapping secrets for the owner's X25519 recovery key (an ephemeral Diffie-Hellman, HKDF,
//! XChaCha20-Poly1305), and the key derivation and cipher the snapshots and the archive are
//! sealed with.

use chacha20poly1305::aead::{Aead as _, KeyInit as _};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::keys::{RecoveryPublic, RecoverySecret};

const WRAP_SALT: &[u8] = b"hearth recovery wrap v1";
const SEEDED_SALT: &[u8] = b"hearth seeded wrap v1";

/// Secret bytes wrapped for an X25519 public key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wrapped {
    /// The sender's ephemeral public key.
    pub ephemeral: [u8; 32],
    /// The nonce.
    pub nonce: [u8; 24],
    /// The encrypted secret, with its tag.
    #[serde(with = "serde_bytes")]
    pub ciphertext: Vec<u8>,
}

/// Why a sealed snapshot could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The bytes are not a sealed snapshot.
    #[error("not a sealed snapshot")]
    Malformed,
    /// The key does not open it (wrong token or recovery key, or altered bytes).
    #[error("the key does not open this snapshot")]
    WrongKey,
}

pub(super) fn derive(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand_multi_info(info, key.as_mut())
        .expect("32 bytes is a valid HKDF-SHA-256 output length");
    key
}

pub(super) fn cipher(key: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.into())
}

/// Wraps `secret` for the holder of `recipient`'s secret key.
pub fn wrap(secret: &[u8], recipient: &RecoveryPublic, rng: &mut impl CryptoRngCore) -> Wrapped {
    Wrapper::new(recipient, rng).wrap(secret, rng)
}

/// A key that wraps secrets for one recipient: one ephemeral X25519 key and its agreement
/// with the recipient's key, made once, then any number of secrets wrapped under the key
/// derived from it, each with its own random 192-bit nonce (XChaCha20-Poly1305 takes that
/// many). Each [`Wrapped`] is what [`wrap`] makes and [`unwrap`] opens; those made by one
/// wrapper carry the same ephemeral key, which tells whoever holds them that they were
/// wrapped together. The agreement is the costly part of wrapping (a Montgomery ladder):
/// control seals the snapshots of a change with one wrapper.
pub struct Wrapper {
    ephemeral: [u8; 32],
    key: Zeroizing<[u8; 32]>,
}

impl Wrapper {
    /// A new wrapper for `recipient`, with an ephemeral key drawn from `rng`.
    pub fn new(recipient: &RecoveryPublic, rng: &mut impl CryptoRngCore) -> Wrapper {
        let ephemeral = RecoverySecret::generate(rng);
        let ephemeral_public = ephemeral.public().to_bytes();
        let shared = ephemeral.0.diffie_hellman(&recipient.0);
        let key = derive(WRAP_SALT, shared.as_bytes(), &[&ephemeral_public, recipient.0.as_bytes()]);
        Wrapper { ephemeral: ephemeral_public, key }
    }

    /// Wraps `secret`, with a nonce drawn from `rng`.
    pub fn wrap(&self, secret: &[u8], rng: &mut impl CryptoRngCore) -> Wrapped {
        let mut nonce = [0u8; 24];
        rng.fill_bytes(&mut nonce);
        let ciphertext = cipher(&self.key)
            .encrypt(XNonce::from_slice(&nonce), secret)
            .expect("XChaCha20-Poly1305 encrypts any short secret");
        Wrapped { ephemeral: self.ephemeral, nonce, ciphertext }
    }
}

/// Wraps `secret` for `recipient` with the ephemeral key and nonce drawn from `seed`: the
/// same secret, recipient and seed always make the same bytes. Control seals a node's routing
/// this way (with a seed only it can make) so that one routing has one encoding, as a
/// credential set must.
pub fn wrap_seeded(secret: &[u8], recipient: &RecoveryPublic, seed: &[u8; 32]) -> Wrapped {
    let drawn = derive(SEEDED_SALT, seed, &[b"ephemeral", recipient.0.as_bytes()]);
    let ephemeral = RecoverySecret(x25519_dalek::StaticSecret::from(*drawn));
    let ephemeral_public = ephemeral.public().to_bytes();
    let shared = ephemeral.0.diffie_hellman(&recipient.0);
    let key = derive(WRAP_SALT, shared.as_bytes(), &[&ephemeral_public, recipient.0.as_bytes()]);
    let nonce = derive(SEEDED_SALT, seed, &[b"nonce", recipient.0.as_bytes()]);
    let nonce: [u8; 24] = nonce[..24].try_into().expect("24 of 32 bytes");
    let ciphertext = cipher(&key)
        .encrypt(XNonce::from_slice(&nonce), secret)
        .expect("XChaCha20-Poly1305 encrypts any length we use");
    Wrapped { ephemeral: ephemeral_public, nonce, ciphertext }
}

/// Unwraps a secret wrapped for `recipient`.
pub fn unwrap(wrapped: &Wrapped, recipient: &RecoverySecret) -> Result<Zeroizing<Vec<u8>>, SealError> {
    let ephemeral = x25519_dalek::PublicKey::from(wrapped.ephemeral);
    let shared = recipient.0.diffie_hellman(&ephemeral);
    if !shared.was_contributory() {
        return Err(SealError::Malformed);
    }
    let own = recipient.public().to_bytes();
    let key = derive(WRAP_SALT, shared.as_bytes(), &[&wrapped.ephemeral, &own]);
    cipher(&key)
        .decrypt(XNonce::from_slice(&wrapped.nonce), wrapped.ciphertext.as_slice())
        .map(Zeroizing::new)
        .map_err(|_| SealError::WrongKey)
}
