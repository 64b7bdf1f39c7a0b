//! Settings the owner changes at run time, from the panel or the API: the subscription
//! profile (the title, announcement, help and web page links and refresh interval every app
//! shows), the edge, and the base of links. They live in the database; `control.toml` (and
//! the environment) seeds them, and an edit there wins again at the next start (the last
//! change wins, from either place). A profile change signs each user's snapshot again; the edge
//! given here is the `main` edge ([`crate::store::edges`]): a new one gets everything, and
//! nodes learn it with control's next answer.

use rusqlite::Connection;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use hearth_shared::agent::UaRule;
use hearth_shared::wire::{DevicePolicy, Profile};

use crate::config::{Config, url};
use crate::error::Error;
use crate::publish::{self, Signer};
use crate::store::{self, Db};

/// A change to the profile; fields left out keep their value, empty strings clear them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileInput {
    pub(crate) title: Option<String>,
    pub(crate) announce: Option<String>,
    pub(crate) support_url: Option<String>,
    pub(crate) web_page_url: Option<String>,
    pub(crate) update_interval_hours: Option<u32>,
}

/// The longest title, in characters.
pub(crate) const MAX_TITLE: usize = 64;
/// The longest announcement, in characters.
pub(crate) const MAX_ANNOUNCE: usize = 200;
/// The longest part of a User-Agent a rule looks for, in characters.
pub(crate) const MAX_RULE_TEXT: usize = 64;

/// `current` with `input` applied, checked.
pub(crate) fn apply(current: &Profile, input: ProfileInput) -> Result<Profile, Error> {
    let mut profile = current.clone();
    if let Some(title) = input.title {
        let title = title.trim();
        if title.is_empty() || title.chars().count() > MAX_TITLE || title.chars().any(char::is_control) {
            return Err(Error::invalid(
                "bad_title",
                format!("the title must be 1 to {MAX_TITLE} characters, on one line"),
            ));
        }
        profile.title = title.to_owned();
    }
    if let Some(announce) = input.announce {
        let announce = announce.trim();
        if announce.chars().count() > MAX_ANNOUNCE {
            return Err(Error::invalid(
                "bad_announce",
                format!("the announcement must be at most {MAX_ANNOUNCE} characters"),
            ));
        }
        profile.announce = (!announce.is_empty()).then(|| announce.to_owned());
    }
    if let Some(support) = input.support_url {
        profile.support_url = url("support_url", &support)?;
    }
    if let Some(page) = input.web_page_url {
        profile.web_page_url = url("web_page_url", &page)?;
    }
    if let Some(hours) = input.update_interval_hours {
        if !(1..=168).contains(&hours) {
            return Err(Error::invalid("bad_interval", "the update interval must be 1 to 168 hours"));
        }
        profile.update_interval_hours = hours;
    }
    Ok(profile)
}

fn stored<T: DeserializeOwned>(conn: &Connection, key: &str) -> Result<Option<T>, Error> {
    Ok(store::get_state_text(conn, key)?.and_then(|json| serde_json::from_str(&json).ok()))
}

fn save<T: Serialize>(conn: &Connection, key: &str, value: &T) -> Result<(), Error> {
    store::set_state(conn, key, serde_json::to_string(value).expect("settings serialize"))
}

/// The rule of run-time settings, at start: the value under `key` in force, given the
/// `configured` one (file or environment). A configuration that changed since the last start
/// wins; otherwise what the owner last set stays. Returns it and whether it differs from the
/// one in force before.
fn settle_value<T>(conn: &Connection, key: &str, configured: &T) -> Result<(T, bool), Error>
where
    T: Serialize + DeserializeOwned + PartialEq + Clone,
{
    let file_key = format!("{key}_file");
    let current: Option<T> = stored(conn, key)?;
    let value = if stored::<T>(conn, &file_key)?.as_ref() != Some(configured) {
        save(conn, &file_key, configured)?;
        configured.clone()
    } else {
        current.clone().unwrap_or_else(|| configured.clone())
    };
    let changed = current.as_ref() != Some(&value);
    if changed {
        save(conn, key, &value)?;
    }
    Ok((value, changed))
}

/// At start: the profile in force (see [`settle_value`]). When it changed, every snapshot is
/// signed again (in the same transaction).
pub(crate) fn settle(db: &Db, signer: &Signer, file: &Profile, now: u64) -> Result<(), Error> {
    db.write_blocking(|tx| {
        let (profile, changed) = settle_value(tx, "profile", file)?;
        *signer.profile.write().expect("profile lock") = profile;
        if changed {
            let signed = publish::republish_users(tx, signer, now)?;
            if signed > 0 {
                tracing::info!(signed, "the subscription profile changed: every snapshot signed again");
            }
        }
        Ok(())
    })
}

/// Changes the profile in force: saved, and every snapshot signed again, in one transaction
/// (the caller's). On an error the signer keeps the old profile.
pub(crate) fn set_profile(
    conn: &Connection,
    signer: &Signer,
    profile: &Profile,
    actor: &str,
    now: u64,
) -> Result<usize, Error> {
    let old = std::mem::replace(&mut *signer.profile.write().expect("profile lock"), profile.clone());
    let result = save(conn, "profile", profile).and_then(|()| {
        store::audit(conn, now, actor, "settings.profile", "", "")?;
        publish::republish_users(conn, signer, now)
    });
    if result.is_err() {
        *signer.profile.write().expect("profile lock") = old;
    }
    result
}

/// Where links and pushes go: the edge (none: control serves links itself) and the link base
/// (none: derived from the edge, else from control's public URL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Addresses {
    pub(crate) edge_url: Option<String>,
    pub(crate) sub_url: Option<String>,
}

impl Addresses {
    pub(crate) fn of(config: &Config) -> Addresses {
        Addresses { edge_url: config.edge_url.clone(), sub_url: config.explicit_sub().map(str::to_owned) }
    }
}

/// At start: the addresses in force (see [`settle_value`]); `config` is updated to them. An
/// address that was configured at the last start and is not now (`HEARTH_EDGE_URL` left out of
/// a restart) is no change: the edge stays attached, with a warning. Only the owner detaches it
/// (Settings, audited). Returns what to warn of, once logging runs.
pub(crate) fn settle_addresses(db: &Db, config: &mut Config) -> Result<Vec<String>, Error> {
    let (addresses, kept) = db.write_blocking(|tx| {
        let mut configured = Addresses::of(config);
        let mut kept = Vec::new();
        if let Some(before) = stored::<Addresses>(tx, "addresses_file")? {
            for (name, now, then) in [
                ("edge_url (HEARTH_EDGE_URL)", &mut configured.edge_url, before.edge_url),
                ("sub_url (HEARTH_SUB_URL)", &mut configured.sub_url, before.sub_url),
            ] {
                if now.is_none()
                    && let Some(then) = then
                {
                    kept.push(format!(
                        "{name} was given at the last start and is not now: it stays {then} \
                         (to change or clear it, use Settings in the panel)"
                    ));
                    *now = Some(then);
                }
            }
        }
        let (addresses, _) = settle_value(tx, "addresses", &configured)?;
        let base = config.link_base(addresses.edge_url.as_deref(), addresses.sub_url.as_deref());
        crate::store::edges::sync_main(tx, addresses.edge_url.as_deref(), &base, crate::clock::now())?;
        Ok((addresses, kept))
    })?;
    config.set_addresses(addresses.edge_url, addresses.sub_url);
    Ok(kept)
}

/// The addresses in force (what `serve` last settled or the owner last set), without changing
/// anything; `config` is updated to them. Before `serve` ever ran, the configured ones.
pub(crate) fn addresses_in_force(db: &Db, config: &mut Config) -> Result<(), Error> {
    let configured = Addresses::of(config);
    let addresses = db.read_blocking(|c| stored::<Addresses>(c, "addresses"))?.unwrap_or(configured);
    config.set_addresses(addresses.edge_url, addresses.sub_url);
    Ok(())
}

/// The subscription profile in force, without changing anything (before `serve` ever ran,
/// the configured one).
pub(crate) fn profile_in_force(db: &Db, file: &Profile) -> Result<Profile, Error> {
    Ok(db.read_blocking(|c| stored::<Profile>(c, "profile"))?.unwrap_or_else(|| file.clone()))
}

/// Keeps the owner's new addresses (in the caller's transaction).
pub(crate) fn save_addresses(
    conn: &Connection,
    config: &Config,
    addresses: &Addresses,
    actor: &str,
    now: u64,
) -> Result<(), Error> {
    save(conn, "addresses", addresses)?;
    let base = config.link_base(addresses.edge_url.as_deref(), addresses.sub_url.as_deref());
    crate::store::edges::sync_main(conn, addresses.edge_url.as_deref(), &base, now)?;
    store::audit(
        conn,
        now,
        actor,
        "settings.addresses",
        "",
        &format!("edge {}", addresses.edge_url.as_deref().unwrap_or("none")),
    )
}

/// The most User-Agent rules the owner can set.
pub(crate) const MAX_RULES: usize = 50;

/// Sets the device policy; every node's set is signed again (those with a device limit in
/// them change). Returns how many were signed.
pub(crate) fn set_device_policy(
    conn: &Connection,
    signer: &Signer,
    policy: DevicePolicy,
    actor: &str,
    now: u64,
) -> Result<usize, Error> {
    save(conn, "device_policy", &policy.as_str())?;
    store::audit(conn, now, actor, "settings.device_policy", "", policy.as_str())?;
    publish::all_nodes_changed(conn, signer, now)
}

/// Checks rules from the owner: each names a part of a User-Agent (1 to [`MAX_RULE_TEXT`]
/// printable characters) and a format.
pub(crate) fn check_rules(rules: &[UaRule]) -> Result<(), Error> {
    if rules.len() > MAX_RULES {
        return Err(Error::invalid("bad_rules", format!("at most {MAX_RULES} User-Agent rules")));
    }
    for rule in rules {
        let text = rule.contains.trim();
        if text.is_empty() || text.chars().count() > MAX_RULE_TEXT || text.chars().any(char::is_control) {
            return Err(Error::invalid(
                "bad_rules",
                format!("each rule needs 1 to {MAX_RULE_TEXT} characters of a User-Agent to look for"),
            ));
        }
    }
    Ok(())
}

/// Keeps the owner's rules and signs them for the edge (in the caller's transaction).
pub(crate) fn set_ua_rules(
    conn: &Connection,
    signer: &Signer,
    rules: &[UaRule],
    actor: &str,
    now: u64,
) -> Result<(), Error> {
    save(conn, "ua_rules", &rules)?;
    publish::publish_edge_settings(conn, signer, now)?;
    store::audit(conn, now, actor, "settings.ua_rules", "", &format!("{} rules", rules.len()))
}
