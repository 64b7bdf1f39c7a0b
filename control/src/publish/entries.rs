//! A user's entries in the credential sets of the nodes it reaches: its own settings over
//! those of the groups it reaches each node through (speed, quota action, devices, abuse
//! guards, rule set), read from the store and merged here.

use std::collections::HashMap;

use hearth_shared::wire::{self, CredEntry, CredentialSet, DevicePolicy, NodeId, SpeedLimit, UserId};
use hearth_shared::{Digest, Rate};
use rusqlite::Connection;

use crate::error::Error;
use crate::store::cred_sets::{devices_elsewhere, entry_rows, node_limited};

/// Two limits, the more generous (0 is none, the most generous of all).
fn generous(a: Rate, b: Rate) -> Rate {
    if a.is_zero() || b.is_zero() { Rate::ZERO } else { a.max(b) }
}

/// Two limits, the stricter (0 is none).
fn stricter(a: Rate, b: Rate) -> Rate {
    if a.is_zero() || b.is_zero() { a.max(b) } else { a.min(b) }
}

/// One user's speed on one node, from its own settings and those of the groups it reaches
/// the node through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Speed {
    pub(super) up: Rate,
    pub(super) down: Rate,
    /// Slowed to this when over quota (0: cut off).
    pub(super) slow: Rate,
}

impl Speed {
    /// The groups' defaults, the most generous of them (the user reaches the node through
    /// any of them).
    fn merge(self, other: Speed) -> Speed {
        Speed {
            up: generous(self.up, other.up),
            down: generous(self.down, other.down),
            slow: self.slow.max(other.slow),
        }
    }
}

/// A user's own settings over its groups': `(speed_up, speed_down, on_quota, slow_kbps)`.
pub(super) fn own_over(group: Speed, own: Own) -> Speed {
    let (up, down, on_quota, slow) = own;
    Speed {
        up: up.unwrap_or(group.up),
        down: down.unwrap_or(group.down),
        slow: match on_quota.as_deref() {
            Some("slow") => slow,
            Some(_) => Rate::ZERO,
            None => group.slow,
        },
    }
}

/// The rule set a user is given on a node: its own, else that of the newest group (the
/// highest id) it reaches the node through that has one; `default`, the oldest, gives way to
/// any group made for a purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rules {
    own: Option<u16>,
    /// The group and its rule set.
    group: Option<(i64, u16)>,
}

impl Rules {
    fn merge(self, other: Rules) -> Rules {
        Rules { own: self.own, group: self.group.max(other.group) }
    }

    fn in_force(self) -> u16 {
        self.own.or(self.group.map(|(_, set)| set)).unwrap_or(0)
    }
}

/// A user's fair-use settings from the groups it reaches a node through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fair {
    /// The groups' device limit, the most generous (0: none, which wins).
    devices: u32,
    guard: wire::Guard,
}

impl Fair {
    fn merge(self, other: Fair) -> Fair {
        Fair {
            devices: if self.devices == 0 || other.devices == 0 { 0 } else { self.devices.max(other.devices) },
            // Refused only if every group the user reaches the node through refuses it.
            guard: wire::Guard {
                torrent: self.guard.torrent && other.guard.torrent,
                smtp: self.guard.smtp && other.guard.smtp,
            },
        }
    }
}

/// The credential set `node` should hold now: every user who can connect, in its groups,
/// and every user over quota whose quota action is to slow down, with their speed limits,
/// device allowances (the user's limit less the devices other nodes reported), kick counts
/// and abuse guards, and the owner's device policy when any user has an allowance.
pub(crate) fn credential_set(conn: &Connection, node: NodeId) -> Result<CredentialSet, Error> {
    let users = if node_limited(conn, node)? { Vec::new() } else { entries(conn, node, None)? };
    let set = CredentialSet::new(node, users).map_err(|e| Error::Internal(e.to_string()))?;
    let policy = policy_for(conn, &set)?;
    Ok(set.with_policy(policy))
}

/// The owner's device policy when any user of the set has a device allowance, else the
/// default (which keeps older set formats).
pub(super) fn policy_for(conn: &Connection, set: &CredentialSet) -> Result<DevicePolicy, Error> {
    Ok(if set.users().iter().any(|entry| entry.devices.is_some()) {
        crate::store::device_policy(conn)?
    } else {
        DevicePolicy::default()
    })
}

/// The users of `node`'s set, sorted (see [`credential_set`]); with `only`, that user's
/// entry alone (none when it has no place in the set).
pub(super) fn entries(conn: &Connection, node: NodeId, only: Option<UserId>) -> Result<Vec<CredEntry>, Error> {
    // A user in two of the node's groups comes twice: merged here, as SQLite's DISTINCT
    // would build a temporary b-tree of every row at each change.
    let rows = entry_rows(conn, node, only, |row| -> Row {
        (
            row.user,
            row.credential_hash,
            row.over_quota,
            (
                row.speed_up.map(Rate::from_kbps),
                row.speed_down.map(Rate::from_kbps),
                row.on_quota,
                Rate::from_kbps(row.slow_kbps),
            ),
            Speed {
                up: Rate::from_kbps(row.group_up),
                down: Rate::from_kbps(row.group_down),
                slow: Rate::from_kbps(row.group_slow),
            },
            (row.device_limit, row.kick),
            Fair {
                devices: row.group_devices,
                guard: wire::Guard { torrent: row.block_torrent, smtp: row.block_smtp },
            },
            Rules { own: row.rule_set, group: row.group_rule_set },
        )
    })?;
    let elsewhere = devices_elsewhere(conn, node, only)?;
    Ok(merged(rows, &elsewhere))
}

/// A user's own speed settings, `(speed_up, speed_down, on_quota, slow_kbps)` (a speed of
/// `None`: its groups').
pub(super) type Own = (Option<Rate>, Option<Rate>, Option<String>, Rate);

/// One row of a user's on a node: the user's id, credential hash, whether it is over its
/// quota, its own speed settings, those of one group it reaches the node through, its own
/// device limit and kick count, and the group's fair-use settings and rule set.
type Row = (UserId, Digest, bool, Own, Speed, (Option<u32>, u32), Fair, Rules);

/// The entries of the users of `rows` (a user once per group it reaches the node through),
/// sorted by user: their groups' settings merged, their own over them, slowed or left out
/// over quota, their device allowance less the devices they have `elsewhere`.
fn merged(mut rows: Vec<Row>, elsewhere: &HashMap<UserId, u32>) -> Vec<CredEntry> {
    rows.sort_unstable_by_key(|row| row.0);
    let mut users: Vec<CredEntry> = Vec::with_capacity(rows.len());
    let mut rows = rows.into_iter().peekable();
    while let Some((user, hash, over_quota, own, mut group, (own_devices, kick), mut fair, mut rules)) = rows.next() {
        while let Some(next) = rows.next_if(|next| next.0 == user) {
            group = group.merge(next.4);
            fair = fair.merge(next.6);
            rules = rules.merge(next.7);
        }
        let limit = own_devices.unwrap_or(fair.devices);
        let devices = (limit > 0).then(|| limit.saturating_sub(elsewhere.get(&user).copied().unwrap_or(0)));
        let speed = own_over(group, own);
        let (up, down) = if over_quota {
            if speed.slow.is_zero() {
                continue;
            }
            (stricter(speed.up, speed.slow), stricter(speed.down, speed.slow))
        } else {
            (speed.up, speed.down)
        };
        users.push(CredEntry {
            limit: SpeedLimit::from_rates(up, down),
            devices,
            kick,
            guard: fair.guard,
            rules: rules.in_force(),
            ..CredEntry::new(user, hash)
        });
    }
    users
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of `user` through a group with `group` speeds (kbit/s), the group's device limit
    /// and guards, and its id and rule set.
    fn row(user: UserId, group: Speed, fair: (u32, bool, bool), rules: (Option<u16>, i64, Option<u16>)) -> Row {
        let (devices, torrent, smtp) = fair;
        let (own_rules, group_id, group_rules) = rules;
        (
            user,
            [user as u8; 32],
            false,
            (None, None, None, Rate::ZERO),
            group,
            (None, 0),
            Fair { devices, guard: wire::Guard { torrent, smtp } },
            Rules { own: own_rules, group: group_rules.map(|set| (group_id, set)) },
        )
    }

    /// A group's speeds in kbit/s, as the database holds them.
    fn speed(up: u64, down: u64, slow: u64) -> Speed {
        Speed { up: Rate::from_kbps(up), down: Rate::from_kbps(down), slow: Rate::from_kbps(slow) }
    }

    /// A user's own speeds in kbit/s, as the database holds them.
    fn own_speed(up: Option<u64>, down: Option<u64>, on_quota: Option<&str>, slow: u64) -> Own {
        (up.map(Rate::from_kbps), down.map(Rate::from_kbps), on_quota.map(str::to_owned), Rate::from_kbps(slow))
    }

    #[test]
    fn a_user_in_two_groups_gets_the_more_generous_of_each_and_is_listed_once() {
        let rows = vec![
            row(9, speed(1000, 0, 0), (2, true, true), (None, 1, None)),
            row(3, speed(500, 500, 0), (0, false, false), (None, 1, None)),
            row(9, speed(2000, 800, 0), (3, false, true), (None, 4, Some(7))),
            row(9, speed(0, 900, 0), (0, true, true), (None, 2, Some(5))),
        ];
        let entries = merged(rows, &HashMap::new());
        assert_eq!(entries.iter().map(|entry| entry.user).collect::<Vec<_>>(), [3, 9]);
        let nine = &entries[1];
        // No limit (0) is the most generous of all; bytes per second on the wire.
        assert_eq!(nine.limit, SpeedLimit { up: 0, down: 0 });
        assert_eq!(nine.devices, None);
        // Refused only if every group refuses it.
        assert_eq!(nine.guard, wire::Guard { torrent: false, smtp: true });
        // The newest group's rule set.
        assert_eq!(nine.rules, 7);
        assert_eq!(entries[0].limit, SpeedLimit { up: 500 * 125, down: 500 * 125 });
    }

    #[test]
    fn a_users_own_settings_win_and_over_quota_it_is_slowed_or_left_out() {
        let own = |row: Row, own, over_quota, devices: (Option<u32>, u32)| -> Row {
            (row.0, row.1, over_quota, own, row.4, devices, row.6, row.7)
        };
        let group = speed(4000, 8000, 1000);
        let rows = vec![
            // Its own up speed, the group's down; over quota, slowed to the group's rate.
            own(
                row(1, group, (0, false, false), (Some(2), 3, Some(9))),
                own_speed(Some(3000), None, None, 0),
                true,
                (None, 4),
            ),
            // Cut off over quota by its own setting.
            own(
                row(2, group, (0, false, false), (None, 3, None)),
                own_speed(None, None, Some("block"), 0),
                true,
                (None, 0),
            ),
            // Slowed by its own rate, the stricter of it and its speed.
            own(
                row(3, group, (0, false, false), (None, 3, None)),
                own_speed(Some(200), None, Some("slow"), 500),
                true,
                (None, 0),
            ),
            // Not over quota: its speeds, and its own device limit less those elsewhere.
            own(row(4, group, (5, false, false), (None, 3, None)), own_speed(None, None, None, 0), false, (Some(3), 0)),
            own(row(5, group, (5, false, false), (None, 3, None)), own_speed(None, None, None, 0), false, (None, 0)),
        ];
        let elsewhere = HashMap::from([(4, 1), (5, 9)]);
        let entries = merged(rows, &elsewhere);
        let by_user = |user| entries.iter().find(|entry| entry.user == user);
        let one = by_user(1).unwrap();
        assert_eq!(one.limit, SpeedLimit { up: 1000 * 125, down: 1000 * 125 });
        assert_eq!((one.kick, one.rules), (4, 2));
        assert!(by_user(2).is_none());
        assert_eq!(by_user(3).unwrap().limit, SpeedLimit { up: 200 * 125, down: 500 * 125 });
        let four = by_user(4).unwrap();
        assert_eq!(four.limit, SpeedLimit { up: 4000 * 125, down: 8000 * 125 });
        assert_eq!(four.devices, Some(2));
        assert_eq!(by_user(5).unwrap().devices, Some(0));
    }
}
