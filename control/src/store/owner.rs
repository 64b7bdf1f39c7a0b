//! The owner's account: its login and password hash, two-step sign-in (the sealed secret,
//! the last time step used, recovery codes) and the addresses it signed in from.

use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Error;
use crate::store::audit_log::audit;

/// The owner's addresses remembered: the most recent, within [`KNOWN_FOR`].
const KNOWN_ADDRESSES: usize = 50;
/// How long an address the owner signed in from stays known.
const KNOWN_FOR: u64 = 90 * 86_400;

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

/// Sets the owner's password hash.
pub(crate) fn set_password_hash(conn: &Connection, hash: &str) -> Result<(), Error> {
    conn.execute("UPDATE owner SET password_hash = ?1 WHERE id = 1", [hash])?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::auth::lockouts::address_hash;

    fn v6(a: u16, b: u16) -> IpAddr {
        IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, a, b, 0, 0, 0, 7))
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
