//! One user as Marzban and PasarGuard keep it (a database row or an API object, read alike)
//! and as Hearth takes it: which panel it is, the fields and what becomes of each, the panels'
//! dates, and the mapping of status, on-hold days and resets to Hearth's.

use serde_json::Value;

use crate::import::incoming::{Fate, Field, IncomingUser};

/// What becomes of each field of a Marzban or PasarGuard user.
pub(super) const FIELDS: &[Field] = &[
    Field { field: "username", fate: Fate::Kept, how: "the user's name" },
    Field {
        field: "proxy_settings.hysteria.auth",
        fate: Fate::Kept,
        how: "PasarGuard's Hysteria2 password; Marzban has none, so its users get a new one and move over by their old link",
    },
    Field { field: "data_limit", fate: Fate::Kept, how: "the traffic quota" },
    Field { field: "used_traffic", fate: Fate::Kept, how: "the traffic used" },
    Field { field: "expire", fate: Fate::Kept, how: "the expiry" },
    Field {
        field: "status",
        fate: Fate::Mapped,
        how: "disabled stays disabled; limited and expired come enabled (Hearth's limits hold them); on_hold starts on the first connection",
    },
    Field {
        field: "on_hold_expire_duration",
        fate: Fate::Kept,
        how: "the days from the first connection (rounded up)",
    },
    Field {
        field: "on_hold_timeout",
        fate: Fate::Dropped,
        how: "Hearth starts the days at the first connection only, never at a date: said per user",
    },
    Field {
        field: "data_limit_reset_strategy",
        fate: Fate::Mapped,
        how: "day, week, month as daily, weekly, monthly; year is none (said in the note)",
    },
    Field { field: "note", fate: Fate::Kept, how: "the note (cut at 1000 bytes, said per user)" },
    Field { field: "hwid_limit", fate: Fate::Kept, how: "the device limit" },
    Field {
        field: "created_at, sub_revoked_at",
        fate: Fate::Mapped,
        how: "used to check old links as the panel checks them, then not kept",
    },
    Field {
        field: "admin_id, group and inbound settings, lifetime_used_traffic, online_at",
        fate: Fate::Dropped,
        how: "imported users are the importing admin's; Hearth's groups decide which nodes a user reaches; it counts from the import",
    },
];

/// Which of the two panels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    Marzban,
    PasarGuard,
}

impl Flavor {
    /// The source's name (in `imported_from` and reports).
    pub(crate) fn source(self) -> &'static str {
        match self {
            Flavor::Marzban => "marzban",
            Flavor::PasarGuard => "pasarguard",
        }
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            Flavor::Marzban => "Marzban",
            Flavor::PasarGuard => "PasarGuard",
        }
    }
}

/// One user as both panels keep it, from a database row or an API object.
#[derive(Debug, Default)]
pub(super) struct Row {
    pub(super) id: i64,
    pub(super) username: String,
    pub(super) status: String,
    pub(super) used: u64,
    pub(super) data_limit: u64,
    /// Unix seconds, 0: never.
    pub(super) expire: u64,
    /// Unix seconds rounded up (a link made in the same second as the user is older).
    pub(super) created: u64,
    /// When the user's links were last revoked, rounded up; 0: never.
    pub(super) revoked: u64,
    pub(super) reset: String,
    pub(super) note: String,
    pub(super) on_hold_seconds: u64,
    /// When the panel would have started an on-hold user's days by itself (Unix seconds, 0:
    /// never).
    pub(super) on_hold_timeout: u64,
    pub(super) hysteria: Option<String>,
    pub(super) hwid_limit: Option<u32>,
}

/// Unix seconds of a date as the panels write it: `2025-02-01 10:00:00.123456` (SQLite,
/// MySQL), `2025-02-01T10:00:00.123456` or with `Z` (their API); rounded up when `ceil`.
pub(super) fn date(text: &str, ceil: bool) -> Option<u64> {
    let text = text.trim().trim_end_matches('Z').trim_end_matches("+00:00");
    let (day, time) = text.split_once(['T', ' '])?;
    let (time, fraction) = time.split_once('.').unwrap_or((time, ""));
    let at = crate::import::remnawave::unix_of(&format!("{day}T{time}Z"))?;
    let up = ceil && fraction.bytes().any(|b| b != b'0');
    Some(at + u64::from(up))
}

/// The Hysteria2 password in PasarGuard's `proxy_settings`.
pub(super) fn hysteria_auth(settings: &Value) -> Option<String> {
    let auth = settings.pointer("/hysteria/auth")?.as_str()?.trim();
    (!auth.is_empty()).then(|| auth.to_owned())
}

/// One user as Hearth takes it.
pub(super) fn user_of(row: Row, flavor: Flavor, aliases: Vec<String>) -> IncomingUser {
    let mut note = row.note.clone();
    let reset = match row.reset.as_str() {
        "day" => "daily",
        "week" => "weekly",
        "month" => "monthly",
        "year" => {
            let said = format!("reset yearly in {} (not kept)", flavor.title());
            note = if note.is_empty() { said } else { format!("{note} | {said}") };
            "none"
        }
        _ => "none",
    };
    let on_hold = row.status == "on_hold" && row.on_hold_seconds > 0;
    let mut mapped = Vec::new();
    if on_hold && row.on_hold_timeout > 0 {
        mapped.push(format!(
            "{} would have started its days on {} if it had not connected by then: here they start at its first connection",
            flavor.title(),
            crate::clock::civil_date(row.on_hold_timeout)
        ));
    }
    IncomingUser {
        id: match flavor {
            Flavor::Marzban => row.username.clone(),
            Flavor::PasarGuard => row.id.to_string(),
        },
        name: row.username,
        password: row.hysteria,
        quota: row.data_limit,
        used_down: row.used,
        expires_at: if on_hold { 0 } else { row.expire },
        days_from_first_use: if on_hold { row.on_hold_seconds.div_ceil(86_400) } else { 0 },
        enabled: row.status != "disabled",
        reset: reset.to_owned(),
        note,
        device_limit: row.hwid_limit,
        aliases,
        mapped,
        ..IncomingUser::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_as_both_panels_write_them() {
        assert_eq!(date("2025-02-01 10:00:00.123456", false), Some(1_738_404_000));
        assert_eq!(date("2025-02-01 10:00:00.123456", true), Some(1_738_404_001));
        assert_eq!(date("2025-02-01 10:00:00.000000", true), Some(1_738_404_000));
        assert_eq!(date("2025-02-01T10:00:00.123456Z", true), Some(1_738_404_001));
        assert_eq!(date("2027-01-01T00:00:00Z", false), Some(1_798_761_600));
        assert_eq!(date("2027-01-01 00:00:00", false), Some(1_798_761_600));
        assert_eq!(date("soon", false), None);
    }

    fn row() -> Row {
        Row {
            id: 7,
            username: "alice".to_owned(),
            status: "active".to_owned(),
            used: 3 << 29,
            data_limit: 50 << 30,
            expire: 1_798_761_600,
            reset: "month".to_owned(),
            note: "paid".to_owned(),
            hysteria: Some("hy2-alice".to_owned()),
            hwid_limit: Some(2),
            ..Row::default()
        }
    }

    /// A user comes with its limits and password, by its name in Marzban and its id in
    /// PasarGuard; a yearly reset is none, said in its note.
    #[test]
    fn a_row_comes_as_hearths_user() {
        let alice = user_of(row(), Flavor::Marzban, vec!["/sub/old".to_owned()]);
        assert_eq!((alice.id.as_str(), alice.name.as_str()), ("alice", "alice"));
        assert_eq!((alice.quota, alice.used_down, alice.expires_at), (50 << 30, 3 << 29, 1_798_761_600));
        assert_eq!((alice.reset.as_str(), alice.note.as_str(), alice.enabled), ("monthly", "paid", true));
        assert_eq!((alice.password.as_deref(), alice.device_limit), (Some("hy2-alice"), Some(2)));
        assert_eq!(alice.aliases, ["/sub/old"]);
        let yearly = user_of(Row { reset: "year".to_owned(), ..row() }, Flavor::PasarGuard, Vec::new());
        assert_eq!(yearly.id, "7");
        assert_eq!(
            (yearly.reset.as_str(), yearly.note.as_str()),
            ("none", "paid | reset yearly in PasarGuard (not kept)")
        );
        let disabled = user_of(Row { status: "disabled".to_owned(), ..row() }, Flavor::Marzban, Vec::new());
        assert!(!disabled.enabled);
        let limited = user_of(Row { status: "limited".to_owned(), ..row() }, Flavor::Marzban, Vec::new());
        assert!(limited.enabled, "the panel's reckoning of its quota, which Hearth redoes");
    }

    /// An on-hold user starts its days (rounded up) at its first connection, with no expiry;
    /// the date the panel would have started them by itself is said.
    #[test]
    fn an_on_hold_user_starts_at_its_first_connection() {
        let held =
            Row { status: "on_hold".to_owned(), on_hold_seconds: 86_401, on_hold_timeout: 1_767_225_600, ..row() };
        let bob = user_of(held, Flavor::Marzban, Vec::new());
        assert_eq!((bob.days_from_first_use, bob.expires_at, bob.enabled), (2, 0, true));
        assert_eq!(
            bob.mapped,
            [
                "Marzban would have started its days on 2026-01-01 if it had not connected by then: here they start at its first connection"
            ]
        );
        let never = user_of(Row { status: "on_hold".to_owned(), ..row() }, Flavor::Marzban, Vec::new());
        assert_eq!((never.days_from_first_use, never.expires_at), (0, 1_798_761_600), "no days to hold");
    }
}
