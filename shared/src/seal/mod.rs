//! Sealing per-user snapshots, so the edge's storage holds nothing readable.
//!
//! A snapshot is encrypted with XChaCha20-Poly1305 under a key derived (HKDF-SHA-256) from the
//! user's subscription token. The edge stores only the token's hash, so it can open a
//! snapshot only while it serves a request that carries the token; a dump of its storage
//! shows no credential and no server address. The envelope signature covers the sealed
//! bytes, so the edge verifies pushes without opening them.
//!
//! The token itself is also wrapped for the owner's X25519 recovery key (an ephemeral
//! Diffie-Hellman, HKDF, XChaCha20-Poly1305): a restore with the recovery key gets back both
//! the snapshot and the link, so every subscription link keeps working after control is lost.

use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::keys::{RecoveryPublic, RecoverySecret};
use crate::wire::{self, Snapshot, SubToken};

mod archive;
pub use archive::{ArchiveSealer, open_archive};

const BODY_SALT: &[u8] = b"hearth seal v1";
const WRAP_SALT: &[u8] = b"hearth recovery wrap v1";
const SEEDED_SALT: &[u8] = b"hearth seeded wrap v1";

/// A sealed snapshot: the body of a [`crate::envelope::Kind::Snapshot`] envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The body's nonce.
    pub nonce: [u8; 24],
    /// The encrypted snapshot, with its tag. The token's hash is the associated data.
    #[serde(with = "serde_bytes")]
    pub ciphertext: Vec<u8>,
    /// The token, wrapped for the owner's recovery key.
    pub recovery: Wrapped,
}

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

fn derive(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand_multi_info(info, key.as_mut())
        .expect("32 bytes is a valid HKDF-SHA-256 output length");
    key
}

fn cipher(key: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.into())
}

/// Seals `snapshot` for the holder of `token`, and wraps the token for `recovery`.
pub fn seal(snapshot: &Snapshot, token: &SubToken, recovery: &RecoveryPublic, rng: &mut impl CryptoRngCore) -> Vec<u8> {
    // The body's nonce first, then the wrap's key and nonce: the order sealing has always
    // drawn them in (the fixtures seal with a fixed sequence).
    let nonce = draw_nonce(rng);
    let wrapper = Wrapper::new(recovery, rng);
    seal_under(snapshot, token, nonce, &wrapper, rng)
}

/// [`seal`], the token wrapped by `wrapper` (made for the owner's recovery key): many
/// snapshots sealed at once share its one X25519 agreement.
pub fn seal_with(snapshot: &Snapshot, token: &SubToken, wrapper: &Wrapper, rng: &mut impl CryptoRngCore) -> Vec<u8> {
    let nonce = draw_nonce(rng);
    seal_under(snapshot, token, nonce, wrapper, rng)
}

fn draw_nonce(rng: &mut impl CryptoRngCore) -> [u8; 24] {
    let mut nonce = [0u8; 24];
    rng.fill_bytes(&mut nonce);
    nonce
}

fn seal_under(
    snapshot: &Snapshot,
    token: &SubToken,
    nonce: [u8; 24],
    wrapper: &Wrapper,
    rng: &mut impl CryptoRngCore,
) -> Vec<u8> {
    let plaintext = Zeroizing::new(snapshot.encode());
    let key = derive(BODY_SALT, token.as_bytes(), &[b"snapshot"]);
    let aad = token.hash();
    let ciphertext = cipher(&key)
        .encrypt(XNonce::from_slice(&nonce), Payload { msg: &plaintext, aad: &aad })
        .expect("XChaCha20-Poly1305 encrypts any length a snapshot can have");
    let recovery = wrapper.wrap(token.as_bytes(), rng);
    wire::encode(&Sealed { nonce, ciphertext, recovery })
}

/// [`Sealed`], borrowed from the stored bytes: what serving a link reads.
#[derive(Deserialize)]
struct SealedRef<'a> {
    nonce: [u8; 24],
    #[serde(borrow, with = "serde_bytes")]
    ciphertext: &'a [u8],
    #[serde(borrow)]
    _recovery: WrappedRef<'a>,
}

#[derive(Deserialize)]
struct WrappedRef<'a> {
    _ephemeral: [u8; 32],
    _nonce: [u8; 24],
    #[serde(borrow, with = "serde_bytes")]
    _ciphertext: &'a [u8],
}

/// Opens a sealed snapshot with the token from the request. This is the hot path of serving
/// a link: one copy of the ciphertext, decrypted in place, and no re-encoding (the AEAD tag
/// already proves the bytes are the ones control sealed).
pub fn open(body: &[u8], token: &SubToken) -> Result<Snapshot, SealError> {
    use chacha20poly1305::aead::AeadInPlace as _;
    let sealed: SealedRef<'_> =
        wire::decode_authenticated(body, "sealed snapshot").map_err(|_| SealError::Malformed)?;
    let key = derive(BODY_SALT, token.as_bytes(), &[b"snapshot"]);
    let aad = token.hash();
    let mut plaintext = Zeroizing::new(sealed.ciphertext.to_vec());
    cipher(&key)
        .decrypt_in_place(XNonce::from_slice(&sealed.nonce), &aad, &mut *plaintext)
        .map_err(|_| SealError::WrongKey)?;
    Snapshot::decode_authenticated(&plaintext).map_err(|_| SealError::Malformed)
}

/// Opens a sealed snapshot with the owner's recovery key: gives back the link's token too.
pub fn recover(body: &[u8], recovery: &RecoverySecret) -> Result<(SubToken, Snapshot), SealError> {
    let sealed: Sealed = wire::decode(body, "sealed snapshot").map_err(|_| SealError::Malformed)?;
    let token = unwrap(&sealed.recovery, recovery)?;
    let token = SubToken::from_bytes(token.as_slice().try_into().map_err(|_| SealError::Malformed)?);
    Ok((token.clone(), open(body, &token)?))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;
    use rand_core::OsRng;

    #[test]
    fn seal_open_recover() {
        let snapshot = sample_snapshot();
        let token = SubToken::generate(&mut OsRng);
        let recovery = RecoverySecret::generate(&mut OsRng);
        let body = seal(&snapshot, &token, &recovery.public(), &mut OsRng);

        assert_eq!(open(&body, &token).unwrap(), snapshot);
        let (recovered_token, recovered) = recover(&body, &recovery).unwrap();
        assert_eq!(recovered_token, token);
        assert_eq!(recovered, snapshot);

        assert_eq!(open(&body, &SubToken::generate(&mut OsRng)), Err(SealError::WrongKey));
        let stranger = RecoverySecret::generate(&mut OsRng);
        assert_eq!(recover(&body, &stranger).unwrap_err(), SealError::WrongKey);
    }

    /// Snapshots sealed with one wrapper open and recover each with its own token, as those
    /// sealed one by one do; they share the ephemeral key, not the nonce, and a stranger's
    /// key opens none.
    #[test]
    fn snapshots_sealed_with_one_wrapper_open_and_recover_each() {
        let snapshot = sample_snapshot();
        let recovery = RecoverySecret::generate(&mut OsRng);
        let wrapper = Wrapper::new(&recovery.public(), &mut OsRng);
        let tokens: Vec<SubToken> = (0..3).map(|_| SubToken::generate(&mut OsRng)).collect();
        let bodies: Vec<Vec<u8>> =
            tokens.iter().map(|token| seal_with(&snapshot, token, &wrapper, &mut OsRng)).collect();
        let sealed: Vec<Sealed> = bodies.iter().map(|body| wire::decode(body, "sealed").unwrap()).collect();
        assert!(sealed.iter().all(|s| s.recovery.ephemeral == sealed[0].recovery.ephemeral));
        assert_ne!(sealed[0].recovery.nonce, sealed[1].recovery.nonce);
        assert_ne!(sealed[0].recovery.ciphertext, sealed[1].recovery.ciphertext);
        for (token, body) in tokens.iter().zip(&bodies) {
            assert_eq!(open(body, token).unwrap(), snapshot);
            assert_eq!(recover(body, &recovery).unwrap(), (token.clone(), snapshot.clone()));
            assert_eq!(recover(body, &RecoverySecret::generate(&mut OsRng)).unwrap_err(), SealError::WrongKey);
        }
        // Another wrapper, another ephemeral key.
        let again = seal_with(&snapshot, &tokens[0], &Wrapper::new(&recovery.public(), &mut OsRng), &mut OsRng);
        let again: Sealed = wire::decode(&again, "sealed").unwrap();
        assert_ne!(again.recovery.ephemeral, sealed[0].recovery.ephemeral);
    }

    #[test]
    fn sealed_bytes_reveal_nothing_and_resist_tampering() {
        let snapshot = sample_snapshot();
        let token = SubToken::generate(&mut OsRng);
        let recovery = RecoverySecret::generate(&mut OsRng).public();
        let body = seal(&snapshot, &token, &recovery, &mut OsRng);
        let haystack = String::from_utf8_lossy(&body);
        for secret in [snapshot.credential.as_str(), snapshot.endpoints[0].host.as_str(), snapshot.name.as_str()] {
            assert!(!haystack.contains(secret), "sealed body shows {secret:?}");
        }
        // The nonce, the ciphertext's length and the ciphertext itself.
        for at in [0, 24, 30, 60, 100] {
            let mut tampered = body.clone();
            tampered[at] ^= 1;
            assert!(open(&tampered, &token).is_err(), "flip at {at} opened");
        }
        assert_eq!(open(b"junk", &token), Err(SealError::Malformed));
    }
}
