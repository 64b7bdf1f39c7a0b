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

use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead as _, Payload};
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::keys::{RecoveryPublic, RecoverySecret};
use crate::wire::{self, Snapshot, SubToken};

mod archive;
mod wrap;
pub use archive::{ArchiveSealer, open_archive};
pub use wrap::{SealError, Wrapped, Wrapper, unwrap, wrap, wrap_seeded};
use wrap::{cipher, derive};

const BODY_SALT: &[u8] = b"hearth seal v1";

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
