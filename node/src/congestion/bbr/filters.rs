//! The two filters over rounds BBR keeps: the largest value (of the bandwidth samples, of the
//! ack aggregation) and the share of bytes lost at random.

/// Round trips the bandwidth estimate (and the ack aggregation) remembers.
pub(super) const BW_ROUNDS: u64 = 10;
/// The rounds (without a standing queue) the share of random loss is learned from: a gain
/// cycle's worth.
pub(super) const LOSS_ROUNDS: usize = 8;

/// The largest value seen over the last [`BW_ROUNDS`] rounds: the best of each round, kept
/// by round number.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RoundMax {
    slots: [(u64, u64); BW_ROUNDS as usize],
}

impl RoundMax {
    pub(super) fn update(&mut self, round: u64, value: u64) {
        let slot = &mut self.slots[(round % BW_ROUNDS) as usize];
        if slot.0 != round {
            *slot = (round, 0);
        }
        slot.1 = slot.1.max(value);
    }

    pub(super) fn get(&self, round: u64) -> u64 {
        self.slots.iter().filter(|(at, _)| at + BW_ROUNDS > round).map(|(_, value)| *value).max().unwrap_or(0)
    }
}

/// The share of bytes lost in each of the last [`LOSS_ROUNDS`] rounds that ran without a
/// standing queue.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LossShares {
    shares: [f64; LOSS_ROUNDS],
    next: usize,
    len: usize,
}

impl LossShares {
    pub(super) fn push(&mut self, share: f64) {
        self.shares[self.next] = share;
        self.next = (self.next + 1) % LOSS_ROUNDS;
        self.len = (self.len + 1).min(LOSS_ROUNDS);
    }

    /// The share lost at random: the mean of the lower half of the rounds. Random loss shows
    /// in every round; a queue overflowing shows in the one or two rounds after a probe, and
    /// where the queue is too shallow for the RTT to rise (a policer, a few milliseconds of
    /// buffer) nothing else tells the two apart: made up for, the overflow would grow itself.
    pub(super) fn random(&self) -> f64 {
        if self.len < LOSS_ROUNDS / 2 {
            return 0.0;
        }
        let mut shares = self.shares;
        let shares = &mut shares[..self.len];
        shares.sort_by(f64::total_cmp);
        let lower = &shares[..self.len / 2];
        lower.iter().sum::<f64>() / lower.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_max_forgets_what_is_older_than_its_rounds() {
        let mut max = RoundMax::default();
        max.update(1, 100);
        max.update(2, 50);
        max.update(2, 70);
        assert_eq!(max.get(2), 100);
        assert_eq!(max.get(10), 100, "round 1 still counts in round 10");
        assert_eq!(max.get(11), 70, "and not in round 11");
        max.update(12, 10);
        assert_eq!(max.get(12), 10, "round 12 took round 2's place");
        assert_eq!(max.get(30), 0);
    }
}
