//! Traffic as the charts read it: per day (UTC) from the daily tables the usage reports fill.

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Error;

/// Whose traffic a series sums.
#[derive(Clone, Copy)]
pub(crate) enum Traffic {
    Everyone,
    User(u64),
    Node(u64),
}

/// One day's traffic: the day's start (Unix seconds) and the bytes each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Day {
    pub(crate) day: u64,
    pub(crate) up: u64,
    pub(crate) down: u64,
}

/// Traffic per day for the last `days` (1 to 366, default 30), oldest first, days without
/// traffic included as zeros.
pub(crate) fn daily(conn: &Connection, whose: Traffic, days: u64, now: u64) -> Result<Vec<Day>, Error> {
    let today = now / 86_400;
    let first = today + 1 - days;
    let (sql, id) = match whose {
        Traffic::Everyone => (
            "SELECT day, sum(up), sum(down) FROM usage_daily WHERE day >= ?1 AND ?2 IS NULL GROUP BY day ORDER BY day",
            None,
        ),
        Traffic::User(id) => {
            ("SELECT day, up, down FROM usage_daily WHERE day >= ?1 AND user_id = ?2 ORDER BY day", Some(id))
        }
        Traffic::Node(id) => {
            ("SELECT day, up, down FROM node_usage_daily WHERE day >= ?1 AND node_id = ?2 ORDER BY day", Some(id))
        }
    };
    let mut statement = conn.prepare_cached(sql)?;
    let rows: Vec<(u64, u64, u64)> = statement
        .query_map(rusqlite::params![first, id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(days as usize);
    let mut rows = rows.into_iter().peekable();
    for day in first..=today {
        let (up, down) = match rows.peek() {
            Some((d, up, down)) if *d == day => {
                let value = (*up, *down);
                rows.next();
                value
            }
            _ => (0, 0),
        };
        out.push(Day { day: day * 86_400, up, down });
    }
    Ok(out)
}

/// Everyone's traffic since `first_day` (a day number), up and down.
pub(crate) fn since(conn: &Connection, first_day: u64) -> Result<(u64, u64), Error> {
    Ok(conn.query_row(
        "SELECT coalesce(sum(up), 0), coalesce(sum(down), 0) FROM usage_daily WHERE day >= ?1",
        [first_day],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?)
}
