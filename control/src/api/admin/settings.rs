//! Settings (`/api/settings`): what apps show, the edge and the base of links, User-Agent
//! rules, the device policy; changed at run time.

use std::sync::Arc;

use axum::extract::State;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, MAX_URL, Reply, bytes, chars, ok, opt, too_long};
use super::write::change;
use crate::api::request::Auth;
use crate::app::App;
use crate::auth::Scope;
use crate::error::Error;
use crate::settings::{MAX_ANNOUNCE, MAX_RULE_TEXT, MAX_RULES, MAX_TITLE};

pub(super) fn settings_json(app: &App) -> serde_json::Value {
    let profile = app.signer.profile.read().expect("profile lock").clone();
    let addresses = app.addresses();
    json!({
        "profile": profile,
        "edge_url": addresses.set.edge_url,
        "sub_url": addresses.sub_url,
        "sub_url_set": addresses.set.sub_url,
        "primary": app.sub_url(),
        "ua_rules": *app.ua_rules.read().expect("rules lock"),
        "public_url": app.config.public_url,
    })
}

pub(super) async fn get_settings(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    settings_reply(&app).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettingsInput {
    #[serde(default)]
    profile: Option<crate::settings::ProfileInput>,
    /// The edge's URL; empty: none (control serves links itself).
    #[serde(default)]
    edge_url: Option<String>,
    /// The base of links; empty: derived from the edge (or control's public URL).
    #[serde(default)]
    sub_url: Option<String>,
    /// The owner's User-Agent rules (replaces them all).
    #[serde(default)]
    ua_rules: Option<Vec<hearth_shared::agent::UaRule>>,
    /// What nodes do with a device over a user's limit: `refuse` or `drop_oldest`.
    #[serde(default)]
    device_policy: Option<String>,
}

impl Bounded for SettingsInput {
    fn check_bounds(&self) -> Result<(), Error> {
        if let Some(profile) = &self.profile {
            chars("title", opt(&profile.title), MAX_TITLE)?;
            chars("announce", opt(&profile.announce), MAX_ANNOUNCE)?;
            bytes("support_url", opt(&profile.support_url), MAX_URL)?;
            bytes("web_page_url", opt(&profile.web_page_url), MAX_URL)?;
        }
        bytes("edge_url", opt(&self.edge_url), MAX_URL)?;
        bytes("sub_url", opt(&self.sub_url), MAX_URL)?;
        bytes("device_policy", opt(&self.device_policy), 16)?;
        let rules = self.ua_rules.as_deref().unwrap_or_default();
        if rules.len() > MAX_RULES {
            return Err(too_long("ua_rules", &format!("{MAX_RULES} entries")));
        }
        rules.iter().try_for_each(|rule| chars("ua_rules", &rule.contains, MAX_RULE_TEXT))
    }
}

/// An address from the owner: empty clears it, anything else must be an http(s) URL.
pub(super) fn address(what: &str, value: Option<String>, current: Option<String>) -> Result<Option<String>, Error> {
    match value {
        None => Ok(current),
        Some(value) if value.trim().is_empty() => Ok(None),
        Some(value) => {
            crate::config::check_url(what, &value).map(Some).map_err(|e| Error::invalid("bad_url", e.to_string()))
        }
    }
}

/// Changes the subscription profile (every link carries it at once: each snapshot is signed
/// again, and pushed) and where pushes and links go (a new edge gets everything; nodes learn
/// it from control's next answer).
pub(super) async fn update_settings(
    State(app): State<Arc<App>>,
    auth: Auth,
    Input(input): Input<SettingsInput>,
) -> Reply {
    auth.need(Scope::Admin)?;
    // Where links are served is the owner's alone (as adding an edge is).
    if input.edge_url.is_some() || input.sub_url.is_some() {
        auth.need_owner()?;
    }
    let current = app.addresses().set;
    let edge_url = address("edge_url", input.edge_url, current.edge_url.clone())?;
    let sub_url = address("sub_url", input.sub_url, current.sub_url.clone())?;
    // Everything is checked before anything changes.
    if let Some(rules) = &input.ua_rules {
        crate::settings::check_rules(rules)?;
    }
    let policy = match input.device_policy.as_deref() {
        Some(name) => Some(
            hearth_shared::wire::DevicePolicy::from_name(name)
                .ok_or_else(|| Error::invalid("bad_device_policy", "device_policy is refuse or drop_oldest"))?,
        ),
        None => None,
    };
    let profile = match input.profile {
        Some(change) => {
            let current = app.signer.profile.read().expect("profile lock").clone();
            Some(crate::settings::apply(&current, change)?)
        }
        None => None,
    };
    if let Some(profile) = profile {
        let signed = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_profile(tx, &app.signer, &profile, actor, now)
        })
        .await?;
        tracing::info!(signed, "subscription profile changed");
    }
    if let Some(rules) = input.ua_rules {
        let rules: Vec<_> = rules
            .into_iter()
            .map(|rule| hearth_shared::agent::UaRule { contains: rule.contains.trim().to_owned(), target: rule.target })
            .collect();
        let saved = rules.clone();
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_ua_rules(tx, &app.signer, &saved, actor, now)
        })
        .await?;
        *app.ua_rules.write().expect("rules lock") = rules;
    }
    if let Some(policy) = policy {
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_device_policy(tx, &app.signer, policy, actor, now)
        })
        .await?;
    }
    let addresses = crate::settings::Addresses { edge_url, sub_url };
    if addresses != current {
        let saved = addresses.clone();
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::save_addresses(tx, &app.config, &saved, actor, now)?;
            crate::publish::edges_changed(tx, &app.signer, now).map(drop)
        })
        .await?;
        app.set_addresses(addresses);
        tracing::info!(edge = app.edge_url().as_deref().unwrap_or("none"), "addresses changed");
    }
    settings_reply(&app).await
}

/// The settings, with those kept only in the database.
pub(super) async fn settings_reply(app: &App) -> Reply {
    let policy = app.db.read(crate::store::device_policy).await?;
    let mut settings = settings_json(app);
    settings["device_policy"] = json!(policy.as_str());
    ok(settings)
}
