//! The owner's and admins' passwords: argon2id, one hash at a time, a bounded queue with
//! room kept for the owner, and an unknown login checked against a dummy hash.

use std::sync::{Arc, Mutex};

use argon2::password_hash::{PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand_core::OsRng;

use crate::error::Error;
use crate::secrets;

/// The longest password accepted, in bytes.
pub(crate) const MAX_PASSWORD: usize = 256;
/// The shortest password accepted at setup, in characters.
pub(crate) const MIN_PASSWORD: usize = 10;
/// Logins that may wait for the hasher; more get 429.
const MAX_WAITING: usize = 8;
/// Sign-ins that may wait for the hasher beside those, from the owner's known addresses or
/// with a good second factor: strangers filling the queue cannot keep the owner out.
const MAX_TRUSTED_WAITING: usize = 4;

/// Blocks reserved (not touched) for argon2's working memory: 33 MiB, above the largest
/// threshold under which glibc's malloc serves a request from its heap. Such a request is
/// always its own mapping, returned to the system when the hash is done: only the 19 MiB a
/// hash touches is ever resident, and only while it runs. (Served from the heap, freed
/// buffers stayed resident: ten sign-ins grew control by 156 MiB.)
const RESERVE_BLOCKS: usize = 33 * 1024;

/// The hashing thread's state: the parameters new hashes use, and the dummy hash unknown
/// logins are checked against.
struct Engine {
    params: Params,
    dummy: String,
}

impl Engine {
    /// An engine hashing with `params`. Its dummy hash is a PHC string with those parameters,
    /// a random salt and random bytes for the hash: checking a password against it costs what
    /// checking one against a real hash costs, and no password matches it. (It was the hash of
    /// a random secret, made as control started: 19 MiB and two passes of argon2, about 14 ms
    /// of CPU beside the start's own work on a one-CPU box.)
    fn new(params: Params) -> Engine {
        let salt = SaltString::generate(&mut OsRng);
        let dummy = phc(&params, salt.as_str(), &secrets::random_bytes::<32>());
        Engine { params, dummy }
    }

    fn compute(&self, params: &Params, password: &[u8], salt: &[u8], out: &mut [u8]) -> Result<(), argon2::Error> {
        let need = params.block_count();
        let mut blocks = Vec::with_capacity(need.max(RESERVE_BLOCKS));
        blocks.resize(need, argon2::Block::default());
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone()).hash_password_into_with_memory(
            password,
            salt,
            out,
            &mut blocks,
        )
    }

    /// A new PHC string for `password`.
    fn hash(&self, password: &[u8]) -> Result<String, Error> {
        let salt = SaltString::generate(&mut OsRng);
        let mut raw = [0u8; 64];
        let salt_bytes = salt.decode_b64(&mut raw).map_err(|e| Error::Internal(format!("salt: {e}")))?;
        let mut out = [0u8; 32];
        let params = self.params.clone();
        self.compute(&params, password, salt_bytes, &mut out).map_err(|e| Error::Internal(format!("hashing: {e}")))?;
        Ok(phc(&params, salt.as_str(), &out))
    }

    /// Whether `password` matches the PHC string `phc`.
    fn verify(&self, password: &[u8], phc: &str) -> bool {
        let Ok(parsed) = PasswordHash::new(phc) else { return false };
        let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else { return false };
        let Ok(params) = Params::try_from(&parsed) else { return false };
        if parsed.algorithm.as_str() != "argon2id" || params.block_count() > 1 << 20 {
            return false;
        }
        let mut raw = [0u8; 64];
        let Ok(salt) = salt.decode_b64(&mut raw) else { return false };
        let mut out = vec![0u8; expected.len()];
        self.compute(&params, password, salt, &mut out).is_ok() && hearth_shared::ct_eq(&out, expected.as_bytes())
    }
}

/// The PHC string of an argon2id hash: its parameters, its salt (in PHC's base64) and the
/// hash.
fn phc(params: &Params, salt: &str, hash: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "$argon2id$v=19$m={},t={},p={}${salt}${}",
        params.m_cost(),
        params.t_cost(),
        params.p_cost(),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash)
    )
}

type Job = Box<dyn FnOnce(&Engine) + Send>;

/// The argon2id hasher: one thread that hashes, one hash at a time.
pub(crate) struct Hasher {
    jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    /// Jobs waiting or running: from anyone, and from the owner's known addresses or with a
    /// good second factor.
    waiting: [std::sync::atomic::AtomicUsize; 2],
}

impl Hasher {
    /// The production parameters: 19 MiB, two passes, one lane.
    pub(crate) fn new() -> Arc<Hasher> {
        Hasher::with_params(Params::new(19 * 1024, 2, 1, Some(32)).expect("valid argon2 parameters"))
    }

    pub(crate) fn with_params(params: Params) -> Arc<Hasher> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("hearth-argon2".into())
            .spawn(move || {
                let engine = Engine::new(params);
                for job in queue {
                    job(&engine);
                }
            })
            .expect("starting the hashing thread");
        Arc::new(Hasher { jobs: Mutex::new(jobs), waiting: Default::default() })
    }

    /// Runs `job` on the hashing thread, unless too many wait already; a `trusted` job (from
    /// the owner's known addresses, or with a good second factor) may also take one of the
    /// places kept for those.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        trusted: bool,
        job: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, Error> {
        use std::sync::atomic::Ordering;
        // A place among everyone's, else (trusted) one of those kept for the owner.
        let take = |slot: usize, most: usize| {
            let taken = self.waiting[slot].fetch_add(1, Ordering::SeqCst) < most;
            if !taken {
                self.waiting[slot].fetch_sub(1, Ordering::SeqCst);
            }
            taken
        };
        let slot = if take(0, MAX_WAITING) {
            0
        } else if trusted && take(1, MAX_TRUSTED_WAITING) {
            1
        } else {
            return Err(Error::TooMany(2));
        };
        let (done, result) = tokio::sync::oneshot::channel();
        let hasher = Arc::clone(self);
        let sent = self.jobs.lock().expect("hasher lock").send(Box::new(move |engine| {
            let value = job(engine);
            hasher.waiting[slot].fetch_sub(1, Ordering::SeqCst);
            let _ = done.send(value);
        }));
        if sent.is_err() {
            self.waiting[slot].fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Internal("the hashing thread stopped".into()));
        }
        result.await.map_err(|_| Error::Internal("hashing failed".into()))
    }

    /// Hashes a new password (PHC string).
    pub(crate) async fn hash(self: &Arc<Self>, password: String) -> Result<String, Error> {
        check_password(&password)?;
        self.run(false, move |engine| engine.hash(password.as_bytes())).await?
    }

    /// Checks a password against a stored hash (or the dummy one when there is none), in
    /// the same time either way; `trusted` when the request comes from the owner's known
    /// address, with a good second factor, or in the owner's session.
    pub(crate) async fn verify(
        self: &Arc<Self>,
        password: String,
        stored: Option<String>,
        trusted: bool,
    ) -> Result<bool, Error> {
        if password.len() > MAX_PASSWORD {
            return Ok(false);
        }
        self.run(trusted, move |engine| {
            let known = stored.is_some();
            let phc = stored.unwrap_or_else(|| engine.dummy.clone());
            engine.verify(password.as_bytes(), &phc) && known
        })
        .await
    }
}

/// Refuses passwords too short or too long.
pub(crate) fn check_password(password: &str) -> Result<(), Error> {
    if password.len() > MAX_PASSWORD {
        return Err(Error::invalid("bad_password", format!("a password must be at most {MAX_PASSWORD} bytes")));
    }
    if password.chars().count() < MIN_PASSWORD {
        return Err(Error::invalid("bad_password", format!("a password must be at least {MIN_PASSWORD} characters")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast() -> Arc<Hasher> {
        Hasher::with_params(Params::new(256, 1, 1, Some(32)).unwrap())
    }

    #[tokio::test]
    async fn passwords_verify_and_unknown_logins_never_pass() {
        let hasher = fast();
        let hash = hasher.hash("correct horse battery".into()).await.unwrap();
        assert!(hasher.verify("correct horse battery".into(), Some(hash.clone()), false).await.unwrap());
        assert!(!hasher.verify("wrong password!!".into(), Some(hash), false).await.unwrap());
        // The dummy hash is of a random secret; even its own password would not pass.
        assert!(!hasher.verify(String::new(), None, false).await.unwrap());
        assert!(hasher.hash("short".into()).await.is_err());
        assert!(hasher.hash("x".repeat(257)).await.is_err());
    }

    /// An unknown login is checked against a hash with the production parameters (so it
    /// costs what a known one costs), which no password matches.
    #[test]
    fn the_dummy_hash_costs_what_a_real_one_does_and_matches_nothing() {
        let params = Params::new(256, 2, 1, Some(32)).unwrap();
        let engine = Engine::new(params.clone());
        let parsed = PasswordHash::new(&engine.dummy).unwrap();
        assert_eq!(parsed.algorithm.as_str(), "argon2id");
        let theirs = Params::try_from(&parsed).unwrap();
        assert_eq!((theirs.m_cost(), theirs.t_cost(), theirs.p_cost()), (256, 2, 1));
        assert_eq!(parsed.hash.unwrap().len(), 32);
        assert!(!engine.verify(b"", &engine.dummy));
        assert_ne!(Engine::new(params).dummy, engine.dummy, "each engine's dummy is its own");
    }

    #[tokio::test]
    async fn our_phc_strings_are_standard_argon2id() {
        use argon2::PasswordVerifier as _;
        let hasher = fast();
        let phc = hasher.hash("correct horse battery".into()).await.unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=256,t=1,p=1$"), "{phc}");
        let parsed = PasswordHash::new(&phc).unwrap();
        assert!(Argon2::default().verify_password(b"correct horse battery", &parsed).is_ok());
        assert!(Argon2::default().verify_password(b"correct horse batterx", &parsed).is_err());
        // And a PHC string made by the library verifies here.
        use argon2::PasswordHasher as _;
        let salt = SaltString::generate(&mut OsRng);
        let theirs = Argon2::default().hash_password(b"another password", &salt).unwrap().to_string();
        assert!(hasher.verify("another password".into(), Some(theirs.clone()), false).await.unwrap());
        assert!(!hasher.verify("another passworx".into(), Some(theirs), false).await.unwrap());
    }

    #[tokio::test]
    async fn one_hash_at_a_time_and_the_queue_is_bounded() {
        let hasher = Hasher::with_params(Params::new(8 * 1024, 2, 1, Some(32)).unwrap());
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut jobs = Vec::new();
        for _ in 0..20 {
            let (hasher, running, peak) = (hasher.clone(), running.clone(), peak.clone());
            jobs.push(tokio::spawn(async move {
                hasher
                    .run(false, move |_| {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(now, SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        running.fetch_sub(1, SeqCst);
                    })
                    .await
            }));
        }
        let mut refused = 0;
        for job in jobs {
            if matches!(job.await.unwrap(), Err(Error::TooMany(_))) {
                refused += 1;
            }
        }
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 1, "never two hashes at once");
        assert!(refused > 0, "a flood beyond the queue is refused");
    }

    #[tokio::test]
    async fn strangers_filling_the_queue_leave_room_for_the_owner() {
        let hasher = fast();
        // The hashing thread held, and the queue filled by strangers.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocked = {
            let hasher = hasher.clone();
            tokio::spawn(async move { hasher.run(false, move |_| held.recv().ok()).await })
        };
        let mut strangers = Vec::new();
        while hasher.waiting[0].load(std::sync::atomic::Ordering::SeqCst) < MAX_WAITING {
            let hasher = hasher.clone();
            strangers.push(tokio::spawn(async move { hasher.verify("guess guess".into(), None, false).await }));
            tokio::task::yield_now().await;
        }
        assert!(matches!(hasher.verify("guess guess".into(), None, false).await, Err(Error::TooMany(_))));
        // The owner's sign-in (a known address, a good code) still waits its turn.
        let phc = fast().hash("correct horse battery".into()).await.unwrap();
        let owner = {
            let hasher = hasher.clone();
            tokio::spawn(async move { hasher.verify("correct horse battery".into(), Some(phc), true).await })
        };
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        assert!(owner.await.unwrap().unwrap(), "the owner was turned away");
        blocked.await.unwrap().unwrap();
        for stranger in strangers {
            assert!(!stranger.await.unwrap().unwrap());
        }
    }
}
