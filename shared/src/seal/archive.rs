//! Control's state archive as the edge keeps it (the body of a
//! [`crate::envelope::Kind::Archive`] envelope): encrypted under a random key that is wrapped
//! for the owner's recovery key, so only the recovery key opens it.
//!
//! Control seals it as it writes it, in chunks ([`ArchiveSealer`]): the archive is tens of
//! megabytes at 100,000 users and never sits in control's memory whole. Each chunk is
//! XChaCha20-Poly1305 under the archive's key with the STREAM construction (a 19-byte nonce
//! prefix, the chunk's number and a flag on the last one), so chunks cannot be reordered,
//! dropped or cut off at the end without the archive failing to open. The body is
//! [`CHUNKED_TAG`], the encoded [`ChunkedHead`], then the sealed chunks: every chunk but the
//! last holds exactly `chunk` bytes (plus its 16-byte tag), the last one 0 to `chunk`.
//!
//! Archives sealed whole, before chunks ([`Legacy`]), still open: a body that does not begin
//! with the tag is one of those (one whose random ephemeral key happened to begin with the
//! tag's 16 bytes would be read as chunked and fail: a chance of 2^-128).

use std::io::{self, Write};

use chacha20poly1305::aead::stream::{DecryptorBE32, EncryptorBE32};
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::wrap::{SealError, Wrapped, cipher, unwrap, wrap};
use crate::keys::{RecoveryPublic, RecoverySecret};
use crate::wire;

/// What a chunked archive's body begins with.
const CHUNKED_TAG: [u8; 16] = *b"hearth archive 2";
/// The plaintext bytes in each chunk control seals.
const CHUNK: usize = 64 * 1024;
/// The largest chunk an archive may say it has: opening holds one chunk at a time.
const MAX_CHUNK: u32 = 1 << 20;
/// The bytes a chunk's tag adds.
const TAG: usize = 16;
/// The associated data of every chunk.
const CHUNKED_AAD: &[u8] = b"hearth archive v2";
/// The associated data of an archive sealed whole.
const LEGACY_AAD: &[u8] = b"hearth archive v1";

/// What follows [`CHUNKED_TAG`]: how to open the chunks after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ChunkedHead {
    /// The archive's key, wrapped for the recovery key.
    key: Wrapped,
    /// The STREAM nonce prefix (XChaCha20's 24 bytes less STREAM's 5).
    nonce: [u8; 19],
    /// The plaintext bytes in every chunk but the last.
    chunk: u32,
}

/// An archive sealed whole (every archive made before chunks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Legacy {
    /// The archive's key, wrapped for the recovery key.
    key: Wrapped,
    /// The nonce.
    nonce: [u8; 24],
    /// The encrypted archive, with its tag.
    #[serde(with = "serde_bytes")]
    ciphertext: Vec<u8>,
}

/// Seals an archive for the holder of a recovery key as it is written, into `out`: one chunk
/// in memory at a time. [`ArchiveSealer::finish`] seals the last chunk; an archive dropped
/// before that does not open.
pub struct ArchiveSealer<W: Write> {
    out: W,
    stream: EncryptorBE32<XChaCha20Poly1305>,
    /// The plaintext not sealed yet: at most one chunk and one byte (a chunk is sealed once
    /// a byte after it shows it is not the last).
    pending: Zeroizing<Vec<u8>>,
    chunk: usize,
}

impl<W: Write> ArchiveSealer<W> {
    /// Starts an archive for `recovery` in chunks of [`CHUNK`] bytes, writing its head to `out`.
    pub fn new(out: W, recovery: &RecoveryPublic, rng: &mut impl CryptoRngCore) -> io::Result<Self> {
        Self::with_chunk(out, recovery, CHUNK, rng)
    }

    /// [`ArchiveSealer::new`] with chunks of `chunk` bytes (1 to 1 MiB): small ones let a test
    /// see many chunks in a few bytes.
    pub fn with_chunk(
        mut out: W,
        recovery: &RecoveryPublic,
        chunk: usize,
        rng: &mut impl CryptoRngCore,
    ) -> io::Result<Self> {
        let size = u32::try_from(chunk).ok().filter(|size| (1..=MAX_CHUNK).contains(size));
        let size =
            size.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an archive chunk of 1 byte to 1 MiB"))?;
        let mut key = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(key.as_mut());
        let mut nonce = [0u8; 19];
        rng.fill_bytes(&mut nonce);
        let head = ChunkedHead { key: wrap(key.as_ref(), recovery, rng), nonce, chunk: size };
        out.write_all(&CHUNKED_TAG)?;
        out.write_all(&wire::encode(&head))?;
        let stream = EncryptorBE32::from_aead(XChaCha20Poly1305::new(key.as_ref().into()), nonce.as_ref().into());
        Ok(ArchiveSealer { out, stream, pending: Zeroizing::new(Vec::with_capacity(chunk + 1)), chunk })
    }

    /// Seals the last chunk and gives back the writer.
    pub fn finish(self) -> io::Result<W> {
        let ArchiveSealer { mut out, stream, pending, .. } = self;
        let sealed = stream.encrypt_last(Payload { msg: &pending, aad: CHUNKED_AAD }).map_err(|_| too_long())?;
        out.write_all(&sealed)?;
        out.flush()?;
        Ok(out)
    }
}

/// The one way sealing a chunk fails: STREAM's counter ran out (2^32 chunks).
fn too_long() -> io::Error {
    io::Error::other("the archive is too long to seal")
}

impl<W: Write> Write for ArchiveSealer<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.chunk + 1 - self.pending.len();
        let taken = bytes.len().min(room);
        self.pending.extend_from_slice(&bytes[..taken]);
        if self.pending.len() > self.chunk {
            let sealed = self
                .stream
                .encrypt_next(Payload { msg: &self.pending[..self.chunk], aad: CHUNKED_AAD })
                .map_err(|_| too_long())?;
            self.out.write_all(&sealed)?;
            self.pending.drain(..self.chunk);
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Opens an archive with the owner's recovery key: one sealed in chunks or one sealed whole.
pub fn open_archive(body: &[u8], recovery: &RecoverySecret) -> Result<Zeroizing<Vec<u8>>, SealError> {
    match body.strip_prefix(&CHUNKED_TAG) {
        Some(rest) => open_chunked(rest, recovery),
        None => open_legacy(body, recovery),
    }
}

fn open_chunked(rest: &[u8], recovery: &RecoverySecret) -> Result<Zeroizing<Vec<u8>>, SealError> {
    let (head, mut chunks) = postcard::take_from_bytes::<ChunkedHead>(rest).map_err(|_| SealError::Malformed)?;
    if wire::encode(&head) != rest[..rest.len() - chunks.len()] || !(1..=MAX_CHUNK).contains(&head.chunk) {
        return Err(SealError::Malformed);
    }
    let key = unwrap(&head.key, recovery)?;
    let key: &[u8; 32] = key.as_slice().try_into().map_err(|_| SealError::Malformed)?;
    let mut stream = DecryptorBE32::from_aead(XChaCha20Poly1305::new(key.into()), head.nonce.as_ref().into());
    // Every chunk but the last is whole: what is left after whole chunks is the last one.
    let sealed_chunk = head.chunk as usize + TAG;
    let mut plaintext = Zeroizing::new(Vec::with_capacity(chunks.len()));
    loop {
        if chunks.len() > sealed_chunk {
            let (next, after) = chunks.split_at(sealed_chunk);
            let opened = Zeroizing::new(
                stream.decrypt_next(Payload { msg: next, aad: CHUNKED_AAD }).map_err(|_| SealError::WrongKey)?,
            );
            plaintext.extend_from_slice(&opened);
            chunks = after;
        } else {
            let opened = Zeroizing::new(
                stream.decrypt_last(Payload { msg: chunks, aad: CHUNKED_AAD }).map_err(|_| SealError::WrongKey)?,
            );
            plaintext.extend_from_slice(&opened);
            return Ok(plaintext);
        }
    }
}

fn open_legacy(body: &[u8], recovery: &RecoverySecret) -> Result<Zeroizing<Vec<u8>>, SealError> {
    let sealed: Legacy = wire::decode(body, "sealed archive").map_err(|_| SealError::Malformed)?;
    let key = unwrap(&sealed.key, recovery)?;
    let key: &[u8; 32] = key.as_slice().try_into().map_err(|_| SealError::Malformed)?;
    cipher(key)
        .decrypt(XNonce::from_slice(&sealed.nonce), Payload { msg: &sealed.ciphertext, aad: LEGACY_AAD })
        .map(Zeroizing::new)
        .map_err(|_| SealError::WrongKey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    fn sealed(plaintext: &[u8], recovery: &RecoverySecret, chunk: usize) -> Vec<u8> {
        let mut sealer = ArchiveSealer::with_chunk(Vec::new(), &recovery.public(), chunk, &mut OsRng).unwrap();
        // In pieces of every size, as a compressor hands them over.
        let mut rest = plaintext;
        let mut piece = 1;
        while !rest.is_empty() {
            let (now, later) = rest.split_at(piece.min(rest.len()));
            sealer.write_all(now).unwrap();
            rest = later;
            piece = piece * 3 + 1;
        }
        sealer.finish().unwrap()
    }

    /// Every length around the chunk's edges: empty, one short of a chunk, exactly one or
    /// two chunks, one over.
    #[test]
    fn archives_open_only_with_the_recovery_key_at_every_length() {
        let owner = RecoverySecret::generate(&mut OsRng);
        let other = RecoverySecret::generate(&mut OsRng);
        let text: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 200] {
            let body = sealed(&text[..len], &owner, 16);
            assert_eq!(open_archive(&body, &owner).unwrap().as_slice(), &text[..len], "{len} bytes");
            assert_eq!(open_archive(&body, &other).err(), Some(SealError::WrongKey), "{len} bytes");
        }
        assert_eq!(open_archive(b"junk", &owner).err(), Some(SealError::Malformed));
        assert_eq!(open_archive(&CHUNKED_TAG, &owner).err(), Some(SealError::Malformed));
        assert!(ArchiveSealer::with_chunk(Vec::new(), &owner.public(), 0, &mut OsRng).is_err());
        assert!(ArchiveSealer::with_chunk(Vec::new(), &owner.public(), (1 << 20) + 1, &mut OsRng).is_err());
    }

    /// A flipped bit anywhere, a chunk dropped, two swapped, the end cut off or the last
    /// chunk's flag faked by cutting at a chunk's edge: none opens.
    #[test]
    fn a_chunked_archive_altered_in_any_way_does_not_open() {
        let owner = RecoverySecret::generate(&mut OsRng);
        let text: Vec<u8> = (0..100u8).collect();
        let body = sealed(&text, &owner, 16);
        // 100 bytes: six chunks of 16 and a last one of 4, each with its tag.
        let head = body.len() - (6 * 32 + 4 + 16);
        let sealed_chunks = &body[head..];
        for at in (0..body.len()).step_by(5) {
            let mut flipped = body.clone();
            flipped[at] ^= 0x10;
            assert!(open_archive(&flipped, &owner).is_err(), "a flip at {at} opened");
        }
        let cut = |range: std::ops::Range<usize>| {
            let mut altered = body[..head].to_vec();
            altered.extend_from_slice(&sealed_chunks[range]);
            altered
        };
        assert!(open_archive(&cut(0..6 * 32), &owner).is_err(), "the last chunk dropped");
        assert!(open_archive(&cut(0..5 * 32), &owner).is_err(), "cut at a chunk's edge");
        assert!(open_archive(&cut(32..sealed_chunks.len()), &owner).is_err(), "the first chunk dropped");
        assert!(open_archive(&cut(0..sealed_chunks.len() - 1), &owner).is_err(), "a byte cut off");
        let mut swapped = body[..head].to_vec();
        swapped.extend_from_slice(&sealed_chunks[32..64]);
        swapped.extend_from_slice(&sealed_chunks[..32]);
        swapped.extend_from_slice(&sealed_chunks[64..]);
        assert!(open_archive(&swapped, &owner).is_err(), "two chunks swapped");
        let mut longer = body.clone();
        longer.push(0);
        assert!(open_archive(&longer, &owner).is_err(), "a byte added");
    }

    /// The sealer holds one chunk, whatever it is handed at once.
    #[test]
    fn the_sealer_holds_one_chunk_at_a_time() {
        let owner = RecoverySecret::generate(&mut OsRng);
        let mut sealer = ArchiveSealer::new(Vec::new(), &owner.public(), &mut OsRng).unwrap();
        let big = vec![7u8; 5 * CHUNK + 3];
        let mut rest = big.as_slice();
        while !rest.is_empty() {
            let taken = sealer.write(rest).unwrap();
            assert!(taken <= CHUNK + 1 && sealer.pending.len() <= CHUNK, "{taken} taken");
            rest = &rest[taken..];
        }
        let body = sealer.finish().unwrap();
        assert_eq!(open_archive(&body, &owner).unwrap().as_slice(), big.as_slice());
    }
}
