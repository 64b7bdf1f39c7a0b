//! Congestion control of the node's QUIC connections: the operator's controller (`congestion`
//! in `node.toml`: Hearth's own BBR by default, quinn's BBR or CUBIC) until a client announces
//! its receive rate, then Brutal.
//!
//! [`Bbr`](bbr::Bbr) is the default: a model of the path's bottleneck rate and RTT, its rate
//! held by the same [`Budget`](budget::Budget) as Brutal's (below; BBR's banks only what the
//! longest recent gap between acknowledgements needs, so a phase of its gain cycle that could
//! not send does not hand its arrears to the next, and no more than ten packets while its own
//! window holds the sender back, so loss recovery does not end in a burst; while it has room
//! for a whole send batch, quinn is handed a window its pacer runs above the rate with, as
//! that pacer otherwise held startup to 1.25 times a round), tested on a simulated
//! bottleneck (`sim`) where quinn's BBR, misled by acknowledgements that come in bursts,
//! loses half of what it sends.
//!
//! Brutal is Hysteria's own: the server sends at a fixed rate (the smallest of what the client
//! says it can receive, the node's `bandwidth.up` and, later, the user's limit), whatever the
//! loss, and makes up for loss by sending more: the rate is divided by the share of bytes
//! acknowledged over the last [`SLOTS`](brutal::SLOTS) seconds (never below [`MIN_ACK_RATE`](brutal::MIN_ACK_RATE), so a path that
//! drops everything is not flooded).
//!
//! quinn has no way to set a pacing rate: its pacer runs at 1.25 congestion windows per
//! smoothed RTT, and it sends while what is in flight stays below the window. A window of one
//! bandwidth-delay product does not hold a rate: the RTT quinn measures leaves out the peer's
//! ack delay (a client with one packet to acknowledge waits up to 25 ms), so on short paths
//! such a window holds the rate far below its target (on loopback, to a fiftieth), and on
//! loopback the pacer, at 1.25 windows per RTT of a tenth of a millisecond, spreads nothing.
//! So a [`Budget`](budget::Budget) holds the rate: bytes that may go out, refilled at the rate at every event
//! (each send, acknowledgement and loss), spent by every send, holding at most an RTT (or
//! [`MAX_BURST_PACKETS`](budget::MAX_BURST_PACKETS), if longer) of sending: a burst the pacer spreads over an RTT on a long path, and
//! one a client's receive queue takes on a short one (a budget of an RTT plus the ack delay
//! lost a tenth of Brutal's packets at 800 Mbit/s on loopback, this one none). The window is
//! what is in flight plus the budget, never above two BDPs (counting the ack delay; the
//! official server's cap), and never below [`MIN_WINDOW_PACKETS`](budget::MIN_WINDOW_PACKETS), so that a packet can
//! always go out when nothing is in flight (its acknowledgement is the next event; quinn has
//! no timer for a window that opens with time). Budget goes out two packets at least: a
//! client acknowledges every second packet at once but a lone one only after its ack delay
//! (25 ms), and only acknowledgements refill. Where a round trip carries less than two
//! packets at the rate (150 Mbit/s on loopback, whose round trip is 0.1 ms), the floor is a
//! pair each round while the debt stays within what the rate brings in over an ack delay, then
//! a lone packet, whose late acknowledgement pays the debt back: on average the rate (146 of
//! 150 Mbit/s with sing-box, where a budget spent a packet at a time held 65). A rate below a
//! packet per RTT and ack delay (48 kB/s against a client that delays a lone packet's ack
//! 25 ms) is not held.
//!
//! A connection is built with [`Factory`] before anyone knows who it is; after the client
//! authenticates, [`use_brutal`] reaches the connection's controller through
//! `Connection::congestion_state` (a clone that shares the rate) and sets the rate, which can
//! change again at any time.

mod bbr;
mod brutal;
mod budget;
#[cfg(test)]
mod sim;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};

use crate::state::Congestion;
use bbr::Bbr;
use brutal::Brutal;

/// Builds each connection's controller: the operator's choice, switchable to Brutal.
pub(crate) struct Factory {
    pub(crate) default: Congestion,
}

impl ControllerFactory for Factory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let default: Box<dyn Controller> = match self.default {
            Congestion::Bbr => Box::new(Bbr::new(now, current_mtu)),
            Congestion::QuinnBbr => Arc::new(quinn::congestion::BbrConfig::default()).build(now, current_mtu),
            Congestion::Cubic => Arc::new(quinn::congestion::CubicConfig::default()).build(now, current_mtu),
        };
        Box::new(Switch { rate: Arc::new(AtomicU64::new(0)), default, brutal: Brutal::new(now, current_mtu) })
    }
}

/// Makes `connection` send with Brutal at `rate` bytes a second (0: back to the default
/// controller). False when the connection was not built by [`Factory`].
pub(crate) fn use_brutal(connection: &quinn::Connection, rate: u64) -> bool {
    match connection.congestion_state().into_any().downcast::<Switch>() {
        Ok(switch) => {
            switch.rate.store(rate, Ordering::Relaxed);
            true
        }
        Err(_) => false,
    }
}

/// The operator's controller while `rate` is 0, Brutal at `rate` otherwise. Brutal's budget
/// sees every event (a few additions each), so it has the RTT and what is in flight at hand
/// when it is chosen; Brutal counts acknowledgements for its ack rate, and the default
/// controller sees events, only while each is the one in use.
struct Switch {
    /// Brutal's rate in bytes a second, shared with the clones `use_brutal` gets.
    rate: Arc<AtomicU64>,
    default: Box<dyn Controller>,
    brutal: Brutal,
}

impl Switch {
    fn brutal_rate(&self) -> Option<u64> {
        Some(self.rate.load(Ordering::Relaxed)).filter(|rate| *rate > 0)
    }
}

impl Controller for Switch {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            self.default.on_sent(now, bytes, last_packet_number);
        }
        self.brutal.on_sent(now, bytes, rate);
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &quinn_proto::RttEstimator) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            self.default.on_ack(now, sent, bytes, app_limited, rtt);
        }
        self.brutal.on_ack(now, bytes, rtt.get(), rate);
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, largest_packet_num_acked: Option<u64>) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            self.default.on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        }
        self.brutal.on_end_acks(now, in_flight, rate);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, is_persistent_congestion: bool, lost_bytes: u64) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            self.default.on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
        }
        self.brutal.on_loss(now, lost_bytes, rate);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.brutal.budget.mtu = u64::from(new_mtu);
        self.default.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        match self.brutal_rate() {
            Some(rate) => self.brutal.window(rate),
            None => self.default.window(),
        }
    }

    fn metrics(&self) -> ControllerMetrics {
        match self.brutal_rate() {
            Some(rate) => {
                let mut metrics = ControllerMetrics::default();
                metrics.congestion_window = self.brutal.window(rate);
                metrics.pacing_rate = Some(self.brutal.sending_rate(rate) * 8);
                metrics
            }
            None => self.default.metrics(),
        }
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Switch { rate: self.rate.clone(), default: self.default.clone_box(), brutal: self.brutal.clone() })
    }

    fn initial_window(&self) -> u64 {
        self.default.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// quinn's side of Hearth's BBR: the RTT comes from the packets themselves (the time since
/// the newest acknowledged one was sent), not quinn's estimator, so the model stays pure.
impl Controller for Bbr {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        Bbr::on_sent(self, now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        _app_limited: bool,
        _rtt: &quinn_proto::RttEstimator,
    ) {
        Bbr::on_ack(self, now, sent, bytes);
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, _largest_acked: Option<u64>) {
        Bbr::on_end_acks(self, now, in_flight, app_limited);
    }

    fn on_congestion_event(&mut self, now: Instant, _sent: Instant, is_persistent_congestion: bool, lost_bytes: u64) {
        // ECN marks (no bytes lost) are not a signal this BBR takes.
        if lost_bytes > 0 || is_persistent_congestion {
            self.on_loss(now, lost_bytes, is_persistent_congestion);
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.set_mtu(new_mtu);
    }

    fn window(&self) -> u64 {
        Bbr::window(self)
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut metrics = ControllerMetrics::default();
        metrics.congestion_window = self.cwnd();
        metrics.pacing_rate = Some(self.pacing_rate() * 8).filter(|rate| *rate > 0);
        metrics
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        Bbr::initial_window(self)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MTU: u16 = 1200;
    const MB: u64 = 1_000_000;

    #[test]
    fn a_connection_switches_to_brutal_and_back_through_a_shared_rate() {
        let start = Instant::now();
        for default in [Congestion::Bbr, Congestion::QuinnBbr, Congestion::Cubic] {
            let built = Arc::new(Factory { default }).build(start, MTU);
            let mut switch = built.into_any().downcast::<Switch>().expect("a Switch");
            let initial = switch.window();
            // (quinn's RTT estimator cannot be built outside quinn: Brutal takes the sample.)
            switch.brutal.on_ack(start, 1200, Duration::from_millis(40), 0);
            // What `use_brutal` reaches: a clone sharing the rate.
            let clone = switch.clone_box().into_any().downcast::<Switch>().expect("a Switch");
            clone.rate.store(5 * MB, Ordering::Relaxed);
            assert_eq!(switch.window(), 12_000, "Brutal's first budget ({default:?})");
            assert_eq!(switch.metrics().pacing_rate, Some(40 * MB), "in bits");
            switch.on_sent(start, 12_000, 0);
            assert_eq!(switch.window(), 12_000, "spent: what is in flight ({default:?})");
            clone.rate.store(0, Ordering::Relaxed);
            assert_eq!(switch.window(), initial, "the default controller again ({default:?})");
            switch.on_mtu_update(1400);
            assert_eq!(switch.brutal.budget.mtu, 1400);
        }
    }
}
