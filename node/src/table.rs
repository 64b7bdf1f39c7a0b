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
//!
//! A user's devices are the distinct client addresses among the user's open connections (an
//! IPv4 address; an IPv6 address's /64, as one home network or phone holds a /64): a client
//! that connects again, hops ports or opens a second connection from the same address is the
//! same device. A connection from a new address when the user already has as many devices
//! as the set allows here is refused, or the device connected longest ago is dropped for it
//! (the set's policy). A new kick count for a user closes the user's connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use std::net::IpAddr;
use std::time::Instant;

use hearth_shared::wire::{CredentialSet, DevicePolicy, Guard, Presence, SpeedLimit, Touched, UserId, UserUsage};
use hearth_shared::{Digest, ct_eq, sha256};

mod view;

// The node's own QUIC close codes. Hysteria2 runs over HTTP/3, whose error codes take
// 0x100-0x110 (0x107 is H3_EXCESSIVE_LOAD, 0x108 H3_ID_ERROR, 0x109 H3_SETTINGS_ERROR: a client
// showed "H3_ID_ERROR: device limit") and 0x200-0x202 (QPACK): these are far from any
// registered or greased value (0x1f * N + 0x21), "HRTH" and a number.

/// The QUIC close code for a user removed from the set.
pub(crate) const CLOSE_REMOVED: u32 = 0x4852_5401;
/// The QUIC close code for a device refused, or dropped to make room for another of the same
/// user, over the user's device limit.
pub(crate) const CLOSE_DEVICE: u32 = 0x4852_5402;
/// The QUIC close code for a kick.
pub(crate) const CLOSE_KICKED: u32 = 0x4852_5403;

/// A device: the client's IPv4 address, or its IPv6 address's /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Device(IpAddr);

impl Device {
    /// The device a client address belongs to.
    pub(crate) fn of(ip: IpAddr) -> Device {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Device(IpAddr::V4(v4)),
                None => Device(IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into())),
            },
            v4 => Device(v4),
        }
    }
}

/// What the node refused a user since the last report (or everyone, all told).
#[derive(Debug, Default)]
pub(crate) struct Refused {
    pub(crate) devices: AtomicU64,
    pub(crate) torrent: AtomicU64,
    pub(crate) smtp: AtomicU64,
    /// Requests the routing rules refused (node-wide only).
    pub(crate) routing: AtomicU64,
}

/// Bytes one user moved since the last report, and the user's speed-limit budgets.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    /// Bytes sent and received since the traffic stats API last cleared its view: reports
    /// never take these, and the API never takes `up` and `down`.
    shown: (AtomicU64, AtomicU64),
    /// What the user may send (client to node).
    pub(crate) pace_up: crate::limit::Pace,
    /// What the user may receive (node to client).
    pub(crate) pace_down: crate::limit::Pace,
    /// What the abuse guard refuses the user: bit 0 BitTorrent, bit 1 port 25.
    guard: std::sync::atomic::AtomicU8,
    /// The rule set the user is routed by (0: none), as the set in force says.
    rules: std::sync::atomic::AtomicU16,
    /// What was refused since the last report.
    pub(crate) refused: Refused,
}

impl Counter {
    /// Counts bytes the user sent.
    pub(crate) fn sent(&self, bytes: u64) {
        self.up.fetch_add(bytes, Ordering::Relaxed);
        self.shown.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts bytes the user received.
    pub(crate) fn received(&self, bytes: u64) {
        self.down.fetch_add(bytes, Ordering::Relaxed);
        self.shown.1.fetch_add(bytes, Ordering::Relaxed);
    }

    fn limit_to(&self, limit: Limits) {
        self.pace_up.set(limit.speed.up);
        self.pace_down.set(limit.speed.down);
        self.guard.store(u8::from(limit.guard.torrent) | (u8::from(limit.guard.smtp) << 1), Ordering::Relaxed);
        self.rules.store(limit.rules, Ordering::Relaxed);
    }

    /// The rule set the user's new connections are routed by (0: none).
    pub(crate) fn rules(&self) -> u16 {
        self.rules.load(Ordering::Relaxed)
    }

    /// Counts a refusal by the abuse guard, for the user and the node.
    pub(crate) fn refuse(&self, live: &Live, smtp: bool) {
        let (mine, all) = if smtp {
            (&self.refused.smtp, &live.refusals.smtp)
        } else {
            (&self.refused.torrent, &live.refusals.torrent)
        };
        mine.fetch_add(1, Ordering::Relaxed);
        all.fetch_add(1, Ordering::Relaxed);
    }

    /// What the abuse guard refuses this user now.
    pub(crate) fn guard(&self) -> Guard {
        let bits = self.guard.load(Ordering::Relaxed);
        Guard { torrent: bits & 1 != 0, smtp: bits & 2 != 0 }
    }
}

/// A user's limits that reach open connections without closing them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Limits {
    speed: SpeedLimit,
    guard: Guard,
    rules: u16,
}

impl Limits {
    fn of(entry: &hearth_shared::wire::CredEntry) -> Limits {
        Limits { speed: entry.limit, guard: entry.guard, rules: entry.rules }
    }
}

/// The users' counters, and the limits of those that have one.
#[derive(Default)]
struct Counters {
    by_user: HashMap<UserId, Arc<Counter>>,
    limits: HashMap<UserId, Limits>,
}

/// The open connections by user, and what decides who else may connect.
#[derive(Default)]
struct Sessions {
    open: HashMap<UserId, HashMap<usize, Open>>,
    /// Devices a user may have here (users without a limit are left out).
    devices: HashMap<UserId, u32>,
    /// Users' kick counts (0 is left out).
    kicks: HashMap<UserId, u32>,
    policy: DevicePolicy,
}

/// An authenticated connection, and the rate Brutal would send to it without the user's
/// limit (0: not on Brutal).
struct Open {
    connection: quinn::Connection,
    brutal: u64,
    device: Device,
    since: Instant,
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
    /// What was refused users, all told (for metrics).
    pub(crate) refusals: Refused,
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
    /// The routing in force (see [`crate::route`]).
    routes: RwLock<Arc<crate::route::Routes>>,
    /// What each outbound carried, by name, kept across changes of routing.
    carried: Mutex<HashMap<String, Arc<crate::route::Carried>>>,
    counters: Mutex<Counters>,
    connections: Mutex<Sessions>,
    /// The TCP streams relayed now, while the traffic stats API is on.
    pub(crate) streams: crate::streams::Streams,
    /// Users kicked through the traffic stats API since the last report.
    kicked_here: Mutex<std::collections::BTreeSet<UserId>>,
}

/// What applying a set changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) users: usize,
    pub(crate) removed: usize,
    pub(crate) closed: usize,
    /// Users whose speed limit or guard changed.
    pub(crate) limited: usize,
    /// Users kicked (their connections closed).
    pub(crate) kicked: usize,
}

/// Why a connection was not let in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The user has as many devices connected as allowed here.
    Devices(u32),
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
        if let Some(open) = connections.open.get_mut(&self.user) {
            if let Some(open) = open.remove(&self.id) {
                self.live.retire(&open.connection);
            }
            if open.is_empty() {
                connections.open.remove(&self.user);
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
    /// Puts the routing of the set in force in place (`sealed`: the set's, `None` when it has
    /// none), opened with the node's `key`, when it is not the one in force already. Routing
    /// that cannot be used is logged, and refuses every routed user until it can.
    pub(crate) fn route_by(
        &self,
        sealed: Option<&[u8]>,
        key: &hearth_shared::keys::SecretKey,
        files: &crate::route::GeoFiles,
    ) {
        let from = sealed.map(hearth_shared::sha256);
        if self.routes.read().expect("routes lock").from == from {
            return;
        }
        let mut carried = self.carried.lock().expect("carried lock");
        let routes = crate::route::Routes::open(sealed, key, files, &mut carried);
        drop(carried);
        match routes.broken() {
            Some(why) => {
                tracing::error!(why, "the routing control sent cannot be used: users with a rule set are refused")
            }
            None if sealed.is_some() => tracing::info!("routing in force"),
            None => {}
        }
        *self.routes.write().expect("routes lock") = Arc::new(routes);
    }

    /// The routing in force.
    pub(crate) fn routes(&self) -> Arc<crate::route::Routes> {
        self.routes.read().expect("routes lock").clone()
    }

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
        let open = connections.open.values().flat_map(HashMap::values).map(|o| o.connection.stats().path);
        let (sent, lost) = open.fold((0, 0), |(s, l), path| (s + path.sent_packets, l + path.lost_packets));
        (sent + self.closed_packets.0.load(Ordering::Relaxed), lost + self.closed_packets.1.load(Ordering::Relaxed))
    }

    /// Open authenticated connections.
    pub(crate) fn connections(&self) -> usize {
        self.connections.lock().expect("connections lock").open.values().map(HashMap::len).sum()
    }

    /// Devices connected, over all users.
    pub(crate) fn devices(&self) -> usize {
        let connections = self.connections.lock().expect("connections lock");
        connections.open.values().map(distinct_devices).sum()
    }

    /// How many users may connect.
    pub(crate) fn users(&self) -> usize {
        self.table.read().expect("table lock").len()
    }

    /// Replaces the table with `set`; closes the connections of users it no longer allows
    /// (removed, or with another credential) or kicks; gives users their new speed limits,
    /// guards and device allowances (a smaller allowance closes nothing: it holds at the
    /// next new device).
    pub(crate) fn apply(&self, set: &CredentialSet) -> Applied {
        let new: HashMap<Digest, UserId> = set.users().iter().map(|entry| (entry.hash, entry.user)).collect();
        let allowed: HashMap<UserId, Digest> = set.users().iter().map(|entry| (entry.user, entry.hash)).collect();
        let limits: HashMap<UserId, Limits> = set
            .users()
            .iter()
            .map(|entry| (entry.user, Limits::of(entry)))
            .filter(|(_, limits)| *limits != Limits::default())
            .collect();
        let devices: HashMap<UserId, u32> =
            set.users().iter().filter_map(|entry| Some((entry.user, entry.devices?))).collect();
        let kicks: HashMap<UserId, u32> =
            set.users().iter().filter(|entry| entry.kick != 0).map(|entry| (entry.user, entry.kick)).collect();
        let old = std::mem::replace(&mut *self.table.write().expect("table lock"), Arc::new(new));
        let gone: Vec<UserId> = old
            .iter()
            .filter(|(hash, user)| allowed.get(user).is_none_or(|now| now != *hash))
            .map(|(_, user)| *user)
            .collect();
        // New limits, under the counters' lock so that a counter made meanwhile starts from
        // them (see `counter`).
        let changed: Vec<(UserId, Limits)> = {
            let mut counters = self.counters.lock().expect("counters lock");
            let old = std::mem::replace(&mut counters.limits, limits);
            let mut changed: Vec<(UserId, Limits)> = old
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
        let mut connections = self.connections.lock().expect("connections lock");
        let kicked: Vec<UserId> = kicks
            .iter()
            .chain(&connections.kicks)
            .map(|(user, _)| *user)
            .filter(|user| kicks.get(user) != connections.kicks.get(user))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|user| !gone.contains(user))
            .collect();
        connections.devices = devices;
        connections.kicks = kicks;
        connections.policy = set.policy();
        let closed = self.settle(&mut connections, &gone, &kicked, &changed);
        Applied { users: allowed.len(), removed: gone.len(), closed, limited: changed.len(), kicked: kicked.len() }
    }

    /// Applies `set`, which differs from the set applied last only in the users `touched`
    /// names (see [`CredentialSet::touched`]): what [`Live::apply`] does, in proportion to
    /// the change. A delta on a set of 100,000 users changes a few entries of the table in
    /// place (it is copied only if an authentication holds it at that instant) instead of
    /// building every map again.
    pub(crate) fn apply_touched(&self, set: &CredentialSet, touched: &[Touched]) -> Applied {
        // The users whose credential is gone (removed, or another one), with that credential.
        let lost: Vec<(UserId, Digest)> = touched
            .iter()
            .filter_map(|t| t.before.filter(|b| t.after.is_none_or(|a| a.hash != b.hash)).map(|b| (t.user, b.hash)))
            .collect();
        let gone: Vec<UserId> = lost.iter().map(|(user, _)| *user).collect();
        {
            let mut table = self.table.write().expect("table lock");
            let table = Arc::make_mut(&mut *table);
            for (user, hash) in &lost {
                if table.get(hash) == Some(user) {
                    table.remove(hash);
                }
            }
            for t in touched {
                if let Some(after) = t.after {
                    table.insert(after.hash, t.user);
                }
            }
        }
        // New limits, under the counters' lock as in `apply`.
        let changed: Vec<(UserId, Limits)> = {
            let mut counters = self.counters.lock().expect("counters lock");
            let mut changed = Vec::new();
            for t in touched {
                let now = t.after.as_ref().map_or_else(Limits::default, Limits::of);
                if counters.limits.get(&t.user).copied().unwrap_or_default() == now {
                    continue;
                }
                if now == Limits::default() {
                    counters.limits.remove(&t.user);
                } else {
                    counters.limits.insert(t.user, now);
                }
                if let Some(counter) = counters.by_user.get(&t.user) {
                    counter.limit_to(now);
                }
                changed.push((t.user, now));
            }
            changed
        };
        let mut connections = self.connections.lock().expect("connections lock");
        let mut kicked = Vec::new();
        for t in touched {
            match t.after.and_then(|a| a.devices) {
                Some(devices) => connections.devices.insert(t.user, devices),
                None => connections.devices.remove(&t.user),
            };
            let kick = t.after.map_or(0, |a| a.kick);
            if connections.kicks.get(&t.user).copied().unwrap_or(0) == kick {
                continue;
            }
            if kick == 0 {
                connections.kicks.remove(&t.user);
            } else {
                connections.kicks.insert(t.user, kick);
            }
            if !gone.contains(&t.user) {
                kicked.push(t.user);
            }
        }
        connections.policy = set.policy();
        let closed = self.settle(&mut connections, &gone, &kicked, &changed);
        Applied { users: set.users().len(), removed: gone.len(), closed, limited: changed.len(), kicked: kicked.len() }
    }

    /// Closes the connections of the users `gone` (removed, or with another credential) and
    /// `kicked`, and puts the open connections of users with new limits on Brutal's new
    /// rate. Returns how many connections it closed.
    fn settle(
        &self,
        connections: &mut Sessions,
        gone: &[UserId],
        kicked: &[UserId],
        changed: &[(UserId, Limits)],
    ) -> usize {
        let mut closed = 0;
        for (users, code, reason) in [(gone, CLOSE_REMOVED, &b"removed"[..]), (kicked, CLOSE_KICKED, b"kicked")] {
            for user in users {
                if let Some(open) = connections.open.remove(user) {
                    for open in open.values() {
                        open.connection.close(code.into(), reason);
                        self.retire(&open.connection);
                        closed += 1;
                    }
                }
            }
        }
        for (user, limit) in changed {
            for open in connections.open.get(user).into_iter().flat_map(HashMap::values).filter(|o| o.brutal > 0) {
                crate::congestion::use_brutal(&open.connection, brutal_within(open.brutal, limit.speed.down));
            }
        }
        closed
    }

    /// Lets a user's connection in from `device` if the user's device allowance here has
    /// room for it (a device already connected always has), or makes room by dropping the
    /// user's device connected longest ago when the set says so; registers it (until the
    /// registration drops), with the rate Brutal sends to it before the user's limit (0: not
    /// on Brutal), and puts it on Brutal at that rate held to the limit `down` holds; returns
    /// whether it is on Brutal. All of it happens under the lock `apply` changes allowances
    /// and Brutal's rates under, so a change made meanwhile reaches this connection too. If
    /// the user was removed meanwhile, the connection is closed at once.
    pub(crate) fn admit(
        self: &Arc<Self>,
        user: UserId,
        credential_hash: Digest,
        connection: &quinn::Connection,
        device: Device,
        brutal: u64,
        counter: &Counter,
    ) -> Result<(Registration, bool), Refusal> {
        let id = connection.stable_id();
        let open = Open { connection: connection.clone(), brutal, device, since: Instant::now() };
        let on_brutal = {
            let mut connections = self.connections.lock().expect("connections lock");
            let Sessions { open: all, devices, policy, .. } = &mut *connections;
            let allowance = devices.get(&user).copied();
            let mine = all.entry(user).or_default();
            if let Some(allowance) = allowance
                && !mine.values().any(|o| o.device == device)
            {
                while distinct_devices(mine) >= allowance as usize {
                    let oldest = mine.values().min_by_key(|o| o.since).map(|o| o.device);
                    self.refusals.devices.fetch_add(1, Ordering::Relaxed);
                    counter.refused.devices.fetch_add(1, Ordering::Relaxed);
                    let (Some(oldest), DevicePolicy::DropOldest, true) = (oldest, *policy, allowance > 0) else {
                        if mine.is_empty() {
                            all.remove(&user);
                        }
                        return Err(Refusal::Devices(allowance));
                    };
                    mine.retain(|_, o| {
                        if o.device != oldest {
                            return true;
                        }
                        o.connection.close(CLOSE_DEVICE.into(), b"device limit");
                        self.retire(&o.connection);
                        false
                    });
                }
            }
            mine.insert(id, open);
            let rate = brutal_within(brutal, counter.pace_down.rate());
            rate > 0 && crate::congestion::use_brutal(connection, rate)
        };
        // `apply` swaps the table before it closes connections: either it saw this one, or
        // this check sees its table.
        let still = self.table.read().expect("table lock").get(&credential_hash) == Some(&user);
        if !still {
            connection.close(CLOSE_REMOVED.into(), b"removed");
        }
        Ok((Registration { live: Arc::clone(self), user, id }, on_brutal))
    }

    /// The user's counters.
    pub(crate) fn counter(&self, user: UserId) -> Arc<Counter> {
        let mut counters = self.counters.lock().expect("counters lock");
        let limit: Limits = counters.limits.get(&user).copied().unwrap_or_default();
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

    /// Who is on the node now (devices and connections by user), and what was refused each
    /// user since the last call; sorted by user.
    pub(crate) fn take_presence(&self) -> Vec<Presence> {
        let mut presence: HashMap<UserId, Presence> = HashMap::new();
        {
            let connections = self.connections.lock().expect("connections lock");
            for (user, open) in &connections.open {
                let entry = presence.entry(*user).or_insert(Presence { user: *user, ..Presence::default() });
                entry.devices = distinct_devices(open) as u32;
                entry.connections = open.len() as u32;
            }
        }
        let counters = self.counters.lock().expect("counters lock");
        for (user, counter) in &counters.by_user {
            let refused = &counter.refused;
            let taken = [&refused.devices, &refused.torrent, &refused.smtp]
                .map(|count| u32::try_from(count.swap(0, Ordering::Relaxed)).unwrap_or(u32::MAX));
            if taken != [0; 3] {
                let entry = presence.entry(*user).or_insert(Presence { user: *user, ..Presence::default() });
                [entry.refused_devices, entry.refused_torrent, entry.refused_smtp] = taken;
            }
        }
        let mut presence: Vec<Presence> = presence.into_values().collect();
        presence.sort_unstable_by_key(|p| p.user);
        presence
    }

    /// Gives back counts (and kicks) that could not be stored (they are reported again next
    /// time).
    pub(crate) fn give_back(&self, usage: &[UserUsage], presence: &[Presence], kicked: &[UserId]) {
        self.kicked_here.lock().expect("kicked lock").extend(kicked);
        for u in usage {
            let counter = self.counter(u.user);
            counter.up.fetch_add(u.up, Ordering::Relaxed);
            counter.down.fetch_add(u.down, Ordering::Relaxed);
        }
        for p in presence {
            let refused = &self.counter(p.user).refused;
            refused.devices.fetch_add(p.refused_devices.into(), Ordering::Relaxed);
            refused.torrent.fetch_add(p.refused_torrent.into(), Ordering::Relaxed);
            refused.smtp.fetch_add(p.refused_smtp.into(), Ordering::Relaxed);
        }
    }
}

/// How many distinct devices hold these connections.
fn distinct_devices(open: &HashMap<usize, Open>) -> usize {
    let mut devices: Vec<Device> = open.values().map(|o| o.device).collect();
    devices.sort_unstable_by_key(|d| d.0);
    devices.dedup();
    devices.len()
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
        assert_eq!(applied, Applied { users: 2, removed: 0, closed: 0, limited: 0, kicked: 0 });
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
        assert_eq!(applied, Applied { users: 2, removed: 0, closed: 0, limited: 1, kicked: 0 });
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

    /// A device is an IPv4 address, or an IPv6 address's /64 (an IPv4 address mapped into
    /// IPv6 is that IPv4 address).
    #[test]
    fn devices_are_addresses_and_ipv6_networks() {
        let of = |ip: &str| Device::of(ip.parse().unwrap());
        assert_eq!(of("2001:db8:1:2::7"), of("2001:db8:1:2:ffff::1"));
        assert_ne!(of("2001:db8:1:2::7"), of("2001:db8:1:3::7"));
        assert_eq!(of("::ffff:203.0.113.9"), of("203.0.113.9"));
        assert_ne!(of("203.0.113.9"), of("203.0.113.10"));
    }

    /// A kick count that changes for a user in the set closes the user's connections (none
    /// open here, so nothing closes, but the kick is counted); the same count again does not.
    #[test]
    fn a_new_kick_count_kicks_once() {
        let live = Live::default();
        let with = |kick| {
            CredentialSet::new(
                1,
                vec![CredEntry { kick, ..CredEntry::new(1, sha256(b"a")) }, CredEntry::new(2, sha256(b"b"))],
            )
            .unwrap()
        };
        assert_eq!(live.apply(&with(0)).kicked, 0);
        assert_eq!(live.apply(&with(1)).kicked, 1);
        assert_eq!(live.apply(&with(1)).kicked, 0);
        assert_eq!(live.apply(&with(0)).kicked, 1, "a count back to zero (a restored control) kicks too");
        assert_eq!(live.authenticate(b"a"), Some(1), "a kick is not a removal");
    }

    /// What a table holds, to compare two ways of reaching it.
    fn held(live: &Live) -> impl PartialEq + std::fmt::Debug {
        let table = live.table.read().unwrap().as_ref().clone();
        let limits = live.counters.lock().unwrap().limits.clone();
        let connections = live.connections.lock().unwrap();
        let mut table: Vec<(Digest, UserId)> = table.into_iter().collect();
        let mut limits: Vec<(UserId, Limits)> = limits.into_iter().collect();
        let mut devices: Vec<(UserId, u32)> = connections.devices.clone().into_iter().collect();
        let mut kicks: Vec<(UserId, u32)> = connections.kicks.clone().into_iter().collect();
        table.sort_unstable();
        limits.sort_unstable_by_key(|(user, _)| *user);
        devices.sort_unstable();
        kicks.sort_unstable();
        (table, limits, devices, kicks, connections.policy)
    }

    fn set_strategy() -> impl proptest::strategy::Strategy<Value = CredentialSet> {
        use proptest::prelude::*;
        prop::collection::btree_map(0u64..48, (0u8..4, 0u64..3, 0u32..3, 0u32..2, any::<bool>()), 0..30).prop_map(
            |users| {
                let users = users.into_iter().map(|(user, (key, speed, devices, kick, torrent))| CredEntry {
                    limit: SpeedLimit { up: speed * 1000, down: speed * 2000 },
                    devices: (devices > 0).then(|| devices - 1),
                    kick,
                    guard: Guard { torrent, smtp: false },
                    ..CredEntry::new(user, sha256(&[user as u8, key]))
                });
                CredentialSet::new(1, users.collect()).unwrap()
            },
        )
    }

    proptest::proptest! {
        /// A delta applied by the users it touches leaves the table, limits, allowances and
        /// kick counts as applying the whole set it makes does, and reports the same change.
        #[test]
        fn applying_the_users_touched_is_applying_the_whole_set(
            base in set_strategy(), a in set_strategy(), b in set_strategy(), from_base in proptest::prelude::any::<bool>()
        ) {
            let before = if from_base { &base } else { &a };
            let (whole, touched) = (Live::default(), Live::default());
            whole.apply(before);
            touched.apply(before);
            let (to_a, to_b) = (base.diff(&a), base.diff(&b));
            let by_whole = whole.apply(&b);
            let by_touched = touched.apply_touched(&b, &base.touched((!from_base).then_some(&to_a), &to_b));
            proptest::prop_assert_eq!(by_touched, by_whole);
            proptest::prop_assert_eq!(held(&touched), held(&whole));
        }
    }

    #[test]
    fn refusals_are_reported_once_and_can_be_given_back() {
        let live = Live::default();
        live.counter(3).refuse(&live, false);
        live.counter(3).refuse(&live, true);
        live.counter(4);
        let presence = live.take_presence();
        assert_eq!(presence, vec![Presence { user: 3, refused_torrent: 1, refused_smtp: 1, ..Presence::default() }]);
        assert!(live.take_presence().is_empty());
        live.give_back(&[], &presence, &[]);
        assert_eq!(live.take_presence(), presence);
        assert_eq!(live.refusals.torrent.load(Ordering::Relaxed), 1, "the node's totals are never taken");
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
        live.give_back(&usage, &[], &[]);
        assert_eq!(live.take_usage(), usage);
    }
}
