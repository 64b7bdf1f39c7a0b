//! What the traffic stats API reads from the live table, and its kicks.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use hearth_shared::wire::UserId;

use super::{CLOSE_KICKED, Live};

impl Live {
    /// Bytes each user sent and received since the API's view was last cleared (users with
    /// none left out), sorted by user; `clear` starts the view again from zero. Reports take
    /// their own counts: clearing this view changes nothing control counts.
    pub(crate) fn traffic(&self, clear: bool) -> Vec<(UserId, u64, u64)> {
        let counters = self.counters.lock().expect("counters lock");
        let read = |count: &std::sync::atomic::AtomicU64| {
            if clear { count.swap(0, Ordering::Relaxed) } else { count.load(Ordering::Relaxed) }
        };
        let mut traffic: Vec<(UserId, u64, u64)> = counters
            .by_user
            .iter()
            .map(|(user, counter)| (*user, read(&counter.shown.0), read(&counter.shown.1)))
            .filter(|&(_, up, down)| up > 0 || down > 0)
            .collect();
        traffic.sort_unstable();
        traffic
    }

    /// Each user with a connection open here, and how many (one per app connected), sorted
    /// by user.
    pub(crate) fn online(&self) -> Vec<(UserId, usize)> {
        let connections = self.connections.lock().expect("connections lock");
        let mut online: Vec<(UserId, usize)> =
            connections.open.iter().map(|(user, open)| (*user, open.len())).filter(|&(_, n)| n > 0).collect();
        online.sort_unstable();
        online
    }

    /// Closes the open connections of those of `users` the set in force allows here (their
    /// apps connect again, as after any kick) and keeps them for the next report, which has
    /// control kick them everywhere. Returns the users kicked and the connections closed.
    pub(crate) fn kick_here(&self, users: &[UserId]) -> (usize, usize) {
        let wanted: BTreeSet<UserId> = users.iter().copied().collect();
        let known: BTreeSet<UserId> = {
            let table = self.table.read().expect("table lock").clone();
            table.values().filter(|user| wanted.contains(user)).copied().collect()
        };
        let mut closed = 0;
        {
            let mut connections = self.connections.lock().expect("connections lock");
            for user in &known {
                for open in connections.open.remove(user).as_ref().into_iter().flat_map(HashMap::values) {
                    open.connection.close(CLOSE_KICKED.into(), b"kicked");
                    self.retire(&open.connection);
                    closed += 1;
                }
            }
        }
        let kicked = known.len();
        self.kicked_here.lock().expect("kicked lock").extend(known);
        (kicked, closed)
    }

    /// Takes the users kicked through the API since the last call, sorted.
    pub(crate) fn take_kicked(&self) -> Vec<UserId> {
        std::mem::take(&mut *self.kicked_here.lock().expect("kicked lock")).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use hearth_shared::sha256;
    use hearth_shared::wire::{CredEntry, CredentialSet};

    use super::*;

    fn set(users: &[UserId]) -> CredentialSet {
        CredentialSet::new(1, users.iter().map(|&user| CredEntry::new(user, sha256(&user.to_be_bytes()))).collect())
            .unwrap()
    }

    /// The API's view counts what reports count, and clearing it leaves the reports' counts
    /// alone (and the other way round).
    #[test]
    fn the_apis_view_is_cleared_apart_from_what_reports_take() {
        let live = Live::default();
        live.apply(&set(&[1, 2]));
        live.counter(1).sent(10);
        live.counter(1).received(20);
        live.counter(2).received(5);
        assert_eq!(live.traffic(false), vec![(1, 10, 20), (2, 0, 5)]);
        assert_eq!(live.traffic(true), vec![(1, 10, 20), (2, 0, 5)]);
        assert_eq!(live.traffic(false), Vec::new(), "cleared");
        let usage = live.take_usage();
        assert_eq!(usage.iter().map(|u| (u.user, u.up, u.down)).collect::<Vec<_>>(), vec![(1, 10, 20), (2, 0, 5)]);
        live.counter(2).sent(3);
        assert!(live.take_usage().len() == 1 && live.traffic(false) == vec![(2, 3, 0)], "reports take only theirs");
        assert_eq!(live.counter(2).up.load(Ordering::Relaxed), 0);
    }

    /// A kick names only users the set allows here; they are kept for the report once each,
    /// and given back when the report could not be written.
    #[test]
    fn kicks_are_kept_for_the_report_for_users_of_the_set() {
        let live = Live::default();
        live.apply(&set(&[1, 2, 3]));
        assert_eq!(live.kick_here(&[3, 1, 99, 3]), (2, 0));
        assert_eq!(live.kick_here(&[1]), (1, 0));
        assert_eq!(live.take_kicked(), vec![1, 3]);
        assert_eq!(live.take_kicked(), Vec::<UserId>::new());
        live.give_back(&[], &[], &[3]);
        assert_eq!(live.take_kicked(), vec![3]);
        assert!(live.online().is_empty());
    }
}
