//! What control signs with: the online key (reloaded after a rotation), the recovery key
//! every snapshot is also sealed to, the vault of secrets at rest and the profile every
//! snapshot carries.

use hearth_shared::keys::{PublicKey, RecoveryPublic};
use hearth_shared::seal::Wrapper;
use hearth_shared::wire::Profile;
use rusqlite::Connection;

use crate::error::Error;
use crate::keyring::Online;
use crate::secrets::Vault;

/// What control signs with, and where it publishes.
pub(crate) struct Signer {
    /// The online signing key and the key records certifying it (sent with every push and
    /// every answer to a node's pull). Swapped when `keys rotate` moved the database's
    /// `keys_serial`: see [`Signer::online`].
    pub(crate) online: std::sync::RwLock<std::sync::Arc<Online>>,
    /// The data directory the keys are read from.
    pub(crate) dir: std::path::PathBuf,
    /// The owner's recovery key: every sealed snapshot is also readable with it.
    pub(crate) recovery: RecoveryPublic,
    /// Secrets at rest.
    pub(crate) vault: Vault,
    /// The subscription headers every snapshot carries (the owner can change them at run
    /// time: [`crate::settings`]).
    pub(crate) profile: std::sync::RwLock<Profile>,
    /// Control's incarnation.
    pub(crate) epoch: u32,
    /// The root key (to verify what nodes sign, next to their own keys).
    pub(crate) root: PublicKey,
    /// The API prefix of `edge.toml` (the `main` edge's, and control's node API's).
    pub(crate) api_prefix: String,
    /// What wraps snapshots' tokens for [`Signer::recovery`], and when it was made: see
    /// [`Signer::wrapper`].
    pub(crate) wrapping: std::sync::Mutex<Option<(std::time::Instant, std::sync::Arc<Wrapper>)>>,
}

/// How long one [`Wrapper`] wraps snapshots' tokens before the next is made.
const WRAPPER_LIFETIME: std::time::Duration = std::time::Duration::from_secs(1);

impl Signer {
    /// What seals snapshots' tokens for the recovery key now: one X25519 agreement serves
    /// every snapshot sealed within a second (a bulk creation of 10,000 users seals them with
    /// two, where one each cost most of its CPU). The snapshots sealed with one share its
    /// ephemeral public key, which tells an edge that they were sealed within that second;
    /// it sees them come in one push anyway.
    pub(crate) fn wrapper(&self) -> std::sync::Arc<Wrapper> {
        let mut held = self.wrapping.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*held {
            Some((made, wrapper)) if made.elapsed() < WRAPPER_LIFETIME => wrapper.clone(),
            _ => {
                let wrapper = std::sync::Arc::new(Wrapper::new(&self.recovery, &mut rand_core::OsRng));
                *held = Some((std::time::Instant::now(), wrapper.clone()));
                wrapper
            }
        }
    }

    /// The signing key in force. A rotation (`hearth-control keys rotate`, another process)
    /// commits a new `keys_serial` with everything it signed again; the first signature after
    /// that, in any transaction, loads the new key from the data directory, so no envelope is
    /// signed with a retired key once the rotation is committed.
    pub(crate) fn online(&self, conn: &Connection) -> Result<std::sync::Arc<Online>, Error> {
        let serial = crate::store::get_state(conn, "keys_serial")?;
        let held = self.online.read().expect("keys lock").clone();
        if held.serial == serial {
            return Ok(held);
        }
        let fresh = crate::keyring::load_online(&self.dir, serial, crate::clock::now())
            .map_err(|e| Error::Internal(format!("loading the rotated signing key: {e:#}")))?;
        let fresh = std::sync::Arc::new(fresh);
        tracing::info!(key = %fresh.key.id(), "the signing key was rotated; signing with the new key");
        *self.online.write().expect("keys lock") = fresh.clone();
        Ok(fresh)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::WRAPPER_LIFETIME;
    use crate::testing::TestControl;

    /// Snapshots sealed within a second share one wrapper; an older one is replaced.
    #[test]
    fn a_wrapper_serves_a_second_then_another_is_made() {
        let t = TestControl::new(false);
        let signer = &t.app.signer;
        let first = signer.wrapper();
        assert!(Arc::ptr_eq(&first, &signer.wrapper()), "a second wrapper within the second");
        // Held for longer than its lifetime: the next seal gets a new one.
        let made = Instant::now().checked_sub(WRAPPER_LIFETIME + Duration::from_millis(10)).unwrap();
        *signer.wrapping.lock().unwrap() = Some((made, first.clone()));
        let next = signer.wrapper();
        assert!(!Arc::ptr_eq(&first, &next), "a wrapper kept past its lifetime");
        assert!(Arc::ptr_eq(&next, &signer.wrapper()));
    }
}
