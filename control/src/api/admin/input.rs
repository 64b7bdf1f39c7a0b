//! What a handler of the admin API takes and answers: a JSON body within its bounds (each
//! field checked before any work is done), the limits, and a refusal.

use axum::response::{IntoResponse, Response};

use crate::api::request::{Auth, Body};
use crate::error::Error;
use crate::store::nodes::{GroupInput, MAX_HOST, MAX_TEXT, NodeInput};
use crate::store::users::{MAX_NAME, MAX_NOTE, UserInput};

/// Why a handler answers no: one of control's errors (its status and code), or an answer made
/// already (a refusal of authentication or sign-in). Either comes with `?`.
pub(in crate::api) enum Refusal {
    Error(Error),
    Answer(Response),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal::Error(e)
    }
}

impl From<Response> for Refusal {
    fn from(answer: Response) -> Refusal {
        Refusal::Answer(answer)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Error(e) => e.into_response(),
            Refusal::Answer(answer) => answer,
        }
    }
}

pub(super) type Reply = Result<Response, Refusal>;

/// The longest setup token, in bytes (they are 43).
pub(super) const MAX_SECRET: usize = 128;
/// The longest second-factor code, in bytes (a recovery code is 14, an app's code 6).
pub(super) const MAX_CODE: usize = 64;
/// The most groups one user or node is put in at once.
pub(super) const MAX_GROUPS: usize = 100;
/// The longest URL (the profile's links, the edge, the link base), in bytes.
pub(super) const MAX_URL: usize = 512;
/// The longest User-Agent a preview takes, and the longest search, in bytes.
pub(super) const MAX_QUERY: usize = 1024;

/// The bounds of a request body's fields, checked as soon as it is parsed, before any work is
/// done with it (the stores check the content again, in full, against the same limits).
pub(super) trait Bounded {
    fn check_bounds(&self) -> Result<(), Error>;
}

/// A JSON body within its bounds: a field too long is a 400 naming it.
pub(super) struct Input<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned + Bounded, S: Send + Sync> axum::extract::FromRequest<S> for Input<T> {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let Body(value) = Body::<T>::from_request(req, state).await?;
        value.check_bounds().map_err(IntoResponse::into_response)?;
        Ok(Input(value))
    }
}

pub(super) fn too_long(field: &str, limit: &str) -> Error {
    Error::invalid("too_long", format!("{field} must be at most {limit}"))
}

/// At most `max` characters (surrounding spaces aside, as names are trimmed).
pub(super) fn chars(field: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.trim().chars().nth(max).is_some() {
        return Err(too_long(field, &format!("{max} characters")));
    }
    Ok(())
}

/// At most `max` bytes.
pub(super) fn bytes(field: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(too_long(field, &format!("{max} bytes")));
    }
    Ok(())
}

/// At most `max` entries, each of at most `max_chars` characters.
pub(super) fn list(field: &str, values: &[String], max: usize, max_chars: usize) -> Result<(), Error> {
    if values.len() > max {
        return Err(too_long(field, &format!("{max} entries")));
    }
    values.iter().try_for_each(|value| chars(field, value, max_chars))
}

pub(super) fn opt(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or_default()
}

impl Bounded for UserInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("reset", opt(&self.reset), 16)?;
        bytes("on_quota", opt(&self.on_quota), 16)?;
        bytes("note", opt(&self.note), MAX_NOTE)?;
        bytes("rule_set", opt(&self.rule_set), hearth_shared::routing::MAX_SET_NAME)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

impl Bounded for NodeInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("host", opt(&self.host), MAX_HOST)?;
        bytes("hop", opt(&self.hop), 32)?;
        bytes("sni", opt(&self.sni), MAX_TEXT)?;
        bytes("tls", opt(&self.tls), 16)?;
        bytes("obfs", opt(&self.obfs), MAX_TEXT)?;
        bytes("masquerade", opt(&self.masquerade), MAX_TEXT)?;
        bytes("domain", opt(&self.domain), MAX_HOST)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

impl Bounded for GroupInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("note", opt(&self.note), MAX_TEXT)?;
        bytes("on_quota", opt(&self.on_quota), 16)?;
        bytes("rule_set", opt(&self.rule_set), hearth_shared::routing::MAX_SET_NAME)
    }
}

/// Whether a request that gives a rule set comes from the owner: who is routed where is the
/// owner's alone to say (refused before the input is looked at further).
pub(super) fn rule_set_by_owner(auth: &Auth, rule_set: &Option<String>) -> Result<(), Response> {
    if rule_set.is_some() {
        auth.need_owner()?;
    }
    Ok(())
}

pub(super) fn ok(value: serde_json::Value) -> Reply {
    Ok(axum::Json(value).into_response())
}
