//! What the owner's bot says, in each of its languages: events (a burst as one message),
//! answers to the owner's commands, and what users with a chat of their own are told.

// Text for a message in Telegram's HTML (which takes `&quot;` and numeric entities too), and
// bytes as people read them.
use hearth_shared::render::page::{escape, human_bytes as size};
use serde_json::Value;

use super::MOST_LINES;
use crate::store::events::EventView;

/// What the bot says, in each of its languages.
#[derive(Clone, Copy)]
pub(super) enum Said<'a> {
    Hello { bot: &'a str },
    Event(&'a EventView),
    More(usize),
    Help,
    NoSuchUser(&'a str),
    Done(&'a str),
    Status { users: &'a str, online: u64, nodes: u64, pending: u64 },
}

pub(super) fn say(lang: &str, said: Said<'_>) -> String {
    let ru = lang == "ru";
    match said {
        Said::Hello { bot } => {
            if ru {
                format!("Hearth подключён: @{} будет сообщать сюда о событиях. /help — команды.", escape(bot))
            } else {
                format!("Hearth is connected: @{} tells this chat what happens. /help lists the commands.", escape(bot))
            }
        }
        Said::Event(event) => event_line(ru, event),
        Said::More(n) => {
            if ru {
                format!("… и ещё {n} (см. панель)")
            } else {
                format!("… and {n} more (see the panel)")
            }
        }
        Said::Help => if ru {
            "/status — сводка\n/user ИМЯ — трафик, срок, ссылка и QR-код\n/disable ИМЯ, /enable ИМЯ\n/extend ИМЯ ДНЕЙ"
        } else {
            "/status — the overview\n/user NAME — usage, expiry, the link and its QR code\n/disable NAME, /enable NAME\n/extend NAME DAYS"
        }
        .to_owned(),
        Said::NoSuchUser(name) => {
            if ru {
                format!("Пользователя {} нет.", escape(name))
            } else {
                format!("No user is named {}.", escape(name))
            }
        }
        Said::Done(what) => escape(what),
        Said::Status { users, online, nodes, pending } => {
            let users = escape(users);
            if ru {
                format!("Пользователи — {users}\nУзлы на связи: {online} / {nodes}\nИзменений ждут edge: {pending}")
            } else {
                format!("Users — {users}\nNodes online: {online} / {nodes}\nChanges waiting for edges: {pending}")
            }
        }
    }
}

/// A user's card: name and status, traffic used of the quota, expiry, and (when given) the
/// subscription link with its QR code.
pub(super) fn card(lang: &str, user: &crate::store::users::UserView, link: Option<&str>) -> String {
    let used = size(user.used_up + user.used_down);
    let quota = if user.quota == 0 { "∞".to_owned() } else { size(user.quota) };
    let expires = if user.expires_at == 0 { "—".to_owned() } else { crate::clock::civil_date(user.expires_at) };
    let (traffic, until) = match lang {
        "ru" => ("Трафик:", "До:"),
        "fa" => ("ترافیک:", "تا:"),
        "zh" => ("流量：", "到期："),
        _ => ("Traffic:", "Expires:"),
    };
    let mut out = format!(
        "<b>{}</b> ({})\n{traffic} {used} / {quota}\n{until} {expires}",
        escape(&user.name),
        escape(&user.status)
    );
    if let Some(link) = link {
        out.push_str(&format!(
            "\n{}\n<pre>{}</pre>",
            escape(link),
            escape(&hearth_shared::render::page::qr_text(link))
        ));
    }
    out
}

/// One event as a line of a message.
fn event_line(ru: bool, event: &EventView) -> String {
    let data = &event.data;
    let text = |key: &str| escape(data.pointer(key).and_then(Value::as_str).unwrap_or_default());
    let number = |key: &str| data.pointer(key).and_then(Value::as_u64).unwrap_or(0);
    let user = text("/user/name");
    let (en, ru_text) = match event.kind.as_str() {
        "user.created" => (format!("👤 New user {user}"), format!("👤 Новый пользователь {user}")),
        "user.changed" => {
            let fields: Vec<&str> =
                data["fields"].as_array().map_or_else(Vec::new, |f| f.iter().filter_map(Value::as_str).collect());
            let fields = escape(&fields.join(", "));
            (format!("✏️ {user} changed: {fields}"), format!("✏️ {user} изменён: {fields}"))
        }
        "user.deleted" => (format!("🗑 {user} deleted"), format!("🗑 {user} удалён")),
        "user.disabled" => (format!("⛔ {user} disabled"), format!("⛔ {user} отключён")),
        "user.expired" => (format!("⌛ {user} expired"), format!("⌛ У {user} истёк срок")),
        "user.over_quota" => {
            let (used, quota) = (size(number("/used")), size(number("/quota")));
            (
                format!("📉 {user} used up the quota ({used} of {quota})"),
                format!("📉 {user} израсходовал квоту ({used} из {quota})"),
            )
        }
        "user.near_quota" => {
            let percent = number("/percent");
            (format!("⚠️ {user} used {percent}% of the quota"), format!("⚠️ {user} израсходовал {percent}% квоты"))
        }
        "user.over_device_limit" => {
            (format!("📱 {user} is over the device limit"), format!("📱 {user} превысил лимит устройств"))
        }
        "node.offline" => {
            let node = text("/node/name");
            (format!("🔴 Node {node} is offline"), format!("🔴 Узел {node} недоступен"))
        }
        "node.online" => {
            let node = text("/node/name");
            (format!("🟢 Node {node} is back"), format!("🟢 Узел {node} снова на связи"))
        }
        "node.certificate_expiring" => {
            let (node, error) = (text("/node/name"), text("/error"));
            (
                format!("🔐 The certificate of node {node} expires soon and cannot be renewed: {error}"),
                format!("🔐 Сертификат узла {node} скоро истекает, а продлить его не удаётся: {error}"),
            )
        }
        "edge.failing" => {
            let (edge, error) = (text("/edge/name"), text("/error"));
            (
                format!("🔴 Pushes to edge {edge} fail: {error}"),
                format!("🔴 Не удаётся отправить на edge {edge}: {error}"),
            )
        }
        "edge.failover" => {
            let (edge, to) = (text("/edge/name"), text("/to/name"));
            (
                format!(
                    "🔀 Edge {edge} kept failing: links moved to {to} (make {edge} active again in Settings to move them back)"
                ),
                format!(
                    "🔀 Сервер ссылок {edge} не отвечает: ссылки перенесены на {to} (сделайте {edge} активным в настройках, чтобы вернуть их)"
                ),
            )
        }
        "edge.disk_full" => {
            let edge = text("/edge/name");
            (
                format!("💾 The disk of edge {edge} is full: it serves what it holds but takes no changes"),
                format!("💾 Диск сервера ссылок {edge} заполнен: он отдаёт то, что хранит, но не принимает изменения"),
            )
        }
        "edge.recovered" => {
            let edge = text("/edge/name");
            (format!("🟢 Edge {edge} takes pushes again"), format!("🟢 Edge {edge} снова принимает изменения"))
        }
        "signin.new_address" => {
            let address = text("/address");
            (format!("🔑 Sign-in from a new address: {address}"), format!("🔑 Вход с нового адреса: {address}"))
        }
        "key.rotated" => {
            let serial = number("/serial");
            (format!("🔁 Keys rotated (rotation {serial})"), format!("🔁 Ключи заменены (замена {serial})"))
        }
        "release.rolled_out" => {
            let release = number("/release");
            (format!("🚀 Release {release} runs on every node"), format!("🚀 Релиз {release} работает на всех узлах"))
        }
        "release.stopped" => {
            let (release, why) = (number("/release"), text("/why"));
            (format!("⏹ Release {release} stopped: {why}"), format!("⏹ Релиз {release} остановлен: {why}"))
        }
        other => (format!("• {}", escape(other)), format!("• {}", escape(other))),
    };
    if ru { ru_text } else { en }
}

/// The message for a burst of events (at most [`MOST_LINES`] listed).
pub(super) fn message(lang: &str, told: &[EventView]) -> String {
    let mut lines: Vec<String> = told.iter().take(MOST_LINES).map(|e| say(lang, Said::Event(e))).collect();
    if told.len() > MOST_LINES {
        lines.push(say(lang, Said::More(told.len() - MOST_LINES)));
    }
    lines.join("\n")
}
