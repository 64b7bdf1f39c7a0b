//! Signed node releases and their rollouts as the database holds them (`releases.sql`): the
//! releases added, each one's rollout, and the release each node is told to run and says it
//! runs. Signing, the binaries and what a rollout does next are `crate::releases`'s; these
//! functions only read and write rows.

use hearth_shared::wire::NodeId;
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Error;

/// A release's row: its version (the envelope's), the manifest's name for it, and its signed
/// manifest envelope.
pub(crate) struct Release {
    pub(crate) version: u64,
    pub(crate) name: String,
    pub(crate) built: u64,
    pub(crate) expires: u64,
    pub(crate) manifest: Vec<u8>,
}

/// A release's rollout, as its row holds it.
pub(crate) struct Rollout {
    pub(crate) state: String,
    pub(crate) canary: NodeId,
    pub(crate) current: NodeId,
    pub(crate) detail: String,
    pub(crate) started: u64,
    pub(crate) updated: u64,
}

/// The rollout going on (state `canary` or `rolling`): its release, the node told last and
/// since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rolling {
    pub(crate) release: u64,
    pub(crate) current: NodeId,
    pub(crate) since: u64,
}

/// What a node runs and what it last said about an update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeRelease {
    /// The release it says it runs (0: none).
    pub(crate) running: u64,
    /// Empty, or `<release> <why>` for a release it refused or rolled back.
    pub(crate) status: String,
}

/// The version the next release signed here takes at least: one past the newest held.
pub(crate) fn next_sequence(conn: &Connection) -> Result<u64, Error> {
    let sequence: i64 = conn.query_row("SELECT COALESCE(MAX(version), 0) + 1 FROM releases", [], |row| row.get(0))?;
    Ok(sequence as u64)
}

/// Whether release `version` was added (SQLite's own error: the import reports it as it is).
pub(crate) fn exists(conn: &Connection, version: u64) -> rusqlite::Result<bool> {
    conn.query_row("SELECT EXISTS (SELECT 1 FROM releases WHERE version = ?1)", [version], |row| row.get(0))
}

/// Adds a release, `added` at that time (SQLite's own error, as [`exists`]).
pub(crate) fn add(conn: &Connection, release: &Release, added: u64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO releases (version, name, built, expires, manifest, added) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![release.version, release.name, release.built, release.expires, release.manifest, added],
    )?;
    Ok(())
}

/// A release's manifest envelope.
pub(crate) fn manifest(conn: &Connection, release: u64) -> Result<Option<Vec<u8>>, Error> {
    Ok(conn.query_row("SELECT manifest FROM releases WHERE version = ?1", [release], |row| row.get(0)).optional()?)
}

/// The version and manifest envelope of the release in force (see `crate::releases::in_force`):
/// the newest not expired at `now` that a completed rollout put on every node or that every
/// enrolled node runs, or, with no node enrolled, whose rollout did not fail or stop.
pub(crate) fn in_force(conn: &Connection, now: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
    Ok(conn
        .query_row(
            "SELECT version, manifest FROM releases r WHERE expires > ?1 AND (
                EXISTS (SELECT 1 FROM rollouts o WHERE o.release = r.version AND o.state = 'done')
                OR (EXISTS (SELECT 1 FROM nodes WHERE public_key IS NOT NULL)
                    AND NOT EXISTS (SELECT 1 FROM nodes WHERE public_key IS NOT NULL AND release_running != r.version))
                OR (NOT EXISTS (SELECT 1 FROM nodes WHERE public_key IS NOT NULL)
                    AND NOT EXISTS (SELECT 1 FROM rollouts o WHERE o.release = r.version AND o.state IN ('failed', 'stopped')))
             )
             ORDER BY version DESC LIMIT 1",
            [now],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?)
}

/// `version`, when it is a release's.
pub(crate) fn by_version(conn: &Connection, version: u64) -> Result<Option<u64>, Error> {
    Ok(conn.query_row("SELECT version FROM releases WHERE version = ?1", [version], |row| row.get(0)).optional()?)
}

/// The newest release the manifest names `name`.
pub(crate) fn newest_named(conn: &Connection, name: &str) -> Result<Option<u64>, Error> {
    Ok(conn
        .query_row("SELECT max(version) FROM releases WHERE name = ?1", [name], |row| row.get(0))
        .optional()?
        .flatten())
}

/// Every release, newest first.
pub(crate) fn list(conn: &Connection) -> Result<Vec<Release>, Error> {
    Ok(conn
        .prepare("SELECT version, name, built, expires, manifest FROM releases ORDER BY version DESC")?
        .query_map([], |row| {
            Ok(Release {
                version: row.get(0)?,
                name: row.get(1)?,
                built: row.get(2)?,
                expires: row.get(3)?,
                manifest: row.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?)
}

/// A release's rollout, when it was rolled out.
pub(crate) fn rollout(conn: &Connection, release: u64) -> Result<Option<Rollout>, Error> {
    Ok(conn
        .query_row(
            "SELECT state, canary, current, detail, started, updated FROM rollouts WHERE release = ?1",
            [release],
            |row| {
                Ok(Rollout {
                    state: row.get(0)?,
                    canary: row.get(1)?,
                    current: row.get(2)?,
                    detail: row.get(3)?,
                    started: row.get(4)?,
                    updated: row.get(5)?,
                })
            },
        )
        .optional()?)
}

/// The nodes that say they run `release`, by id.
pub(crate) fn running(conn: &Connection, release: u64) -> Result<Vec<NodeId>, Error> {
    Ok(conn
        .prepare_cached("SELECT id FROM nodes WHERE release_running = ?1 ORDER BY id")?
        .query_map([release], |row| row.get(0))?
        .collect::<Result<_, _>>()?)
}

/// When `release` expires (`None`: there is no such release).
pub(crate) fn expires(conn: &Connection, release: u64) -> Result<Option<u64>, Error> {
    Ok(conn.query_row("SELECT expires FROM releases WHERE version = ?1", [release], |row| row.get(0)).optional()?)
}

/// The release rolling out (state `canary` or `rolling`), if one is.
pub(crate) fn rolling_release(conn: &Connection) -> Result<Option<u64>, Error> {
    Ok(conn
        .query_row("SELECT release FROM rollouts WHERE state IN ('canary', 'rolling')", [], |row| row.get(0))
        .optional()?)
}

/// Whether `node` is enrolled (`None`: there is no such node).
pub(crate) fn enrolled(conn: &Connection, node: NodeId) -> Result<Option<bool>, Error> {
    Ok(conn.query_row("SELECT public_key IS NOT NULL FROM nodes WHERE id = ?1", [node], |row| row.get(0)).optional()?)
}

/// Starts (or starts again) `release`'s rollout with `canary`, and tells the canary to run it.
pub(crate) fn start(conn: &Connection, release: u64, canary: NodeId, now: u64) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO rollouts (release, state, canary, current, since, detail, started, updated)
         VALUES (?1, 'canary', ?2, ?2, ?3, '', ?3, ?3)
         ON CONFLICT (release) DO UPDATE SET state = 'canary', canary = ?2, current = ?2, since = ?3, detail = '',
           started = ?3, updated = ?3",
        params![release, canary, now],
    )?;
    conn.execute("UPDATE nodes SET release_target = ?2, update_status = '' WHERE id = ?1", params![canary, release])?;
    Ok(())
}

/// Stops `release`'s rollout, the owner's doing, when it is rolling out; nodes not running it
/// yet are no longer told to. Returns whether it was rolling out (when not, nothing changed).
pub(crate) fn stop(conn: &Connection, release: u64, now: u64) -> Result<bool, Error> {
    let changed = conn.execute(
        "UPDATE rollouts SET state = 'stopped', detail = 'stopped by the owner', updated = ?2
         WHERE release = ?1 AND state IN ('canary', 'rolling')",
        params![release, now],
    )?;
    if changed == 0 {
        return Ok(false);
    }
    conn.execute("UPDATE nodes SET release_target = 0 WHERE release_target = ?1 AND release_running != ?1", [release])?;
    Ok(true)
}

/// The rollout going on, if one is.
pub(crate) fn rolling(conn: &Connection) -> Result<Option<Rolling>, Error> {
    Ok(conn
        .query_row("SELECT release, current, since FROM rollouts WHERE state IN ('canary', 'rolling')", [], |row| {
            Ok(Rolling { release: row.get(0)?, current: row.get(1)?, since: row.get(2)? })
        })
        .optional()?)
}

/// What `node` runs and said of an update (`None`: there is no such node).
pub(crate) fn node_release(conn: &Connection, node: NodeId) -> Result<Option<NodeRelease>, Error> {
    Ok(conn
        .query_row("SELECT release_running, update_status FROM nodes WHERE id = ?1", [node], |row| {
            Ok(NodeRelease { running: row.get(0)?, status: row.get(1)? })
        })
        .optional()?)
}

/// Marks `release`'s rollout failed for `detail`; `current`, the node told last, is no longer
/// told to run it unless it does.
pub(crate) fn fail(conn: &Connection, release: u64, current: NodeId, detail: &str, now: u64) -> Result<(), Error> {
    conn.execute(
        "UPDATE rollouts SET state = 'failed', detail = ?2, updated = ?3 WHERE release = ?1",
        params![release, detail, now],
    )?;
    conn.execute(
        "UPDATE nodes SET release_target = 0 WHERE id = ?1 AND release_running != ?2",
        params![current, release],
    )?;
    Ok(())
}

/// The next enrolled node (by id) neither told to run `release` nor running it.
pub(crate) fn next_node(conn: &Connection, release: u64) -> Result<Option<NodeId>, Error> {
    Ok(conn
        .query_row(
            "SELECT id FROM nodes WHERE public_key IS NOT NULL AND release_target != ?1 AND release_running != ?1
             ORDER BY id LIMIT 1",
            [release],
            |row| row.get(0),
        )
        .optional()?)
}

/// Moves `release`'s rollout on to `node`, told to run it from `now`.
pub(crate) fn tell_next(conn: &Connection, release: u64, node: NodeId, now: u64) -> Result<(), Error> {
    conn.execute(
        "UPDATE rollouts SET state = 'rolling', current = ?2, since = ?3, updated = ?3 WHERE release = ?1",
        params![release, node, now],
    )?;
    conn.execute("UPDATE nodes SET release_target = ?2, update_status = '' WHERE id = ?1", params![node, release])?;
    Ok(())
}

/// Marks `release`'s rollout done: every node runs it.
pub(crate) fn finish(conn: &Connection, release: u64, now: u64) -> Result<(), Error> {
    conn.execute(
        "UPDATE rollouts SET state = 'done', detail = 'every node runs it', updated = ?2 WHERE release = ?1",
        params![release, now],
    )?;
    Ok(())
}

/// Notes that `node` said something about its release at `said_at`; false (and nothing
/// noted) when what was noted last is newer.
pub(crate) fn said_newer(conn: &Connection, node: NodeId, said_at: u64) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("UPDATE nodes SET release_said_at = ?2 WHERE id = ?1 AND release_said_at <= ?2 RETURNING 1")?
        .query_row(params![node, said_at], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Sets the version name and release `node` runs, when they changed.
pub(crate) fn set_running(conn: &Connection, node: NodeId, name: &str, release: u64) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE nodes SET version = ?2, release_running = ?3 WHERE id = ?1 AND (version != ?2 OR release_running != ?3)",
    )?
    .execute(params![node, name, release])?;
    Ok(())
}

/// Sets what `node` last said about an update, when it changed.
pub(crate) fn set_update_status(conn: &Connection, node: NodeId, status: &str) -> Result<(), Error> {
    conn.prepare_cached("UPDATE nodes SET update_status = ?2 WHERE id = ?1 AND update_status != ?2")?
        .execute(params![node, status])?;
    Ok(())
}

/// The release `node` is told to run (0: none).
pub(crate) fn target(conn: &Connection, node: NodeId) -> Result<u64, Error> {
    Ok(conn
        .prepare_cached("SELECT release_target FROM nodes WHERE id = ?1")?
        .query_row([node], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The release the edge should hold for nodes that reach only it: the newest rollout's.
pub(crate) fn for_edge(conn: &Connection) -> Result<Option<u64>, Error> {
    Ok(conn
        .query_row(
            "SELECT release FROM rollouts WHERE state IN ('canary', 'rolling', 'done') ORDER BY started DESC LIMIT 1",
            [],
            |row| row.get(0),
        )
        .optional()?)
}

/// The newest rollout's release (0: none), whatever its state: what the rollout stream says.
pub(crate) fn newest_rollout(conn: &Connection) -> Result<u64, Error> {
    Ok(conn
        .query_row("SELECT release FROM rollouts ORDER BY started DESC, release DESC LIMIT 1", [], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The nodes told to run `release` (none for 0), sorted.
pub(crate) fn told_to_run(conn: &Connection, release: u64) -> Result<Vec<NodeId>, Error> {
    Ok(conn
        .prepare("SELECT id FROM nodes WHERE release_target = ?1 AND ?1 != 0 ORDER BY id")?
        .query_map([release], |row| row.get(0))?
        .collect::<Result<_, _>>()?)
}
