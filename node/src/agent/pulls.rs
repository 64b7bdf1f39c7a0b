//! The pull loop's decisions, with time passed in: how long a long poll to control waits,
//! how soon the next round starts after what the last one came to, when nobody answering is
//! worth a warning, and when an expired set is alarmed again. No IO: [`super::pull`] asks,
//! logs and sleeps as these say.

use std::time::Duration;

/// What an answered pull came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A new set was sent: applied (or the one held, sent again).
    New,
    /// A set was sent and refused, or could not be stored: the set held stays.
    Refused,
    /// Nothing new.
    Unchanged,
}

/// How long a long poll to control waits for a change, in seconds: a new release proving
/// itself pulls without waiting, to be kept (and say so) soon.
pub(crate) fn long_poll_secs(release_proving: bool) -> u64 {
    if release_proving { 1 } else { 25 }
}

/// How often an expired set is alarmed, in seconds.
const ALARM_EVERY: u64 = 3600;

/// Rounds in a row nobody answered before that is worth a warning.
const WARN_AFTER: u32 = 3;

/// What the pull loop remembers from one round to the next.
#[derive(Debug, Default)]
pub(crate) struct Pulls {
    /// Rounds in a row that nobody answered.
    failures: u32,
    /// When an expired set was last alarmed (0: never).
    alarmed: u64,
}

/// What comes after a round.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Next {
    /// How long to wait before the next round (zero: at once).
    pub(crate) pause: Duration,
    /// Nobody has answered for [`WARN_AFTER`] rounds: say so, once.
    pub(crate) warn: bool,
}

impl Pulls {
    /// Whether a set that `expires` (0: never) is to be alarmed at `now`: it is kept (users
    /// stay online) and alarmed once an hour.
    pub(crate) fn alarm(&mut self, expires: u64, now: u64) -> bool {
        if expires == 0 || now <= expires || now < self.alarmed + ALARM_EVERY {
            return false;
        }
        self.alarmed = now;
        true
    }

    /// The round that asked control first, and the edges (`from_edge`) when control did not
    /// answer, came to `answered` (`None`: nobody answered). A new set is followed by the
    /// next pull at once (there may be more); a refused one waits an edge poll (`poll_secs`)
    /// before asking again; after a long poll to control the next starts at once, and after
    /// asking the edges it waits an edge poll (at least a second).
    pub(crate) fn after(&mut self, answered: Option<Taken>, from_edge: bool, poll_secs: u64) -> Next {
        let warn = match answered {
            Some(_) => {
                self.failures = 0;
                false
            }
            None => {
                self.failures = self.failures.saturating_add(1);
                self.failures == WARN_AFTER
            }
        };
        let pause = match answered {
            Some(Taken::New) => Duration::ZERO,
            Some(Taken::Refused) => Duration::from_secs(poll_secs),
            _ if from_edge => Duration::from_secs(poll_secs.max(1)),
            _ => Duration::ZERO,
        };
        Next { pause, warn }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_proving_itself_does_not_wait_on_control() {
        assert_eq!((long_poll_secs(false), long_poll_secs(true)), (25, 1));
    }

    #[test]
    fn an_expired_set_is_alarmed_once_an_hour() {
        let mut pulls = Pulls::default();
        assert!(!pulls.alarm(0, 10_000), "a set that never expires");
        assert!(!pulls.alarm(10_000, 10_000), "not expired yet");
        assert!(pulls.alarm(10_000, 10_001));
        assert!(!pulls.alarm(10_000, 10_001 + ALARM_EVERY - 1));
        assert!(pulls.alarm(10_000, 10_001 + ALARM_EVERY));
    }

    #[test]
    fn the_next_round_waits_as_what_the_last_came_to_says() {
        let mut pulls = Pulls::default();
        let at_once = Next { pause: Duration::ZERO, warn: false };
        let poll = |secs| Next { pause: Duration::from_secs(secs), warn: false };
        assert_eq!(pulls.after(Some(Taken::New), false, 30), at_once);
        assert_eq!(pulls.after(Some(Taken::New), true, 30), at_once);
        assert_eq!(pulls.after(Some(Taken::Refused), false, 30), poll(30));
        assert_eq!(pulls.after(Some(Taken::Refused), true, 0), poll(0));
        // Control's long poll came back empty: at once; the edge's: an edge poll, at least 1 s.
        assert_eq!(pulls.after(Some(Taken::Unchanged), false, 30), at_once);
        assert_eq!(pulls.after(Some(Taken::Unchanged), true, 30), poll(30));
        assert_eq!(pulls.after(Some(Taken::Unchanged), true, 0), poll(1));
    }

    #[test]
    fn nobody_answering_is_warned_once_after_three_rounds_and_again_after_an_answer() {
        let mut pulls = Pulls::default();
        let warned: Vec<bool> = (0..5).map(|_| pulls.after(None, true, 30).warn).collect();
        assert_eq!(warned, [false, false, true, false, false]);
        assert_eq!(pulls.after(None, true, 30).pause, Duration::from_secs(30));
        assert!(!pulls.after(Some(Taken::Unchanged), true, 30).warn);
        let warned: Vec<bool> = (0..3).map(|_| pulls.after(None, true, 30).warn).collect();
        assert_eq!(warned, [false, false, true]);
    }
}
