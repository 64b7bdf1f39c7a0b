//! The edges control publishes to, and how far each has come.
//!
//! Every stream carries `seq`, the order of its last change (see [`next_seq`]); an edge holds
//! every stream as control has it up to its `pushed`, so what it lacks is `seq > pushed`,
//! whichever process (serve, the CLI, a restore) made the change. An edge added later starts
//! at 0 and gets everything; removing one touches no other.
//!
//! The edge named [`MAIN`] is the one of `edge_url` (control.toml, `HEARTH_EDGE_URL` or the
//! panel's settings) and uses `edge.toml`'s push token and API prefix; the owner adds others,
//! each with its own.

use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Error;

/// The name of the edge of `edge_url`.
pub(crate) const MAIN: &str = "main";
/// The most edges control publishes to.
pub(crate) const MAX_EDGES: usize = 16;

pub(crate) use hearth_shared::wire::LinkState;

/// The state the owner named: active, blocked or retired.
pub(crate) fn check_state(text: &str) -> Result<LinkState, Error> {
    LinkState::from_name(text)
        .ok_or_else(|| Error::invalid("bad_state", "an edge's links are active, blocked or retired"))
}

/// One edge as control keeps it (the push token never leaves control).
#[derive(Clone, Debug)]
pub(crate) struct Edge {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) url: String,
    /// Its API prefix (`None`: edge.toml's).
    pub(crate) api_prefix: Option<String>,
    /// Its push token (`None`: edge.toml's).
    pub(crate) push_token: Option<String>,
    /// The public base of its links (`None`: its URL and the sub prefix).
    pub(crate) link_base: Option<String>,
    pub(crate) state: LinkState,
    pub(crate) position: i64,
    /// Every stream with `seq` up to this is at the edge as control has it.
    pub(crate) pushed: i64,
    /// Its usage queue's cursor.
    pub(crate) drained: i64,
    /// When its usage queue was last taken.
    pub(crate) last_drain: u64,
    /// The release it was handed.
    pub(crate) release: i64,
    /// The archive version it holds.
    pub(crate) archive: i64,
    pub(crate) added: u64,
    pub(crate) last_push: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) error_since: u64,
    /// A peer the edge does not trust that sends it forwarding headers, as it last said.
    pub(crate) untrusted_forwarding: Option<String>,
    /// Since when its disk has been full (0: it is not, as far as control knows).
    pub(crate) disk_full: u64,
}

const COLUMNS: &str = "id, name, url, api_prefix, push_token, link_base, state, position, pushed, drained, release, \
                       archive, added, last_push, last_error, error_since, last_drain, untrusted_forwarding, \
                       disk_full";

fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Edge> {
    Ok(Edge {
        id: row.get(0)?,
        name: row.get(1)?,
        url: row.get(2)?,
        api_prefix: row.get(3)?,
        push_token: row.get(4)?,
        link_base: row.get(5)?,
        state: LinkState::from_name(&row.get::<_, String>(6)?).unwrap_or(LinkState::Active),
        position: row.get(7)?,
        pushed: row.get(8)?,
        drained: row.get(9)?,
        release: row.get(10)?,
        archive: row.get(11)?,
        added: row.get(12)?,
        last_push: row.get(13)?,
        last_error: row.get(14)?,
        error_since: row.get(15)?,
        last_drain: row.get(16)?,
        untrusted_forwarding: row.get(17)?,
        disk_full: row.get(18)?,
    })
}

/// Every edge, in the owner's order.
pub(crate) fn list(conn: &Connection) -> Result<Vec<Edge>, Error> {
    let mut query = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM edges ORDER BY position, id"))?;
    Ok(query.query_map([], row)?.collect::<Result<_, _>>()?)
}

/// One edge.
pub(crate) fn get(conn: &Connection, id: i64) -> Result<Option<Edge>, Error> {
    let mut query = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM edges WHERE id = ?1"))?;
    Ok(query.query_row([id], row).optional()?)
}

/// One edge by name.
pub(crate) fn by_name(conn: &Connection, name: &str) -> Result<Option<Edge>, Error> {
    let mut query = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM edges WHERE name = ?1"))?;
    Ok(query.query_row([name], row).optional()?)
}

/// The `seq` of the next change to a stream (the caller writes it in the same transaction).
pub(crate) fn next_seq(conn: &Connection) -> Result<i64, Error> {
    Ok(conn.prepare_cached("SELECT ifnull(max(seq), 0) + 1 FROM streams")?.query_row([], |row| row.get(0))?)
}

/// Keeps what edge `id` said in its last answer to a push of a peer it does not trust that
/// sends it forwarding headers (`None`: nothing).
pub(crate) fn said_forwarding(conn: &Connection, id: i64, peer: Option<&str>) -> Result<(), Error> {
    conn.prepare_cached("UPDATE edges SET untrusted_forwarding = ?2 WHERE id = ?1 AND untrusted_forwarding IS NOT ?2")?
        .execute(rusqlite::params![id, peer])?;
    Ok(())
}

/// Whether edge `id` said, in its last answer to a push, that it keeps credential deltas
/// ([`hearth_shared::wire::DELTAS_HEADER`]).
pub(crate) fn takes_deltas(conn: &Connection, id: i64) -> Result<bool, Error> {
    let takes = conn.prepare_cached("SELECT deltas FROM edges WHERE id = ?1")?.query_row([id], |row| row.get(0));
    Ok(takes.optional()?.unwrap_or(false))
}

/// Keeps what edge `id` said of deltas in its answer to a push. The first time it says it
/// keeps them, every delta stream is queued again: they were held back from it until then.
pub(crate) fn said_deltas(conn: &Connection, id: i64, takes: bool) -> Result<(), Error> {
    let changed = conn
        .prepare_cached("UPDATE edges SET deltas = ?2 WHERE id = ?1 AND deltas != ?2")?
        .execute(params![id, takes])?;
    if changed > 0 && takes {
        let mut names: Vec<String> = conn
            .prepare("SELECT name FROM streams WHERE name >= 'creds-delta/' AND name < 'creds-delta0'")?
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut queue = conn.prepare_cached("UPDATE streams SET seq = ?2 WHERE name = ?1")?;
        for name in names {
            queue.execute(params![name, next_seq(conn)?])?;
        }
    }
    Ok(())
}

/// Whether every edge keeps credential deltas: control signs them only then (an edge from
/// before them would serve nodes whole sets that deltas no longer renew).
pub(crate) fn all_take_deltas(conn: &Connection) -> Result<bool, Error> {
    let behind: bool =
        conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM edges WHERE deltas = 0)")?.query_row([], |row| row.get(0))?;
    Ok(!behind)
}

/// Changes an edge lacks: streams changed after its `pushed`.
pub(crate) fn pending(conn: &Connection, pushed: i64) -> Result<u64, Error> {
    Ok(conn.prepare_cached("SELECT count(*) FROM streams WHERE seq > ?1")?.query_row([pushed], |row| row.get(0))?)
}

/// A new edge, from the owner.
pub(crate) struct NewEdge {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) api_prefix: String,
    pub(crate) push_token: String,
    /// The public base of its links (its URL and the sub prefix when not given).
    pub(crate) link_base: String,
}

/// The longest edge name, in characters.
pub(crate) const MAX_EDGE_NAME: usize = 32;
/// The longest push token, in bytes.
pub(crate) const MAX_PUSH_TOKEN: usize = 256;

/// An edge's name: 1 to [`MAX_EDGE_NAME`] lowercase letters, digits and `-` (it names the edge
/// in the metrics too).
pub(crate) fn check_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    let fine = !name.is_empty()
        && name.len() <= MAX_EDGE_NAME
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !fine {
        return Err(Error::invalid(
            "bad_edge_name",
            format!("an edge's name is 1 to {MAX_EDGE_NAME} lowercase letters, digits or '-'"),
        ));
    }
    Ok(name.to_owned())
}

/// A URL control or apps reach an edge at.
pub(crate) fn check_url(field: &'static str, url: &str) -> Result<String, Error> {
    crate::config::check_url(field, url)
        .ok()
        .filter(|url| url.len() <= 512 && !url.contains(['?', '#']))
        .ok_or_else(|| Error::invalid("bad_url", format!("{field} must be an http:// or https:// URL without ? or #")))
}

impl NewEdge {
    /// Checks what the owner gave: names, URLs, the prefix and token each edge's own.
    pub(crate) fn checked(
        name: &str,
        url: &str,
        api_prefix: &str,
        push_token: &str,
        link_base: Option<&str>,
        sub_prefix: &str,
    ) -> Result<NewEdge, Error> {
        let name = check_name(name)?;
        if name == MAIN {
            return Err(Error::invalid(
                "bad_edge_name",
                "`main` is the edge of edge_url (set it in Settings); name this one otherwise",
            ));
        }
        crate::config::check_prefix("api_prefix", api_prefix)
            .map_err(|e| Error::invalid("bad_api_prefix", e.to_string()))?;
        let token_fine =
            (16..=MAX_PUSH_TOKEN).contains(&push_token.len()) && push_token.bytes().all(|b| b.is_ascii_graphic());
        if !token_fine {
            return Err(Error::invalid(
                "bad_push_token",
                format!("the push token is 16 to {MAX_PUSH_TOKEN} printable characters without spaces"),
            ));
        }
        let url = check_url("url", url)?;
        let link_base = match link_base.filter(|b| !b.trim().is_empty()) {
            Some(base) => check_url("link_base", base)?,
            None => format!("{url}/{sub_prefix}"),
        };
        Ok(NewEdge { name, url, api_prefix: api_prefix.to_owned(), push_token: push_token.to_owned(), link_base })
    }
}

fn taken(conn: &Connection, name: &str, url: &str, except: i64) -> Result<(), Error> {
    let clash: Option<String> = conn
        .prepare_cached("SELECT name FROM edges WHERE (name = ?1 OR url = ?2) AND id != ?3")?
        .query_row(params![name, url, except], |row| row.get(0))
        .optional()?;
    match clash {
        Some(other) if other == name => Err(Error::conflict("conflict", format!("an edge is already named {name}"))),
        Some(other) => Err(Error::conflict("edge_url_taken", format!("edge {other} has that URL already"))),
        None => Ok(()),
    }
}

/// Adds an edge after the others; it starts with nothing and is brought up to date.
pub(crate) fn add(conn: &Connection, edge: &NewEdge, now: u64) -> Result<i64, Error> {
    let count: i64 = conn.query_row("SELECT count(*) FROM edges", [], |row| row.get(0))?;
    if usize::try_from(count).unwrap_or(usize::MAX) >= MAX_EDGES {
        return Err(Error::invalid("too_many_edges", format!("at most {MAX_EDGES} edges")));
    }
    taken(conn, &edge.name, &edge.url, 0)?;
    conn.execute(
        "INSERT INTO edges (name, url, api_prefix, push_token, link_base, position, added)
         VALUES (?1, ?2, ?3, ?4, ?5, (SELECT ifnull(max(position), 0) + 1 FROM edges), ?6)",
        params![edge.name, edge.url, edge.api_prefix, edge.push_token, edge.link_base, now],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Removes an edge: control stops publishing to it; nothing else changes.
pub(crate) fn remove(conn: &Connection, id: i64) -> Result<bool, Error> {
    Ok(conn.execute("DELETE FROM edges WHERE id = ?1", [id])? > 0)
}

/// Marks an edge's links active, blocked or retired.
pub(crate) fn set_state(conn: &Connection, id: i64, state: LinkState) -> Result<(), Error> {
    conn.execute("UPDATE edges SET state = ?2 WHERE id = ?1", params![id, state.as_str()])?;
    Ok(())
}

/// Puts an edge at `position` in the owner's order (the others keep theirs, ties by age).
pub(crate) fn set_position(conn: &Connection, id: i64, position: i64) -> Result<(), Error> {
    conn.execute("UPDATE edges SET position = ?2 WHERE id = ?1", params![id, position])?;
    Ok(())
}

/// Changes an edge's public link base (`None`: its URL and the sub prefix).
pub(crate) fn set_link_base(conn: &Connection, id: i64, base: Option<&str>) -> Result<(), Error> {
    conn.execute("UPDATE edges SET link_base = ?2 WHERE id = ?1", params![id, base])?;
    Ok(())
}

/// Sets since when an edge has failed (made the primary again by the owner: a whole failover
/// period from `since`).
pub(crate) fn set_error_since(conn: &Connection, id: i64, since: u64) -> Result<(), Error> {
    conn.execute("UPDATE edges SET error_since = ?2 WHERE id = ?1", params![id, since])?;
    Ok(())
}

/// A stream an edge lacks (its `seq` past the edge's position), as a push reads it.
pub(crate) struct Lacking {
    pub(crate) name: String,
    pub(crate) version: u64,
    /// `None`: the stream was deleted.
    pub(crate) envelope: Option<Vec<u8>>,
    pub(crate) seq: i64,
    /// Set aside for this edge at this version (it refused it): not to be sent again.
    pub(crate) held: bool,
}

/// The streams `edge` lacks past `pushed`, at most `limit`, in the order of their change,
/// each handed to `each` as it is read until `each` says to stop (returns false): a push that
/// has its fill reads no more envelopes.
pub(crate) fn lacking(
    conn: &Connection,
    edge: i64,
    pushed: i64,
    limit: usize,
    mut each: impl FnMut(Lacking) -> bool,
) -> Result<(), Error> {
    let mut query = conn.prepare_cached(
        "SELECT s.name, s.version, s.envelope, s.seq,
                EXISTS (SELECT 1 FROM outbox_held h WHERE h.edge = ?1 AND h.stream = s.name AND h.version = s.version)
         FROM streams s WHERE s.seq > ?2 ORDER BY s.seq LIMIT ?3",
    )?;
    let rows = query.query_map(params![edge, pushed, limit], |row| {
        Ok(Lacking {
            name: row.get(0)?,
            version: row.get(1)?,
            envelope: row.get(2)?,
            seq: row.get(3)?,
            held: row.get(4)?,
        })
    })?;
    for row in rows {
        if !each(row?) {
            break;
        }
    }
    Ok(())
}

/// Makes the [`MAIN`] edge match `url` (the `edge_url` in force) and `base` (the link base in
/// force): added first in the order when missing, removed when there is none; a new URL is a
/// new edge, brought up to date from nothing.
pub(crate) fn sync_main(conn: &Connection, url: Option<&str>, base: &str, now: u64) -> Result<(), Error> {
    if url.is_some() {
        conn.execute("UPDATE edges SET link_base = ?1 WHERE name = ?2", params![base, MAIN])?;
    }
    let current = by_name(conn, MAIN)?;
    match (current, url) {
        (None, None) => {}
        (Some(edge), None) => {
            remove(conn, edge.id)?;
        }
        (Some(edge), Some(url)) if edge.url == url => {}
        (Some(edge), Some(url)) => {
            taken(conn, MAIN, url, edge.id)?;
            conn.execute(
                "UPDATE edges SET url = ?2, pushed = 0, drained = 0, last_drain = 0, release = 0, archive = 0, last_push = 0,
                   last_error = NULL, error_since = 0 WHERE id = ?1",
                params![edge.id, url],
            )?;
            conn.execute("DELETE FROM outbox_held WHERE edge = ?1", [edge.id])?;
        }
        (None, Some(url)) => {
            taken(conn, MAIN, url, 0)?;
            conn.execute(
                "INSERT INTO edges (name, url, link_base, position, added)
                 VALUES (?1, ?2, ?3, (SELECT ifnull(min(position), 1) - 1 FROM edges), ?4)",
                params![MAIN, url, base, now],
            )?;
        }
    }
    Ok(())
}

/// After a push the edge took: it holds everything up to `seq`, and what it took of `streams`
/// is no longer set aside.
pub(crate) fn pushed(conn: &Connection, id: i64, seq: i64, streams: &[String], now: u64) -> Result<(), Error> {
    let told: Option<(String, u64)> = conn
        .prepare_cached("SELECT name, failing_told FROM edges WHERE id = ?1 AND failing_told > 0")?
        .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    if let Some((name, since)) = told {
        let data = serde_json::json!({ "edge": { "id": id, "name": name }, "failing_since": since });
        crate::store::events::emit(conn, now, "edge.recovered", &format!("edge {name}"), &data)?;
    }
    conn.prepare_cached(
        "UPDATE edges SET pushed = max(pushed, ?2), last_push = ?3, last_error = NULL, error_since = 0, failing_told = 0,
                          disk_full = 0
         WHERE id = ?1",
    )?
    .execute(params![id, seq, now])?;
    let mut held = conn.prepare_cached("DELETE FROM outbox_held WHERE edge = ?1 AND stream = ?2")?;
    for name in streams {
        held.execute(params![id, name])?;
    }
    Ok(())
}

/// After a failed attempt: the error, and since when the edge has been failing. An edge whose
/// disk is full is told at once (`edge.disk_full`, once until a push goes through again).
pub(crate) fn failed(conn: &Connection, id: i64, error: &str, now: u64) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE edges SET last_error = ?2, error_since = iif(error_since = 0, ?3, error_since) WHERE id = ?1",
    )?
    .execute(params![id, error, now])?;
    if error.contains(hearth_shared::wire::EDGE_DISK_FULL) {
        let newly: Option<String> = conn
            .prepare_cached("UPDATE edges SET disk_full = ?2 WHERE id = ?1 AND disk_full = 0 RETURNING name")?
            .query_row(params![id, now], |row| row.get(0))
            .optional()?;
        if let Some(name) = newly {
            let data = serde_json::json!({ "edge": { "id": id, "name": name }, "error": error });
            crate::store::events::emit(conn, now, "edge.disk_full", &format!("edge {name}"), &data)?;
        }
    }
    Ok(())
}

/// Sets a stream the edge refused aside at `version`: the rest goes on, and a newer version
/// goes out as usual (and clears it once taken).
pub(crate) fn hold(
    conn: &Connection,
    id: i64,
    stream: &str,
    version: u64,
    reason: &str,
    now: u64,
) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO outbox_held (edge, stream, version, reason, held_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (edge, stream) DO UPDATE SET version = excluded.version, reason = excluded.reason,
           held_at = excluded.held_at",
        params![id, stream, version, reason, now],
    )?;
    Ok(())
}

/// After a usage drain: its cursor, and when.
pub(crate) fn drained(conn: &Connection, id: i64, cursor: i64, now: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE edges SET drained = ?2, last_drain = ?3 WHERE id = ?1")?
        .execute(params![id, cursor, now])?;
    Ok(())
}

/// Records a per-edge marker: the release handed, the archive held.
pub(crate) fn set_marker(conn: &Connection, id: i64, marker: Marker, value: i64) -> Result<(), Error> {
    let column = match marker {
        Marker::Release => "release",
        Marker::Archive => "archive",
    };
    conn.execute(&format!("UPDATE edges SET {column} = ?2 WHERE id = ?1"), params![id, value])?;
    Ok(())
}

/// What [`set_marker`] records.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Marker {
    Release,
    Archive,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::now;

    fn user(t: &crate::testing::TestControl, name: &str) {
        let app = &t.app;
        let input = crate::store::users::UserInput { name: Some(name.into()), ..Default::default() };
        app.db.write_blocking(|tx| crate::users::create(tx, &app.signer, "test", &input, now())).unwrap();
    }

    fn lacks(t: &crate::testing::TestControl, name: &str) -> u64 {
        t.app
            .db
            .read_blocking(|c| {
                let edge = by_name(c, name)?.expect("the edge");
                pending(c, edge.pushed)
            })
            .unwrap()
    }

    #[test]
    fn each_edge_gets_what_it_lacks_and_a_new_one_gets_everything() {
        let t = crate::testing::TestControl::new(false);
        user(&t, "alice");
        let db = &t.app.db;
        db.write_blocking(|tx| sync_main(tx, Some("https://edge.example"), "https://edge.example/s", now())).unwrap();
        assert_eq!(lacks(&t, MAIN), 1, "a new edge gets every stream");
        let edge = db.read_blocking(|c| by_name(c, MAIN)).unwrap().unwrap();
        let to = db.read_blocking(|c| Ok(c.query_row("SELECT max(seq) FROM streams", [], |r| r.get(0))?)).unwrap();
        db.write_blocking(|tx| pushed(tx, edge.id, to, &[], now())).unwrap();
        assert_eq!(lacks(&t, MAIN), 0);
        db.write_blocking(|tx| sync_main(tx, Some("https://edge.example"), "https://edge.example/s", now())).unwrap();
        assert_eq!(lacks(&t, MAIN), 0, "the same edge again: nothing more");

        let mirror = NewEdge {
            name: "mirror".into(),
            url: "https://mirror.example".into(),
            api_prefix: "p".repeat(16),
            push_token: "t".repeat(32),
            link_base: "https://mirror.example/s".into(),
        };
        db.write_blocking(|tx| add(tx, &mirror, now())).unwrap();
        assert_eq!(lacks(&t, "mirror"), 1, "an edge added later gets everything");
        user(&t, "bob");
        assert_eq!((lacks(&t, MAIN), lacks(&t, "mirror")), (1, 2), "a change reaches every edge's queue");
        let clash = db.write_blocking(|tx| add(tx, &mirror, now())).unwrap_err();
        assert!(matches!(clash, Error::Conflict { .. }), "{clash}");

        // The main edge moves: the new one is brought up from nothing; none: it goes.
        db.write_blocking(|tx| sync_main(tx, Some("https://other.example"), "https://other.example/s", now())).unwrap();
        assert_eq!(lacks(&t, MAIN), 2);
        db.write_blocking(|tx| sync_main(tx, None, "", now())).unwrap();
        let names: Vec<String> = db.read_blocking(list).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["mirror"], "removing one edge leaves the others");
        assert_eq!(lacks(&t, "mirror"), 2);
    }
}
