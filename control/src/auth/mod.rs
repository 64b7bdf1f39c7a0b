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

pub(crate) mod lockouts;
mod password;
pub(crate) mod principal;

pub(crate) use crate::store::owner::{
    TotpState, create_owner, has_owner, known_address, owner, recovery_code_exists, remember_address, totp_begin,
    totp_disable, totp_enable, totp_state, totp_use_step, use_recovery_code,
};
pub(crate) use crate::store::sessions::{
    SESSION_ABSOLUTE, check_session, end_other_sessions, end_session, end_session_id, sessions, start_session,
    touch_session,
};
pub(crate) use crate::store::tokens::{check_token, create_token, revoke_token, tokens, touch_token};
#[cfg(test)]
pub(crate) use lockouts::LOGIN_CHECKS_PER_HOUR;
pub(crate) use lockouts::{Lockouts, address_hash, address_key};
pub(crate) use password::{Hasher, MAX_PASSWORD, check_password};
pub(crate) use principal::{Principal, Role, Scope, Via, Whose};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "__Host-hearth";
