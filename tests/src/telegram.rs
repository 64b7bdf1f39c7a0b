//! A local stand-in of the Telegram Bot API (the real one cannot be reached from here) that
//! checks every request against the Bot API's documented methods and fields
//! (https://core.telegram.org/bots/api): the token, the method, each field's name and type,
//! `parse_mode` HTML that Telegram would parse, a text of 1 to 4096 characters, a chat that
//! exists. It keeps what was sent, and takes updates (someone writing to the bot) for
//! `getUpdates`, which waits for one up to its `timeout`, as the Bot API does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The bot's token: any other is refused.
pub const TOKEN: &str = "123456789:AAHearthStandInToken_abcdefghijklmno";
/// The owner's chat, a stranger's, a user's: the chats that exist.
pub const OWNER: i64 = 4242;
pub const STRANGER: i64 = 999;
pub const USER_CHAT: i64 = 777;
/// Another user's chat.
pub const SECOND_CHAT: i64 = 778;

/// The stand-in's state: messages sent (chat, text), updates waiting, requests refused.
#[derive(Default)]
pub struct Bot {
    sent: Vec<(i64, String)>,
    updates: VecDeque<Value>,
    next_update: i64,
    refused: Vec<String>,
    /// How the next `sendMessage` calls fail, in order (429: Telegram's flood control, with
    /// `retry_after`; 5xx: a gateway's HTML page), before any is taken.
    failures: VecDeque<u16>,
}

/// The fields each method the bot uses takes, as the Bot API documents them: (name, type,
/// required). Types: `int`, `str`, `int|str`, `bool`, `obj`, `[str]`, `[obj]`.
fn fields(method: &str) -> Option<&'static [(&'static str, &'static str, bool)]> {
    Some(match method {
        "getMe" => &[],
        "getUpdates" => &[
            ("offset", "int", false),
            ("limit", "int", false),
            ("timeout", "int", false),
            ("allowed_updates", "[str]", false),
        ],
        "sendMessage" => &[
            ("business_connection_id", "str", false),
            ("chat_id", "int|str", true),
            ("message_thread_id", "int", false),
            ("text", "str", true),
            ("parse_mode", "str", false),
            ("entities", "[obj]", false),
            ("link_preview_options", "obj", false),
            ("disable_notification", "bool", false),
            ("protect_content", "bool", false),
            ("allow_paid_broadcast", "bool", false),
            ("message_effect_id", "str", false),
            ("reply_parameters", "obj", false),
            ("reply_markup", "obj", false),
        ],
        _ => return None,
    })
}

fn typed(value: &Value, kind: &str) -> bool {
    match kind {
        "int" => value.is_i64(),
        "str" => value.is_string(),
        "int|str" => value.is_i64() || value.is_string(),
        "bool" => value.is_boolean(),
        "obj" => value.is_object(),
        "[str]" => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        "[obj]" => value.as_array().is_some_and(|a| a.iter().all(Value::is_object)),
        _ => false,
    }
}

/// The text Telegram shows for `html` (parse_mode HTML), or why it cannot parse it: only the
/// tags it supports, balanced; `&` only in `&lt;`, `&gt;`, `&amp;`, `&quot;` or `&#...;`.
fn parse_html(html: &str) -> Result<String, String> {
    const TAGS: [&str; 16] = [
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    ];
    let mut shown = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest.find('>').ok_or("Unclosed start tag")?;
                let tag = &rest[1..end];
                let (closing, name) = match tag.strip_prefix('/') {
                    Some(name) => (true, name.trim()),
                    None => (false, tag.split_whitespace().next().unwrap_or_default()),
                };
                if !TAGS.contains(&name) {
                    return Err(format!("Unsupported start tag \"{name}\""));
                }
                if closing {
                    if open.pop().as_deref() != Some(name) {
                        return Err(format!("Unmatched end tag \"{name}\""));
                    }
                } else {
                    open.push(name.to_owned());
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let end = rest.find(';').ok_or("Character entity is not terminated")?;
                let entity = &rest[1..end];
                shown.push(match entity {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    _ if entity.starts_with('#') => '?',
                    _ => return Err(format!("Unsupported HTML entity \"&{entity};\"")),
                });
                rest = &rest[end + 1..];
            }
            c => {
                shown.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if let Some(tag) = open.pop() {
        return Err(format!("Can't find end tag corresponding to start tag \"{tag}\""));
    }
    Ok(shown)
}

/// Checks a request as the Bot API would; the result, or (status, description).
pub fn answer(bot: &Mutex<Bot>, token: &str, method: &str, body: &Value) -> Result<Value, (u16, String)> {
    if token != TOKEN {
        return Err((401, "Unauthorized".into()));
    }
    let known = fields(method).ok_or((404, "Not Found".to_owned()))?;
    let object = body.as_object().ok_or((400, "Bad Request: the body is not a JSON object".to_owned()))?;
    for (name, value) in object {
        let (_, kind, _) = known.iter().find(|(field, _, _)| field == name).ok_or_else(|| {
            (400, format!("Bad Request: {method} takes no field {name:?} (stand-in: not in the documentation)"))
        })?;
        if !typed(value, kind) {
            return Err((400, format!("Bad Request: field {name:?} must be {kind}")));
        }
    }
    if let Some((name, _, _)) = known.iter().find(|(name, _, required)| *required && !object.contains_key(*name)) {
        return Err((400, format!("Bad Request: {name} is empty")));
    }
    match method {
        "getMe" => Ok(json!({ "id": 123456789, "is_bot": true, "first_name": "Hearth", "username": "hearth_test_bot",
                               "can_join_groups": true, "can_read_all_group_messages": false, "supports_inline_queries": false })),
        "sendMessage" => {
            let chat = body["chat_id"].as_i64().ok_or((400, "Bad Request: chat not found".to_owned()))?;
            if ![OWNER, USER_CHAT, SECOND_CHAT, STRANGER].contains(&chat) {
                return Err((400, "Bad Request: chat not found".into()));
            }
            let text = body["text"].as_str().unwrap_or_default();
            let shown = match body["parse_mode"].as_str() {
                None => text.to_owned(),
                Some("HTML") => {
                    parse_html(text).map_err(|e| (400, format!("Bad Request: can't parse entities: {e}")))?
                }
                Some(other) => return Err((400, format!("Bad Request: unsupported parse_mode {other:?} (stand-in)"))),
            };
            let length = shown.encode_utf16().count();
            if shown.trim().is_empty() || length > 4096 {
                return Err((400, format!("Bad Request: message text is empty or too long ({length})")));
            }
            let mut bot = bot.lock().unwrap();
            bot.sent.push((chat, shown.clone()));
            Ok(
                json!({ "message_id": bot.sent.len(), "date": 1_764_590_400, "chat": { "id": chat, "type": "private" }, "text": shown }),
            )
        }
        "getUpdates" => {
            if let Some(limit) = body["limit"].as_i64()
                && !(1..=100).contains(&limit)
            {
                return Err((400, "Bad Request: limit must be 1 to 100".into()));
            }
            let offset = body["offset"].as_i64().unwrap_or(0);
            let mut bot = bot.lock().unwrap();
            // Updates below the offset are confirmed: Telegram forgets them.
            while bot.updates.front().is_some_and(|u| u["update_id"].as_i64().unwrap() < offset) {
                bot.updates.pop_front();
            }
            Ok(Value::Array(bot.updates.iter().cloned().collect()))
        }
        _ => unreachable!(),
    }
}

/// The stand-in, running on loopback.
pub struct BotApi {
    pub bot: Arc<Mutex<Bot>>,
    /// What `telegram_api` is set to.
    pub url: String,
}

impl BotApi {
    pub async fn start() -> BotApi {
        let bot = Arc::new(Mutex::new(Bot::default()));
        let url = serve(bot.clone()).await;
        BotApi { bot, url }
    }

    /// Someone writes `text` in `chat`.
    pub fn write(&self, chat: i64, text: &str) {
        let mut bot = self.bot.lock().unwrap();
        bot.next_update += 1;
        let id = 500 + bot.next_update;
        bot.updates.push_back(json!({
            "update_id": id,
            "message": { "message_id": id, "date": 1_764_590_400, "text": text,
                         "chat": { "id": chat, "type": "private", "first_name": "Someone" },
                         "from": { "id": chat, "is_bot": false, "first_name": "Someone" } },
        }));
    }

    /// The texts sent to `chat`, as Telegram shows them.
    pub fn sent_to(&self, chat: i64) -> Vec<String> {
        self.bot.lock().unwrap().sent.iter().filter(|(c, _)| *c == chat).map(|(_, t)| t.clone()).collect()
    }

    /// The next `sendMessage` calls fail with these statuses, in order.
    pub fn fail_next(&self, statuses: &[u16]) {
        self.bot.lock().unwrap().failures.extend(statuses);
    }

    /// How many of the failures asked for are still to come.
    pub fn failures_left(&self) -> usize {
        self.bot.lock().unwrap().failures.len()
    }

    /// The requests refused, and why.
    pub fn refused(&self) -> Vec<String> {
        self.bot.lock().unwrap().refused.clone()
    }
}

/// Serves the Bot API; `getUpdates` waits up to its `timeout` for an update.
async fn serve(bot: Arc<Mutex<Bot>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let bot = bot.clone();
            tokio::spawn(async move {
                let Some((head, body)) = crate::read_request(&mut stream).await else { return };
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let (token, method) = path.trim_start_matches("/bot").split_once('/').unwrap_or_default();
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if method == "getUpdates" {
                    let wait = request["timeout"].as_u64().unwrap_or(0);
                    let started = std::time::Instant::now();
                    while started.elapsed() < Duration::from_secs(wait) && bot.lock().unwrap().updates.is_empty() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                let failure = if method == "sendMessage" { bot.lock().unwrap().failures.pop_front() } else { None };
                match failure {
                    Some(429) => {
                        let reply = json!({ "ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1",
                                            "parameters": { "retry_after": 1 } });
                        crate::write_answer(&mut stream, 429, "application/json", reply.to_string().as_bytes()).await;
                        return;
                    }
                    Some(status) => {
                        let page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
                        crate::write_answer(&mut stream, status, "text/html", page).await;
                        return;
                    }
                    None => {}
                }
                let (status, reply) = match answer(&bot, token, method, &request) {
                    Ok(result) => (200, json!({ "ok": true, "result": result })),
                    Err((status, description)) => {
                        bot.lock().unwrap().refused.push(format!("{method}: {description}"));
                        (status, json!({ "ok": false, "error_code": status, "description": description }))
                    }
                };
                crate::write_answer(&mut stream, status, "application/json", reply.to_string().as_bytes()).await;
            });
        }
    });
    format!("http://{address}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_refuses_what_telegram_would() {
        let bot = Mutex::new(Bot::default());
        let send = |body: Value| answer(&bot, TOKEN, "sendMessage", &body).map(|_| ()).map_err(|(_, e)| e);
        assert!(
            send(json!({ "chat_id": OWNER, "text": "<b>bold</b> &amp; fine" })).is_ok(),
            "no parse_mode: plain text"
        );
        assert!(send(json!({ "chat_id": OWNER, "text": "<b>bold</b> &amp; fine", "parse_mode": "HTML" })).is_ok());
        assert!(send(json!({ "chat_id": OWNER, "text": "a < b", "parse_mode": "HTML" })).is_err());
        assert!(send(json!({ "chat_id": OWNER, "text": "<b>open", "parse_mode": "HTML" })).is_err());
        assert!(send(json!({ "chat_id": OWNER, "text": "<div>x</div>", "parse_mode": "HTML" })).is_err());
        assert!(
            send(json!({ "chat_id": OWNER, "text": "x", "disable_web_page_preview": true })).is_err(),
            "not documented any more"
        );
        assert!(send(json!({ "chat_id": OWNER })).is_err());
        assert!(send(json!({ "chat_id": OWNER, "text": "x".repeat(4097) })).is_err());
        assert!(send(json!({ "chat_id": 5, "text": "x" })).is_err());
        assert!(answer(&bot, TOKEN, "sendPigeon", &json!({})).is_err());
        assert!(answer(&bot, "1:other", "getMe", &json!({})).is_err());
    }
}
