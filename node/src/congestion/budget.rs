//! The budget that holds a connection to a sending rate through quinn's window, for Brutal
//! and BBR alike (see the parent module for why quinn needs it).

use std::time::{Duration, Instant};

/// The most packets the budget holds on a short path (on a long one, an RTT of sending,
/// which the pacer spreads out). quic-go (sing-box's client) drops what arrives while 256
/// packets wait in a connection's queue: half of that at once.
pub(super) const MAX_BURST_PACKETS: i64 = 128;
/// The longest a peer delays an acknowledgement (QUIC's default `max_ack_delay`).
pub(super) const ACK_DELAY: Duration = Duration::from_millis(25);
/// The smallest window, in packets: quinn sends while what is in flight and the next packet
/// stay below the window, so two packets' worth lets one go out when nothing is in flight.
pub(super) const MIN_WINDOW_PACKETS: u64 = 2;
/// The budget a connection starts with, in packets.
pub(super) const INITIAL_BUDGET_PACKETS: i64 = 10;

/// Holds a connection to a sending rate through quinn's window: bytes that may go out,
/// refilled at the rate at every event, spent by every send; the window is what is in flight
/// plus that, at most the controller's cap and at least [`MIN_WINDOW_PACKETS`].
#[derive(Clone, Debug)]
pub(super) struct Budget {
    pub(super) mtu: u64,
    rtt: Option<Duration>,
    /// Bytes in flight: quinn's own figure at the end of each batch of acknowledgements,
    /// kept up to date in between.
    in_flight: u64,
    /// Bytes that may go out now (below zero after a send that took more).
    bytes: i64,
    /// When the budget was last refilled.
    refilled: Instant,
    /// How much it may bank.
    bank: Bank,
    /// The longest gaps between batches of acknowledgements, this second and the last, and
    /// when this one began and the last batch came.
    gaps: [Duration; 2],
    gaps_since: Instant,
    last_acks: Option<Instant>,
    /// The controller's own window as the last event left it (Brutal's: none).
    cap: u64,
}

/// How much sending a budget holds when nothing spends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bank {
    /// An RTT and the ack delay of it (at least [`INITIAL_BUDGET_PACKETS`], at most an RTT or
    /// [`MAX_BURST_PACKETS`]): Brutal's, whose rate is the target whatever held it back.
    Rtt,
    /// What the rate brings in over the longest recent gap between acknowledgements and a
    /// millisecond more (at least [`INITIAL_BUDGET_PACKETS`], at most the RTT's bank): BBR's,
    /// whose gains below and above 1 must each move the rate, not be evened out by what an
    /// earlier phase could not send.
    AckGaps,
}

impl Budget {
    pub(super) fn new(now: Instant, mtu: u16, bank: Bank) -> Budget {
        Budget {
            bank,
            gaps: [Duration::ZERO; 2],
            gaps_since: now,
            last_acks: None,
            cap: u64::MAX,
            mtu: u64::from(mtu),
            rtt: None,
            in_flight: 0,
            bytes: INITIAL_BUDGET_PACKETS * i64::from(mtu),
            refilled: now,
        }
    }

    /// Adds what `rate` (bytes a second) allows since the last refill, up to its [`Bank`]: an
    /// RTT and the ack delay of it (acknowledgements, which refill it, come that far apart at
    /// low rates), or the longest recent gap between acknowledgements.
    fn refill(&mut self, now: Instant, rate: u64) {
        let elapsed = now.saturating_duration_since(self.refilled);
        self.refilled = self.refilled.max(now);
        let rate = rate as f64;
        let rtt = self.rtt.unwrap_or_default().as_secs_f64();
        let packets = |seconds: f64| (rate * seconds / self.mtu as f64) as i64;
        let most = packets(rtt).max(MAX_BURST_PACKETS);
        let held = match self.bank {
            Bank::Rtt => rtt + ACK_DELAY.as_secs_f64(),
            Bank::AckGaps => self.gaps[0].max(self.gaps[1]).as_secs_f64() + 0.001,
        };
        let mut burst = packets(held).clamp(INITIAL_BUDGET_PACKETS, most) * self.mtu as i64;
        if self.in_flight + self.mtu >= self.cap {
            // The controller's own window held the sender back since the last event (loss
            // recovery, say), not the budget: what the rate brought in meanwhile could not
            // have gone out, and banked it would leave in one burst once the window opens. On
            // B4 (30 Mbit/s, a 10 ms queue) that was a hundred packets after each recovery,
            // two thirds of them lost.
            burst = burst.min(INITIAL_BUDGET_PACKETS * self.mtu as i64);
        }
        let added = (rate * elapsed.as_secs_f64()) as i64;
        self.bytes = self.bytes.saturating_add(added).min(burst);
    }

    pub(super) fn on_sent(&mut self, now: Instant, bytes: u64, rate: u64) {
        self.refill(now, rate);
        self.in_flight += bytes;
        // Before there is a rate the window alone holds the sender (BBR's first flight): what
        // goes out then is no debt for the rate to pay back once it comes.
        if rate > 0 {
            self.bytes = self.bytes.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    pub(super) fn on_ack(&mut self, now: Instant, bytes: u64, rtt: Duration, rate: u64) {
        self.refill(now, rate);
        self.rtt = Some(rtt);
        self.in_flight = self.in_flight.saturating_sub(bytes);
    }

    pub(super) fn on_end_acks(&mut self, now: Instant, in_flight: u64, rate: u64) {
        if let Some(last) = self.last_acks.filter(|_| self.bank == Bank::AckGaps) {
            if now.saturating_duration_since(self.gaps_since) > Duration::from_secs(1) {
                self.gaps = [Duration::ZERO, self.gaps[0]];
                self.gaps_since = now;
            }
            self.gaps[0] = self.gaps[0].max(now.saturating_duration_since(last));
        }
        self.last_acks = Some(now);
        self.refill(now, rate);
        self.in_flight = in_flight;
    }

    pub(super) fn on_loss(&mut self, now: Instant, lost_bytes: u64, rate: u64) {
        self.refill(now, rate);
        self.in_flight = self.in_flight.saturating_sub(lost_bytes);
    }

    /// Takes in the controller's own window after an event: while what is in flight fills
    /// it, the budget banks no more than [`INITIAL_BUDGET_PACKETS`].
    pub(super) fn hold_to(&mut self, cap: u64) {
        self.cap = cap;
    }

    /// The RTT last measured (`None` before the first acknowledgement).
    pub(super) fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// What is in flight plus the budget at `rate`, at most `cap` (the controller's own
    /// window), at least [`MIN_WINDOW_PACKETS`].
    pub(super) fn window(&self, rate: u64, cap: u64) -> u64 {
        // Sends go out two packets at least: a client acknowledges every second packet at
        // once, a lone one only after its ack delay, and only an acknowledgement refills.
        let spendable = u64::try_from(self.bytes).unwrap_or(0);
        let spendable = if spendable > 2 * self.mtu { spendable } else { 0 };
        // The floor sends even when the budget holds less than that, or nothing would ever
        // send again: a pair, while the debt is within what the rate brings in over an ack
        // delay, else a lone packet, whose acknowledgement comes an ack delay later and pays
        // the debt back. (Where a round trip carries less than two packets at the rate, as
        // on loopback, pairs go out each round and the lone packet's wait evens them out.)
        let debt_allowed = (rate as f64 * ACK_DELAY.as_secs_f64()) as i64;
        let floor = if self.bytes >= -debt_allowed { MIN_WINDOW_PACKETS + 1 } else { MIN_WINDOW_PACKETS } * self.mtu;
        (self.in_flight + spendable).min(cap).max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_window_held_back_is_not_banked() {
        // 30 Mbit/s, and acknowledgements 50 ms apart once: the bank holds up to 50 ms of the
        // rate (156 packets; at most 128 before an RTT is known).
        let (mtu, rate) = (1200u64, 3_750_000u64);
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut budget = Budget::new(start, mtu as u16, Bank::AckGaps);
        let mut in_flight = 150 * mtu;
        budget.on_end_acks(start, in_flight, rate);
        for at in [50, 100] {
            // The budget alone held the sender back for 50 ms: all of it may go out.
            budget.on_end_acks(start + ms(at), in_flight, rate);
            let banked = budget.window(rate, u64::MAX) - in_flight;
            assert!(banked >= 100 * mtu, "{} packets banked over 50 ms", banked / mtu);
            budget.on_sent(start + ms(at), banked, rate);
            in_flight += banked;
        }
        // The window (loss recovery) held it back for the next 50 ms: once the window opens,
        // a few packets go out, not the hundred the rate brought in meanwhile.
        budget.hold_to(in_flight);
        budget.on_end_acks(start + ms(150), in_flight, rate);
        budget.hold_to(u64::MAX);
        let burst = budget.window(rate, u64::MAX) - in_flight;
        assert_eq!(burst, INITIAL_BUDGET_PACKETS as u64 * mtu, "{} packets at once", burst / mtu);
    }
}
