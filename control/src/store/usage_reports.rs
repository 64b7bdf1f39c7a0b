//! Nodes' signed usage reports, each applied exactly once and in order: the traffic counted
//! for users (their quotas and status) and for the node (its daily traffic and monthly cap,
//! whose months roll over here too), and what else a report says: who is on the node, whom
//! it kicked, what it runs.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::PublicKey;
use hearth_shared::trust::{self, EnvelopeDigest, Expect, RoleKeys, StreamState, Trust, VerifyError};
use hearth_shared::wire::{NodeId, UsageReport, UserId, stream};
use rusqlite::{Connection, OptionalExtension as _, params};

use super::changes::Changes;
use super::presence::apply_presence;
use super::users::{status_name, status_of};
use crate::error::Error;
use crate::store::audit_log::audit;

/// What became of a usage report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UsageOutcome {
    /// Applied now.
    Applied(u64),
    /// Applied before (a replay, or a resend after a lost acknowledgement): counted once.
    Duplicate(u64),
}

impl UsageOutcome {
    /// The highest sequence number applied for the node.
    pub(crate) fn acked(&self) -> u64 {
        match self {
            UsageOutcome::Applied(seq) | UsageOutcome::Duplicate(seq) => *seq,
        }
    }
}

/// Verifies and applies a node's signed usage report exactly once. Reports must come in
/// order (the node keeps every report until it is acknowledged); a gap is refused.
pub(crate) fn apply_usage(
    conn: &Connection,
    root: PublicKey,
    changes: &mut Changes,
    node: NodeId,
    bytes: &[u8],
    now: u64,
) -> Result<UsageOutcome, Error> {
    type Row = (Option<[u8; 32]>, u64, Option<[u8; 32]>);
    let row: Option<Row> = conn
        .query_row("SELECT public_key, usage_seq, usage_digest FROM nodes WHERE id = ?1", [node], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((Some(key), applied, digest)) = row else {
        return Err(Error::invalid("unknown_node", "no enrolled node has this id"));
    };
    let key = PublicKey::from_bytes(&key).map_err(|_| Error::Internal("a stored node key is invalid".into()))?;
    let mut trust = Trust::new(RoleKeys::single(root));
    trust.set_node(node, key);
    let name = stream::usage(node);
    let stored = digest.map(|digest| StreamState { version: applied, digest: EnvelopeDigest(digest) });
    let expect = Expect { kind: Kind::UsageReport, audience: Audience::Control, stream: &name };
    let verified = match trust::verify(bytes, &trust, &expect, stored.as_ref(), now) {
        Ok(verified) => verified,
        Err(VerifyError::Stale { .. }) => return Ok(UsageOutcome::Duplicate(applied)),
        Err(e) => return Err(Error::invalid("refused", format!("usage report refused: {e}"))),
    };
    let seq = verified.envelope.header.version;
    // A restore may raise the applied sequence to what the edge acknowledged, without the
    // report's digest: anything at or below it was counted already.
    if verified.unchanged || seq <= applied {
        return Ok(UsageOutcome::Duplicate(applied));
    }
    if seq != applied + 1 {
        return Err(Error::conflict(
            "out_of_order",
            format!("usage report {seq} out of order: send report {} first", applied + 1),
        ));
    }
    let report = UsageReport::decode(&verified.envelope.body)
        .map_err(|_| Error::invalid("refused", "usage report refused: bad body"))?;
    if report.node != node || report.seq != seq {
        return Err(Error::invalid("refused", "usage report refused: its body names another node or sequence"));
    }
    let day = now / 86_400;
    // A month that ended starts again before this traffic counts into it.
    roll_quotas(conn, changes, now)?;
    let multiplier: u64 = conn.query_row("SELECT multiplier FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
    let counted = |bytes: u64| (u128::from(bytes) * u128::from(multiplier) / 1000).min(i64::MAX as u128) as u64;
    for usage in &report.users {
        let raw = (usage.up, usage.down);
        if apply_user_usage(conn, usage.user, (counted(usage.up), counted(usage.down)), raw, day, now)? {
            changes.user(conn, usage.user)?;
        }
    }
    conn.execute(
        "UPDATE nodes SET usage_seq = ?2, usage_digest = ?3, last_seen = max(last_seen, ?4) WHERE id = ?1",
        params![node, seq, verified.digest.0, now],
    )?;
    let (up, down) =
        report.users.iter().fold((0u64, 0u64), |(up, down), u| (up.saturating_add(u.up), down.saturating_add(u.down)));
    conn.prepare_cached(
        "INSERT INTO node_usage_daily (node_id, day, up, down) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (node_id, day) DO UPDATE SET up = up + excluded.up, down = down + excluded.down",
    )?
    .execute(params![node, day, up.min(i64::MAX as u64), down.min(i64::MAX as u64)])?;
    // Over its monthly cap: limited (it carries nobody; its users are told) until the month ends.
    let before: bool = conn.query_row("SELECT limited FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
    let limited: bool = conn
        .prepare_cached(
            "UPDATE nodes SET quota_used = CASE WHEN quota > 0 THEN min(quota_used + ?2, 9223372036854775807) ELSE 0 END,
                    limited = CASE WHEN quota > 0 AND quota_used + ?2 >= quota THEN 1 ELSE limited END
             WHERE id = ?1 RETURNING limited",
        )?
        .query_row(params![node, up.saturating_add(down).min(i64::MAX as u64)], |row| row.get(0))?;
    if limited && !before {
        changes.users_of_node(conn, node)?;
        audit(conn, now, "control", "node.limited", &format!("node {node}"), "its monthly traffic cap is reached")?;
    }
    apply_presence(conn, node, &report.presence, now, changes)?;
    // Users kicked through the node's traffic stats API are kicked as the panel kicks them
    // (on every node, recorded in the audit log); a node kicks only users it serves.
    let actor = format!("node {node} (traffic stats API)");
    for &user in &report.kicked {
        if super::changes::nodes_of_user(conn, user)?.contains(&node) {
            super::users::kick(conn, changes, &actor, user, now)?;
        }
    }
    // What it runs, as it says in its pulls: a node that reaches only an edge is heard here.
    if let Some(release) = &report.release {
        let update = Some(release.update.as_str()).filter(|u| !u.is_empty());
        let said_at = report.period_end.min(now);
        crate::releases::node_says(conn, node, Some(&release.running), update, said_at)?;
    }
    Ok(UsageOutcome::Applied(seq))
}

/// Adds one user's traffic, `counted` (what it counts for on the node, multiplied) and `raw`
/// (as measured); returns whether the user's status changed (or it just started).
fn apply_user_usage(
    conn: &Connection,
    user: UserId,
    counted: (u64, u64),
    raw: (u64, u64),
    day: u64,
    now: u64,
) -> Result<bool, Error> {
    let (up, down) = counted;
    type Row = (bool, u64, u64, u64, u64, u64, u64, String);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT enabled, expires_at, quota, used_up, used_down, duration_secs, started_at, status
             FROM users WHERE id = ?1",
        )?
        .query_row([user], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?))
        })
        .optional()?;
    // Traffic of a user deleted since is dropped: there is nobody to count it for.
    let Some((enabled, mut expires_at, quota, used_up, used_down, duration, mut started, stored)) = row else {
        return Ok(false);
    };
    let (up, down) = (up.min(i64::MAX as u64), down.min(i64::MAX as u64));
    let used_up = used_up.saturating_add(up).min(i64::MAX as u64);
    let used_down = used_down.saturating_add(down).min(i64::MAX as u64);
    let starts = duration != 0 && started == 0 && up.saturating_add(down) > 0;
    if starts {
        started = now;
        expires_at = now + duration;
    }
    conn.prepare_cached(
        "UPDATE users SET used_up = ?2, used_down = ?3, started_at = ?4, expires_at = ?5, usage_dirty = 1,
                raw_up = min(raw_up + ?6, 9223372036854775807), raw_down = min(raw_down + ?7, 9223372036854775807)
         WHERE id = ?1",
    )?
    .execute(params![
        user,
        used_up,
        used_down,
        started,
        expires_at,
        raw.0.min(i64::MAX as u64),
        raw.1.min(i64::MAX as u64)
    ])?;
    conn.prepare_cached(
        "INSERT INTO usage_daily (user_id, day, up, down) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (user_id, day) DO UPDATE SET up = up + excluded.up, down = down + excluded.down",
    )?
    .execute(params![user, day, up, down])?;
    let status = status_of(enabled, expires_at, quota, used_up.saturating_add(used_down), duration, started, now);
    Ok(starts || status_name(status) != stored)
}

/// Starts a new cap month for every node whose month ended: nothing carried yet, and not
/// limited; their users are signed again (the node is back). Returns how many nodes.
pub(crate) fn roll_quotas(conn: &Connection, changes: &mut Changes, now: u64) -> Result<usize, Error> {
    let due: Vec<(NodeId, u32)> = conn
        .prepare_cached("SELECT id, quota_day FROM nodes WHERE quota_next > 0 AND quota_next <= ?1")?
        .query_map([now], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (node, day) in &due {
        let was_limited: bool = conn.query_row("SELECT limited FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
        conn.execute(
            "UPDATE nodes SET quota_used = 0, limited = 0, quota_next = ?2 WHERE id = ?1",
            params![node, crate::clock::next_on_day(*day, now)],
        )?;
        if was_limited {
            changes.users_of_node(conn, *node)?;
        }
    }
    Ok(due.len())
}
