//! Glue between the edge's runtime-free types and workers-rs.

use std::cell::Cell;
use std::rc::Rc;

use hearth_edge::Reply;
use hearth_edge::config::{ConfigError, EdgeConfig};
use worker::js_sys::{Function, Reflect, Uint8Array};
use worker::wasm_bindgen::{JsCast as _, JsValue, closure::Closure};
use worker::{Env, Headers, Method, Request, RequestInit, Response, Result, SqlStorage, Storage, Stub};

thread_local! {
    /// The settings, read once per isolate: a deployment's vars and secrets do not change
    /// under a running isolate (changing them deploys a new version, served by new isolates).
    /// Reading them costs a call into JavaScript per setting and parsing the root key.
    static CONFIG: std::cell::OnceCell<Rc<EdgeConfig>> = const { std::cell::OnceCell::new() };
}

/// The edge's settings from the Worker's vars and secrets. A bad setting is not kept: each
/// request says so until it is fixed.
pub(crate) fn config(env: &Env) -> std::result::Result<Rc<EdgeConfig>, ConfigError> {
    if let Some(config) = CONFIG.with(|held| held.get().cloned()) {
        return Ok(config);
    }
    let config = Rc::new(EdgeConfig::from_vars(|name| {
        env.secret(name).map(|s| s.to_string()).or_else(|_| env.var(name).map(|v| v.to_string())).ok()
    })?);
    Ok(CONFIG.with(|held| held.get_or_init(|| config).clone()))
}

/// The settings, when this isolate has read them already.
pub(crate) fn config_read() -> Option<Rc<EdgeConfig>> {
    CONFIG.with(|held| held.get().cloned())
}

/// A [`Reply`] as a workers-rs response (no body on HEAD).
pub(crate) fn respond(reply: Reply, head: bool) -> Result<Response> {
    let headers = Headers::new();
    for (name, value) in &reply.headers {
        headers.set(name, value)?;
    }
    // workerd sends no Content-Length for an empty body unless told: HEAD says what GET sends.
    let response = if head {
        headers.set("content-length", &reply.body.len().to_string())?;
        Response::empty()?
    } else {
        Response::from_bytes(reply.body)?
    };
    Ok(response.with_status(reply.status).with_headers(headers))
}

/// A response from a Durable Object, back into a [`Reply`].
pub(crate) async fn reply_of(mut response: Response) -> Result<Reply> {
    let mut headers = Vec::new();
    for name in ["content-type", "retry-after"] {
        if let Some(value) = response.headers().get(name)? {
            headers.push((name, value));
        }
    }
    Ok(Reply { status: response.status_code(), headers, body: response.bytes().await? })
}

/// The `Links` object holding shard `shard`.
pub(crate) fn links_shard(env: &Env, shard: u32) -> Result<Stub> {
    env.durable_object("LINKS")?.id_from_name(&format!("links-{shard}"))?.get_stub()
}

/// Sends `body` to a Durable Object.
pub(crate) async fn call(stub: &Stub, method: Method, url: &str, body: Option<&[u8]>) -> Result<Response> {
    let mut init = RequestInit::new();
    init.with_method(method);
    if let Some(body) = body {
        init.with_body(Some(Uint8Array::from(body).into()));
    }
    stub.fetch_with_request(Request::new_with_init(url, &init)?).await
}

/// Milliseconds since the epoch, by the Workers clock.
pub(crate) fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

/// Runs `f` inside `storage.transactionSync`: an `Err` rolls every write back, and so does
/// an `Ok(Err(refusal))`, which is given back as it is. (workers-rs 0.8 does not wrap it; raw
/// `BEGIN` is refused by Durable Objects.)
pub(crate) fn transaction<T: 'static, E: 'static>(
    storage: &Storage,
    f: impl FnOnce(&SqlStorage) -> Result<std::result::Result<T, E>> + 'static,
) -> Result<std::result::Result<T, E>> {
    let raw: &JsValue = storage.as_raw().as_ref();
    let run: Function = Reflect::get(raw, &JsValue::from_str("transactionSync"))?.dyn_into()?;
    let sql = storage.sql();
    let out = Rc::new(Cell::new(None));
    let slot = out.clone();
    let callback = Closure::once(move || -> std::result::Result<JsValue, JsValue> {
        match f(&sql) {
            Ok(outcome) => {
                let refused = outcome.is_err();
                slot.set(Some(outcome));
                // Thrown, so that the transaction rolls back; the refusal itself is in `slot`.
                if refused { Err(JsValue::from_str("refused")) } else { Ok(JsValue::UNDEFINED) }
            }
            Err(e) => Err(JsValue::from_str(&e.to_string())),
        }
    });
    let result = run.call1(raw, callback.as_ref().unchecked_ref());
    drop(callback);
    match (result, out.take()) {
        (_, Some(Err(refusal))) => Ok(Err(refusal)),
        (Ok(_), Some(Ok(value))) => Ok(Ok(value)),
        (Err(e), _) => Err(worker::Error::from(e)),
        (Ok(_), None) => Err("the transaction callback did not run".into()),
    }
}

/// u64 to a SQL integer (versions and times never reach 2^63).
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A query parameter of a Durable Object's request.
pub(crate) fn query(url: &worker::Url, name: &str) -> Option<String> {
    url.query_pairs().find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
}

/// A numeric query parameter; 0 when missing or malformed.
pub(crate) fn query_u64(url: &worker::Url, name: &str) -> u64 {
    query(url, name).and_then(|value| value.parse().ok()).unwrap_or(0)
}
