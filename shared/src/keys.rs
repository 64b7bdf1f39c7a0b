//! Keys and the roles they play.
//!
//! Hearth signs with ed25519. An offline **root** key (made once at `init`, kept by the
//! owner) certifies the online **signing** key that control uses and the **release** key that
//! signs node binaries; every node has a **node** key of its own for its usage reports. The
//! owner also keeps an X25519 **recovery** key: snapshots and archives are wrapped for it so a
//! lost control can be rebuilt.
//!
//! Secret keys live in small text files with 0600 permissions (the programs read and write
//! the files; this module only makes and parses their text, so it stays free of IO):
//!
//! ```text
//! hearth secret key v1
//! role: signing
//! id: 3f2a9c0d41e5b766
//! key: <base64 of the 32-byte seed>
//! ```
//!
//! The `id` line lets a corrupt or swapped file be told apart from a good one, and a loaded
//! file must be for the role the caller asked for.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::Signer as _;
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::sha256;

/// What a key is trusted for. The numbering is part of the wire format: append only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The offline root: certifies the other roles, and its own rotation.
    Root,
    /// Control's online signing key: snapshots, credential sets, batches, acknowledgements.
    Signing,
    /// Signs node release manifests.
    Release,
    /// A node's own key: signs that node's usage reports.
    Node,
    /// The owner's X25519 recovery key (encryption, never signatures).
    Recovery,
}

impl Role {
    /// The lowercase name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Signing => "signing",
            Role::Release => "release",
            Role::Node => "node",
            Role::Recovery => "recovery",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Role {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Ok(match s {
            "root" => Role::Root,
            "signing" => Role::Signing,
            "release" => Role::Release,
            "node" => Role::Node,
            "recovery" => Role::Recovery,
            other => return Err(KeyError::UnknownRole(other.to_owned())),
        })
    }
}

/// A short, stable name for a public key: the first 8 bytes of SHA-256 over a domain tag and
/// the key. Shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    /// The id of a 32-byte public key (ed25519 or X25519).
    pub fn of(public: &[u8; 32]) -> KeyId {
        let mut tagged = [0u8; 16 + 32];
        tagged[..16].copy_from_slice(b"hearth key id v1");
        tagged[16..].copy_from_slice(public);
        let digest = sha256(&tagged);
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        KeyId(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// An ed25519 public key. Serialized as its 32 bytes; shown as standard base64.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// Parses 32 bytes; fails on a point that is not a valid key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, KeyError> {
        ed25519_dalek::VerifyingKey::from_bytes(bytes).map(PublicKey).map_err(|_| KeyError::InvalidPublicKey)
    }

    /// The 32 bytes of the key.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// This key's id.
    pub fn id(&self) -> KeyId {
        KeyId::of(self.0.as_bytes())
    }

    /// The same key as an X25519 public key (its Montgomery form), to seal for its holder:
    /// control seals a node's routing for the node's identity key this way.
    pub fn to_x25519(&self) -> RecoveryPublic {
        RecoveryPublic(x25519_dalek::PublicKey::from(self.0.to_montgomery().to_bytes()))
    }

    /// Checks `signature` over `message` (strict: no malleable or small-order forms).
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        self.0.verify_strict(message, &signature).is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.id())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&B64.encode(self.0.as_bytes()))
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        PublicKey::from_bytes(&decode_32(s.trim()).ok_or(KeyError::InvalidPublicKey)?)
    }
}

impl Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.as_bytes().serialize(s)
    }
}

impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = <[u8; 32]>::deserialize(d)?;
        PublicKey::from_bytes(&bytes).map_err(serde::de::Error::custom)
    }
}

/// An ed25519 secret key together with the role it was made for. Its `Debug` shows only the
/// role and the public key id; the seed is wiped from memory when dropped.
pub struct SecretKey {
    role: Role,
    key: ed25519_dalek::SigningKey,
}

impl SecretKey {
    /// Makes a new key for `role` (any role but [`Role::Recovery`], which is X25519).
    pub fn generate(role: Role, rng: &mut impl CryptoRngCore) -> Result<SecretKey, KeyError> {
        if role == Role::Recovery {
            return Err(KeyError::WrongKind { role });
        }
        Ok(SecretKey { role, key: ed25519_dalek::SigningKey::generate(rng) })
    }

    /// Builds a key from its 32-byte seed (tests and fixtures use fixed seeds).
    pub fn from_seed(role: Role, seed: &[u8; 32]) -> SecretKey {
        SecretKey { role, key: ed25519_dalek::SigningKey::from_bytes(seed) }
    }

    /// The role this key was made for.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.key.verifying_key())
    }

    /// The public key's id.
    pub fn id(&self) -> KeyId {
        self.public().id()
    }

    /// The X25519 secret that matches [`PublicKey::to_x25519`] of this key's public key:
    /// what opens what was sealed for it.
    pub fn to_x25519(&self) -> RecoverySecret {
        let scalar = Zeroizing::new(self.key.to_scalar_bytes());
        RecoverySecret(x25519_dalek::StaticSecret::from(*scalar))
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// The text of this key's file (see the module's documentation).
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let seed = Zeroizing::new(self.key.to_bytes());
        file_text(self.role, &self.id(), &seed)
    }

    /// Reads a key file's text, which must hold a key made for `role`.
    pub fn from_file_text(text: &[u8], role: Role) -> Result<SecretKey, KeyError> {
        let file = parse_file_text(text, role)?;
        let key = SecretKey::from_seed(role, &file.secret);
        check_id(&file, &key.id())?;
        Ok(key)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({} {}, ****)", self.role, self.id())
    }
}

/// The owner's X25519 recovery public key: snapshots and archives are wrapped for it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecoveryPublic(pub(crate) x25519_dalek::PublicKey);

impl RecoveryPublic {
    /// The 32 bytes of the key.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// Builds the key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> RecoveryPublic {
        RecoveryPublic(x25519_dalek::PublicKey::from(bytes))
    }

    /// This key's id.
    pub fn id(&self) -> KeyId {
        KeyId::of(self.0.as_bytes())
    }
}

impl fmt::Debug for RecoveryPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecoveryPublic({})", self.id())
    }
}

impl fmt::Display for RecoveryPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&B64.encode(self.0.as_bytes()))
    }
}

impl FromStr for RecoveryPublic {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Ok(RecoveryPublic::from_bytes(decode_32(s.trim()).ok_or(KeyError::InvalidPublicKey)?))
    }
}

/// The owner's X25519 recovery secret key. `Debug` shows only its id.
pub struct RecoverySecret(pub(crate) x25519_dalek::StaticSecret);

impl RecoverySecret {
    /// Makes a new recovery key.
    pub fn generate(rng: &mut impl CryptoRngCore) -> RecoverySecret {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(seed.as_mut());
        RecoverySecret(x25519_dalek::StaticSecret::from(*seed))
    }

    /// Builds the key from its 32 secret bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> RecoverySecret {
        RecoverySecret(x25519_dalek::StaticSecret::from(bytes))
    }

    /// The matching public key.
    pub fn public(&self) -> RecoveryPublic {
        RecoveryPublic(x25519_dalek::PublicKey::from(&self.0))
    }

    /// The text of this key's file.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let secret = Zeroizing::new(self.0.to_bytes());
        file_text(Role::Recovery, &self.public().id(), &secret)
    }

    /// Reads a recovery key file's text.
    pub fn from_file_text(text: &[u8]) -> Result<RecoverySecret, KeyError> {
        let file = parse_file_text(text, Role::Recovery)?;
        let key = RecoverySecret::from_bytes(*file.secret);
        check_id(&file, &key.public().id())?;
        Ok(key)
    }
}

impl fmt::Debug for RecoverySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecoverySecret({}, ****)", self.public().id())
    }
}

/// Why a key could not be made or parsed. No variant ever carries key material; the programs
/// that read a key file name the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text is not a Hearth key file at all.
    #[error("not a Hearth secret key file (expected the line 'hearth secret key v1')")]
    NotAKeyFile,
    /// The file holds a key for another role.
    #[error("it holds a {found} key, but a {expected} key is needed")]
    WrongRole {
        /// The role asked for.
        expected: Role,
        /// The role in the file.
        found: Role,
    },
    /// The file is damaged: a missing line, bad base64, or an id that does not match.
    #[error("the key file is corrupt: {0}")]
    Corrupt(&'static str),
    /// An unknown role name.
    #[error("unknown key role {0:?} (expected root, signing, release, node or recovery)")]
    UnknownRole(String),
    /// Bytes that are not a valid public key.
    #[error("not a valid public key (expected 32 bytes in base64)")]
    InvalidPublicKey,
    /// A recovery key asked for as a signing key, or the reverse.
    #[error("a {role} key is not an ed25519 signing key")]
    WrongKind {
        /// The role asked for.
        role: Role,
    },
}

const FILE_MAGIC: &str = "hearth secret key v1";

struct KeyFile {
    id: String,
    secret: Zeroizing<[u8; 32]>,
}

fn decode_32(text: &str) -> Option<[u8; 32]> {
    let bytes = Zeroizing::new(B64.decode(text).ok()?);
    <[u8; 32]>::try_from(bytes.as_slice()).ok()
}

/// The longest key file read: a good one is about 110 bytes.
pub const MAX_KEY_FILE: usize = 4096;

fn file_text(role: Role, id: &KeyId, secret: &[u8; 32]) -> Zeroizing<String> {
    Zeroizing::new(format!("{FILE_MAGIC}\nrole: {role}\nid: {id}\nkey: {}\n", B64.encode(secret)))
}

fn parse_file_text(text: &[u8], role: Role) -> Result<KeyFile, KeyError> {
    if text.len() > MAX_KEY_FILE {
        return Err(KeyError::NotAKeyFile);
    }
    let text = std::str::from_utf8(text).map_err(|_| KeyError::NotAKeyFile)?;
    let mut lines = text.lines();
    if lines.next() != Some(FILE_MAGIC) {
        return Err(KeyError::NotAKeyFile);
    }
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|line| line.strip_prefix(name))
            .and_then(|rest| rest.strip_prefix(": "))
            .ok_or(KeyError::Corrupt("a line is missing or out of order"))
    };
    let found: Role = field("role")?.parse().map_err(|_| KeyError::Corrupt("unknown role"))?;
    let id = field("id")?.to_owned();
    let secret = decode_32(field("key")?).ok_or(KeyError::Corrupt("the key is not 32 bytes of base64"))?;
    if found != role {
        return Err(KeyError::WrongRole { expected: role, found });
    }
    Ok(KeyFile { id, secret: Zeroizing::new(secret) })
}

fn check_id(file: &KeyFile, derived: &KeyId) -> Result<(), KeyError> {
    if file.id == derived.to_string() { Ok(()) } else { Err(KeyError::Corrupt("the key does not match its id line")) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    #[test]
    fn key_file_text_round_trips() {
        let key = SecretKey::generate(Role::Signing, &mut OsRng).unwrap();
        let text = key.to_file_text();
        assert!(text.starts_with("hearth secret key v1\nrole: signing\nid: "), "{}", *text);
        let loaded = SecretKey::from_file_text(text.as_bytes(), Role::Signing).unwrap();
        assert_eq!(loaded.public(), key.public());
        assert_eq!(loaded.sign(b"x"), key.sign(b"x"));

        let recovery = RecoverySecret::generate(&mut OsRng);
        let loaded = RecoverySecret::from_file_text(recovery.to_file_text().as_bytes()).unwrap();
        assert_eq!(loaded.public(), recovery.public());
    }

    #[test]
    fn key_file_errors_are_clear() {
        let good = SecretKey::generate(Role::Root, &mut OsRng).unwrap().to_file_text();
        let err = SecretKey::from_file_text(good.as_bytes(), Role::Signing).unwrap_err();
        assert!(matches!(err, KeyError::WrongRole { expected: Role::Signing, found: Role::Root }));
        assert!(err.to_string().contains("holds a root key, but a signing key is needed"));
        assert!(RecoverySecret::from_file_text(good.as_bytes()).is_err(), "a root key is not a recovery key");

        assert!(matches!(SecretKey::from_file_text(b"hello\n", Role::Root), Err(KeyError::NotAKeyFile)));
        assert!(matches!(SecretKey::from_file_text(&[0xff; 40], Role::Root), Err(KeyError::NotAKeyFile)));
        let long = format!("{}{}", *good, " ".repeat(MAX_KEY_FILE));
        assert!(matches!(SecretKey::from_file_text(long.as_bytes(), Role::Root), Err(KeyError::NotAKeyFile)));

        let truncated = &good[..good.len() - 10];
        assert!(matches!(SecretKey::from_file_text(truncated.as_bytes(), Role::Root), Err(KeyError::Corrupt(_))));
        let unknown = good.replace("role: root", "role: king");
        let err = SecretKey::from_file_text(unknown.as_bytes(), Role::Root).unwrap_err();
        assert!(err.to_string().contains("unknown role"), "{err}");

        // A valid key under someone else's id line: corrupt, not silently accepted.
        let other = SecretKey::generate(Role::Root, &mut OsRng).unwrap();
        let swapped = good.replace(&good.lines().nth(2).unwrap()[4..], &other.id().to_string());
        let err = SecretKey::from_file_text(swapped.as_bytes(), Role::Root).unwrap_err();
        assert!(err.to_string().contains("does not match its id line"), "{err}");

        assert!(SecretKey::generate(Role::Recovery, &mut OsRng).is_err());
    }

    #[test]
    fn debug_never_shows_secrets() {
        let key = SecretKey::from_seed(Role::Signing, &[7; 32]);
        let shown = format!("{key:?}");
        assert!(shown.contains("****") && !shown.contains(&B64.encode([7u8; 32])));
        let recovery = RecoverySecret::from_bytes([9; 32]);
        assert!(!format!("{recovery:?}").contains(&B64.encode([9u8; 32])));
    }

    #[test]
    fn public_keys_parse_and_print() {
        let key = SecretKey::from_seed(Role::Root, &[1; 32]).public();
        let text = key.to_string();
        assert_eq!(text.parse::<PublicKey>().unwrap(), key);
        assert!("not base64!".parse::<PublicKey>().is_err());
        assert!(B64.encode([0u8; 31]).parse::<PublicKey>().is_err());
        assert_eq!(key.id().to_string().len(), 16);
    }
}
