//! Brutal, Hysteria's own controller, and the budget that holds a connection to a rate
//! through quinn's window (see the parent module for why it takes both).

use std::time::{Duration, Instant};

use super::budget::{ACK_DELAY, Bank, Budget};

/// Seconds of acknowledgements and losses the ack rate is measured over.
const SLOTS: usize = 5;
/// Below this many packets' worth of bytes in the window, the ack rate counts as 1.
const MIN_SAMPLE_PACKETS: u64 = 50;
/// The ack rate is never taken lower than this: at most 1.25 times the rate goes out.
const MIN_ACK_RATE: f64 = 0.8;
/// Acknowledged and lost bytes in one second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    second: u64,
    acked: u64,
    lost: u64,
}

/// Brutal: the acknowledgements of the last [`SLOTS`] seconds, and the budget that holds the
/// connection to the rate they call for.
#[derive(Clone, Debug)]
pub(super) struct Brutal {
    epoch: Instant,
    slots: [Slot; SLOTS],
    ack_rate: f64,
    pub(super) budget: Budget,
}

impl Brutal {
    pub(super) fn new(now: Instant, mtu: u16) -> Brutal {
        Brutal { epoch: now, slots: [Slot::default(); SLOTS], ack_rate: 1.0, budget: Budget::new(now, mtu, Bank::Rtt) }
    }

    /// The slot of the second `now` falls in, emptied if it held an older second.
    fn slot(&mut self, now: Instant) -> &mut Slot {
        let second = now.saturating_duration_since(self.epoch).as_secs();
        let slot = &mut self.slots[(second % SLOTS as u64) as usize];
        if slot.second != second {
            *slot = Slot { second, acked: 0, lost: 0 };
        }
        slot
    }

    pub(super) fn on_sent(&mut self, now: Instant, bytes: u64, rate: u64) {
        self.budget.on_sent(now, bytes, self.sending_rate(rate));
    }

    pub(super) fn on_ack(&mut self, now: Instant, bytes: u64, rtt: Duration, rate: u64) {
        if rate > 0 {
            self.slot(now).acked += bytes;
            self.update_ack_rate(now);
        }
        self.budget.on_ack(now, bytes, rtt, self.sending_rate(rate));
    }

    pub(super) fn on_end_acks(&mut self, now: Instant, in_flight: u64, rate: u64) {
        self.budget.on_end_acks(now, in_flight, self.sending_rate(rate));
    }

    pub(super) fn on_loss(&mut self, now: Instant, lost_bytes: u64, rate: u64) {
        if rate > 0 {
            self.slot(now).lost += lost_bytes;
            self.update_ack_rate(now);
        }
        self.budget.on_loss(now, lost_bytes, self.sending_rate(rate));
    }

    /// The share of bytes acknowledged over the slots of the last [`SLOTS`] seconds.
    fn update_ack_rate(&mut self, now: Instant) {
        let second = now.saturating_duration_since(self.epoch).as_secs();
        let recent = self.slots.iter().filter(|slot| slot.second + SLOTS as u64 > second);
        let (acked, lost) = recent.fold((0u64, 0u64), |(a, l), slot| (a + slot.acked, l + slot.lost));
        let total = acked + lost;
        self.ack_rate = if total < MIN_SAMPLE_PACKETS * self.budget.mtu {
            1.0
        } else {
            (acked as f64 / total as f64).max(MIN_ACK_RATE)
        };
    }

    /// What goes out, loss included, to get `rate` bytes a second through.
    pub(super) fn sending_rate(&self, rate: u64) -> u64 {
        (rate as f64 / self.ack_rate) as u64
    }

    /// The window that holds the connection to the sending rate:
    /// at most two BDPs counting the ack delay (the official server's cap).
    pub(super) fn window(&self, rate: u64) -> u64 {
        let rate = self.sending_rate(rate);
        let delay = self.budget.rtt().map_or(ACK_DELAY, |rtt| rtt + ACK_DELAY);
        self.budget.window(rate, (2.0 * rate as f64 * delay.as_secs_f64()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u16 = 1200;
    const MB: u64 = 1_000_000;

    /// Drives Brutal at `rate` as quinn does, in steps of 100 us for `seconds`, against a
    /// peer that acknowledges as quic-go does (sing-box's client): every tenth packet, or
    /// 25 ms after the first one it has not acknowledged. Packets take `rtt` / 2 each way;
    /// every `lose_every`th is lost (and noticed when the packet after it is acknowledged).
    /// quinn sends while what is in flight and the next packet stay below the window, and its
    /// pacer lets out 1.25 windows per RTT, in bursts of 2 ms of that (10 to 256 packets);
    /// Brutal hears of each batch sent at its end. Returns the bytes sent and acknowledged.
    fn drive(rate: u64, rtt: Duration, lose_every: u64, seconds: u64) -> (u64, u64) {
        let start = Instant::now();
        let mut brutal = Brutal::new(start, MTU);
        let mtu = u64::from(MTU);
        let half = rtt / 2;
        // Packets on the way out: when they reach the peer, and whether they are lost.
        let mut out: std::collections::VecDeque<(Instant, bool)> = Default::default();
        // What the peer holds unacknowledged (since when), and acknowledgements on the way
        // back: when they arrive, and how many packets (and how many lost) each settles.
        let (mut pending, mut pending_lost, mut pending_since) = (0u64, 0u64, None::<Instant>);
        let mut acks: std::collections::VecDeque<(Instant, u64, u64)> = Default::default();
        let (mut in_flight, mut sent, mut acked, mut packets) = (0u64, 0u64, 0u64, 0u64);
        let (mut tokens, mut paced_at) = (10.0 * mtu as f64, start);
        let step = Duration::from_micros(100);
        for tick in 0..seconds * 10_000 {
            let now = start + step * tick as u32;
            while out.front().is_some_and(|(at, _)| *at <= now) {
                let (_, lost) = out.pop_front().unwrap();
                pending += 1;
                pending_lost += u64::from(lost);
                pending_since.get_or_insert(now);
            }
            if pending >= 10 || pending_since.is_some_and(|since| now >= since + Duration::from_millis(25)) {
                acks.push_back((now + half, pending, pending_lost));
                (pending, pending_lost, pending_since) = (0, 0, None);
            }
            let mut answered = false;
            while acks.front().is_some_and(|(at, ..)| *at <= now) {
                let (_, settled, lost) = acks.pop_front().unwrap();
                for _ in 0..settled - lost {
                    brutal.on_ack(now, mtu, rtt, rate);
                }
                if lost > 0 {
                    brutal.on_loss(now, lost * mtu, rate);
                }
                acked += (settled - lost) * mtu;
                in_flight -= settled * mtu;
                answered = true;
            }
            if answered {
                brutal.on_end_acks(now, in_flight, rate);
            }
            let window = brutal.window(rate);
            let per_rtt = 1.25 * window as f64;
            let capacity = (window as f64 * 0.002 / rtt.as_secs_f64()).clamp(10.0 * mtu as f64, 256.0 * mtu as f64);
            tokens = (tokens + per_rtt * (now - paced_at).as_secs_f64() / rtt.as_secs_f64()).min(capacity);
            paced_at = now;
            let mut batch = 0;
            while in_flight + mtu < window && tokens >= mtu as f64 {
                packets += 1;
                out.push_back((now + half, lose_every > 0 && packets % lose_every == 0));
                in_flight += mtu;
                tokens -= mtu as f64;
                batch += mtu;
            }
            if batch > 0 {
                brutal.on_sent(now, batch, rate);
                sent += batch;
            }
        }
        (sent, acked)
    }

    fn within(value: u64, target: u64, share: f64) -> bool {
        (value as f64 - target as f64).abs() <= target as f64 * share
    }

    #[test]
    fn brutal_sends_at_its_rate_on_long_and_short_paths() {
        for (rate, rtt) in [(5 * MB, 50u64), (5 * MB, 1), (MB / 2, 5), (25 * MB, 20)] {
            let (sent, acked) = drive(rate, Duration::from_millis(rtt), 0, 4);
            assert!(within(sent / 4, rate, 0.05), "{rate} B/s over {rtt} ms: sent {} B/s", sent / 4);
            assert!(within(acked / 4, rate, 0.05), "{rate} B/s over {rtt} ms: delivered {} B/s", acked / 4);
        }
    }

    #[test]
    fn brutal_makes_up_for_loss_and_stops_at_its_floor() {
        // A tenth lost: a ninth more goes out, and the rate gets through.
        let (sent, acked) = drive(5 * MB, Duration::from_millis(30), 10, 6);
        assert!(within(acked / 6, 5 * MB, 0.06), "delivered {} B/s", acked / 6);
        assert!(within(sent / 6, 5 * MB * 10 / 9, 0.06), "sent {} B/s", sent / 6);
        // Half lost: no more than 1.25 times the rate goes out.
        let (sent, _) = drive(5 * MB, Duration::from_millis(30), 2, 6);
        assert!(within(sent / 6, 5 * MB * 5 / 4, 0.06), "sent {} B/s", sent / 6);
    }

    #[test]
    fn the_window_is_what_is_in_flight_and_the_budget_within_bounds() {
        let start = Instant::now();
        let mut brutal = Brutal::new(start, MTU);
        assert_eq!(brutal.window(10 * MB), 10 * 1200, "the first budget");
        brutal.on_sent(start, 12_000, 10 * MB);
        assert_eq!(brutal.window(10 * MB), 12_000, "budget spent: nothing more goes out");
        // 1 ms later, 10 kB more may go.
        brutal.on_ack(start + Duration::from_millis(1), 1200, Duration::from_millis(50), 10 * MB);
        assert_eq!(brutal.window(10 * MB), 10_800 + 10_000);
        // After a pause the budget holds an RTT and the ack delay of sending (75 ms at
        // 100 kB/s: 7,500 bytes, raised to 10 packets), at most an RTT of it (at 10 MB/s:
        // 416 packets)...
        brutal.on_end_acks(start + Duration::from_secs(2), 0, 100_000);
        assert_eq!(brutal.window(100_000), 12_000);
        brutal.on_end_acks(start + Duration::from_secs(3), 0, 10 * MB);
        assert_eq!(brutal.window(10 * MB), 416 * 1200);
        // ...or 128 packets when that is more (an RTT of 1 ms).
        let mut short = Brutal::new(start, MTU);
        short.on_ack(start, 1200, Duration::from_millis(1), 10 * MB);
        short.on_end_acks(start + Duration::from_secs(1), 0, 10 * MB);
        assert_eq!(short.window(10 * MB), 128 * 1200);
        // Never above two BDPs counting the ack delay: 2 * 1 MB/s * 75 ms.
        brutal.on_end_acks(start + Duration::from_secs(4), 1_000_000, MB);
        assert_eq!(brutal.window(MB), 150_000);
        // Never below two packets, so one can go when nothing is in flight: deep in debt,
        // one alone (its late acknowledgement pays the debt back)...
        let mut starved = Brutal::new(start, MTU);
        starved.on_sent(start, 1_000_000, 1000);
        starved.on_end_acks(start, 0, 1000);
        assert_eq!(starved.window(1000), 2400);
        // ...and two, which a client acknowledges at once, while the debt is within what the
        // rate brings in over an ack delay (at 18.75 MB/s, 468 kB): 150 Mbit/s on loopback.
        let mut fast = Brutal::new(start, MTU);
        fast.on_ack(start, 1200, Duration::from_micros(120), 18_750_000);
        fast.on_sent(start, 12_000 + 400_000, 18_750_000);
        fast.on_end_acks(start, 0, 18_750_000);
        assert_eq!(fast.window(18_750_000), 3600, "a pair while in debt by 400 kB");
        fast.on_sent(start, 100_000, 18_750_000);
        assert_eq!(fast.window(18_750_000), 100_000, "deeper: nothing more until acknowledgements");
        fast.on_end_acks(start, 0, 18_750_000);
        assert_eq!(fast.window(18_750_000), 2400, "and then one packet alone");
        // Less than two packets to spend goes out as a pair only through the floor: none
        // more while something is in flight that will be acknowledged.
        let mut trickle = Brutal::new(start, MTU);
        trickle.on_sent(start, 12_000 - 1500, 18_750_000);
        assert_eq!(trickle.window(18_750_000), 12_000 - 1500, "1,500 bytes left: not spent alone");
    }

    #[test]
    fn the_ack_rate_forgets_what_is_older_than_its_slots_and_needs_a_sample() {
        let start = Instant::now();
        let rtt = Duration::from_millis(20);
        let mut brutal = Brutal::new(start, MTU);
        // A few losses are not a sample.
        brutal.on_ack(start, 10 * 1200, rtt, MB);
        brutal.on_loss(start, 10 * 1200, MB);
        assert_eq!(brutal.ack_rate, 1.0);
        // Heavy loss in second 0...
        brutal.on_loss(start, 200 * 1200, MB);
        assert_eq!(brutal.ack_rate, MIN_ACK_RATE);
        assert_eq!(brutal.sending_rate(4 * MB), 5 * MB);
        // ...still counts in second 4, and is forgotten in second 5.
        brutal.on_ack(start + Duration::from_secs(4), 1200, rtt, MB);
        assert_eq!(brutal.ack_rate, MIN_ACK_RATE);
        let later = start + Duration::from_secs(5);
        for _ in 0..100 {
            brutal.on_ack(later, 1200, rtt, MB);
        }
        assert_eq!(brutal.ack_rate, 1.0);
        // 10 % lost, enough to count (with second 4's packet): a ninth more goes out.
        for _ in 0..799 {
            brutal.on_ack(later, 1200, rtt, MB);
        }
        brutal.on_loss(later, 100 * 1200, MB);
        assert!((brutal.ack_rate - 0.9).abs() < 1e-9, "{}", brutal.ack_rate);
        assert_eq!(brutal.sending_rate(9 * MB), 10 * MB);
        // A slot reused for a later second starts empty.
        brutal.on_loss(start + Duration::from_secs(10), 1200, MB);
        assert_eq!(brutal.slots[0], Slot { second: 10, acked: 0, lost: 1200 });
    }
}
