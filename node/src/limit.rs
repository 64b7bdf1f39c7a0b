//! Per-user speed limits: one budget per user and direction, shared by all of the user's
//! connections, TCP streams and UDP sessions alike.
//!
//! Each budget is a GCRA (the "virtual scheduling" form of a token bucket) in two atomics:
//! the rate, and the theoretical arrival time (TAT): the moment the bytes sent so far would
//! have finished at exactly the rate. A sender may send while the TAT is no more than the
//! burst allowance ahead of now, and sending `n` bytes moves the TAT on by `n / rate` (from
//! now, if it lies in the past). One compare-and-swap per chunk, no lock, and nothing at all
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

    /// Takes `bytes` from the budget if the budget is no more than `slack` nanoseconds ahead
    /// of now; otherwise says how long until it is.
    fn try_take_at(&self, bytes: usize, now: u64, slack: impl Fn(u64) -> u64) -> Result<(), Duration> {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return Ok(());
        }
        let cost = (bytes as u128 * NANOS / u128::from(rate)).min(u128::from(u64::MAX / 4)) as u64;
        let limit = now.saturating_add(slack(rate));
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            if tat > limit {
                return Err(Duration::from_nanos(tat - limit));
            }
            let next = tat.max(now).saturating_add(cost);
            match self.tat.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }

    /// Whether a datagram of `bytes` fits the budget now; takes it if so. A datagram may go
    /// [`UDP_HEADROOM`] further ahead than a TCP chunk, so that TCP streams keeping the budget
    /// full never shut UDP out: the budget is shared, what UDP takes TCP waits for.
    pub(crate) fn admit(&self, bytes: usize) -> bool {
        self.admit_at(bytes, now())
    }

    fn admit_at(&self, bytes: usize, now: u64) -> bool {
        self.try_take_at(bytes, now, |rate| allowance(rate) + headroom(rate)).is_ok()
    }

    /// Waits until the budget has room, then takes `bytes` from it. Waiting before taking
    /// (rather than taking and then waiting out the debt) keeps the budget within a chunk
    /// of now however many streams wait on it.
    pub(crate) async fn wait(&self, bytes: usize) {
        while let Err(wait) = self.try_take_at(bytes, now(), allowance) {
            tokio::time::sleep(wait).await;
        }
    }
}

/// How much further ahead than a TCP chunk a datagram may take the budget.
const UDP_HEADROOM: u128 = 128 * 1024;

/// [`UDP_HEADROOM`] at `rate`, in nanoseconds (at most a second).
fn headroom(rate: u64) -> u64 {
    (UDP_HEADROOM * NANOS / u128::from(rate)).min(NANOS) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn without_a_rate_nothing_waits() {
        let pace = Pace::default();
        assert_eq!(pace.try_take_at(usize::MAX / 2, 5, allowance), Ok(()));
        assert!(pace.admit_at(usize::MAX / 2, 5));
    }

    /// Senders sharing a budget, run on a simulated clock: each sends a chunk when the budget
    /// lets it, else waits as told. `udp`: a datagram of 1200 bytes every 10 ms besides.
    /// Returns the bytes sent by TCP and by UDP in `secs` seconds.
    fn simulate(rate: u64, senders: usize, udp: bool, secs: u64) -> (u64, u64) {
        let pace = Pace::default();
        pace.set(rate);
        let (start, chunk) = (1_000 * MS, 64 * 1024);
        let end = start + secs * 1_000 * MS;
        let mut ready = vec![start; senders];
        let (mut tcp, mut datagrams, mut next_datagram) = (0u64, 0u64, start);
        loop {
            let (who, at) = ready.iter().copied().enumerate().min_by_key(|(_, at)| *at).expect("senders");
            if udp && next_datagram <= at {
                if pace.admit_at(1200, next_datagram) {
                    datagrams += 1200;
                }
                next_datagram += 10 * MS;
                continue;
            }
            if at >= end {
                return (tcp, datagrams);
            }
            match pace.try_take_at(chunk, at, allowance) {
                Ok(()) => tcp += chunk as u64,
                Err(wait) => ready[who] = at + wait.as_nanos() as u64,
            }
        }
    }

    /// However many streams share a budget, together they get its rate (and the burst a user
    /// may start with, at most a chunk more).
    #[test]
    fn shared_senders_get_the_rate_between_them() {
        let rate = 2_500_000; // 20 Mbit/s
        for senders in [1, 4, 64] {
            let (tcp, _) = simulate(rate, senders, false, 10);
            let burst = rate * allowance(rate) / 1_000_000_000 + 64 * 1024;
            assert!((rate * 10..=rate * 10 + burst).contains(&tcp), "{senders} senders sent {tcp}");
        }
        // An idle user has its allowance again, not the time it did not use.
        let pace = Pace::default();
        pace.set(rate);
        assert!(pace.try_take_at(64 * 1024, 60_000 * MS, allowance).is_ok());
        assert!(pace.try_take_at(64 * 1024, 60_000 * MS, allowance).is_ok(), "within 50 ms (125 kB)");
        assert!(pace.try_take_at(64 * 1024, 60_000 * MS, allowance).is_err());
    }

    /// TCP streams that keep the budget full leave room for UDP (found: taking first and
    /// waiting after kept the budget a chunk ahead per stream, and every datagram was
    /// dropped while a download ran); together they stay at the rate.
    #[test]
    fn busy_tcp_streams_do_not_shut_udp_out() {
        let rate = 1_250_000; // 10 Mbit/s
        for senders in [1, 4, 64] {
            let (tcp, udp) = simulate(rate, senders, true, 10);
            assert!(udp >= 1200 * 1000 * 9 / 10, "{senders} streams: {udp} bytes of 1.2 MB of datagrams went");
            let burst = rate * (allowance(rate) + headroom(rate)) / 1_000_000_000 + 64 * 1024;
            assert!(tcp + udp <= rate * 10 + burst, "{senders} streams: {} bytes in 10 s", tcp + udp);
            assert!(tcp + udp >= rate * 10, "{senders} streams: {} bytes in 10 s", tcp + udp);
        }
    }

    #[test]
    fn datagrams_over_the_budget_are_dropped_and_cost_nothing() {
        let pace = Pace::default();
        pace.set(125_000); // 1 Mbit/s: allowance and headroom make about 1.5 s of sending
        let now = 10_000 * MS;
        let admitted = (0..400).filter(|_| pace.admit_at(1200, now)).count();
        let ahead = (allowance(125_000) + headroom(125_000)) as usize;
        assert_eq!(admitted, ahead / 9_600_000 + 1, "9.6 ms a datagram");
        let tat = pace.tat.load(Ordering::Relaxed);
        assert!(!pace.admit_at(1200, now));
        assert_eq!(pace.tat.load(Ordering::Relaxed), tat, "a dropped datagram takes nothing");
        // Much later the same again, and no more: an idle time is not saved up.
        let later = (0..400).filter(|_| pace.admit_at(1200, now + 60_000 * MS)).count();
        assert_eq!(later, admitted);
    }

    #[test]
    fn the_allowance_is_50_ms_between_64_kib_and_a_second() {
        assert_eq!(allowance(125_000_000), 50 * MS); // 1 Gbit/s
        assert_eq!(allowance(2_500_000), 50 * MS); // 20 Mbit/s: 125 kB
        assert_eq!(allowance(1_000_000), 65_536_000); // 8 Mbit/s: 64 KiB
        assert_eq!(allowance(1_000), 1_000 * MS);
    }
}
