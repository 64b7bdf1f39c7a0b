//! Signing in: the owner's password (argon2id), sessions, lockouts and API tokens.
//!
//! - Passwords are hashed with argon2id (19 MiB, t=2, p=1), **one hash at a time**: a
//!   semaphore lets one hash run; eight more wait, the rest get 429, and four more places are
//!   kept for the owner's known addresses and requests with a good second factor, so
//!   strangers filling the queue cannot turn the owner away. Ten logins at once never
//!   hold more than one hash's memory. An unknown login is checked against a dummy hash so it
//!   takes as long as a wrong password. Passwords are capped at 256 bytes.
//! - Sign-in limits. Someone who knows the admin prefix can slow guessing but never keep the
//!   owner out, and guessing stays bounded per hour:
//!   - 10 failures from one address (IPv6: its /64) within an hour lock that address for 15
//!     minutes (429 with `Retry-After`), whatever the login;
//!   - each login has a budget of 30 password checks per hour (a token bucket, one back every
//!     two minutes) for addresses not known to be the owner's: when it is spent, they get 429
//!     until it refills. No login is ever locked from everywhere;
//!   - an address the owner signed in from within 90 days is known (only the SHA-256 of its
//!     key is stored, with the time, for the 50 most recent) and is never held to the login's
//!     budget, only to its own limit;
//!   - with two-step sign-in on, a request carrying a valid authenticator code (or an unspent
//!     recovery code) is not held to the budget either: the code is checked first, without
//!     spending it, and spent only when the sign-in succeeds. A wrong code counts as a failure
//!     for the address, even once the budget is spent (and takes a check from the budget while
//!     there is one), and an authenticator code gets past the budget once (one time step, one
//!     password check), so the owner always has a way in from anywhere while a code guessed
//!     from many addresses buys one password check, not a stream of them;
//!   - a login longer than any the owner can have (64 characters), a password over 256 bytes
//!     or a code over 64 bytes is refused (400) before anything is counted or hashed. The
//!     tables in memory hold fixed-size keys (an address, a login's SHA-256) and at most
//!     8192 of each.
//! - Sessions live in `__Host-` cookies (Secure, HttpOnly, SameSite=Strict) with idle and
//!   absolute timeouts; only their SHA-256 is stored.
//! - API tokens (`hth_` and 43 characters) carry a scope (read, operate, admin); only their
//!   SHA-256 is stored and they are shown once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use argon2::password_hash::{PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use hearth_shared::sha256;
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::secrets;
use crate::store::audit;

/// The longest password accepted, in bytes.
pub(crate) const MAX_PASSWORD: usize = 256;
/// The shortest password accepted at setup, in characters.
pub(crate) const MIN_PASSWORD: usize = 10;
/// A session ends after this long without a request.
pub(crate) const SESSION_IDLE: u64 = 12 * 3600;
/// A session ends this long after sign-in, whatever happens.
pub(crate) const SESSION_ABSOLUTE: u64 = 7 * 86_400;
/// The session cookie's name.
pub(crate) const COOKIE: &str = "__Host-hearth";
/// Logins that may wait for the hasher; more get 429.
const MAX_WAITING: usize = 8;
/// Sign-ins that may wait for the hasher beside those, from the owner's known addresses or
/// with a good second factor: strangers filling the queue cannot keep the owner out.
const MAX_TRUSTED_WAITING: usize = 4;

/// Failures from one address (IPv6: its /64) within [`FAILURE_WINDOW`] that lock it out.
const ADDRESS_FAILURES: usize = 10;
const FAILURE_WINDOW: u64 = 3600;
/// How long a locked address waits after its last failure.
const LOCKOUT: u64 = 15 * 60;
/// Password checks per hour for one login from addresses not known to be the owner's.
pub(crate) const LOGIN_CHECKS_PER_HOUR: u64 = 30;
/// Addresses, and logins, whose sign-in failures are kept in memory.
const MAX_ADDRESSES: usize = 8192;
const MAX_LOGINS: usize = 8192;
/// The owner's addresses remembered: the most recent, within [`KNOWN_FOR`].
const KNOWN_ADDRESSES: usize = 50;
/// How long an address the owner signed in from stays known.
const KNOWN_FOR: u64 = 90 * 86_400;

/// What a request may do, each level holding the ones below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scope {
    /// Look.
    Read,
    /// Change users (an operator's reach).
    Users,
    /// Change users, nodes and groups.
    Operate,
    /// Everything, including tokens and settings.
    Admin,
}

impl Scope {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Users => "users",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }
    pub(crate) fn parse(name: &str) -> Option<Scope> {
        Some(match name {
            "read" => Scope::Read,
            "users" => Scope::Users,
            "operate" => Scope::Operate,
            "admin" => Scope::Admin,
            _ => return None,
        })
    }
}

pub(crate) use crate::store::admins::Role;

impl Role {
    /// The most this role may do (a reseller's, only to their own users).
    pub(crate) fn scope(self) -> Scope {
        match self {
            Role::Owner | Role::Admin => Scope::Admin,
            Role::Operator | Role::Reseller => Scope::Users,
            Role::ReadOnly => Scope::Read,
        }
    }
}

/// The admin behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Account {
    /// The admin's id; `None` for the owner.
    pub(crate) id: Option<i64>,
    /// Their login (empty for the owner, named "owner" in the audit log).
    pub(crate) login: String,
    pub(crate) role: Role,
}

impl Account {
    pub(crate) fn owner() -> Account {
        Account { id: None, login: String::new(), role: Role::Owner }
    }

    /// How the audit log names this admin.
    pub(crate) fn name(&self) -> String {
        match self.id {
            None => "owner".to_owned(),
            Some(_) => format!("admin {}", self.login),
        }
    }
}

/// How a request is signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// A browser session (its stored hash).
    Session([u8; 32]),
    /// An API token.
    Token {
        /// Its id.
        id: i64,
        /// Its name (for the audit log).
        name: String,
        /// Its scope (never more than its admin's role allows, whatever it says).
        scope: Scope,
    },
}

/// Who is asking: an admin, by a session or one of their tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Principal {
    pub(crate) account: Account,
    pub(crate) via: Via,
}

impl Principal {
    /// What this principal may do: its role's rights, cut to its token's scope.
    pub(crate) fn scope(&self) -> Scope {
        match &self.via {
            Via::Session(_) => self.account.role.scope(),
            Via::Token { scope, .. } => self.account.role.scope().min(*scope),
        }
    }

    /// The reseller asking, if it is one.
    pub(crate) fn reseller(&self) -> Option<i64> {
        if self.account.role == Role::Reseller { self.account.id } else { None }
    }

    /// The session asking, if it is one.
    pub(crate) fn session(&self) -> Option<[u8; 32]> {
        match self.via {
            Via::Session(hash) => Some(hash),
            Via::Token { .. } => None,
        }
    }

    /// The actor's name in the audit log: the admin, and the token if one was used.
    pub(crate) fn actor(&self) -> String {
        match (&self.via, self.account.id) {
            (Via::Session(_), _) => self.account.name(),
            (Via::Token { id, name, .. }, None) => format!("token {id} ({name})"),
            (Via::Token { id, name, .. }, Some(_)) => format!("token {id} ({name}) of {}", self.account.name()),
        }
    }
}

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

/// Failed sign-ins per address, and the password checks each login has left for addresses
/// not known to be the owner's, in memory. Keys are fixed-size (an address's 16 bytes, a
/// login's SHA-256) and each table holds at most a fixed number of them, so what strangers
/// send never grows it: a full table drops the entry that carries the least (the address
/// whose last failure is oldest, the login whose budget is fullest).
pub(crate) struct Lockouts {
    tables: Mutex<Tables>,
}

struct Tables {
    addresses: HashMap<[u8; 16], Failures>,
    logins: HashMap<[u8; 32], u64>,
    max_addresses: usize,
    max_logins: usize,
    /// The last authenticator time step whose code got a request past a login's budget.
    code_step: u64,
    /// The clock hour of the failed sign-ins the audit log recorded, how many it recorded in
    /// that hour, and how many it did not since it last said so.
    audited: (u64, usize, u64),
}

/// At most this many failed sign-ins an hour go in the audit log one by one; the rest are
/// counted, and the next one recorded says how many were not (guessing from many addresses
/// cannot grow the log without bound).
pub(crate) const FAILURES_AUDITED_PER_HOUR: usize = 100;

/// An address's most recent failures (Unix seconds; 0: none), as many as its limit needs.
#[derive(Clone, Copy, Default)]
struct Failures {
    times: [u64; ADDRESS_FAILURES],
    next: usize,
}

impl Failures {
    fn push(&mut self, now: u64) {
        self.times[self.next] = now;
        self.next = (self.next + 1) % ADDRESS_FAILURES;
    }

    fn last(&self) -> u64 {
        self.times.iter().copied().max().unwrap_or(0)
    }

    /// The failures within the window before `now`.
    fn recent(&self, now: u64) -> usize {
        self.times.iter().filter(|t| **t > 0 && now < **t + FAILURE_WINDOW).count()
    }

    /// Seconds until the address may try again, if it is locked out.
    fn locked(&self, now: u64) -> Option<u64> {
        let until = self.last() + LOCKOUT;
        (self.recent(now) >= ADDRESS_FAILURES && now < until).then(|| until - now)
    }
}

/// The key an address's failures (and its anonymous budget, [`crate::app::App::spend`]) count
/// under: IPv4 (also IPv4-mapped IPv6) as is, IPv6 by its /64.
pub(crate) fn address_key(ip: IpAddr) -> [u8; 16] {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_ipv6_mapped(),
            None => {
                let s = v6.segments();
                std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0)
            }
        },
    };
    v6.octets()
}

/// The key a login's budget counts under: the SHA-256 of the login as the owner's is
/// matched (trimmed, lower-cased), never the login itself.
fn login_key(login: &str) -> [u8; 32] {
    sha256(login.trim().to_lowercase().as_bytes())
}

/// What is stored of an address the owner signed in from: the SHA-256 of its key (see
/// [`address_key`]).
pub(crate) fn address_hash(ip: IpAddr) -> [u8; 32] {
    sha256(&address_key(ip))
}

/// Seconds between two password checks of a login's budget.
const CHECK_INTERVAL: u64 = 3600 / LOGIN_CHECKS_PER_HOUR;

impl Default for Lockouts {
    fn default() -> Lockouts {
        Lockouts::with_capacity(MAX_ADDRESSES, MAX_LOGINS)
    }
}

impl Lockouts {
    fn with_capacity(max_addresses: usize, max_logins: usize) -> Lockouts {
        Lockouts {
            tables: Mutex::new(Tables {
                addresses: HashMap::new(),
                logins: HashMap::new(),
                max_addresses,
                max_logins,
                code_step: 0,
                audited: (0, 0, 0),
            }),
        }
    }

    /// Seconds until this address may try again, if it is locked out.
    pub(crate) fn locked(&self, ip: IpAddr, now: u64) -> Option<u64> {
        self.tables.lock().expect("lockout lock").addresses.get(&address_key(ip))?.locked(now)
    }

    /// How many more failures this address may have before it is locked out (0: locked).
    pub(crate) fn tries_left(&self, ip: IpAddr, now: u64) -> usize {
        let tables = self.tables.lock().expect("lockout lock");
        let recent = tables.addresses.get(&address_key(ip)).map_or(0, |failures| failures.recent(now));
        ADDRESS_FAILURES.saturating_sub(recent)
    }

    /// Whether a failed sign-in at `now` goes in the audit log ([`FAILURES_AUDITED_PER_HOUR`]):
    /// `Some(n)` with the failures not recorded since the last that was, `None` to skip it.
    pub(crate) fn audit_failure(&self, now: u64) -> Option<u64> {
        let mut tables = self.tables.lock().expect("lockout lock");
        let (hour, recorded, skipped) = &mut tables.audited;
        if *hour != now / 3600 {
            (*hour, *recorded) = (now / 3600, 0);
        }
        if *recorded >= FAILURES_AUDITED_PER_HOUR {
            *skipped += 1;
            return None;
        }
        *recorded += 1;
        Some(std::mem::take(skipped))
    }

    /// Counts a failure for an address.
    pub(crate) fn fail(&self, ip: IpAddr, now: u64) {
        let mut tables = self.tables.lock().expect("lockout lock");
        let key = address_key(ip);
        if !tables.addresses.contains_key(&key) && tables.addresses.len() >= tables.max_addresses {
            tables.addresses.retain(|_, failures| failures.last() + FAILURE_WINDOW > now);
            if tables.addresses.len() >= tables.max_addresses {
                let oldest = tables.addresses.iter().min_by_key(|(_, f)| f.last()).map(|(key, _)| *key);
                if let Some(oldest) = oldest {
                    tables.addresses.remove(&oldest);
                }
            }
        }
        tables.addresses.entry(key).or_default().push(now);
    }

    /// Forgets an address's failures after the owner signed in from it.
    pub(crate) fn succeed(&self, ip: IpAddr) {
        self.tables.lock().expect("lockout lock").addresses.remove(&address_key(ip));
    }

    /// Takes one password check from the login's budget for addresses not known to be the
    /// owner's ([`LOGIN_CHECKS_PER_HOUR`], refilled evenly); `Err(retry_after)` when it is
    /// spent.
    pub(crate) fn take(&self, login: &str, now: u64) -> Result<(), u64> {
        let mut tables = self.tables.lock().expect("lockout lock");
        let key = login_key(login);
        // The budget is a token bucket kept as the time it is full again (GCRA): full (or
        // unknown) at `now` or earlier, spent when that is a whole hour away.
        let full_at = tables.logins.get(&key).copied().unwrap_or(0).max(now);
        if full_at + CHECK_INTERVAL > now + 3600 {
            return Err(full_at + CHECK_INTERVAL - 3600 - now);
        }
        if !tables.logins.contains_key(&key) && tables.logins.len() >= tables.max_logins {
            tables.logins.retain(|_, full_at| *full_at > now);
            if tables.logins.len() >= tables.max_logins {
                let fullest = tables.logins.iter().min_by_key(|(_, full_at)| **full_at).map(|(key, _)| *key);
                if let Some(fullest) = fullest {
                    tables.logins.remove(&fullest);
                }
            }
        }
        tables.logins.insert(key, full_at + CHECK_INTERVAL);
        Ok(())
    }

    /// Lets a valid authenticator code of this time step past a login's budget, once: a code
    /// found by guessing from many addresses buys one password check, not as many as the
    /// hasher runs while the code is valid. Recovery codes are not guessable and need no such
    /// limit.
    pub(crate) fn pass_code(&self, step: u64) -> bool {
        let mut tables = self.tables.lock().expect("lockout lock");
        if step <= tables.code_step {
            return false;
        }
        tables.code_step = step;
        true
    }

    /// Entries held (addresses and logins).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        let tables = self.tables.lock().expect("lockout lock");
        tables.addresses.len() + tables.logins.len()
    }

    /// Bytes the tables hold: their keys and values are fixed-size, so this is their whole
    /// memory (give or take the hash maps' control bytes).
    #[cfg(test)]
    pub(crate) fn memory(&self) -> usize {
        let tables = self.tables.lock().expect("lockout lock");
        tables.addresses.capacity() * std::mem::size_of::<([u8; 16], Failures)>()
            + tables.logins.capacity() * std::mem::size_of::<([u8; 32], u64)>()
    }
}

/// Whether the owner signed in from this address (see [`address_hash`]) within
/// [`KNOWN_FOR`].
pub(crate) fn known_address(conn: &Connection, hash: &[u8; 32], now: u64) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM known_addresses WHERE address_hash = ?1 AND signed_in > ?2")?
        .query_row(params![hash.as_slice(), now.saturating_sub(KNOWN_FOR)], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Remembers that the owner signed in from this address now; keeps the
/// [`KNOWN_ADDRESSES`] most recent within [`KNOWN_FOR`].
pub(crate) fn remember_address(conn: &Connection, hash: &[u8; 32], now: u64) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO known_addresses (address_hash, signed_in) VALUES (?1, ?2)
         ON CONFLICT (address_hash) DO UPDATE SET signed_in = excluded.signed_in",
        params![hash.as_slice(), now],
    )?;
    conn.execute(
        "DELETE FROM known_addresses WHERE signed_in <= ?1 OR address_hash NOT IN
         (SELECT address_hash FROM known_addresses ORDER BY signed_in DESC LIMIT ?2)",
        params![now.saturating_sub(KNOWN_FOR), KNOWN_ADDRESSES],
    )?;
    Ok(())
}

/// Whether an owner exists yet.
pub(crate) fn has_owner(conn: &Connection) -> Result<bool, Error> {
    Ok(conn.query_row("SELECT count(*) FROM owner", [], |row| row.get::<_, i64>(0))? > 0)
}

/// The owner's login and password hash.
pub(crate) fn owner(conn: &Connection) -> Result<Option<(String, String)>, Error> {
    Ok(conn
        .query_row("SELECT login, password_hash FROM owner WHERE id = 1", [], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The owner's second factor, as stored.
#[derive(Default)]
pub(crate) struct TotpState {
    /// The sealed secret, when two-step sign-in is on.
    pub(crate) secret: Option<Vec<u8>>,
    /// A sealed secret being enrolled.
    pub(crate) pending: Option<Vec<u8>>,
    /// The last time step a code was accepted for.
    pub(crate) last_step: u64,
    /// Unused recovery codes.
    pub(crate) recovery_left: u64,
}

pub(crate) fn totp_state(conn: &Connection) -> Result<TotpState, Error> {
    let state = conn
        .query_row(
            "SELECT totp_secret, totp_pending, totp_last_step, (SELECT count(*) FROM recovery_codes) FROM owner WHERE id = 1",
            [],
            |row| {
                Ok(TotpState {
                    secret: row.get(0)?,
                    pending: row.get(1)?,
                    last_step: row.get(2)?,
                    recovery_left: row.get(3)?,
                })
            },
        )
        .optional()?;
    Ok(state.unwrap_or_default())
}

/// Starts an enrollment with a new (sealed) secret; an earlier unconfirmed one is replaced.
pub(crate) fn totp_begin(conn: &Connection, sealed: &[u8]) -> Result<(), Error> {
    conn.execute("UPDATE owner SET totp_pending = ?1 WHERE id = 1", params![sealed])?;
    Ok(())
}

/// Turns two-step sign-in on with the pending secret, whose code for `step` was just shown,
/// and replaces the recovery codes.
pub(crate) fn totp_enable(conn: &Connection, step: u64, recovery: &[[u8; 32]], now: u64) -> Result<(), Error> {
    let changed = conn.execute(
        "UPDATE owner SET totp_secret = totp_pending, totp_pending = NULL, totp_last_step = ?1
         WHERE id = 1 AND totp_pending IS NOT NULL",
        params![step],
    )?;
    if changed == 0 {
        return Err(Error::conflict("no_enrollment", "no enrollment is under way; start again"));
    }
    conn.execute("DELETE FROM recovery_codes", [])?;
    for hash in recovery {
        conn.execute("INSERT INTO recovery_codes (code_hash) VALUES (?1)", params![hash.as_slice()])?;
    }
    audit(conn, now, "owner", "owner.totp_on", "", "")?;
    Ok(())
}

/// Turns two-step sign-in off.
pub(crate) fn totp_disable(conn: &Connection, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE owner SET totp_secret = NULL, totp_pending = NULL, totp_last_step = 0 WHERE id = 1", [])?;
    conn.execute("DELETE FROM recovery_codes", [])?;
    audit(conn, now, "owner", "owner.totp_off", "", "")?;
    Ok(())
}

/// Records that the code of `step` was used; `false` if that step (or a later one) already was,
/// so a code seen over someone's shoulder cannot be replayed.
pub(crate) fn totp_use_step(conn: &Connection, step: u64) -> Result<bool, Error> {
    Ok(conn.execute("UPDATE owner SET totp_last_step = ?1 WHERE id = 1 AND totp_last_step < ?1", params![step])? == 1)
}

/// Spends a recovery code; `false` if it is not one (or was spent).
pub(crate) fn use_recovery_code(conn: &Connection, hash: &[u8; 32], now: u64) -> Result<bool, Error> {
    let spent = conn.execute("DELETE FROM recovery_codes WHERE code_hash = ?1", params![hash.as_slice()])? == 1;
    if spent {
        let left: u64 = conn.query_row("SELECT count(*) FROM recovery_codes", [], |row| row.get(0))?;
        audit(conn, now, "owner", "owner.recovery_code_used", "", &format!("{left} left"))?;
    }
    Ok(spent)
}

/// Whether a recovery code (by its hash) is unspent, without spending it. A lookup by hash
/// needs no constant-time compare: the hash of a guess says nothing about a stored code.
pub(crate) fn recovery_code_exists(conn: &Connection, hash: &[u8; 32]) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM recovery_codes WHERE code_hash = ?1")?
        .query_row([hash.as_slice()], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Creates the owner (once).
pub(crate) fn create_owner(conn: &Connection, login: &str, hash: &str, now: u64) -> Result<(), Error> {
    if has_owner(conn)? {
        return Err(Error::conflict("setup_done", "setup is already done; sign in instead"));
    }
    conn.execute(
        "INSERT INTO owner (id, login, password_hash, created) VALUES (1, ?1, ?2, ?3)",
        params![login, hash, now],
    )?;
    audit(conn, now, "setup", "owner.create", login, "")?;
    Ok(())
}

/// Whose sessions or tokens a call covers: everyone's (the owner's view), or one admin's
/// (`None`: the owner's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whose {
    All,
    Of(Option<i64>),
}

impl Whose {
    /// The two SQL parameters of `(?a OR admin_id IS ?b)`.
    fn params(self) -> (bool, Option<i64>) {
        match self {
            Whose::All => (true, None),
            Whose::Of(admin) => (false, admin),
        }
    }
}

/// The principal of a row that joined `admins` (`a.login`, `a.role`) on its `admin_id`.
fn account_of(admin: Option<i64>, login: Option<String>, role: Option<String>) -> Option<Account> {
    match admin {
        None => Some(Account::owner()),
        Some(id) => Some(Account { id: Some(id), login: login?, role: Role::parse(&role?)? }),
    }
}

/// Starts a session for the owner (`admin` `None`) or an admin; returns the cookie value.
pub(crate) fn start_session(
    conn: &Connection,
    now: u64,
    admin: Option<i64>,
    address: &str,
    agent: &str,
) -> Result<String, Error> {
    let id = secrets::random_token();
    let agent: String = agent.chars().filter(|c| !c.is_control()).take(MAX_AGENT).collect();
    conn.execute(
        "INSERT INTO sessions (id_hash, created, last_seen, address, agent, admin_id) VALUES (?1, ?2, ?2, ?3, ?4, ?5)",
        params![sha256(id.as_bytes()), now, address, agent, admin],
    )?;
    conn.execute(
        "DELETE FROM sessions WHERE last_seen < ?1 OR created < ?2",
        params![now.saturating_sub(SESSION_IDLE), now.saturating_sub(SESSION_ABSOLUTE)],
    )?;
    Ok(id)
}

/// Checks a session cookie. Returns who it is and whether its idle timer should be refreshed
/// (done at most once a minute, by [`touch_session`]).
pub(crate) fn check_session(conn: &Connection, cookie: &str, now: u64) -> Result<Option<(Principal, bool)>, Error> {
    let hash = sha256(cookie.as_bytes());
    type Row = (u64, u64, Option<i64>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT s.created, s.last_seen, s.admin_id, a.login, a.role
             FROM sessions s LEFT JOIN admins a ON a.id = s.admin_id WHERE s.id_hash = ?1",
        )?
        .query_row([hash], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))
        .optional()?;
    match row {
        Some((created, last_seen, admin, login, role))
            if now < created + SESSION_ABSOLUTE && now < last_seen + SESSION_IDLE =>
        {
            Ok(account_of(admin, login, role)
                .map(|account| (Principal { account, via: Via::Session(hash) }, now >= last_seen + 60)))
        }
        _ => Ok(None),
    }
}

/// Refreshes a session's idle timer.
pub(crate) fn touch_session(conn: &Connection, hash: &[u8; 32], now: u64) -> Result<(), Error> {
    conn.execute("UPDATE sessions SET last_seen = ?2 WHERE id_hash = ?1", params![hash, now])?;
    Ok(())
}

/// Ends a session.
pub(crate) fn end_session(conn: &Connection, hash: &[u8; 32]) -> Result<(), Error> {
    conn.execute("DELETE FROM sessions WHERE id_hash = ?1", [hash])?;
    Ok(())
}

/// The most characters of a browser's User-Agent kept with its session.
const MAX_AGENT: usize = 256;

/// A session as an admin sees it (never its cookie or hash).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct SessionView {
    pub(crate) id: i64,
    /// Whose it is: "owner" or the admin's login.
    pub(crate) admin: String,
    pub(crate) created: u64,
    pub(crate) last_seen: u64,
    pub(crate) address: String,
    pub(crate) browser: String,
    /// The session asking.
    pub(crate) current: bool,
}

/// The sessions still valid at `now` of `whose`, the most recently used first.
pub(crate) fn sessions(
    conn: &Connection,
    whose: Whose,
    current: Option<&[u8; 32]>,
    now: u64,
) -> Result<Vec<SessionView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT s.rowid, coalesce(a.login, 'owner'), s.created, s.last_seen, s.address, s.agent, s.id_hash = ?1
         FROM sessions s LEFT JOIN admins a ON a.id = s.admin_id
         WHERE s.last_seen >= ?2 AND s.created >= ?3 AND (?4 OR s.admin_id IS ?5)
         ORDER BY s.last_seen DESC, s.rowid DESC",
    )?;
    let (all, admin) = whose.params();
    let rows = query
        .query_map(
            params![
                current.map(|h| h.to_vec()),
                now.saturating_sub(SESSION_IDLE),
                now.saturating_sub(SESSION_ABSOLUTE),
                all,
                admin
            ],
            |row| {
                Ok(SessionView {
                    id: row.get(0)?,
                    admin: row.get(1)?,
                    created: row.get(2)?,
                    last_seen: row.get(3)?,
                    address: row.get(4)?,
                    browser: row.get(5)?,
                    current: row.get::<_, Option<bool>>(6)?.unwrap_or(false),
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Ends one session of `whose` by its id; whether it existed.
pub(crate) fn end_session_id(conn: &Connection, whose: Whose, id: i64) -> Result<bool, Error> {
    let (all, admin) = whose.params();
    Ok(conn.execute("DELETE FROM sessions WHERE rowid = ?1 AND (?2 OR admin_id IS ?3)", params![id, all, admin])? > 0)
}

/// Ends every session of one admin (`None`: the owner) but `keep` (all of them with none); how
/// many ended.
pub(crate) fn end_other_sessions(
    conn: &Connection,
    admin: Option<i64>,
    keep: Option<&[u8; 32]>,
) -> Result<usize, Error> {
    Ok(conn.execute(
        "DELETE FROM sessions WHERE admin_id IS ?1 AND (?2 IS NULL OR id_hash != ?2)",
        params![admin, keep.map(|h| h.to_vec())],
    )?)
}

/// An API token as listed (never the token itself).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TokenView {
    pub(crate) id: i64,
    /// Whose it is: "owner" or the admin's login.
    pub(crate) admin: String,
    pub(crate) name: String,
    pub(crate) scope: Scope,
    pub(crate) created: u64,
    pub(crate) last_used: u64,
}

/// The prefix of every API token, so secret scanners can find leaked ones.
pub(crate) const TOKEN_PREFIX: &str = "hth_";

/// Creates an API token of `account`'s, with at most the scope their role allows; returns it
/// (shown once) and its listing.
pub(crate) fn create_token(
    conn: &Connection,
    actor: &str,
    account: &Account,
    name: &str,
    scope: Scope,
    now: u64,
) -> Result<(String, TokenView), Error> {
    let name = crate::store::users::check_name(name, "token")?;
    let most = account.role.scope();
    if scope > most {
        return Err(Error::invalid(
            "bad_scope",
            format!("a token of a {} has at most the {} scope", account.role.as_str(), most.as_str()),
        ));
    }
    let token = format!("{TOKEN_PREFIX}{}", secrets::random_token());
    conn.execute(
        "INSERT INTO api_tokens (name, hash, scope, created, admin_id) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![name, sha256(token.as_bytes()), scope.as_str(), now, account.id],
    )?;
    let id = conn.last_insert_rowid();
    audit(conn, now, actor, "token.create", &format!("token {id} ({name})"), scope.as_str())?;
    let admin = if account.id.is_some() { account.login.clone() } else { "owner".to_owned() };
    Ok((token, TokenView { id, admin, name, scope, created: now, last_used: 0 }))
}

/// The API tokens of `whose`.
pub(crate) fn tokens(conn: &Connection, whose: Whose) -> Result<Vec<TokenView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT t.id, coalesce(a.login, 'owner'), t.name, t.scope, t.created, t.last_used
         FROM api_tokens t LEFT JOIN admins a ON a.id = t.admin_id
         WHERE ?1 OR t.admin_id IS ?2 ORDER BY t.id",
    )?;
    let (all, admin) = whose.params();
    let rows = query
        .query_map(params![all, admin], |row| {
            let scope: String = row.get(3)?;
            Ok(TokenView {
                id: row.get(0)?,
                admin: row.get(1)?,
                name: row.get(2)?,
                scope: Scope::parse(&scope).unwrap_or(Scope::Read),
                created: row.get(4)?,
                last_used: row.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Revokes an API token of `whose`.
pub(crate) fn revoke_token(conn: &Connection, actor: &str, whose: Whose, id: i64, now: u64) -> Result<(), Error> {
    let (all, admin) = whose.params();
    let name: String = conn
        .query_row(
            "SELECT name FROM api_tokens WHERE id = ?1 AND (?2 OR admin_id IS ?3)",
            params![id, all, admin],
            |row| row.get(0),
        )
        .optional()?
        .ok_or(Error::NotFound("token"))?;
    conn.execute("DELETE FROM api_tokens WHERE id = ?1", [id])?;
    audit(conn, now, actor, "token.revoke", &format!("token {id} ({name})"), "")?;
    Ok(())
}

/// Looks an API token up (by its SHA-256: the lookup needs no constant-time compare, as the
/// hash of a guess says nothing about the stored token). Returns the principal and whether
/// its last-used time should be refreshed (by [`touch_token`]).
pub(crate) fn check_token(conn: &Connection, token: &str, now: u64) -> Result<Option<(Principal, bool)>, Error> {
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 100 {
        return Ok(None);
    }
    let hash = sha256(token.as_bytes());
    type Row = (i64, String, String, u64, Option<i64>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT t.id, t.name, t.scope, t.last_used, t.admin_id, a.login, a.role
             FROM api_tokens t LEFT JOIN admins a ON a.id = t.admin_id WHERE t.hash = ?1",
        )?
        .query_row([hash], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?))
        })
        .optional()?;
    let Some((id, name, scope, last_used, admin, login, role)) = row else { return Ok(None) };
    let (Some(scope), Some(account)) = (Scope::parse(&scope), account_of(admin, login, role)) else {
        return Ok(None);
    };
    Ok(Some((Principal { account, via: Via::Token { id, name, scope } }, now >= last_used + 60)))
}

/// Records when a token was last used.
pub(crate) fn touch_token(conn: &Connection, id: i64, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE api_tokens SET last_used = ?2 WHERE id = ?1", params![id, now])?;
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

    fn v6(a: u16, b: u16) -> IpAddr {
        IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, a, b, 0, 0, 0, 7))
    }

    #[test]
    fn the_audit_log_takes_a_hundred_failed_sign_ins_an_hour_and_counts_the_rest() {
        let lockouts = Lockouts::default();
        let hour = 3600 * 500_000;
        for i in 0..FAILURES_AUDITED_PER_HOUR as u64 {
            assert_eq!(lockouts.audit_failure(hour + i), Some(0));
        }
        assert_eq!(lockouts.audit_failure(hour + 200), None);
        assert_eq!(lockouts.audit_failure(hour + 3599), None);
        assert_eq!(lockouts.audit_failure(hour + 3600), Some(2), "the next hour's first says how many were not");
        assert_eq!(lockouts.audit_failure(hour + 3601), Some(0));
    }

    #[test]
    fn ten_failures_lock_an_address_not_a_login() {
        let lockouts = Lockouts::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "198.51.100.7".parse().unwrap();
        for i in 0..9 {
            lockouts.fail(a, 1000 + i);
            assert_eq!(lockouts.locked(a, 1000 + i), None);
        }
        assert_eq!(lockouts.tries_left(a, 1009), 1, "the sign-in page says so");
        lockouts.fail(a, 1009);
        assert_eq!(lockouts.tries_left(a, 1010), 0);
        assert_eq!(lockouts.locked(a, 1010), Some(LOCKOUT - 1), "ten failures lock the address");
        assert_eq!(lockouts.locked(b, 1010), None, "and only that address");
        assert_eq!(lockouts.locked(a, 1009 + LOCKOUT), None, "for 15 minutes");
        // The same address as IPv4-mapped IPv6 is the same address.
        assert!(lockouts.locked("::ffff:192.0.2.1".parse().unwrap(), 1010).is_some());
        lockouts.succeed(a);
        assert_eq!(lockouts.locked(a, 1010), None, "the owner signing in clears it");
        // Failures older than an hour do not count.
        for i in 0..9 {
            lockouts.fail(b, 2000 + i);
        }
        lockouts.fail(b, 2009 + FAILURE_WINDOW);
        assert_eq!(lockouts.locked(b, 2010 + FAILURE_WINDOW), None);
        // Ten failures from one IPv6 /64, from any of its addresses, lock the whole /64.
        for i in 0..10 {
            lockouts.fail(IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, i)), 3000);
        }
        assert!(lockouts.locked(v6(1, 2), 3001).is_some());
        assert!(lockouts.locked(v6(1, 3), 3001).is_none());
    }

    #[test]
    fn strangers_get_thirty_checks_of_a_login_an_hour() {
        let lockouts = Lockouts::default();
        let now = 1_000_000;
        for _ in 0..LOGIN_CHECKS_PER_HOUR {
            assert_eq!(lockouts.take("owner", now), Ok(()));
        }
        assert_eq!(lockouts.take("OWNER ", now), Err(CHECK_INTERVAL), "the budget is per login, spelled any way");
        assert_eq!(lockouts.take("someone else", now), Ok(()), "another login has its own");
        // One check back every two minutes, never more than the hour's worth: an attacker
        // guessing all day gets 30 an hour and the first hour's.
        assert_eq!(lockouts.take("owner", now + CHECK_INTERVAL - 1), Err(1));
        assert_eq!(lockouts.take("owner", now + CHECK_INTERVAL), Ok(()));
        assert!(lockouts.take("owner", now + CHECK_INTERVAL).is_err());
        let mut day = 0;
        for minute in 0..24 * 60 {
            day += (0..10).filter(|_| lockouts.take("owner", now + 300 + minute * 60).is_ok()).count();
        }
        assert!(day <= 25 * LOGIN_CHECKS_PER_HOUR as usize, "{day} checks in a day");
        assert!(day >= 23 * LOGIN_CHECKS_PER_HOUR as usize, "{day} checks in a day");
    }

    #[test]
    fn the_tables_stay_bounded_whatever_is_sent() {
        let lockouts = Lockouts::with_capacity(1000, 1000);
        let now = 1_000_000;
        for _ in 0..LOGIN_CHECKS_PER_HOUR {
            lockouts.take("owner", now).unwrap();
        }
        let huge = "x".repeat(1 << 20);
        for i in 0..5000u16 {
            lockouts.fail(v6(i, 1), now + 1);
            // Logins of a megabyte each keep 40 bytes each.
            assert_eq!(lockouts.take(&format!("{huge}{i}"), now + 1), Ok(()));
        }
        assert_eq!(lockouts.entries(), 2000, "at most 1000 addresses and 1000 logins");
        let memory = lockouts.memory();
        assert!(memory < 300 * 1024, "{memory} bytes");
        // The entries dropped were the strangers' (their budgets fuller than the owner's
        // spent one): flooding the table gives no fresh guesses at the owner's login.
        assert!(lockouts.take("owner", now + 2).is_err());
        // A locked address stays locked while newer single failures fill the table: the
        // address with the oldest last failure is dropped first.
        let locked: IpAddr = "203.0.113.5".parse().unwrap();
        for _ in 0..10 {
            lockouts.fail(locked, now + 10);
        }
        for i in 0..999u16 {
            lockouts.fail(v6(i, 2), now + 11);
        }
        assert!(lockouts.locked(locked, now + 12).is_some());
        // The default tables: 8192 of each, in two and a half megabytes at most.
        let full = Lockouts::default();
        for i in 0..10_000u16 {
            full.fail(v6(i, 3), now);
            full.take(&i.to_string(), now).unwrap();
        }
        assert_eq!(full.entries(), MAX_ADDRESSES + MAX_LOGINS);
        assert!(full.memory() < 5 << 19, "{} bytes", full.memory());
    }

    #[test]
    fn known_addresses_are_hashed_recent_and_few() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::Db::open(&dir.path().join("control.db")).unwrap();
        let now = 100 * 86_400;
        let home: IpAddr = "192.0.2.10".parse().unwrap();
        db.write_blocking(|tx| remember_address(tx, &address_hash(home), now)).unwrap();
        let known = |ip: IpAddr, at: u64| db.read_blocking(|c| known_address(c, &address_hash(ip), at)).unwrap();
        assert!(known(home, now));
        assert!(known("::ffff:192.0.2.10".parse().unwrap(), now));
        assert!(!known("192.0.2.11".parse().unwrap(), now));
        assert!(!known(home, now + KNOWN_FOR), "for 90 days");
        let stored: Vec<u8> = db
            .read_blocking(|c| Ok(c.query_row("SELECT address_hash FROM known_addresses", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(stored, address_hash(home), "only a hash is kept");
        for i in 0..60 {
            db.write_blocking(|tx| remember_address(tx, &address_hash(v6(i, 9)), now + 1 + u64::from(i))).unwrap();
        }
        assert!(!known(home, now + 100), "the 50 most recent are kept");
        assert!(known(v6(59, 9), now + 100) && known(v6(10, 9), now + 100) && !known(v6(9, 9), now + 100));
        let count: u64 =
            db.read_blocking(|c| Ok(c.query_row("SELECT count(*) FROM known_addresses", [], |r| r.get(0))?)).unwrap();
        assert_eq!(count, KNOWN_ADDRESSES as u64);
    }
}
