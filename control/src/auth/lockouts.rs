//! Sign-in limits kept in memory: failures per address (IPv6: its /64), each login's budget
//! of password checks, and how many failures the audit log takes an hour. Fixed-size keys,
//! bounded tables.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use hearth_shared::sha256;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
