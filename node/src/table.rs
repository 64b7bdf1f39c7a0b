//! The live user table: who may connect, their open connections, and their byte counters.
//!
//! Authentication looks a credential's SHA-256 up in an immutable map behind an `Arc`, which
//! a new credential set replaces in one swap; it never waits on a writer for longer than
//! the swap. Each connection holds its user's counters (two atomics) directly, so the relay
//! paths count bytes without any lock; beside them sit the user's speed-limit budgets
//! ([`crate::limit`]), which every connection of the user shares. Applying a set closes the
//! connections of every user it removes or whose credential changed, and touches nobody
//! else; a changed speed limit applies to open connections at their next chunk, and to the
//! rate Brutal sends at, without closing anything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hearth_shared::wire::{CredentialSet, SpeedLimit, UserId, UserUsage};
use hearth_shared::{Digest, ct_eq, sha256};

/// The QUIC close code for a user removed from the set.
pub(crate) const CLOSE_REMOVED: u32 = 0x107;

/// Bytes one user moved since the last report, and the user's speed-limit budgets.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    /// What the user may send (client to node).
    pub(crate) pace_up: crate::limit::Pace,
    /// What the user may receive (node to client).
    pub(crate) pace_down: crate::limit::Pace,
}

impl Counter {
    fn limit_to(&self, limit: SpeedLimit) {
        self.pace_up.set(limit.up);
        self.pace_down.set(limit.down);
    }
}

/// The users' counters, and the speed limits of those that have one.
#[derive(Default)]
struct Counters {
    by_user: HashMap<UserId, Arc<Counter>>,
    limits: HashMap<UserId, SpeedLimit>,
}

/// An authenticated connection, and the rate Brutal would send to it without the user's
/// limit (0: not on Brutal).
struct Open {
    connection: quinn::Connection,
    brutal: u64,
}

/// Brutal's rate for a connection: `brutal` held to the user's `down` limit (0: none), with
/// an eighth more for what QUIC adds to the payload the limit counts, so that the limit, not
/// Brutal, sets the pace.
pub(crate) fn brutal_within(brutal: u64, down: u64) -> u64 {
    if brutal == 0 || down == 0 { brutal } else { brutal.min(down + down / 8) }
}

/// The node's users.
#[derive(Default)]
pub(crate) struct Live {
    /// Refused authentications (for metrics).
    pub(crate) auth_failures: AtomicU64,
    /// Connections that have not authenticated yet (for metrics).
    pub(crate) unauthenticated: AtomicU64,
    /// Connections refused because too many had not authenticated yet (for metrics).
    pub(crate) refused_unauthenticated: AtomicU64,
    /// The version of the credential set held (for metrics).
    pub(crate) version: AtomicU64,
    /// When the credential set held expires, Unix seconds (for the alarm and metrics).
    pub(crate) expires: AtomicU64,
    /// Open connections that send with Brutal (for metrics).
    pub(crate) brutal: Arc<AtomicU64>,
    /// Datagrams received on the ports of the hop range (for metrics).
    pub(crate) hopped: Arc<AtomicU64>,
    /// QUIC packets sent and declared lost on authenticated connections that have closed
    /// (for metrics; open ones are asked when the metrics are read).
    closed_packets: (AtomicU64, AtomicU64),
    table: RwLock<Arc<HashMap<Digest, UserId>>>,
    counters: Mutex<Counters>,
    connections: Mutex<HashMap<UserId, HashMap<usize, Open>>>,
}

/// What applying a set changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) users: usize,
    pub(crate) removed: usize,
    pub(crate) closed: usize,
    /// Users whose speed limit changed.
    pub(crate) limited: usize,
}

/// Keeps a connection registered while it lives.
pub(crate) struct Registration {
    live: Arc<Live>,
    user: UserId,
    id: usize,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut connections = self.live.connections.lock().expect("connections lock");
        if let Some(open) = connections.get_mut(&self.user) {
            if let Some(open) = open.remove(&self.id) {
                self.live.retire(&open.connection);
            }
            if open.is_empty() {
                connections.remove(&self.user);
            }
        }
    }
}

/// Counts a connection in [`Live::brutal`] while it lives.
pub(crate) struct Counted(Arc<AtomicU64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Live {
    /// Counts a connection that sends with Brutal until the value is dropped.
    pub(crate) fn brutal(&self) -> Counted {
        self.brutal.fetch_add(1, Ordering::Relaxed);
        Counted(self.brutal.clone())
    }

    /// The user a credential belongs to, if it may connect now.
    pub(crate) fn authenticate(&self, credential: &[u8]) -> Option<UserId> {
        let hash = sha256(credential);
        let table = self.table.read().expect("table lock").clone();
        // The map is keyed by SHA-256, so the lookup reveals nothing about stored
        // credentials; the final comparison is constant-time all the same.
        table.get_key_value(&hash).filter(|(stored, _)| ct_eq(stored.as_slice(), &hash)).map(|(_, user)| *user)
    }

    /// Adds a connection's packet counts to those of closed connections.
    fn retire(&self, connection: &quinn::Connection) {
        let path = connection.stats().path;
        self.closed_packets.0.fetch_add(path.sent_packets, Ordering::Relaxed);
        self.closed_packets.1.fetch_add(path.lost_packets, Ordering::Relaxed);
    }

    /// QUIC packets sent to authenticated clients so far, and how many of them were declared
    /// lost (and their data sent again).
    pub(crate) fn packets(&self) -> (u64, u64) {
        let connections = self.connections.lock().expect("connections lock");
        let open = connections.values().flat_map(HashMap::values).map(|o| o.connection.stats().path);
        let (sent, lost) = open.fold((0, 0), |(s, l), path| (s + path.sent_packets, l + path.lost_packets));
        (sent + self.closed_packets.0.load(Ordering::Relaxed), lost + self.closed_packets.1.load(Ordering::Relaxed))
    }

    /// Open authenticated connections.
    pub(crate) fn connections(&self) -> usize {
        self.connections.lock().expect("connections lock").values().map(HashMap::len).sum()
    }

    /// How many users may connect.
    pub(crate) fn users(&self) -> usize {
        self.table.read().expect("table lock").len()
    }

    /// Replaces the table with `set`; closes the connections of users it no longer allows
    /// (removed, or with another credential); gives users their new speed limits.
    pub(crate) fn apply(&self, set: &CredentialSet) -> Applied {
        let new: HashMap<Digest, UserId> = set.users().iter().map(|entry| (entry.hash, entry.user)).collect();
        let allowed: HashMap<UserId, Digest> = set.users().iter().map(|entry| (entry.user, entry.hash)).collect();
        let limits: HashMap<UserId, SpeedLimit> =
            set.users().iter().filter(|entry| !entry.limit.is_none()).map(|entry| (entry.user, entry.limit)).collect();
        let old = std::mem::replace(&mut *self.table.write().expect("table lock"), Arc::new(new));
        let gone: Vec<UserId> = old
            .iter()
            .filter(|(hash, user)| allowed.get(user).is_none_or(|now| now != *hash))
            .map(|(_, user)| *user)
            .collect();
        // New limits, under the counters' lock so that a counter made meanwhile starts from
        // them (see `counter`).
        let changed: Vec<(UserId, SpeedLimit)> = {
            let mut counters = self.counters.lock().expect("counters lock");
            let old = std::mem::replace(&mut counters.limits, limits);
            let mut changed: Vec<(UserId, SpeedLimit)> = old
                .keys()
                .chain(counters.limits.keys())
                .filter_map(|user| {
                    let now = counters.limits.get(user).copied().unwrap_or_default();
                    (old.get(user).copied().unwrap_or_default() != now).then_some((*user, now))
                })
                .collect();
            changed.sort_unstable_by_key(|(user, _)| *user);
            changed.dedup_by_key(|(user, _)| *user);
            for (user, limit) in &changed {
                if let Some(counter) = counters.by_user.get(user) {
                    counter.limit_to(*limit);
                }
            }
            changed
        };
        let mut closed = 0;
        let mut connections = self.connections.lock().expect("connections lock");
        for user in &gone {
            if let Some(open) = connections.remove(user) {
                for open in open.values() {
                    open.connection.close(CLOSE_REMOVED.into(), b"removed");
                    self.retire(&open.connection);
                    closed += 1;
                }
            }
        }
        for (user, limit) in &changed {
            for open in connections.get(user).into_iter().flat_map(HashMap::values).filter(|o| o.brutal > 0) {
                crate::congestion::use_brutal(&open.connection, brutal_within(open.brutal, limit.down));
            }
        }
        Applied { users: allowed.len(), removed: gone.len(), closed, limited: changed.len() }
    }

    /// Registers a user's connection (until the registration drops), with the rate Brutal
    /// sends to it before the user's limit (0: not on Brutal), and puts it on Brutal at that
    /// rate held to the limit `down` holds; returns whether it is on Brutal. Both happen under
    /// the lock `apply` changes Brutal's rates under, so a limit changed meanwhile reaches
    /// this connection too. If the user was removed meanwhile, the connection is closed at
    /// once.
    pub(crate) fn register(
        self: &Arc<Self>,
        user: UserId,
        credential_hash: Digest,
        connection: &quinn::Connection,
        brutal: u64,
        down: &crate::limit::Pace,
    ) -> (Registration, bool) {
        let id = connection.stable_id();
        let open = Open { connection: connection.clone(), brutal };
        let on_brutal = {
            let mut connections = self.connections.lock().expect("connections lock");
            connections.entry(user).or_default().insert(id, open);
            let rate = brutal_within(brutal, down.rate());
            rate > 0 && crate::congestion::use_brutal(connection, rate)
        };
        // `apply` swaps the table before it closes connections: either it saw this one, or
        // this check sees its table.
        let still = self.table.read().expect("table lock").get(&credential_hash) == Some(&user);
        if !still {
            connection.close(CLOSE_REMOVED.into(), b"removed");
        }
        (Registration { live: Arc::clone(self), user, id }, on_brutal)
    }

    /// The user's counters.
    pub(crate) fn counter(&self, user: UserId) -> Arc<Counter> {
        let mut counters = self.counters.lock().expect("counters lock");
        let limit = counters.limits.get(&user).copied().unwrap_or_default();
        Arc::clone(counters.by_user.entry(user).or_insert_with(|| {
            let counter = Counter::default();
            counter.limit_to(limit);
            Arc::new(counter)
        }))
    }

    /// Takes every user's counts since the last call (users without traffic are left out).
    pub(crate) fn take_usage(&self) -> Vec<UserUsage> {
        let counters = self.counters.lock().expect("counters lock");
        let mut usage: Vec<UserUsage> = counters
            .by_user
            .iter()
            .map(|(user, c)| UserUsage {
                user: *user,
                up: c.up.swap(0, Ordering::Relaxed),
                down: c.down.swap(0, Ordering::Relaxed),
            })
            .filter(|u| u.up > 0 || u.down > 0)
            .collect();
        usage.sort_by_key(|u| u.user);
        usage
    }

    /// Gives back counts that could not be stored (they are counted again next time).
    pub(crate) fn give_back(&self, usage: &[UserUsage]) {
        for u in usage {
            let counter = self.counter(u.user);
            counter.up.fetch_add(u.up, Ordering::Relaxed);
            counter.down.fetch_add(u.down, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_shared::wire::CredEntry;

    fn set(users: &[(UserId, &str)]) -> CredentialSet {
        CredentialSet::new(1, users.iter().map(|(user, cred)| CredEntry::new(*user, sha256(cred.as_bytes()))).collect())
            .unwrap()
    }

    #[test]
    fn a_new_set_changes_who_may_connect() {
        let live = Live::default();
        assert_eq!(live.authenticate(b"a"), None);
        let applied = live.apply(&set(&[(1, "a"), (2, "b")]));
        assert_eq!(applied, Applied { users: 2, removed: 0, closed: 0, limited: 0 });
        assert_eq!(live.authenticate(b"a"), Some(1));
        assert_eq!(live.authenticate(b"b"), Some(2));
        assert_eq!(live.authenticate(b"c"), None);
        // User 1 removed, user 2's credential rotated, user 3 added.
        let applied = live.apply(&set(&[(2, "b2"), (3, "c")]));
        assert_eq!((applied.users, applied.removed), (2, 2));
        assert_eq!(live.authenticate(b"a"), None);
        assert_eq!(live.authenticate(b"b"), None);
        assert_eq!(live.authenticate(b"b2"), Some(2));
        assert_eq!(live.authenticate(b"c"), Some(3));
    }

    /// A new limit reaches the counters connections already hold (live), and counters made
    /// later; a limit alone changing closes nothing and keeps the user in.
    #[test]
    fn limits_reach_open_counters_and_new_ones() {
        use hearth_shared::wire::CredEntry;
        let live = Live::default();
        let with = |up, down| {
            let entry = CredEntry { limit: SpeedLimit { up, down }, ..CredEntry::new(1, sha256(b"a")) };
            CredentialSet::new(1, vec![entry, CredEntry::new(2, sha256(b"b"))]).unwrap()
        };
        live.apply(&with(0, 0));
        let held = live.counter(1);
        assert_eq!((held.pace_up.rate(), held.pace_down.rate()), (0, 0));
        let applied = live.apply(&with(100, 2_500_000));
        assert_eq!(applied, Applied { users: 2, removed: 0, closed: 0, limited: 1 });
        assert_eq!((held.pace_up.rate(), held.pace_down.rate()), (100, 2_500_000));
        assert_eq!(live.counter(1).pace_up.rate(), 100);
        assert_eq!(live.counter(2).pace_down.rate(), 0, "the other user is not limited");
        assert_eq!(live.authenticate(b"a"), Some(1));
        assert_eq!(live.apply(&with(100, 2_500_000)).limited, 0);
        live.apply(&with(0, 0));
        assert_eq!((held.pace_up.rate(), held.pace_down.rate()), (0, 0), "lifted");
        live.apply(&with(0, 7));
        assert_eq!(live.counter(1).pace_down.rate(), 7);
        assert_eq!((brutal_within(0, 8), brutal_within(99, 8), brutal_within(5, 8), brutal_within(9, 0)), (0, 9, 5, 9));
    }

    #[test]
    fn usage_is_taken_once_and_can_be_given_back() {
        let live = Live::default();
        live.counter(4).up.fetch_add(10, Ordering::Relaxed);
        live.counter(4).down.fetch_add(20, Ordering::Relaxed);
        live.counter(5);
        let usage = live.take_usage();
        assert_eq!(usage, vec![UserUsage { user: 4, up: 10, down: 20 }]);
        assert!(live.take_usage().is_empty());
        live.give_back(&usage);
        assert_eq!(live.take_usage(), usage);
    }
}
