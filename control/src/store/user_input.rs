//! A user's settings as the API and CLI give them (speeds, device limit, expiry, reset
//! schedule), and the checks they pass before they are stored; also the check of a name, which
//! every named thing (a node, group, token, the owner's login) passes.

use hearth_shared::wire::ResetStrategy;
use hearth_shared::{Rate, RateError};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The longest name of anything (a user, node, group, token, the owner's login), in
/// characters.
pub(crate) const MAX_NAME: usize = 64;

/// The longest note on a user, in bytes.
pub(crate) const MAX_NOTE: usize = 1000;

/// A user's settings as the API and CLI give them; every field is optional on a change.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserInput {
    /// The name shown in the panel and in apps (1 to 64 characters).
    pub(crate) name: Option<String>,
    /// Traffic quota in bytes, up and down together (0: unlimited).
    pub(crate) quota: Option<u64>,
    /// Expiry as Unix seconds (0: never). Conflicts with `days`.
    pub(crate) expires_at: Option<u64>,
    /// Valid for this many days from now, or from first use with `start_on_first_use`.
    pub(crate) days: Option<u64>,
    /// Start the `days` at the first connection instead of now.
    pub(crate) start_on_first_use: Option<bool>,
    /// When used traffic goes back to zero: none, daily, weekly, monthly, rolling30.
    pub(crate) reset: Option<String>,
    /// A note for the operator.
    pub(crate) note: Option<String>,
    /// The groups (by name) whose nodes the user gets; new users default to `default`.
    pub(crate) groups: Option<Vec<String>>,
    /// Whether the user may connect.
    pub(crate) enabled: Option<bool>,
    /// Speed limit in Mbit/s each way: a number (0: none) or null (its groups' default, also
    /// for a side left out); absent: unchanged (a new user takes its groups' default).
    pub(crate) speed_limit: Option<SpeedInput>,
    /// When the quota is used up: `cut` (the user can no longer connect), `slow` (slowed
    /// to `slow_speed`) or `group` (what its groups say; the default).
    pub(crate) on_quota: Option<String>,
    /// The rate a user whose quota is used up is slowed to, in Mbit/s.
    pub(crate) slow_speed: Option<Mbps>,
    /// How many devices may be connected at once over all nodes: a number (0: no limit) or
    /// `"group"` (its groups' default; what a new user takes).
    pub(crate) device_limit: Option<DeviceLimit>,
    /// The rule set (by name) the user's traffic is routed by on every node (empty: its
    /// groups'; the owner's alone to set).
    pub(crate) rule_set: Option<String>,
    /// Whose names a new user's must differ from: a reseller's own (their id), or everyone
    /// else's (0). Set by control for a reseller's new users, never from a request.
    #[serde(skip)]
    pub(crate) tenant: i64,
}

/// A user's own device limit, or its groups'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceLimit {
    /// Its groups' default.
    Group,
    /// Its own: at most this many (0: no limit).
    Own(u32),
}

/// The most devices a limit names (a number above is surely a mistake).
pub(crate) const MAX_DEVICES: u32 = 1000;

impl DeviceLimit {
    /// As stored: `NULL` for the groups'.
    pub(super) fn stored(self) -> Option<u32> {
        match self {
            DeviceLimit::Group => None,
            DeviceLimit::Own(n) => Some(n),
        }
    }
}

impl<'de> Deserialize<'de> for DeviceLimit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DeviceLimit, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(u64),
            Word(String),
        }
        match Given::deserialize(deserializer)? {
            Given::Number(n) if n <= u64::from(MAX_DEVICES) => Ok(DeviceLimit::Own(n as u32)),
            Given::Word(word) if word == "group" => Ok(DeviceLimit::Group),
            _ => Err(serde::de::Error::custom(format!(
                "device_limit is a number of devices from 0 (no limit) to {MAX_DEVICES}, or \"group\""
            ))),
        }
    }
}

/// A user's own speed limit, Mbit/s each way; `None`: its groups' default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpeedInput {
    #[serde(default)]
    pub(crate) up: Option<Mbps>,
    #[serde(default)]
    pub(crate) down: Option<Mbps>,
}

/// A rate as the API gives and shows it: a number of Mbit/s in JSON (fractions allowed, to
/// 0.001; see [`Rate::parse_mbps`]), kbit/s in the database ([`Mbps::stored`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mbps(pub(crate) Rate);

impl Mbps {
    /// From Mbit/s; refuses what is not a rate from 0 to 100,000 Mbit/s.
    pub(crate) fn parse(mbps: f64) -> Result<Mbps, RateError> {
        Rate::parse_mbps(mbps).map(Mbps)
    }

    /// As the database stores it, in kbit/s.
    pub(crate) const fn stored(self) -> u64 {
        self.0.kbps()
    }

    /// From the database's kbit/s.
    pub(crate) const fn from_stored(kbps: u64) -> Mbps {
        Mbps(Rate::from_kbps(kbps))
    }
}

impl Serialize for Mbps {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0.mbps_f64())
    }
}

impl<'de> Deserialize<'de> for Mbps {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Mbps, D::Error> {
        Mbps::parse(f64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// `on_quota` as stored: `None` for the groups' choice.
pub(crate) fn parse_on_quota(value: &str) -> Result<Option<&'static str>, Error> {
    match value {
        "group" => Ok(None),
        "cut" => Ok(Some("cut")),
        "slow" => Ok(Some("slow")),
        _ => Err(Error::invalid("bad_on_quota", "on_quota must be cut, slow or group")),
    }
}

/// Checks a user's name.
pub(crate) fn check_name(name: &str, what: &str) -> Result<String, Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "bad_name",
            format!("a {what} name must be 1 to {MAX_NAME} characters, without control characters"),
        ));
    }
    Ok(name.to_owned())
}

pub(super) fn check_note(note: &str) -> Result<(), Error> {
    if note.len() > MAX_NOTE {
        return Err(Error::invalid("bad_note", format!("a note must be at most {MAX_NOTE} bytes")));
    }
    Ok(())
}

/// A slowed user (or group) needs a rate to be slowed to.
pub(crate) fn check_slow(on_quota: Option<&str>, slow: Mbps) -> Result<(), Error> {
    if on_quota == Some("slow") && slow.0.is_zero() {
        return Err(Error::invalid("bad_slow_speed", "on_quota slow needs a slow_speed above 0"));
    }
    Ok(())
}

/// Expiry and start-on-first-use duration from `expires_at` / `days` / `start_on_first_use`.
pub(super) fn expiry(input: &UserInput, now: u64) -> Result<(u64, u64), Error> {
    if input.quota.is_some_and(|q| q > i64::MAX as u64) {
        return Err(Error::invalid("bad_quota", "quota is too large"));
    }
    match (input.expires_at, input.days) {
        (Some(_), Some(_)) => Err(Error::invalid("bad_expiry", "give expires_at or days, not both")),
        (_, Some(days)) if days == 0 || days > 36_500 => {
            Err(Error::invalid("bad_expiry", "days must be between 1 and 36500"))
        }
        (Some(at), None) if at > 0 && at > now + 36_500 * 86_400 => {
            Err(Error::invalid("bad_expiry", "expires_at is too far away"))
        }
        (Some(_), None) if input.start_on_first_use == Some(true) => {
            Err(Error::invalid("bad_expiry", "start_on_first_use needs days, not expires_at"))
        }
        (Some(at), None) => Ok((at, 0)),
        (None, Some(days)) if input.start_on_first_use == Some(true) => Ok((0, days * 86_400)),
        (None, Some(days)) => Ok((now + days * 86_400, 0)),
        (None, None) => Ok((0, 0)),
    }
}

/// The name of a reset strategy in the database and the API.
pub(crate) fn reset_name(reset: ResetStrategy) -> &'static str {
    match reset {
        ResetStrategy::Never => "none",
        ResetStrategy::Daily => "daily",
        ResetStrategy::Weekly => "weekly",
        ResetStrategy::Monthly => "monthly",
        ResetStrategy::Rolling30 => "rolling30",
    }
}

/// Parses a reset strategy's name.
pub(crate) fn parse_reset(name: &str) -> Option<ResetStrategy> {
    Some(match name {
        "none" => ResetStrategy::Never,
        "daily" => ResetStrategy::Daily,
        "weekly" => ResetStrategy::Weekly,
        "monthly" => ResetStrategy::Monthly,
        "rolling30" => ResetStrategy::Rolling30,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API's JSON writes Mbit/s as it always did; the database keeps kbit/s.
    #[test]
    fn speeds_are_mbps_in_json_and_kbps_stored() {
        let json = |kbps| serde_json::to_string(&Mbps::from_stored(kbps)).unwrap();
        assert_eq!(
            [json(0), json(500), json(1000), json(1), json(100_000_000)],
            ["0.0", "0.5", "1.0", "0.001", "100000.0"]
        );
        let read = |text| serde_json::from_str::<Mbps>(text).map_err(|e| e.to_string());
        assert_eq!(read("2.75").map(Mbps::stored), Ok(2750));
        assert_eq!(read("20").map(|m| m.0.bytes_per_sec()), Ok(2_500_000));
        assert_eq!(read("-1").unwrap_err(), "a speed is a number of Mbit/s from 0 to 100000");
        assert_eq!(read("0.0001").unwrap_err(), "a speed is at least 0.001 Mbit/s (or 0 for none)");
        let input: SpeedInput = serde_json::from_str(r#"{"up": 1.5}"#).unwrap();
        assert_eq!(input, SpeedInput { up: Some(Mbps::from_stored(1500)), down: None });
        assert_eq!(serde_json::to_string(&input).unwrap(), r#"{"up":1.5,"down":null}"#);
        assert!(check_slow(Some("slow"), Mbps::default()).is_err());
        assert!(check_slow(Some("slow"), Mbps::from_stored(1)).is_ok());
    }
}
