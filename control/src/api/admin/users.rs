//! Users (`/api/users`): list, create (one or many), change, extend, disable, rotate the link,
//! kick, delete; their link, preview, registered apps and aliases; moving users in and out.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, MAX_QUERY, Reply, bytes, chars, list, ok, opt};
use super::write::{change_users, read_user};
use crate::api::request::{Auth, Body, Reach};
use crate::app::{App, now};
use crate::auth::Scope;
use crate::error::Error;
use crate::store::users::{self as user_store, ListQuery, MAX_BULK, MAX_NAME, UserInput};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewQuery {
    #[serde(default)]
    ua: String,
}

/// What an app sending `ua` receives from the user's link: the format chosen, the headers
/// and the body, exactly as the edge renders them (from the same signed snapshot).
pub(super) async fn user_preview(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<PreviewQuery>,
) -> Reply {
    use hearth_shared::agent::Wants;
    use hearth_shared::render::Format;
    // It shows the credential, as the link does.
    bytes("ua", &query.ua, MAX_QUERY)?;
    let (token, stored) = read_user(&app, &auth, Scope::Users, id, move |c, app| {
        let token = user_store::token(c, &app.signer.vault, id)?;
        let stored = crate::store::streams::envelope(c, &hearth_shared::wire::stream::snapshot(&token.hash()))?;
        Ok((token, stored))
    })
    .await?;
    let snapshot = stored
        .and_then(|(_, bytes)| {
            let body = hearth_shared::envelope::Envelope::stored_body(&bytes)?.to_vec();
            hearth_shared::seal::open(&body, &token).ok()
        })
        .ok_or_else(|| Error::Internal("the user's snapshot does not open".into()))?;
    let wants = hearth_shared::agent::match_user_agent(query.ua.trim(), &app.ua_rules.read().expect("rules lock"));
    let url = format!("{}/{}", app.sub_url(), token.to_link_form());
    // A browser's page as that browser would get it, in English.
    let viewer = hearth_shared::render::page::Viewer::of(query.ua.trim(), "", "");
    let answer = hearth_shared::render::answer_at(&snapshot, wants, &url, &Default::default(), viewer);
    let format = match wants {
        Wants::Page => "page".to_owned(),
        Wants::Profile(Format::Base64) => "base64".to_owned(),
        Wants::Profile(Format::Mihomo) => "mihomo".to_owned(),
        Wants::Profile(Format::Surge) => "surge".to_owned(),
        Wants::Profile(Format::Loon) => "loon".to_owned(),
        Wants::Profile(Format::SingBox(v)) => format!("sing-box {}.{}", v.major, v.minor),
    };
    ok(json!({ "format": format, "headers": answer.headers, "body": answer.body }))
}

/// Users, a page at a time (a reseller's own only).
pub(super) async fn list_users(State(app): State<Arc<App>>, auth: Auth, Query(mut query): Query<ListQuery>) -> Reply {
    if let Reach::Reseller(admin) = auth.reach(Scope::Read)? {
        query.admin = Some(admin);
    }
    bytes("q", opt(&query.q), MAX_QUERY)?;
    bytes("status", opt(&query.status), 16)?;
    chars("group", opt(&query.group), MAX_NAME)?;
    let page = app.db.read(move |c| user_store::list(c, &query)).await?;
    ok(serde_json::to_value(page).expect("a page serializes"))
}

/// A user's view and its subscription link.
pub(super) fn with_link(
    app: &App,
    user: user_store::UserView,
    token: &hearth_shared::wire::SubToken,
) -> serde_json::Value {
    let mut value = serde_json::to_value(user).expect("a user serializes");
    value["link"] = json!(format!("{}/{}", app.sub_url(), token.to_link_form()));
    value["links"] = mirrors(app, token);
    value
}

/// A user's link at every edge that still offers links (blocked ones too, for the people
/// who still reach them), in the owner's order.
pub(super) fn mirrors(app: &App, token: &hearth_shared::wire::SubToken) -> serde_json::Value {
    let links: Vec<_> = app
        .link_bases()
        .into_iter()
        .filter(|base| base.state != crate::store::edges::LinkState::Retired)
        .map(|base| json!({ "edge": base.edge, "state": base.state, "link": format!("{}/{}", base.base, token.to_link_form()) }))
        .collect();
    json!(links)
}

/// The settings a new user of `auth`'s starts from: a reseller's joins the groups they may use
/// unless they name others.
fn for_creator(auth: &Auth, mut input: UserInput, conn: &rusqlite::Connection) -> Result<UserInput, Error> {
    if let Some(admin) = auth.0.reseller() {
        // Their users' names are theirs: they never meet anyone else's.
        input.tenant = admin;
        if input.groups.is_none() {
            input.groups = Some(crate::store::admins::groups_of(conn, admin)?);
        }
    }
    Ok(input)
}

/// Marks the users just made as created by the admin asking (the owner's are nobody's).
fn mark_created(auth: &Auth, conn: &rusqlite::Connection, ids: impl IntoIterator<Item = u64>) -> Result<(), Error> {
    if let Some(admin) = auth.0.account.id {
        ids.into_iter().try_for_each(|id| crate::store::admins::set_creator(conn, admin, id))?;
    }
    Ok(())
}

pub(super) async fn create_user(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<UserInput>) -> Reply {
    super::input::rule_set_by_owner(&auth, &input.rule_set)?;
    let who = Auth(auth.0.clone());
    let (user, token) = change_users(&app, &auth, None, move |tx, app, actor, now| {
        let input = for_creator(&who, input, tx)?;
        let created = crate::users::create(tx, &app.signer, actor, &input, now)?;
        mark_created(&who, tx, [created.id])?;
        Ok((user_store::get(tx, created.id)?, created.token))
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(with_link(&app, user, &token))).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkRequest {
    names: Vec<String>,
    #[serde(default)]
    settings: UserInput,
}

impl Bounded for BulkRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        list("names", &self.names, MAX_BULK, MAX_NAME)?;
        self.settings.check_bounds()
    }
}

pub(super) async fn bulk_create(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<BulkRequest>) -> Reply {
    super::input::rule_set_by_owner(&auth, &req.settings.rule_set)?;
    let who = Auth(auth.0.clone());
    let created = change_users(&app, &auth, None, move |tx, app, actor, now| {
        let settings = for_creator(&who, req.settings, tx)?;
        let created = crate::users::create_many(tx, &app.signer, actor, &req.names, &settings, now)?;
        mark_created(&who, tx, created.iter().map(|(_, c)| c.id))?;
        Ok(created)
    })
    .await?;
    // Written straight from these (10,000 users at most): a JSON value for each user first
    // took several times the answer's size, at the peak of a bulk create.
    #[derive(serde::Serialize)]
    struct Made<'a> {
        id: u64,
        name: &'a str,
        link: String,
    }
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        created: usize,
        users: Vec<Made<'a>>,
    }
    let base = app.sub_url();
    let users: Vec<Made<'_>> = created
        .iter()
        .map(|(name, c)| Made { id: c.id, name, link: format!("{base}/{}", c.token.to_link_form()) })
        .collect();
    Ok((StatusCode::CREATED, axum::Json(Answer { created: users.len(), users })).into_response())
}

pub(super) async fn get_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let user = read_user(&app, &auth, Scope::Read, id, move |c, _| user_store::get(c, id)).await?;
    ok(serde_json::to_value(user).expect("a user serializes"))
}

pub(super) async fn user_link(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let token =
        read_user(&app, &auth, Scope::Users, id, move |c, app| user_store::token(c, &app.signer.vault, id)).await?;
    let link = format!("{}/{}", app.sub_url(), token.to_link_form());
    let qr_svg = hearth_shared::render::page::qr_svg(&link);
    ok(json!({ "link": link, "qr_svg": qr_svg, "links": mirrors(&app, &token) }))
}

/// Runs a user change and answers with the user.
pub(super) async fn change_user(
    app: Arc<App>,
    auth: &Auth,
    id: u64,
    f: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<user_store::UserView, Error> + Send + 'static,
) -> Reply {
    let user = change_users(&app, auth, Some(id), f).await?;
    ok(serde_json::to_value(user).expect("a user serializes"))
}

pub(super) async fn update_user(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Input(input): Input<UserInput>,
) -> Reply {
    super::input::rule_set_by_owner(&auth, &input.rule_set)?;
    change_user(app, &auth, id, move |c, app, actor, now| crate::users::update(c, &app.signer, actor, id, &input, now))
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExtendRequest {
    days: u64,
}

pub(super) async fn extend_user(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Body(req): Body<ExtendRequest>,
) -> Reply {
    change_user(app, &auth, id, move |c, app, actor, now| {
        crate::users::extend(c, &app.signer, actor, id, req.days, now)
    })
    .await
}

pub(super) async fn reset_traffic(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change_user(app, &auth, id, move |c, app, actor, now| crate::users::reset_traffic(c, &app.signer, actor, id, now))
        .await
}

pub(super) async fn disable_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let input = UserInput { enabled: Some(false), ..UserInput::default() };
    change_user(app, &auth, id, move |c, app, actor, now| crate::users::update(c, &app.signer, actor, id, &input, now))
        .await
}

pub(super) async fn enable_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let input = UserInput { enabled: Some(true), ..UserInput::default() };
    change_user(app, &auth, id, move |c, app, actor, now| crate::users::update(c, &app.signer, actor, id, &input, now))
        .await
}

/// Closes the user's open connections at every node (at its next pull); the user's apps
/// connect again at once if they still may.
pub(super) async fn kick_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change_user(app, &auth, id, move |c, app, actor, now| crate::users::kick(c, &app.signer, actor, id, now)).await
}

/// The apps registered by their device id when they fetched the user's link (HWID).
pub(super) async fn user_hwid(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let view = read_user(&app, &auth, Scope::Read, id, move |c, _| crate::store::hwid::list(c, id)).await?;
    ok(serde_json::to_value(view).expect("a device list serializes"))
}

/// Deletes a registered device: its room is free at every edge once they have the user's
/// snapshot again.
pub(super) async fn forget_hwid(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path((id, key)): Path<(u64, String)>,
) -> Reply {
    let view = change_users(&app, &auth, Some(id), move |c, app, actor, now| {
        crate::users::forget_device(c, &app.signer, actor, id, &key, now)
    })
    .await?;
    ok(serde_json::to_value(view).expect("a device list serializes"))
}

/// A user's aliases: old subscription paths (from the panel it was imported from) that every
/// edge serves like its link.
pub(super) async fn user_aliases(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let aliases = read_user(&app, &auth, Scope::Users, id, move |c, _| {
        crate::store::users::get(c, id)?;
        crate::store::aliases::list(c, Some(id))
    })
    .await?;
    ok(json!({ "aliases": aliases }))
}

#[derive(Deserialize)]
pub(super) struct AliasQuery {
    path: String,
}

/// Retires an alias: the edges stop serving it.
pub(super) async fn retire_alias(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<AliasQuery>,
) -> Reply {
    let aliases = change_users(&app, &auth, Some(id), move |c, app, actor, now| {
        crate::users::retire_alias(c, &app.signer, actor, id, &query.path, now)
    })
    .await?;
    ok(json!({ "aliases": aliases }))
}

#[derive(Deserialize)]
pub(super) struct ImportQuery {
    source: String,
    #[serde(default)]
    dry_run: bool,
}

/// Takes users over from another panel (the body: the source's file), or with `dry_run`
/// says what it would do.
pub(super) async fn import_users(
    State(app): State<Arc<App>>,
    auth: Auth,
    Query(query): Query<ImportQuery>,
    body: axum::body::Bytes,
) -> Reply {
    let actor = auth.need(Scope::Admin)?.actor();
    let source = crate::import::Source::named(&query.source)?;
    let incoming = crate::import::read_bytes(source, body.to_vec()).await?;
    let now = now();
    let apply = move |tx: &rusqlite::Transaction<'_>, app: Arc<App>| {
        crate::import::apply(tx, &app.signer, &actor, incoming, query.dry_run, now)
    };
    let state = app.clone();
    let report = if query.dry_run {
        app.db.dry_run(move |tx| apply(tx, state)).await?
    } else {
        let report = app.db.write(move |tx| apply(tx, state)).await?;
        app.changed();
        report
    };
    ok(serde_json::to_value(report).expect("a report serializes"))
}

/// Every user as a Hearth users document (links and passwords included).
pub(super) async fn export_users(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Admin)?;
    let state = app.clone();
    let document = app.db.read(move |c| crate::import::json::export(c, &state.signer)).await?;
    ok(serde_json::to_value(document).expect("a document serializes"))
}

pub(super) async fn rotate_link(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let (user, token) = change_users(&app, &auth, Some(id), move |tx, app, actor, now| {
        let token = crate::users::rotate(tx, &app.signer, actor, id, now)?;
        Ok((user_store::get(tx, id)?, token))
    })
    .await?;
    ok(with_link(&app, user, &token))
}

pub(super) async fn delete_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change_users(&app, &auth, Some(id), move |tx, app, actor, now| {
        crate::users::delete(tx, &app.signer, actor, id, now)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
