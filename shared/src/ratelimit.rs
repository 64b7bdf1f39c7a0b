//! Rate limiting as pure functions of the clock.
//!
//! Three limiters, each a small state that serializes so the edge can keep it in storage next
//! to what it protects, and a `now` in milliseconds passed in by the caller:
//!
//! - [`FixedWindow`]: N hits per clock-aligned window, the per-link limit (60 fetches per
//!   hour by default, worldwide).
//! - [`TokenBucket`]: a burst and a steady rate, the per-network limit. It is kept as a
//!   single "theoretical arrival time" (the GCRA form of a token bucket), so it is exact in
//!   integers and one `u64` to store.
//! - [`MissGuard`]: too many unknown tokens from one network within a minute sends that
//!   network the decoy for a while.
//!
//! Networks are counted per IPv4 /24 and per IPv6 /48 ([`Network::of`]), as one household or
//! one mobile carrier's pool is. [`PerNetwork`] caps what one network holds open at once (the
//! native edge's connections, the node's connections waiting to authenticate).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// A limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead; this many more would be allowed right now.
    Allow {
        /// Hits left.
        remaining: u32,
    },
    /// Refused; try again after this many seconds (at least 1), for `Retry-After`.
    Deny {
        /// Seconds until a retry can succeed.
        retry_after: u64,
    },
}

impl Decision {
    /// Whether the hit is allowed.
    pub fn allowed(self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

fn seconds_ceil(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// A fixed, clock-aligned window's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowLimit {
    /// Hits allowed per window.
    pub limit: u32,
    /// The window's length in milliseconds.
    pub window_ms: u64,
}

impl WindowLimit {
    /// 60 fetches per link per hour: Hearth's default per-link limit.
    pub const PER_LINK: WindowLimit = WindowLimit { limit: 60, window_ms: 3_600_000 };
}

/// The state of a fixed-window counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedWindow {
    /// Start of the current window, in milliseconds.
    pub start_ms: u64,
    /// Hits counted in it.
    pub count: u32,
}

impl FixedWindow {
    /// Counts a hit at `now_ms` if the limit allows it. A refused hit is not counted.
    pub fn hit(&mut self, now_ms: u64, limit: WindowLimit) -> Decision {
        let window = limit.window_ms.max(1);
        let start = now_ms - now_ms % window;
        if start != self.start_ms {
            *self = FixedWindow { start_ms: start, count: 0 };
        }
        if self.count >= limit.limit {
            return Decision::Deny { retry_after: seconds_ceil(start + window - now_ms) };
        }
        self.count += 1;
        Decision::Allow { remaining: limit.limit - self.count }
    }
}

/// A token bucket's shape: how many hits may come at once, and how fast it refills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketLimit {
    /// The most hits allowed at once (at least 1).
    pub burst: u32,
    /// Hits regained per minute (at least 1).
    pub per_minute: u32,
}

impl BucketLimit {
    /// Hearth's default per-network limit: bursts of 120, 600 a minute sustained.
    pub const PER_NETWORK: BucketLimit = BucketLimit { burst: 120, per_minute: 600 };

    /// Microseconds between two tokens (at least 1: a rate over a million a second is
    /// treated as a million a second).
    fn interval_us(self) -> u64 {
        (60_000_000 / u64::from(self.per_minute.max(1))).max(1)
    }
}

/// The state of a token bucket, as a theoretical arrival time in microseconds. The default
/// (zero) is a full bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBucket {
    /// When the bucket would be full again if nothing else came, in microseconds.
    pub tat_us: u64,
}

impl TokenBucket {
    /// Takes one token at `now_ms` if there is one.
    pub fn take(&mut self, now_ms: u64, limit: BucketLimit) -> Decision {
        let now = now_ms.saturating_mul(1000);
        let interval = limit.interval_us();
        let tolerance = interval * u64::from(limit.burst.max(1) - 1);
        let tat = self.tat_us.max(now);
        if tat - now > tolerance {
            let wait_us = tat - now - tolerance;
            return Decision::Deny { retry_after: seconds_ceil(wait_us.div_ceil(1000)) };
        }
        self.tat_us = tat + interval;
        let remaining = (tolerance - (tat - now)) / interval;
        Decision::Allow { remaining: u32::try_from(remaining).unwrap_or(u32::MAX) }
    }
}

/// How many unknown tokens a network may try, and what happens then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissLimit {
    /// Misses allowed per window.
    pub misses: WindowLimit,
    /// How long a network that went over gets only the decoy, in milliseconds.
    pub block_ms: u64,
}

impl MissLimit {
    /// 20 unknown tokens a minute, then 15 minutes of decoys.
    pub const DEFAULT: MissLimit =
        MissLimit { misses: WindowLimit { limit: 20, window_ms: 60_000 }, block_ms: 900_000 };
}

/// The state of a network's unknown-token guard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissGuard {
    /// Misses in the current window.
    pub window: FixedWindow,
    /// Until when this network gets only decoys, in milliseconds (0: not blocked).
    pub blocked_until_ms: u64,
}

impl MissGuard {
    /// Whether the network gets only decoys at `now_ms`, known token or not.
    pub fn is_blocked(&self, now_ms: u64) -> bool {
        now_ms < self.blocked_until_ms
    }

    /// Records an unknown token; returns whether the network is now blocked.
    pub fn miss(&mut self, now_ms: u64, limit: MissLimit) -> bool {
        if !self.is_blocked(now_ms) && !self.window.hit(now_ms, limit.misses).allowed() {
            self.blocked_until_ms = now_ms + limit.block_ms;
        }
        self.is_blocked(now_ms)
    }
}

/// The network a client address is counted in: its IPv4 /24 or IPv6 /48. IPv4-mapped IPv6
/// addresses count as IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Network {
    /// The first three octets.
    V4([u8; 3]),
    /// The first six bytes.
    V6([u8; 6]),
}

impl Network {
    /// The network of `ip`.
    pub fn of(ip: IpAddr) -> Network {
        match ip {
            IpAddr::V4(v4) => Network::v4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Network::v4(v4),
                None => {
                    let o = v6.octets();
                    Network::V6([o[0], o[1], o[2], o[3], o[4], o[5]])
                }
            },
        }
    }

    fn v4(ip: Ipv4Addr) -> Network {
        let o = ip.octets();
        Network::V4([o[0], o[1], o[2]])
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Network::V4([a, b, c]) => write!(f, "{a}.{b}.{c}.0/24"),
            Network::V6(p) => {
                let mut o = [0u8; 16];
                o[..6].copy_from_slice(&p);
                write!(f, "{}/48", Ipv6Addr::from(o))
            }
        }
    }
}

/// Things one network holds open at once (connections), at most `cap` each: a
/// [`NetworkSlot`] is taken when one opens and given back when it is dropped. Only networks
/// with something open are kept, so the map never holds more entries than slots taken.
#[derive(Clone)]
pub struct PerNetwork {
    open: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Network, usize>>>,
    cap: usize,
}

impl PerNetwork {
    /// At most `cap` open per network.
    pub fn new(cap: usize) -> PerNetwork {
        PerNetwork { open: Default::default(), cap }
    }

    /// A slot for one more from `ip`'s network, or `None` when it holds `cap` already.
    pub fn take(&self, ip: IpAddr) -> Option<NetworkSlot> {
        let network = Network::of(ip);
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(network).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(NetworkSlot { open: self.open.clone(), network })
    }

    /// How many `ip`'s network holds open.
    pub fn holding(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.get(&Network::of(ip)).copied().unwrap_or(0)
    }
}

/// One thing held open by a network ([`PerNetwork::take`]); given back when dropped.
pub struct NetworkSlot {
    open: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Network, usize>>>,
    network: Network,
}

impl Drop for NetworkSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.network) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.network);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_holds_at_most_its_cap_and_gives_slots_back() {
        let open = PerNetwork::new(2);
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let a = open.take(ip("198.51.100.1")).expect("first");
        let b = open.take(ip("198.51.100.200")).expect("second, same /24");
        assert!(open.take(ip("198.51.100.7")).is_none(), "a third from the /24");
        assert!(open.take(ip("::ffff:198.51.100.7")).is_none(), "mapped IPv6 is the same network");
        let other = open.take(ip("198.51.101.1")).expect("another network");
        assert_eq!(open.holding(ip("198.51.100.9")), 2);
        drop(a);
        let c = open.take(ip("198.51.100.7")).expect("a slot given back is taken again");
        drop((b, c, other));
        assert_eq!(open.holding(ip("198.51.100.9")), 0);
        assert!(open.open.lock().unwrap().is_empty(), "nothing kept for networks holding nothing");
    }
    use proptest::prelude::*;

    #[test]
    fn fixed_window_counts_and_resets_on_the_boundary() {
        let limit = WindowLimit { limit: 3, window_ms: 60_000 };
        let mut w = FixedWindow::default();
        let t0 = 120_000; // a window boundary
        let cases = [
            (t0, Decision::Allow { remaining: 2 }),
            (t0 + 1, Decision::Allow { remaining: 1 }),
            (t0 + 2, Decision::Allow { remaining: 0 }),
            (t0 + 3, Decision::Deny { retry_after: 60 }),
            (t0 + 59_001, Decision::Deny { retry_after: 1 }),
            (t0 + 59_999, Decision::Deny { retry_after: 1 }),
            (t0 + 60_000, Decision::Allow { remaining: 2 }),
        ];
        for (now, expected) in cases {
            assert_eq!(w.hit(now, limit), expected, "at {now}");
        }
    }

    #[test]
    fn per_link_default_is_60_an_hour() {
        let mut w = FixedWindow::default();
        let allowed = (0..100).filter(|i| w.hit(7_200_000 + i * 1000, WindowLimit::PER_LINK).allowed()).count();
        assert_eq!(allowed, 60);
        assert_eq!(w.hit(7_200_000 + 100_000, WindowLimit::PER_LINK), Decision::Deny { retry_after: 3500 });
    }

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let limit = BucketLimit { burst: 5, per_minute: 60 };
        let mut b = TokenBucket::default();
        let now = 1_000_000;
        for remaining in (0..5).rev() {
            assert_eq!(b.take(now, limit), Decision::Allow { remaining });
        }
        assert_eq!(b.take(now, limit), Decision::Deny { retry_after: 1 });
        assert_eq!(b.take(now + 999, limit), Decision::Deny { retry_after: 1 });
        assert_eq!(b.take(now + 1000, limit), Decision::Allow { remaining: 0 });
        assert!(!b.take(now + 1000, limit).allowed());
        // Ten idle seconds refill the bucket only up to its burst.
        assert_eq!(b.take(now + 11_000, limit), Decision::Allow { remaining: 4 });
    }

    #[test]
    fn huge_rates_do_not_divide_by_zero() {
        let limit = BucketLimit { burst: u32::MAX, per_minute: u32::MAX };
        let mut b = TokenBucket::default();
        for now in 0..1000 {
            assert!(b.take(now, limit).allowed());
        }
    }

    #[test]
    fn miss_guard_blocks_for_fifteen_minutes_after_twenty_misses() {
        let mut g = MissGuard::default();
        let t = 60_000 * 100;
        for i in 0..20 {
            assert!(!g.miss(t + i, MissLimit::DEFAULT));
        }
        assert!(g.miss(t + 20, MissLimit::DEFAULT));
        assert!(g.is_blocked(t + 20 + 899_999));
        assert!(!g.is_blocked(t + 20 + 900_000));
    }

    #[test]
    fn networks_group_by_24_and_48() {
        let net = |s: &str| Network::of(s.parse().unwrap());
        assert_eq!(net("203.0.113.7"), net("203.0.113.250"));
        assert_ne!(net("203.0.113.7"), net("203.0.114.7"));
        assert_eq!(net("2001:db8:1:ffff::1"), net("2001:db8:1::2"));
        assert_ne!(net("2001:db8:1::1"), net("2001:db8:2::1"));
        assert_eq!(net("::ffff:203.0.113.9"), net("203.0.113.1"));
        assert_eq!(net("203.0.113.7").to_string(), "203.0.113.0/24");
        assert_eq!(net("2001:db8:1:ffff::1").to_string(), "2001:db8:1::/48");
    }

    proptest! {
        /// However hits are spaced, a bucket never allows more than its burst plus what the
        /// elapsed time refilled, and a window never more than its limit per window.
        #[test]
        fn limits_hold_for_any_arrivals(gaps in proptest::collection::vec(0u64..3_000, 1..400)) {
            let limit = BucketLimit { burst: 10, per_minute: 120 };
            let window = WindowLimit { limit: 7, window_ms: 10_000 };
            let (mut bucket, mut fixed) = (TokenBucket::default(), FixedWindow::default());
            let start = 5_000_000u64;
            let mut now = start;
            let (mut allowed, mut per_window) = (0u64, std::collections::BTreeMap::<u64, u32>::new());
            for gap in gaps {
                now += gap;
                if bucket.take(now, limit).allowed() {
                    allowed += 1;
                }
                if fixed.hit(now, window).allowed() {
                    *per_window.entry(now / 10_000).or_default() += 1;
                }
            }
            let refilled = (now - start) * 120 / 60_000;
            prop_assert!(allowed <= 10 + refilled, "{allowed} > 10 + {refilled}");
            prop_assert!(per_window.values().all(|&n| n <= 7));
        }
    }
}
