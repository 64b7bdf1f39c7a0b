//! An edit of a user: each field given is compared with what is stored, and only a field
//! whose value really changes is written, told (`user.changed`) and audited, old and new
//! (but for the note, whose words stay out of logs). A field left out is never touched, and
//! nothing is worked out from another field's absence: a PATCH of a note leaves the expiry,
//! the reset schedule and its next reset, the speed and the groups as they were.

use hearth_shared::wire::UserId;
use rusqlite::{Connection, params};
use serde_json::{Value, json};

use super::changes::Changes;
use super::groups::group_ids;
use super::user_create::named_like;
use super::user_input::{
    DeviceLimit, Mbps, UserInput, check_name, check_note, check_slow, expiry, parse_on_quota, parse_reset, reset_name,
};
use super::users::{UserView, get};
use crate::error::Error;
use crate::store::audit_log::{FieldChange, audit_edit};
use crate::store::events;

/// A field an edit changed, with what it was and became (`None` for the note).
struct Changed {
    field: &'static str,
    values: Option<(Value, Value)>,
}

/// What an edit changed, in the order the fields were looked at.
#[derive(Default)]
struct Edit(Vec<Changed>);

impl Edit {
    fn shown(&mut self, field: &'static str, from: impl Into<Value>, to: impl Into<Value>) {
        self.0.push(Changed { field, values: Some((from.into(), to.into())) });
    }

    fn hidden(&mut self, field: &'static str) {
        self.0.push(Changed { field, values: None });
    }

    /// The audit log's changes.
    fn audited(&self) -> Vec<FieldChange> {
        let one = |c: &Changed| match &c.values {
            Some((from, to)) => FieldChange::shown(c.field, from.clone(), to.clone()),
            None => FieldChange::hidden(c.field),
        };
        self.0.iter().map(one).collect()
    }

    /// The event's data: the fields, and what each was and became where it can be shown.
    fn data(&self, actor: &str) -> Value {
        let fields: Vec<&str> = self.0.iter().map(|c| c.field).collect();
        let changes: serde_json::Map<String, Value> = self
            .0
            .iter()
            .filter_map(|c| c.values.as_ref().map(|(from, to)| (c.field.to_owned(), json!({ "from": from, "to": to }))))
            .collect();
        json!({ "fields": fields, "changes": changes, "by": actor })
    }
}

/// What the view of a user does not show as stored.
struct Stored {
    duration: u64,
    speed: (Option<u64>, Option<u64>),
    on_quota: Option<String>,
    slow: u64,
    device_limit: Option<u32>,
    groups: Vec<i64>,
}

fn stored(conn: &Connection, id: UserId) -> Result<Stored, Error> {
    let (duration, up, down, on_quota, slow, device_limit) = conn.query_row(
        "SELECT duration_secs, speed_up, speed_down, on_quota, slow_kbps, device_limit FROM users WHERE id = ?1",
        [id],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)),
    )?;
    let mut groups: Vec<i64> = conn
        .prepare_cached("SELECT group_id FROM user_groups WHERE user_id = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    groups.sort_unstable();
    Ok(Stored { duration, speed: (up, down), on_quota, slow, device_limit, groups })
}

/// Changes a user's settings: what `input` gives and differs from what is stored; says what
/// must be published. An edit that changes nothing writes, tells and audits nothing.
pub(crate) fn update(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: UserId,
    input: &UserInput,
    now: u64,
) -> Result<(), Error> {
    let before = get(conn, id)?;
    let was = stored(conn, id)?;
    // The nodes the user reaches now: a change of groups republishes those it leaves too.
    changes.user(conn, id)?;
    let mut editing = Editing { conn, id, input, now, before, was, edit: Edit::default() };
    editing.name()?;
    editing.quota()?;
    editing.expiry()?;
    editing.reset()?;
    editing.note()?;
    editing.enabled()?;
    editing.speed_limit()?;
    editing.on_quota()?;
    editing.device_limit()?;
    editing.rule_set()?;
    editing.groups()?;
    let Editing { before, edit, .. } = editing;
    if edit.0.is_empty() {
        return Ok(());
    }
    conn.execute("UPDATE users SET updated = ?2 WHERE id = ?1", params![id, now])?;
    // Told before what follows from it (a user disabled, or over its new quota).
    events::user_event_of(conn, now, "user.changed", id, edit.data(actor))?;
    changes.user(conn, id)?;
    audit_edit(conn, now, actor, "user.update", &format!("user {id} ({})", before.name), &edit.audited())?;
    Ok(())
}

/// An edit under way: the user as it was (its view and what the view does not show), what
/// `input` gives, and what changed so far. Each step looks at one field (or two that go
/// together), in the order [`update`] takes them, and writes it only when it changes.
struct Editing<'a> {
    conn: &'a Connection,
    id: UserId,
    input: &'a UserInput,
    now: u64,
    before: UserView,
    was: Stored,
    edit: Edit,
}

impl Editing<'_> {
    fn name(&mut self) -> Result<(), Error> {
        let (conn, id, before) = (self.conn, self.id, &self.before);
        if let Some(name) = &self.input.name {
            let name = check_name(name, "user")?;
            if name != before.name {
                let tenant: i64 = conn.query_row("SELECT tenant FROM users WHERE id = ?1", [id], |row| row.get(0))?;
                if let Some(existing) = named_like(conn, &name, Some(id), tenant)? {
                    return Err(Error::conflict("conflict", format!("a user named {existing:?} already exists")));
                }
                conn.execute("UPDATE users SET name = ?2 WHERE id = ?1", params![id, name])
                    .map_err(|e| Error::from(e).unique(&format!("a user named {name:?}")))?;
                self.edit.shown("name", before.name.as_str(), name);
            }
        }
        Ok(())
    }

    fn quota(&mut self) -> Result<(), Error> {
        let (conn, id, before) = (self.conn, self.id, &self.before);
        if let Some(quota) = self.input.quota {
            if quota > i64::MAX as u64 {
                return Err(Error::invalid("bad_quota", "quota is too large"));
            }
            if quota != before.quota {
                conn.execute("UPDATE users SET quota = ?2 WHERE id = ?1", params![id, quota])?;
                self.edit.shown("quota", before.quota, quota);
            }
        }
        Ok(())
    }

    /// The expiry and the start-on-first-use duration, from `expires_at`, `days` and
    /// `start_on_first_use` together.
    fn expiry(&mut self) -> Result<(), Error> {
        let (conn, id, input, before, was) = (self.conn, self.id, self.input, &self.before, &self.was);
        if input.expires_at.is_some() || input.days.is_some() || input.start_on_first_use.is_some() {
            let (expires_at, duration) = expiry(input, self.now)?;
            // A user already started keeps its start; a new duration then counts from it.
            let (expires_at, duration) = if duration != 0 && before.started_at != 0 {
                (before.started_at + duration, duration)
            } else {
                (expires_at, duration)
            };
            // The expiry it has, given again, is no change (nor is the duration it came from).
            let same_date = input.days.is_none() && input.expires_at == Some(before.expires_at);
            if !same_date && (expires_at, duration) != (before.expires_at, was.duration) {
                conn.execute(
                    "UPDATE users SET expires_at = ?2, duration_secs = ?3 WHERE id = ?1",
                    params![id, expires_at, duration],
                )?;
                if expires_at != before.expires_at {
                    self.edit.shown("expires_at", before.expires_at, expires_at);
                }
                if duration != was.duration {
                    self.edit.shown("duration_days", was.duration / 86_400, duration / 86_400);
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), Error> {
        let (conn, id, before) = (self.conn, self.id, &self.before);
        if let Some(reset) = &self.input.reset {
            let reset = parse_reset(reset).ok_or_else(|| {
                Error::invalid("bad_reset", "reset must be none, daily, weekly, monthly or rolling30")
            })?;
            if reset_name(reset) != before.reset {
                conn.execute(
                    "UPDATE users SET reset = ?2, next_reset = ?3 WHERE id = ?1",
                    params![id, reset_name(reset), crate::clock::next_reset(reset, self.now)],
                )?;
                self.edit.shown("reset", before.reset.as_str(), reset_name(reset));
            }
        }
        Ok(())
    }

    fn note(&mut self) -> Result<(), Error> {
        if let Some(note) = &self.input.note {
            check_note(note)?;
            if *note != self.before.note {
                self.conn.execute("UPDATE users SET note = ?2 WHERE id = ?1", params![self.id, note])?;
                self.edit.hidden("note");
            }
        }
        Ok(())
    }

    fn enabled(&mut self) -> Result<(), Error> {
        if let Some(enabled) = self.input.enabled
            && enabled != self.before.enabled
        {
            self.conn.execute("UPDATE users SET enabled = ?2 WHERE id = ?1", params![self.id, enabled])?;
            self.edit.shown(if enabled { "enabled" } else { "disabled" }, self.before.enabled, enabled);
        }
        Ok(())
    }

    fn speed_limit(&mut self) -> Result<(), Error> {
        let (conn, id, was) = (self.conn, self.id, &self.was);
        if let Some(speed) = self.input.speed_limit {
            let speed = (speed.up.map(Mbps::stored), speed.down.map(Mbps::stored));
            if speed != was.speed {
                conn.execute(
                    "UPDATE users SET speed_up = ?2, speed_down = ?3 WHERE id = ?1",
                    params![id, speed.0, speed.1],
                )?;
                let mbps = |(up, down): (Option<u64>, Option<u64>)| json!({ "up": up.map(Mbps::from_stored), "down": down.map(Mbps::from_stored) });
                self.edit.shown("speed_limit", mbps(was.speed), mbps(speed));
            }
        }
        Ok(())
    }

    /// What a used-up quota does and the rate `slow` slows to; checked together once both
    /// are written (`slow` needs a rate).
    fn on_quota(&mut self) -> Result<(), Error> {
        let (conn, id, input, was) = (self.conn, self.id, self.input, &self.was);
        if let Some(on_quota) = &input.on_quota {
            let on_quota = parse_on_quota(on_quota)?;
            if on_quota != was.on_quota.as_deref() {
                conn.execute("UPDATE users SET on_quota = ?2 WHERE id = ?1", params![id, on_quota])?;
                self.edit.shown("on_quota", was.on_quota.as_deref().unwrap_or("group"), on_quota.unwrap_or("group"));
            }
        }
        if let Some(slow) = input.slow_speed
            && slow.stored() != was.slow
        {
            conn.execute("UPDATE users SET slow_kbps = ?2 WHERE id = ?1", params![id, slow.stored()])?;
            self.edit.shown("slow_speed", json!(Mbps::from_stored(was.slow)), json!(slow));
        }
        if input.on_quota.is_some() || input.slow_speed.is_some() {
            let (on_quota, slow): (Option<String>, u64) =
                conn.query_row("SELECT on_quota, slow_kbps FROM users WHERE id = ?1", [id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            check_slow(on_quota.as_deref(), Mbps::from_stored(slow))?;
        }
        Ok(())
    }

    fn device_limit(&mut self) -> Result<(), Error> {
        if let Some(limit) = self.input.device_limit {
            let stored = match limit {
                DeviceLimit::Group => None,
                DeviceLimit::Own(n) => Some(n),
            };
            if stored != self.was.device_limit {
                self.conn.execute("UPDATE users SET device_limit = ?2 WHERE id = ?1", params![self.id, stored])?;
                let shown = |limit: Option<u32>| limit.map_or_else(|| json!("group"), |n| json!(n));
                self.edit.shown("device_limit", shown(self.was.device_limit), shown(stored));
            }
        }
        Ok(())
    }

    fn rule_set(&mut self) -> Result<(), Error> {
        let (conn, id) = (self.conn, self.id);
        if let Some(name) = &self.input.rule_set {
            let set = super::routing::named(conn, name)?;
            let had: Option<u16> =
                conn.query_row("SELECT rule_set_id FROM users WHERE id = ?1", [id], |row| row.get(0))?;
            if set != had {
                conn.execute("UPDATE users SET rule_set_id = ?2 WHERE id = ?1", params![id, set])?;
                let name = |set: Option<u16>| -> Result<Value, Error> {
                    Ok(match set {
                        None => json!("group"),
                        Some(set) => {
                            json!(conn.query_row("SELECT name FROM rule_sets WHERE id = ?1", [set], |r| {
                                r.get::<_, String>(0)
                            })?)
                        }
                    })
                };
                self.edit.shown("rule_set", name(had)?, name(set)?);
            }
        }
        Ok(())
    }

    fn groups(&mut self) -> Result<(), Error> {
        let (conn, id) = (self.conn, self.id);
        if let Some(groups) = &self.input.groups {
            let mut ids = group_ids(conn, groups)?;
            ids.sort_unstable();
            ids.dedup();
            if ids != self.was.groups {
                conn.execute("DELETE FROM user_groups WHERE user_id = ?1", [id])?;
                for group in &ids {
                    conn.execute("INSERT INTO user_groups (user_id, group_id) VALUES (?1, ?2)", params![id, group])?;
                }
                let mut names = groups.clone();
                names.sort();
                names.dedup();
                self.edit.shown("groups", self.before.groups.clone(), names);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::store::users::{UserInput, get};
    use crate::testing::TestControl;

    /// What a field's edit may change besides itself (the status follows what it is made of).
    fn follows(field: &str) -> &'static [&'static str] {
        match field {
            "quota" | "enabled" => &["status"],
            "expires_at" | "days" => &["expires_at", "duration_days", "status"],
            "reset" => &["next_reset"],
            "device_limit" => &["devices"],
            "on_quota" | "slow_speed" => &["status"],
            _ => &[],
        }
    }

    /// A user's settings as a new user's input: each field there or left out.
    fn user() -> impl Strategy<Value = Value> {
        (
            prop::option::of(0u64..5 << 30),
            prop::option::of(1u64..400),
            any::<bool>(),
            prop::sample::select(vec!["none", "daily", "weekly", "monthly", "rolling30"]),
            "[a-z ]{0,20}",
            prop::option::of(0u32..5),
            prop::option::of((0u32..100, 0u32..100)),
            any::<bool>(),
        )
            .prop_map(|(quota, days, first_use, reset, note, devices, speed, friends)| {
                let mut user = json!({ "reset": reset, "note": note });
                if let Some(quota) = quota {
                    user["quota"] = quota.into();
                }
                if let Some(days) = days {
                    user["days"] = days.into();
                    if first_use {
                        user["start_on_first_use"] = true.into();
                    }
                }
                if let Some(devices) = devices {
                    user["device_limit"] = devices.into();
                }
                if let Some((up, down)) = speed {
                    user["speed_limit"] = json!({ "up": up, "down": down });
                }
                user["groups"] = if friends { json!(["default", "friends"]) } else { json!(["default"]) };
                user
            })
    }

    /// One field's edit, as the API takes it.
    fn edit() -> impl Strategy<Value = (String, Value)> {
        prop_oneof![
            "[a-z]{1,12}".prop_map(|n| ("name".to_owned(), json!(n))),
            (0u64..5 << 30).prop_map(|q| ("quota".to_owned(), json!(q))),
            (0u64..3).prop_map(|d| ("expires_at".to_owned(), json!(if d == 0 { 0 } else { 1_900_000_000 + d }))),
            (1u64..400).prop_map(|d| ("days".to_owned(), json!(d))),
            prop::sample::select(vec!["none", "daily", "weekly", "monthly", "rolling30"])
                .prop_map(|r| ("reset".to_owned(), json!(r))),
            "[a-z ]{0,20}".prop_map(|n| ("note".to_owned(), json!(n))),
            any::<bool>().prop_map(|e| ("enabled".to_owned(), json!(e))),
            (0u32..100, 0u32..100).prop_map(|(u, d)| ("speed_limit".to_owned(), json!({ "up": u, "down": d }))),
            prop::sample::select(vec!["cut", "group"]).prop_map(|o| ("on_quota".to_owned(), json!(o))),
            (0u32..5).prop_map(|n| ("device_limit".to_owned(), json!(n))),
            any::<bool>().prop_map(|f| ("groups".to_owned(), if f { json!(["friends"]) } else { json!(["default"]) })),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// For a random user and a random edit of one field, every other field of the user is
        /// as it was; an edit that gives a field the value it has changes nothing at all.
        #[test]
        fn an_edit_changes_only_the_field_it_edits(user in user(), (field, value) in edit()) {
            thread_local!(static CONTROL: TestControl = {
                let t = TestControl::new(false);
                let friends = crate::store::nodes::GroupInput { name: Some("friends".into()), ..Default::default() };
                t.app.db.write_blocking(|tx| crate::store::nodes::create_group(tx, "test", &friends, 1)).unwrap();
                t
            });
            CONTROL.with(|t| {
                let app = &t.app;
                let now = crate::app::now();
                let mut new: UserInput = serde_json::from_value(user.clone()).unwrap();
                new.name = Some(format!("u{}", rand_core::RngCore::next_u64(&mut rand_core::OsRng)));
                let id = app.db.write_blocking(|tx| crate::users::create(tx, &app.signer, "test", &new, now)).unwrap().id;
                let before = serde_json::to_value(app.db.read_blocking(|c| get(c, id)).unwrap()).unwrap();
                let events = || app.db.read_blocking(|c| Ok(c.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))?)).unwrap();
                let told = events();
                let patch: UserInput = serde_json::from_value(json!({ field.as_str(): value })).unwrap();
                let edited = app.db.write_blocking(|tx| crate::users::update(tx, &app.signer, "test", id, &patch, now + 5));
                prop_assume!(edited.is_ok());
                let after = serde_json::to_value(app.db.read_blocking(|c| get(c, id)).unwrap()).unwrap();
                let own: Vec<&str> = match field.as_str() {
                    "days" => vec!["expires_at", "duration_days"],
                    "speed_limit" | "device_limit" | "name" | "quota" | "reset" | "note" | "enabled" | "on_quota" | "groups" | "expires_at" => vec![field.as_str()],
                    other => panic!("{other}"),
                };
                for (key, was) in before.as_object().unwrap() {
                    if key == "updated" || own.contains(&key.as_str()) || follows(&field).contains(&key.as_str()) {
                        continue;
                    }
                    prop_assert_eq!(&after[key], was, "{} changed when only {} was edited to {}", key, field, value);
                }
                // The same value again: nothing written, told or audited.
                let told_now = events();
                let again = serde_json::to_value(app.db.read_blocking(|c| get(c, id)).unwrap()).unwrap();
                let same: Value = match field.as_str() {
                    "days" => return Ok(()),
                    "speed_limit" => json!({ "up": again["speed_limit"]["up"], "down": again["speed_limit"]["down"] }),
                    _ => again[field.as_str()].clone(),
                };
                let same: UserInput = serde_json::from_value(json!({ field.as_str(): same })).unwrap();
                app.db.write_blocking(|tx| crate::users::update(tx, &app.signer, "test", id, &same, now + 10)).unwrap();
                let after_same = serde_json::to_value(app.db.read_blocking(|c| get(c, id)).unwrap()).unwrap();
                prop_assert_eq!(after_same, again, "{} given the value it had changed something", field);
                prop_assert_eq!(events(), told_now, "{} given the value it had was told", field);
                prop_assert!(told_now >= told);
                Ok(())
            })?;
        }
    }

    /// The panel's regressions, named: a user counted from its first connection, and one
    /// with an ordinary expiry, each given a note, keep their expiry; the note's change is
    /// what is told and audited, without its words.
    #[test]
    fn a_note_added_leaves_the_expiry_as_it_was() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        for user in [
            json!({ "name": "first-use", "days": 30, "start_on_first_use": true }),
            json!({ "name": "dated", "days": 30 }),
        ] {
            let input: UserInput = serde_json::from_value(user).unwrap();
            let id = app.db.write_blocking(|tx| crate::users::create(tx, &app.signer, "test", &input, now)).unwrap().id;
            let before = app.db.read_blocking(|c| get(c, id)).unwrap();
            let note: UserInput = serde_json::from_value(json!({ "note": "grandma's phone" })).unwrap();
            app.db.write_blocking(|tx| crate::users::update(tx, &app.signer, "admin", id, &note, now + 60)).unwrap();
            let after = app.db.read_blocking(|c| get(c, id)).unwrap();
            assert_eq!(
                (after.expires_at, after.duration_days, after.status.as_str()),
                (before.expires_at, before.duration_days, before.status.as_str())
            );
            assert_eq!(after.note, "grandma's phone");
            let (detail, data): (String, String) = app
                .db
                .read_blocking(|c| {
                    Ok((
                        c.query_row("SELECT detail FROM audit ORDER BY id DESC LIMIT 1", [], |r| r.get(0))?,
                        c.query_row(
                            "SELECT data FROM events WHERE kind = 'user.changed' ORDER BY id DESC LIMIT 1",
                            [],
                            |r| r.get(0),
                        )?,
                    ))
                })
                .unwrap();
            assert_eq!(detail, "note", "only the note, and not its words");
            let data: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(data["fields"], json!(["note"]));
            assert_eq!(data["changes"], json!({}));
            assert!(!data.to_string().contains("grandma"));
        }
    }
}
