//! The ground every other wire module stands on: the ids of users and nodes, why wire data is
//! refused ([`WireError`], which names the newest credential-set format this version reads),
//! and the postcard encoding with its strict and its trusting decoders.

use serde::{Deserialize, Serialize};

/// A user's stable id (control's row id). It survives link rotation and restores.
pub type UserId = u64;
/// A node's stable id.
pub type NodeId = u64;

/// The credential-set format a node of this version reads at most (see
/// [`CredentialSet::encode`](crate::wire::CredentialSet::encode)).
pub const CREDS_FORMAT: u64 = 5;

/// Why wire data was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes do not decode, or decode to a non-canonical value.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A user appears twice.
    #[error("user {0} appears twice")]
    DuplicateUser(UserId),
    /// A diff does not fit the set it is applied to.
    #[error("diff does not apply: {0}")]
    DiffMismatch(&'static str),
    /// A credential set in a format this version does not read.
    #[error("credential set format {0} is newer than this node reads (format {CREDS_FORMAT} at most): update the node")]
    NewerFormat(u64),
}

/// Encodes any wire value with postcard.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("encoding into a Vec cannot fail")
}

/// Decodes a wire value strictly (no trailing bytes, canonical form).
pub fn decode<T: Serialize + serde::de::DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, WireError> {
    let value: T = postcard::from_bytes(bytes).map_err(|_| WireError::Malformed(what))?;
    if encode(&value) != bytes {
        return Err(WireError::Malformed(what));
    }
    Ok(value)
}

/// Decodes a wire value whose bytes are already proven genuine (opened with an AEAD key, or
/// covered by a signature checked when they arrived), without the canonical-form check of
/// [`decode`]: it is on the hot path of serving a link, where re-encoding to compare took a
/// tenth of the work.
pub fn decode_authenticated<'de, T: Deserialize<'de>>(bytes: &'de [u8], what: &'static str) -> Result<T, WireError> {
    postcard::from_bytes(bytes).map_err(|_| WireError::Malformed(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BatchManifest, CredDelta, CredentialSet, Snapshot, SubToken, UsageReport};

    proptest::proptest! {
        /// The strict decoders never panic and accept only canonical input.
        #[test]
        fn decoders_take_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(set) = CredentialSet::decode(&bytes) {
                proptest::prop_assert_eq!(set.encode(), bytes.clone());
            }
            if let Ok(manifest) = BatchManifest::decode(&bytes) {
                proptest::prop_assert_eq!(manifest.encode(), bytes.clone());
            }
            if let Ok(report) = UsageReport::decode(&bytes) {
                proptest::prop_assert_eq!(report.encode(), bytes.clone());
            }
            if let Ok(delta) = CredDelta::decode(&bytes) {
                proptest::prop_assert_eq!(delta.encode(), bytes.clone());
            }
            let _ = decode::<Snapshot>(&bytes, "snapshot");
            let _ = crate::seal::open(&bytes, &SubToken::from_bytes([1; 32]));
        }
    }
}
