//! Hearth's BBR: the node's default controller for clients that announce no receive rate.
//!
//! It models the path as a bottleneck bandwidth and a round-trip time and sends at the one,
//! keeping about two of their product in flight, as BBR (v1, with v2's gentler RTT probe)
//! does in Chromium, the official Hysteria server and sing-box:
//!
//! - **Delivery-rate samples.** quinn tells a controller of each send batch (`on_sent`) and,
//!   for each packet acknowledged, when it was sent. Each batch keeps what had been delivered
//!   when it left; when an acknowledgement's newest packet comes back, the bytes delivered
//!   since, over the longer of the send and the acknowledgement intervals, is one sample. The
//!   send interval bounds it: acknowledgements that come in bursts (a client acknowledging
//!   every 25 ms, an ack-thinning middlebox) do not inflate it, where quinn's own BBR takes
//!   the rate between two acknowledgements.
//! - **App-limited samples** (quinn says when the connection had nothing to send) count only
//!   when they raise the estimate, so a user reading a web page does not teach it a low rate.
//! - **The bandwidth** is the largest sample over the last
//!   [`BW_ROUNDS`](filters::BW_ROUNDS) round trips; **the RTT** the smallest over
//!   [`MIN_RTT_WINDOW`], probed by holding what is in flight to half a BDP for
//!   [`PROBE_RTT_TIME`] when it has not come down for that long.
//! - **Startup** starts from [`INITIAL_CWND_PACKETS`] and doubles the rate each round until
//!   three rounds bring less than a quarter more bandwidth, a round that did not grow it
//!   queued and lost more than [`STALLED_LOSS`], or a round loses more than [`STARTUP_LOSS`]
//!   of what it sent (a full queue dropping a burst; random loss of a few percent does not end
//!   it). **Drain** then empties the queue it built, and **ProbeBW** cycles the rate through
//!   1.25, 0.75 (until the queue is gone) and six rounds of 1.0 of the estimate.
//! - **The window** is twice the BDP plus the most the acknowledgements have run ahead of
//!   the estimate over the last [`BW_ROUNDS`](filters::BW_ROUNDS) rounds (ack aggregation),
//!   so bursts of acknowledgements (and jitter) do not stall the sender. In startup that is counted from
//!   the last round that grew the estimate a quarter: before, the acknowledgements ran ahead
//!   of an estimate that startup's growth had left behind.
//! - **The rate** is held by the same [`Budget`] Brutal uses: quinn's own pacer follows the
//!   window, not a rate. quinn paces at 1.25 windows per smoothed RTT, and where the window is
//!   what is in flight and a little more, that held startup to about 1.25 times the last
//!   round's rate (its timer wakes it a millisecond late): so while the window and the budget
//!   leave room for a whole send batch, quinn is handed [`PACER_WINDOW_RTTS`] of the rate, and
//!   the budget alone holds the rate.
//!
//! Loss does not lower the rate in ProbeBW: on the paths Hysteria is picked for, loss is
//! mostly random, and the bandwidth samples already see a full queue. Random loss is made up
//! for, as Brutal does: the rate is divided by one less the share lost at random, or a path
//! losing 5 % before its bottleneck would leave the bottleneck idle 5 % of the time. That
//! share is the mean of the lower half of the last [`LOSS_ROUNDS`](filters::LOSS_ROUNDS)
//! rounds whose RTT stayed within an eighth of the smallest (at most a fifth): loss from a full queue does not count,
//! nor a queue's overflow where the queue is too shallow to raise the RTT (it shows in one or
//! two rounds of a gain cycle, where random loss shows in all). After the pipe is full, a loss
//! holds the window to what is acknowledged for a round (packet conservation), then lets it
//! grow back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use self::filters::{LossShares, RoundMax};
use super::budget::{Bank, Budget};

mod filters;

/// What a loss does to the window: nothing, or for a round the packets acknowledged are all
/// that may go out (conservation), then the window grows by what is acknowledged, until a
/// packet sent after the last loss is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recovery {
    None,
    Conservation,
    Growth,
}

/// Startup's gain on the rate: 2/ln 2, which doubles what is delivered each round trip.
const STARTUP_GAIN: f64 = 2.885;
/// Drain's gain on the rate: startup's inverse, which empties in a round what it queued.
const DRAIN_GAIN: f64 = 1.0 / STARTUP_GAIN;
/// ProbeBW's gains on the rate, one phase of about a round trip each.
const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// The window's gain over the BDP, in startup too (v1's 2.885 there lets a one-BDP queue
/// overflow for the three rounds it takes to see the pipe is full).
const CWND_GAIN: f64 = 2.0;
/// The longest the 0.75 phase lasts, in smallest RTTs, when what is in flight does not come
/// down to a BDP before (it ends once it does, so a queue left by startup or a probe drains).
const DRAIN_PHASE_RTTS: u32 = 3;
/// How long the smallest RTT counts before it is probed again.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long the RTT probe holds what is in flight down (and one round at least).
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// The smallest window, in packets.
const MIN_CWND_PACKETS: u64 = 4;
/// The window a connection starts with, in packets (quinn's own initial window is about as
/// large).
const INITIAL_CWND_PACKETS: u64 = 32;
/// Growth that counts as the pipe not full yet, and the rounds without it that say it is.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;
/// The share of a round's packets lost that ends startup (with [`STARTUP_LOSS_PACKETS`] at
/// least): a queue overflowing, not the random loss of a bad path, which stays far below.
const STARTUP_LOSS: f64 = 0.2;
const STARTUP_LOSS_PACKETS: u64 = 8;
/// The share of a round's packets lost that ends startup in a round that did not grow the
/// estimate and queued (and [`STARTUP_LOSS_PACKETS`] at least).
const STALLED_LOSS: f64 = 0.02;
/// The most of the share lost at random that sending makes up for.
const MAX_MADE_UP: f64 = 0.2;
/// Below this many packets' worth of bytes a round says nothing of the loss share.
const LOSS_SAMPLE_PACKETS: u64 = 20;
/// The window quinn's pacer is handed while the budget has room, in smoothed RTTs of the
/// pacing rate. quinn paces at 1.25 windows per smoothed RTT, a burst of 2 ms of that at a
/// time, and once it has sent one it sleeps until the next is due; tokio's timer wakes it
/// about a millisecond late (1.0 to 1.1 ms for sleeps of 0.3 to 4 ms here), so it sends about
/// 0.6 of its rate. At one RTT of the rate it would hold the sender below the rate; at this,
/// above.
const PACER_WINDOW_RTTS: f64 = 1.5;
/// The most packets quinn sends before it tells the controller (`on_sent`): one transmit.
pub(super) const SEND_BATCH_PACKETS: u64 = 10;
/// Send batches remembered at most (a batch per packet at worst: quinn's own limit on what is
/// in flight keeps far fewer).
const MAX_SENT_BATCHES: usize = 1 << 14;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mode {
    Startup,
    Drain,
    /// The phase of [`PROBE_BW_GAINS`], and since when.
    ProbeBw {
        phase: usize,
        since: Instant,
    },
    /// Holding what is in flight down; `done_at` once it is down, and whether a round has
    /// ended since.
    ProbeRtt {
        done_at: Option<Instant>,
        round_done: bool,
    },
}

/// What the connection had delivered when a batch of packets was sent.
#[derive(Clone, Copy, Debug)]
struct Batch {
    sent: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    app_limited: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Bbr {
    mtu: u64,
    // The delivery-rate sampler.
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    /// Samples are app-limited until `delivered` passes this (0: not app-limited).
    app_limited_until: u64,
    batches: VecDeque<Batch>,
    in_flight: u64,
    /// The current batch of acknowledgements: bytes, and the newest packet's send time; and
    /// the bytes of the last batch.
    acked: u64,
    acked_before: u64,
    newest_acked: Option<Instant>,
    lost: u64,
    // Round trips.
    round: u64,
    next_round_delivered: u64,
    round_acked: u64,
    round_lost: u64,
    /// The share of bytes lost at random (see [`LossShares::random`]), from the rounds whose
    /// RTT stayed near the smallest (loss without a queue).
    loss_share: f64,
    loss_shares: LossShares,
    /// This round's RTT samples: their sum and count.
    round_rtt: (Duration, u32),
    // The model.
    max_bw: RoundMax,
    min_rtt: Option<Duration>,
    min_rtt_at: Instant,
    extra_acked: RoundMax,
    aggregation_start: Instant,
    aggregation_acked: u64,
    // The state machine.
    mode: Mode,
    full_bw: u64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    /// Bytes lost since the ProbeBW phase began.
    phase_lost: u64,
    prior_cwnd: u64,
    cwnd: u64,
    recovery: Recovery,
    recovery_window: u64,
    /// Recovery ends once a packet sent after this (the last loss) is acknowledged.
    recovery_end: Instant,
    last_sent: Instant,
    /// Bytes a second (0 until the first sample: the window alone holds it).
    pacing_rate: u64,
    budget: Budget,
    /// The RTT smoothed as quinn smooths it (an eighth of each new sample), which its pacer
    /// divides the window by.
    srtt: Option<Duration>,
}

impl Bbr {
    pub(super) fn new(now: Instant, mtu: u16) -> Bbr {
        let mtu64 = u64::from(mtu);
        Bbr {
            mtu: mtu64,
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            app_limited_until: 0,
            batches: VecDeque::new(),
            in_flight: 0,
            acked: 0,
            acked_before: 0,
            newest_acked: None,
            lost: 0,
            round: 0,
            next_round_delivered: 0,
            round_acked: 0,
            round_lost: 0,
            loss_share: 0.0,
            loss_shares: LossShares::default(),
            round_rtt: (Duration::ZERO, 0),
            max_bw: RoundMax::default(),
            min_rtt: None,
            min_rtt_at: now,
            extra_acked: RoundMax::default(),
            aggregation_start: now,
            aggregation_acked: 0,
            mode: Mode::Startup,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            phase_lost: 0,
            prior_cwnd: 0,
            cwnd: INITIAL_CWND_PACKETS * mtu64,
            recovery: Recovery::None,
            recovery_window: 0,
            recovery_end: now,
            last_sent: now,
            pacing_rate: 0,
            budget: Budget::new(now, mtu, Bank::AckGaps),
            srtt: None,
        }
    }

    /// The bandwidth estimate, in bytes a second.
    pub(super) fn bandwidth(&self) -> u64 {
        self.max_bw.get(self.round)
    }

    #[cfg(test)]
    pub(super) fn mode(&self) -> Mode {
        self.mode
    }

    pub(super) fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    pub(super) fn cwnd(&self) -> u64 {
        self.cwnd
    }

    pub(super) fn initial_window(&self) -> u64 {
        INITIAL_CWND_PACKETS * self.mtu
    }

    pub(super) fn set_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
        self.budget.mtu = self.mtu;
    }

    /// The bandwidth-delay product at `gain`.
    fn bdp(&self, gain: f64) -> u64 {
        match self.min_rtt {
            Some(rtt) => (gain * self.bandwidth() as f64 * rtt.as_secs_f64()) as u64,
            None => self.initial_window(),
        }
    }

    /// A batch of `bytes` went out.
    pub(super) fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.in_flight == 0 {
            // A new flight after an idle spell: its samples start from now.
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        if self.batches.back().is_none_or(|batch| batch.sent != now) {
            if self.batches.len() == MAX_SENT_BATCHES {
                self.batches.pop_front();
            }
            self.batches.push_back(Batch {
                sent: now,
                delivered: self.delivered,
                delivered_time: self.delivered_time,
                first_sent_time: self.first_sent_time,
                app_limited: self.app_limited_until != 0,
            });
        }
        self.in_flight += bytes;
        self.last_sent = now;
        self.budget.on_sent(now, bytes, self.pacing_rate);
    }

    /// A packet of `bytes` sent at `sent` was acknowledged (one of a batch that ends with
    /// [`on_end_acks`](Self::on_end_acks)).
    pub(super) fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) {
        self.delivered += bytes;
        self.delivered_time = now;
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.acked += bytes;
        self.round_acked += bytes;
        if self.newest_acked.is_none_or(|newest| sent > newest) {
            self.newest_acked = Some(sent);
        }
        self.budget.on_ack(now, bytes, now.saturating_duration_since(sent), self.pacing_rate);
    }

    /// Packets holding `bytes` were lost (`persistent`: everything sent over the persistent
    /// congestion period, which takes the window down to its least).
    pub(super) fn on_loss(&mut self, now: Instant, bytes: u64, persistent: bool) {
        self.lost += bytes;
        self.round_lost += bytes;
        self.phase_lost += bytes;
        self.in_flight = self.in_flight.saturating_sub(bytes);
        if persistent {
            self.cwnd = MIN_CWND_PACKETS * self.mtu;
        }
        // Startup keeps growing through loss (random loss must not stop it): its exit looks
        // at loss instead.
        let least = MIN_CWND_PACKETS * self.mtu;
        if self.filled_pipe && self.recovery == Recovery::None {
            // What is in flight now, and what the last acknowledgements let out.
            self.recovery = Recovery::Conservation;
            self.recovery_window = (self.in_flight + self.acked_before).max(least);
        } else if self.filled_pipe {
            self.recovery_window = self.recovery_window.saturating_sub(bytes).max(least);
        }
        self.recovery_end = self.last_sent;
        if !self.filled_pipe && self.round_overflowed() {
            // Startup ends at once: the next acknowledgement drains.
            self.filled_pipe = true;
        }
        self.budget.on_loss(now, bytes, self.pacing_rate);
        self.budget.hold_to(self.cap());
    }

    /// A batch of acknowledgements ended: `in_flight` is quinn's own figure, and
    /// `app_limited` whether the connection had nothing to send before it.
    pub(super) fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        self.in_flight = in_flight;
        let acked = std::mem::take(&mut self.acked);
        self.acked_before = acked;
        let Some(newest) = self.newest_acked.take() else {
            self.budget.on_end_acks(now, in_flight, self.pacing_rate);
            return;
        };
        if app_limited {
            self.app_limited_until = (self.delivered + in_flight).max(1);
        } else if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        // The batch the newest packet went out in, and the sample it gives.
        while self.batches.front().is_some_and(|batch| batch.sent < newest) {
            self.batches.pop_front();
        }
        let batch = self.batches.front().copied().filter(|batch| batch.sent == newest);
        let mut round_start = false;
        if let Some(batch) = batch {
            self.first_sent_time = batch.sent;
            if batch.delivered >= self.next_round_delivered {
                self.next_round_delivered = self.delivered;
                self.round += 1;
                round_start = true;
            }
            let interval = batch
                .sent
                .saturating_duration_since(batch.first_sent_time)
                .max(now.saturating_duration_since(batch.delivered_time));
            // The send interval bounds it (acknowledgements that bunch up cannot make it
            // faster than the packets left); shorter than the RTT, it is noise.
            if self.min_rtt.is_none_or(|rtt| interval >= rtt) && !interval.is_zero() {
                let rate = ((self.delivered - batch.delivered) as f64 / interval.as_secs_f64()) as u64;
                if !batch.app_limited || rate >= self.bandwidth() {
                    self.max_bw.update(self.round, rate);
                }
            }
        }
        self.update_aggregation(now, acked);
        if round_start {
            if !self.filled_pipe {
                tracing::trace!(
                    round = self.round,
                    bandwidth_mbit = self.bandwidth() as f64 * 8e-6,
                    pacing_mbit = self.pacing_rate as f64 * 8e-6,
                    cwnd = self.cwnd,
                    window = self.window(),
                    in_flight = self.in_flight,
                    app_limited = batch.is_some_and(|batch| batch.app_limited),
                    lost = self.round_lost,
                    "bbr startup round"
                );
            }
            self.on_round_start(batch.is_some_and(|batch| batch.app_limited));
        }
        let rtt = now.saturating_duration_since(newest);
        self.srtt = Some(self.srtt.map_or(rtt, |srtt| (srtt * 7 + rtt) / 8));
        self.round_rtt = (self.round_rtt.0 + rtt, self.round_rtt.1 + 1);
        let rtt_expired = self.update_min_rtt(now, rtt);
        let before = std::mem::discriminant(&self.mode);
        self.update_mode(now, round_start, rtt_expired);
        if before != std::mem::discriminant(&self.mode) {
            tracing::debug!(
                mode = ?self.mode_name(),
                bandwidth_mbit = self.bandwidth() as f64 * 8e-6,
                min_rtt_ms = self.min_rtt.unwrap_or_default().as_secs_f64() * 1e3,
                cwnd = self.cwnd,
                in_flight = self.in_flight,
                delivered = self.delivered,
                lost = self.lost,
                round = self.round,
                "bbr"
            );
        }
        self.update_pacing_rate();
        self.update_cwnd(acked);
        self.update_recovery(newest, round_start, acked);
        self.budget.on_end_acks(now, in_flight, self.pacing_rate);
        // The window changes here and on a loss only.
        self.budget.hold_to(self.cap());
    }

    /// The most the acknowledgements have run ahead of the estimate lately.
    fn update_aggregation(&mut self, now: Instant, acked: u64) {
        let bw = self.bandwidth();
        let mut expected = (bw as f64 * now.saturating_duration_since(self.aggregation_start).as_secs_f64()) as u64;
        if self.aggregation_acked <= expected {
            self.aggregation_acked = 0;
            self.aggregation_start = now;
            expected = 0;
        }
        self.aggregation_acked += acked;
        let extra = (self.aggregation_acked - expected.min(self.aggregation_acked)).min(self.cwnd);
        self.extra_acked.update(self.round, extra);
    }

    /// Whether `lost` bytes, of `acked` and `lost`, are [`STARTUP_LOSS_PACKETS`] at least and
    /// more than `share` of them.
    fn lost_over(&self, acked: u64, lost: u64, share: f64) -> bool {
        lost >= STARTUP_LOSS_PACKETS * self.mtu && lost as f64 > share * (acked + lost) as f64
    }

    /// Whether this round has lost enough to say startup filled a queue.
    fn round_overflowed(&self) -> bool {
        self.lost_over(self.round_acked, self.round_lost, STARTUP_LOSS)
    }

    fn on_round_start(&mut self, app_limited: bool) {
        let overflowed = self.round_overflowed();
        let (acked, lost) = (self.round_acked, self.round_lost);
        (self.round_acked, self.round_lost) = (0, 0);
        let (sum, count) = std::mem::take(&mut self.round_rtt);
        let queued = match (self.min_rtt, count) {
            (Some(min), 1..) => sum / count > min + min / 8,
            _ => true,
        };
        if acked + lost >= LOSS_SAMPLE_PACKETS * self.mtu {
            // A round that queued says nothing of random loss.
            if !queued {
                self.loss_shares.push(lost as f64 / (acked + lost) as f64);
                self.loss_share = self.loss_shares.random();
            }
        }
        if self.filled_pipe {
            tracing::trace!(
                round = self.round,
                mode = self.mode_name(),
                bw = self.bandwidth() as f64 * 8e-6,
                pace = self.pacing_rate as f64 * 8e-6,
                acked = acked / self.mtu,
                lost = lost / self.mtu,
                queued,
                rtt_ms = if count > 0 { (sum / count).as_secs_f64() * 1e3 } else { 0.0 },
                share = self.loss_share,
                cwnd = self.cwnd / self.mtu,
                window = self.window() / self.mtu,
                "bbr round"
            );
            return;
        }
        if overflowed {
            self.filled_pipe = true;
            return;
        }
        if app_limited {
            return;
        }
        let bw = self.bandwidth();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            // Startup's own growth is not ack aggregation: counted from before it, what the
            // acknowledgements ran ahead of an estimate a round behind left the window a
            // third of a BDP over two BDPs at startup's end, and B2 (a queue of one BDP) lost
            // 1.5 to 1.7 % of its packets, where counted from here 0.75 to 1.0 (sing-box 0.3
            // to 0.5). Chromium's BBR has this as an option
            // (`expire_ack_aggregation_in_startup`).
            self.extra_acked = RoundMax::default();
        } else {
            // A round that did not grow the estimate: three in a row, or one that queued and
            // lost more than a little (random loss, without a queue, does not end startup).
            self.full_bw_rounds += 1;
            let lossy = queued && self.lost_over(acked, lost, STALLED_LOSS);
            self.filled_pipe = self.full_bw_rounds >= FULL_BW_ROUNDS || lossy;
        }
    }

    /// Takes `rtt` in; true when the smallest RTT had gone unconfirmed too long.
    fn update_min_rtt(&mut self, now: Instant, rtt: Duration) -> bool {
        let expired = now.saturating_duration_since(self.min_rtt_at) > MIN_RTT_WINDOW;
        if self.min_rtt.is_none_or(|min| rtt <= min) || expired {
            self.min_rtt = Some(rtt);
            self.min_rtt_at = now;
        }
        expired
    }

    fn probe_bw(&mut self, now: Instant) {
        // Phases start anywhere but the one that drains (the round number spreads flows).
        let phase = [0, 2, 3, 4, 5, 6, 7][(self.round % 7) as usize];
        self.mode = Mode::ProbeBw { phase, since: now };
        self.phase_lost = 0;
    }

    fn update_mode(&mut self, now: Instant, round_start: bool, rtt_expired: bool) {
        match self.mode {
            Mode::Startup if self.filled_pipe => self.mode = Mode::Drain,
            Mode::Drain if self.in_flight <= self.bdp(1.0) => self.probe_bw(now),
            Mode::ProbeBw { phase, since } => {
                let full_length = self.min_rtt.is_some_and(|rtt| now.saturating_duration_since(since) > rtt);
                let next = match PROBE_BW_GAINS[phase] {
                    gain if gain > 1.0 => full_length && (self.phase_lost > 0 || self.in_flight >= self.bdp(gain)),
                    gain if gain < 1.0 => {
                        let longest = self
                            .min_rtt
                            .is_some_and(|rtt| now.saturating_duration_since(since) > rtt * DRAIN_PHASE_RTTS);
                        longest || self.in_flight <= self.bdp(1.0)
                    }
                    _ => full_length,
                };
                if next {
                    self.mode = Mode::ProbeBw { phase: (phase + 1) % PROBE_BW_GAINS.len(), since: now };
                    self.phase_lost = 0;
                }
            }
            _ => {}
        }
        if rtt_expired && !matches!(self.mode, Mode::ProbeRtt { .. }) {
            self.prior_cwnd = self.cwnd;
            self.mode = Mode::ProbeRtt { done_at: None, round_done: false };
        }
        if let Mode::ProbeRtt { done_at, round_done } = self.mode {
            // Nothing sampled while held down raises the estimate.
            self.app_limited_until = (self.delivered + self.in_flight).max(1);
            match done_at {
                None if self.in_flight <= self.probe_rtt_cwnd() => {
                    self.next_round_delivered = self.delivered;
                    self.mode = Mode::ProbeRtt { done_at: Some(now + PROBE_RTT_TIME), round_done: false };
                }
                None => {}
                Some(done_at) => {
                    let round_done = round_done || round_start;
                    self.mode = Mode::ProbeRtt { done_at: Some(done_at), round_done };
                    if round_done && now >= done_at {
                        self.min_rtt_at = now;
                        self.cwnd = self.cwnd.max(self.prior_cwnd);
                        if self.filled_pipe {
                            self.probe_bw(now);
                        } else {
                            self.mode = Mode::Startup;
                        }
                    }
                }
            }
        }
    }

    fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Startup => "startup",
            Mode::Drain => "drain",
            Mode::ProbeBw { .. } => "probe_bw",
            Mode::ProbeRtt { .. } => "probe_rtt",
        }
    }

    fn probe_rtt_cwnd(&self) -> u64 {
        self.bdp(0.5).max(MIN_CWND_PACKETS * self.mtu)
    }

    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => STARTUP_GAIN,
            Mode::Drain => DRAIN_GAIN,
            // What is lost on the way is made up for, as Brutal does: the estimate is what
            // arrives, so a path losing 5 % at random before its bottleneck would otherwise
            // leave the bottleneck idle 5 % of the time.
            Mode::ProbeBw { phase, .. } => PROBE_BW_GAINS[phase] / (1.0 - self.loss_share.min(MAX_MADE_UP)),
            Mode::ProbeRtt { .. } => 1.0,
        }
    }

    fn update_pacing_rate(&mut self) {
        let mut rate = (self.pacing_gain() * self.bandwidth() as f64) as u64;
        if self.pacing_rate == 0 {
            // Before the first samples mean much: startup's gain on the first window per RTT.
            if let Some(rtt) = self.min_rtt.filter(|rtt| !rtt.is_zero()) {
                rate = rate.max((STARTUP_GAIN * self.initial_window() as f64 / rtt.as_secs_f64()) as u64);
            }
        }
        // Startup never slows down before the pipe is full.
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    fn update_cwnd(&mut self, acked: u64) {
        // The ack aggregation counts in startup too (since the last round that grew the
        // estimate): where packets take longer than the smallest RTT (jitter), two BDPs alone
        // hold startup to less than twice the last round (B3 moved 0.94 of sing-box without
        // it, 1.00 with it).
        let extra = self.extra_acked.get(self.round);
        let target = self.bdp(CWND_GAIN) + extra;
        if self.filled_pipe {
            self.cwnd = (self.cwnd + acked).min(target);
        } else if self.cwnd < target || self.delivered < self.initial_window() {
            self.cwnd += acked;
        }
        self.cwnd = self.cwnd.max(MIN_CWND_PACKETS * self.mtu);
        if matches!(self.mode, Mode::ProbeRtt { .. }) {
            self.cwnd = self.cwnd.min(self.probe_rtt_cwnd());
        }
    }

    fn update_recovery(&mut self, newest: Instant, round_start: bool, acked: u64) {
        if self.recovery == Recovery::None {
            return;
        }
        if newest > self.recovery_end {
            self.recovery = Recovery::None;
            return;
        }
        if round_start {
            self.recovery = Recovery::Growth;
        }
        if self.recovery == Recovery::Growth {
            self.recovery_window += acked;
        }
        self.recovery_window = self.recovery_window.max(self.in_flight + acked).max(MIN_CWND_PACKETS * self.mtu);
    }

    /// The window, held to the recovery window while loss recovery lasts.
    fn cap(&self) -> u64 {
        match self.recovery {
            Recovery::None => self.cwnd,
            _ => self.cwnd.min(self.recovery_window),
        }
    }

    /// What may be in flight: the window, and within it what the budget lets out at the
    /// pacing rate. While that leaves room for a whole send batch, quinn is handed more (its
    /// pacer takes the window as a rate too: see [`PACER_WINDOW_RTTS`]); it sends a batch at
    /// most before [`on_sent`](Self::on_sent) takes it in, and the window is what it was.
    pub(super) fn window(&self) -> u64 {
        let cwnd = self.cap();
        let rate = self.pacing_rate;
        if rate == 0 {
            return cwnd;
        }
        let window = self.budget.window(rate, cwnd);
        match self.srtt {
            Some(srtt) if window >= self.in_flight + SEND_BATCH_PACKETS * self.mtu => {
                window.max((PACER_WINDOW_RTTS * rate as f64 * srtt.as_secs_f64()) as u64)
            }
            _ => window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::congestion::budget::INITIAL_BUDGET_PACKETS;

    #[test]
    fn the_first_flight_leaves_the_rate_no_debt() {
        // The initial window goes out before there is a rate; once the first acknowledgements
        // set one, the congestion window alone says what more goes out. (Charged to the budget, those 32 packets
        // held a jittery path's startup to a few packets in flight for two round trips.)
        let mtu = 1200;
        let start = Instant::now();
        let mut bbr = Bbr::new(start, mtu as u16);
        for i in 0..INITIAL_CWND_PACKETS {
            bbr.on_sent(start + Duration::from_millis(i), mtu);
        }
        let now = start + Duration::from_millis(60);
        bbr.on_ack(now, start, mtu);
        bbr.on_ack(now, start + Duration::from_millis(1), mtu);
        let in_flight = (INITIAL_CWND_PACKETS - 2) * mtu;
        bbr.on_end_acks(now, in_flight, false);
        assert!(bbr.pacing_rate() > 0);
        assert!(bbr.cwnd() > in_flight);
        assert_eq!(bbr.window(), bbr.cwnd(), "the budget holds the window below the congestion window");
    }

    #[test]
    fn quinns_pacer_is_handed_a_window_it_paces_above_the_rate_with() {
        // 100 Mbit/s over a 50 ms path: quinn's pacer, at 1.25 windows per smoothed RTT and a
        // millisecond late on each wake, would hold the sender below the rate with the window
        // the budget leaves (what is in flight and ten packets).
        let mtu = 1200;
        let start = Instant::now();
        let mut bbr = Bbr::new(start, mtu as u16);
        bbr.pacing_rate = 12_500_000;
        bbr.srtt = Some(Duration::from_millis(50));
        bbr.cwnd = 2_000_000;
        let paced = (PACER_WINDOW_RTTS * 12_500_000.0 * 0.05) as u64;
        assert_eq!(bbr.budget.window(bbr.pacing_rate, bbr.cwnd), INITIAL_BUDGET_PACKETS as u64 * mtu);
        assert_eq!(bbr.window(), paced, "room for a send batch: quinn paces at 1.9 times the rate");
        // A packet out: the budget has room for nine more, fewer than quinn may send before
        // it says so, and quinn is handed what the budget allows.
        bbr.on_sent(start, mtu);
        assert_eq!(bbr.window(), INITIAL_BUDGET_PACKETS as u64 * mtu);
        // Before quinn's RTT is known, the budget's window alone.
        bbr.srtt = None;
        bbr.in_flight = 0;
        assert!(bbr.window() < paced);
    }

    #[test]
    fn startup_counts_ack_aggregation_from_the_last_round_that_grew_the_estimate() {
        let start = Instant::now();
        let mut bbr = Bbr::new(start, 1200);
        bbr.round = 5;
        bbr.full_bw = 1_000_000;
        bbr.max_bw.update(5, 1_100_000);
        bbr.extra_acked.update(4, 400_000);
        bbr.on_round_start(false);
        assert_eq!(bbr.extra_acked.get(5), 400_000, "a round that grew the estimate less than a quarter keeps it");
        bbr.max_bw.update(5, 1_300_000);
        bbr.on_round_start(false);
        assert_eq!(bbr.extra_acked.get(5), 0, "the acknowledgements ran ahead of an estimate left behind");
        assert!(!bbr.filled_pipe);
    }
}
