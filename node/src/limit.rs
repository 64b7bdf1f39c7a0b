//! Per-user speed limits: one budget per user and direction, shared by all of the user's
//! connections, TCP streams and UDP sessions alike.
//!
//! Each budget is a GCRA (the "virtual scheduling" form of a token bucket) in two atomics:
//! the rate, and the theoretical arrival time (TAT): the moment the bytes sent so far would
//! have finished at exactly the rate. Sending `n` bytes moves the TAT on by `n / rate`
//! (from now, if it lies in the past); the sender waits until the TAT is no more than the
//! burst allowance ahead of now. One compare-and-swap per chunk, no lock, and nothing at all
//! for a user without a limit (the rate is 0).
//!
//! TCP waits (the wait backs up into the client's QUIC flow control or the target's TCP
//! window, so nothing is dropped); a UDP datagram that does not fit is dropped, as a router
//! at its rate would.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NANOS: u128 = 1_000_000_000;

/// How far ahead of its rate a user may be: 50 ms of sending, at least 64 KiB (a relay
/// chunk) and at most a second.
fn allowance(rate: u64) -> u64 {
    let ahead = (u128::from(rate) / 20).max(64 * 1024) * NANOS / u128::from(rate);
    ahead.min(NANOS) as u64
}

/// Nanoseconds since the first call (a monotonic clock all budgets share).
fn now() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One direction's budget.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Bytes a second; 0: no limit.
    rate: AtomicU64,
    /// The theoretical arrival time, in [`now`]'s nanoseconds.
    tat: AtomicU64,
}

impl Pace {
    /// Sets the rate (0: none); takes effect at the next chunk of every connection.
    pub(crate) fn set(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// The rate, bytes a second (0: none).
    pub(crate) fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Takes `bytes` from the budget and says how long to wait before sending them.
    pub(crate) fn take(&self, bytes: usize) -> Duration {
        self.take_at(bytes, now())
    }

    fn take_at(&self, bytes: usize, now: u64) -> Duration {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return Duration::ZERO;
        }
        let cost = (bytes as u128 * NANOS / u128::from(rate)).min(u128::from(u64::MAX / 4)) as u64;
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now).saturating_add(cost);
            match self.tat.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Duration::from_nanos(next.saturating_sub(now.saturating_add(allowance(rate)))),
                Err(current) => tat = current,
            }
        }
    }

    /// Whether a datagram of `bytes` fits the budget now; takes it if so.
    pub(crate) fn admit(&self, bytes: usize) -> bool {
        self.admit_at(bytes, now())
    }

    fn admit_at(&self, bytes: usize, now: u64) -> bool {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return true;
        }
        let cost = (bytes as u128 * NANOS / u128::from(rate)).min(u128::from(u64::MAX / 4)) as u64;
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            if tat > now.saturating_add(allowance(rate)) {
                return false;
            }
            let next = tat.max(now).saturating_add(cost);
            match self.tat.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(current) => tat = current,
            }
        }
    }

    /// Waits until `bytes` may be sent.
    pub(crate) async fn wait(&self, bytes: usize) {
        let wait = self.take(bytes);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn without_a_rate_nothing_waits() {
        let pace = Pace::default();
        assert_eq!(pace.take_at(usize::MAX / 2, 5), Duration::ZERO);
        assert!(pace.admit_at(usize::MAX / 2, 5));
    }

    /// Senders sharing a budget move the rate between them, whatever their number: the
    /// waits they are given add up to the bytes at the rate, less the burst allowance.
    #[test]
    fn shared_senders_get_the_rate_between_them() {
        let pace = Pace::default();
        pace.set(2_500_000); // 20 Mbit/s
        let start = 1_000 * MS;
        // Four senders take 64 KiB chunks in turn for what would be 10 s at the rate; each
        // sender sends when its wait is over, so the last wait is when the last byte goes.
        let chunk = 64 * 1024;
        let chunks = (25_000_000 / chunk) as u64;
        let mut last = Duration::ZERO;
        for _ in 0..chunks {
            last = pace.take_at(chunk, start);
        }
        let expected = Duration::from_nanos(chunks * chunk as u64 * 1_000_000_000 / 2_500_000 - allowance(2_500_000));
        assert_eq!(last, expected);
        // An idle user has its allowance again, not the time it did not use.
        let later = start + 60_000 * MS;
        assert_eq!(pace.take_at(chunk, later), Duration::ZERO);
        assert!(pace.take_at(2 * chunk, later) > Duration::ZERO);
    }

    #[test]
    fn datagrams_over_the_budget_are_dropped_and_cost_nothing() {
        let pace = Pace::default();
        pace.set(125_000); // 1 Mbit/s: the allowance is 64 KiB, about half a second
        let now = 10_000 * MS;
        let admitted = (0..200).filter(|_| pace.admit_at(1200, now)).count();
        // A datagram fits while the TAT is within the allowance: 524 ms at 9.6 ms each.
        assert_eq!(admitted, 55);
        let tat = pace.tat.load(Ordering::Relaxed);
        assert!(!pace.admit_at(1200, now));
        assert_eq!(pace.tat.load(Ordering::Relaxed), tat, "a dropped datagram takes nothing");
        // A second later the allowance is back, and no more: an idle second is not saved up.
        let second = (0..200).filter(|_| pace.admit_at(1200, now + 1_000 * MS)).count();
        assert_eq!(second, 55);
    }

    #[test]
    fn the_allowance_is_50_ms_between_64_kib_and_a_second() {
        assert_eq!(allowance(125_000_000), 50 * MS); // 1 Gbit/s
        assert_eq!(allowance(2_500_000), 50 * MS); // 20 Mbit/s: 125 kB
        assert_eq!(allowance(1_000_000), 65_536_000); // 8 Mbit/s: 64 KiB
        assert_eq!(allowance(1_000), 1_000 * MS);
    }
}
