//! What the owner's bot says to the owner, in each of its languages (English, Russian, Persian,
//! Simplified Chinese): events (a burst as one message), answers to the owner's commands, and
//! the card of a user (which users with a chat of their own are shown too).
//!
//! Persian is written right to left: each of its lines begins with a Persian word, or with a
//! right-to-left mark (U+200F), so Telegram lays it out right to left; a command or `@name`
//! inside it comes after a left-to-right mark (U+200E), so its `/` or `@` stays in front of it
//! (and so do the card's sizes and date, which read left to right).

// Text for a message in Telegram's HTML (which takes `&quot;` and numeric entities too), and
// bytes as people read them. Numbers keep their ASCII digits in every language (Persian too),
// as in what the bot tells users, so a card and a reminder read alike.
use hearth_shared::render::page::{Lang, escape, human_bytes as size};
use serde_json::Value;

use crate::store::events::EventView;

/// The most events listed in one message (the rest are counted).
pub(super) const MOST_LINES: usize = 30;

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

/// The language a setting's code names (`en`, `ru`, `fa`, `zh`); English for any other.
fn lang_of(code: &str) -> Lang {
    super::user_text::lang_of(code).unwrap_or_default()
}

/// One text in each language: the `format!` of `lang`'s string, whose `{names}` are taken
/// from where it stands (every one of them already escaped, or a number).
macro_rules! tr {
    ($lang:expr, en: $en:literal, ru: $ru:literal, fa: $fa:literal, zh: $zh:literal $(,)?) => {
        match $lang {
            Lang::En => format!($en),
            Lang::Ru => format!($ru),
            Lang::Fa => format!($fa),
            Lang::Zh => format!($zh),
        }
    };
}

pub(super) fn say(lang: &str, said: Said<'_>) -> String {
    let lang = lang_of(lang);
    match said {
        Said::Hello { bot } => {
            let bot = escape(bot);
            tr!(lang,
                en: "Hearth is connected: @{bot} tells this chat what happens. /help lists the commands.",
                ru: "Hearth подключён: @{bot} будет сообщать сюда о событиях. /help — команды.",
                fa: "اتصال Hearth برقرار شد: \u{200e}@{bot} رویدادها را در این چت خبر می‌دهد. برای دیدن فرمان‌ها \u{200e}/help را بفرستید.",
                zh: "Hearth 已连接：@{bot} 会在此聊天中通知发生的事件。发送 /help 查看命令。",
            )
        }
        Said::Event(event) => event_line(lang, event),
        Said::More(n) => tr!(lang,
            en: "… and {n} more (see the panel)",
            ru: "… и ещё {n} (см. панель)",
            fa: "… و {n} مورد دیگر (در پنل ببینید)",
            zh: "……另有 {n} 条（详见面板）",
        ),
        Said::Help => match lang {
            Lang::En => {
                "/status — the overview\n/user NAME — usage, expiry, the link and its QR code\n/disable NAME, /enable NAME\n/extend NAME DAYS"
            }
            Lang::Ru => {
                "/status — сводка\n/user ИМЯ — трафик, срок, ссылка и QR-код\n/disable ИМЯ, /enable ИМЯ\n/extend ИМЯ ДНЕЙ"
            }
            Lang::Fa => {
                "\u{200f}\u{200e}/status — خلاصهٔ وضعیت\n\u{200f}\u{200e}/user NAME — مصرف، تاریخ انقضا، لینک و کد QR آن\n\u{200f}\u{200e}/disable NAME، \u{200e}/enable NAME\n\u{200f}\u{200e}/extend NAME DAYS"
            }
            Lang::Zh => {
                "/status — 概览\n/user 用户名 — 流量用量、到期时间、订阅链接及其二维码\n/disable 用户名，/enable 用户名\n/extend 用户名 天数"
            }
        }
        .to_owned(),
        Said::NoSuchUser(name) => {
            let name = escape(name);
            tr!(lang,
                en: "No user is named {name}.",
                ru: "Пользователя {name} нет.",
                fa: "کاربری با نام {name} وجود ندارد.",
                zh: "没有名为 {name} 的用户。",
            )
        }
        Said::Done(what) => escape(what),
        Said::Status { users, online, nodes, pending } => {
            let users = escape(users);
            tr!(lang,
                en: "Users — {users}\nNodes online: {online} / {nodes}\nChanges waiting for edges: {pending}",
                ru: "Пользователи — {users}\nУзлы на связи: {online} / {nodes}\nИзменений ждут edge: {pending}",
                fa: "کاربران — {users}\nنودهای آنلاین: {online} / {nodes}\nتغییرهای در انتظار سرورهای لبه: {pending}",
                zh: "用户 — {users}\n在线节点：{online} / {nodes}\n等待推送到边缘服务器的更改：{pending}",
            )
        }
    }
}

/// A user's card: name and status, traffic used of the quota, expiry, and (when given) the
/// subscription link with its QR code.
pub(super) fn card(lang: &str, user: &crate::store::users::UserView, link: Option<&str>) -> String {
    let lang = lang_of(lang);
    let used = size(user.used_up + user.used_down);
    let quota = if user.quota == 0 { "∞".to_owned() } else { size(user.quota) };
    let expires = if user.expires_at == 0 { "—".to_owned() } else { crate::clock::civil_date(user.expires_at) };
    // Each label with what parts it from its value; in Persian, a left-to-right mark too, so
    // "1.5 GiB / 10.0 GiB" and "2027-01-01" read left to right as they are written.
    let (traffic, until) = match lang {
        Lang::En => ("Traffic: ", "Expires: "),
        Lang::Ru => ("Трафик: ", "До: "),
        Lang::Fa => ("ترافیک: \u{200e}", "انقضا: \u{200e}"),
        Lang::Zh => ("流量：", "到期："),
    };
    let mut out = format!(
        "<b>{}</b> ({})\n{traffic}{used} / {quota}\n{until}{expires}",
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
fn event_line(lang: Lang, event: &EventView) -> String {
    let (kind, data) = (event.kind.as_str(), Fields(&event.data));
    let line = match kind.split('.').next() {
        Some("user") => user_line(lang, kind, &data),
        Some("node") => node_line(lang, kind, &data),
        Some("edge") => edge_line(lang, kind, &data),
        _ => owner_line(lang, kind, &data),
    };
    line.unwrap_or_else(|| format!("• {}", escape(kind)))
}

/// An event's data, its values read by JSON pointer (escaped text, or 0 when absent).
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn text(&self, key: &str) -> String {
        escape(self.0.pointer(key).and_then(Value::as_str).unwrap_or_default())
    }

    fn number(&self, key: &str) -> u64 {
        self.0.pointer(key).and_then(Value::as_u64).unwrap_or(0)
    }
}

/// A user's event (`None`: a kind this does not know).
fn user_line(lang: Lang, kind: &str, data: &Fields<'_>) -> Option<String> {
    let user = data.text("/user/name");
    Some(match kind {
        "user.created" => tr!(lang,
            en: "👤 New user {user}",
            ru: "👤 Новый пользователь {user}",
            fa: "👤 کاربر جدید: {user}",
            zh: "👤 新用户 {user}",
        ),
        "user.changed" => {
            let fields: Vec<&str> =
                data.0["fields"].as_array().map_or_else(Vec::new, |f| f.iter().filter_map(Value::as_str).collect());
            let comma = match lang {
                Lang::En | Lang::Ru => ", ",
                Lang::Fa => "، ",
                Lang::Zh => "、",
            };
            let fields = escape(&fields.join(comma));
            tr!(lang,
                en: "✏️ {user} changed: {fields}",
                ru: "✏️ {user} изменён: {fields}",
                fa: "✏️ کاربر {user} ویرایش شد: {fields}",
                zh: "✏️ 用户 {user} 已修改：{fields}",
            )
        }
        "user.deleted" => tr!(lang,
            en: "🗑 {user} deleted",
            ru: "🗑 {user} удалён",
            fa: "🗑 کاربر {user} حذف شد",
            zh: "🗑 用户 {user} 已删除",
        ),
        "user.disabled" => tr!(lang,
            en: "⛔ {user} disabled",
            ru: "⛔ {user} отключён",
            fa: "⛔ کاربر {user} غیرفعال شد",
            zh: "⛔ 用户 {user} 已禁用",
        ),
        "user.expired" => tr!(lang,
            en: "⌛ {user} expired",
            ru: "⌛ У {user} истёк срок",
            fa: "⌛ اعتبار کاربر {user} به پایان رسید",
            zh: "⌛ 用户 {user} 已到期",
        ),
        "user.over_quota" => {
            let (used, quota) = (size(data.number("/used")), size(data.number("/quota")));
            tr!(lang,
                en: "📉 {user} used up the quota ({used} of {quota})",
                ru: "📉 {user} израсходовал квоту ({used} из {quota})",
                fa: "📉 سهمیهٔ کاربر {user} تمام شد ({used} از {quota})",
                zh: "📉 用户 {user} 已用完配额（{used} / {quota}）",
            )
        }
        "user.near_quota" => {
            let percent = data.number("/percent");
            tr!(lang,
                en: "⚠️ {user} used {percent}% of the quota",
                ru: "⚠️ {user} израсходовал {percent}% квоты",
                fa: "⚠️ کاربر {user} {percent}٪ از سهمیه‌اش را مصرف کرده است",
                zh: "⚠️ 用户 {user} 已使用配额的 {percent}%",
            )
        }
        "user.over_device_limit" => tr!(lang,
            en: "📱 {user} is over the device limit",
            ru: "📱 {user} превысил лимит устройств",
            fa: "📱 کاربر {user} از محدودیت دستگاه فراتر رفته است",
            zh: "📱 用户 {user} 超出了设备数限制",
        ),
        _ => return None,
    })
}

/// A node's event.
fn node_line(lang: Lang, kind: &str, data: &Fields<'_>) -> Option<String> {
    Some(match kind {
        "node.offline" => {
            let node = data.text("/node/name");
            tr!(lang,
                en: "🔴 Node {node} is offline",
                ru: "🔴 Узел {node} недоступен",
                fa: "🔴 نود {node} آفلاین است",
                zh: "🔴 节点 {node} 已离线",
            )
        }
        "node.online" => {
            let node = data.text("/node/name");
            tr!(lang,
                en: "🟢 Node {node} is back",
                ru: "🟢 Узел {node} снова на связи",
                fa: "🟢 نود {node} دوباره آنلاین شد",
                zh: "🟢 节点 {node} 已恢复在线",
            )
        }
        "node.certificate_expiring" => {
            let (node, error) = (data.text("/node/name"), data.text("/error"));
            tr!(lang,
                en: "🔐 The certificate of node {node} expires soon and cannot be renewed: {error}",
                ru: "🔐 Сертификат узла {node} скоро истекает, а продлить его не удаётся: {error}",
                fa: "🔐 گواهی نود {node} به‌زودی منقضی می‌شود و تمدید آن ممکن نیست: {error}",
                zh: "🔐 节点 {node} 的证书即将过期，且无法续期：{error}",
            )
        }
        _ => return None,
    })
}

/// An edge's event.
fn edge_line(lang: Lang, kind: &str, data: &Fields<'_>) -> Option<String> {
    Some(match kind {
        "edge.failing" => {
            let (edge, error) = (data.text("/edge/name"), data.text("/error"));
            tr!(lang,
                en: "🔴 Pushes to edge {edge} fail: {error}",
                ru: "🔴 Не удаётся отправить на edge {edge}: {error}",
                fa: "🔴 ارسال به سرور لبه {edge} ناموفق است: {error}",
                zh: "🔴 推送到边缘服务器 {edge} 失败：{error}",
            )
        }
        "edge.failover" => {
            let (edge, to) = (data.text("/edge/name"), data.text("/to/name"));
            tr!(lang,
                en: "🔀 Edge {edge} kept failing: links moved to {to} (make {edge} active again in Settings to move them back)",
                ru: "🔀 Сервер ссылок {edge} не отвечает: ссылки перенесены на {to} (сделайте {edge} активным в настройках, чтобы вернуть их)",
                fa: "🔀 سرور لبه {edge} پیاپی ناموفق بود: لینک‌ها به {to} منتقل شدند (برای برگرداندنشان، {edge} را در «تنظیمات» دوباره فعال کنید)",
                zh: "🔀 边缘服务器 {edge} 持续失败：链接已转移到 {to}（如需将链接移回，请在“设置”中重新启用 {edge}）",
            )
        }
        "edge.disk_full" => {
            let edge = data.text("/edge/name");
            tr!(lang,
                en: "💾 The disk of edge {edge} is full: it serves what it holds but takes no changes",
                ru: "💾 Диск сервера ссылок {edge} заполнен: он отдаёт то, что хранит, но не принимает изменения",
                fa: "💾 دیسک سرور لبه {edge} پر است: آنچه را دارد همچنان ارائه می‌کند، اما تغییری نمی‌پذیرد",
                zh: "💾 边缘服务器 {edge} 的磁盘已满：它仍提供已保存的内容，但不再接受更改",
            )
        }
        "edge.recovered" => {
            let edge = data.text("/edge/name");
            tr!(lang,
                en: "🟢 Edge {edge} takes pushes again",
                ru: "🟢 Edge {edge} снова принимает изменения",
                fa: "🟢 سرور لبه {edge} دوباره تغییرها را می‌پذیرد",
                zh: "🟢 边缘服务器 {edge} 已恢复接收推送",
            )
        }
        _ => return None,
    })
}

/// The owner's own events: sign-ins, keys, releases.
fn owner_line(lang: Lang, kind: &str, data: &Fields<'_>) -> Option<String> {
    Some(match kind {
        "signin.new_address" => {
            let address = data.text("/address");
            tr!(lang,
                en: "🔑 Sign-in from a new address: {address}",
                ru: "🔑 Вход с нового адреса: {address}",
                fa: "🔑 ورود از نشانی جدید: {address}",
                zh: "🔑 来自新地址的登录：{address}",
            )
        }
        "key.rotated" => {
            let serial = data.number("/serial");
            tr!(lang,
                en: "🔁 Keys rotated (rotation {serial})",
                ru: "🔁 Ключи заменены (замена {serial})",
                fa: "🔁 کلیدها تعویض شدند (تعویض شمارهٔ {serial})",
                zh: "🔁 密钥已轮换（第 {serial} 次轮换）",
            )
        }
        "release.rolled_out" => {
            let release = data.number("/release");
            tr!(lang,
                en: "🚀 Release {release} runs on every node",
                ru: "🚀 Релиз {release} работает на всех узлах",
                fa: "🚀 نسخهٔ {release} روی همهٔ نودها اجرا می‌شود",
                zh: "🚀 版本 {release} 已在所有节点上运行",
            )
        }
        "release.stopped" => {
            let (release, why) = (data.number("/release"), data.text("/why"));
            tr!(lang,
                en: "⏹ Release {release} stopped: {why}",
                ru: "⏹ Релиз {release} остановлен: {why}",
                fa: "⏹ انتشار نسخهٔ {release} متوقف شد: {why}",
                zh: "⏹ 版本 {release} 的发布已停止：{why}",
            )
        }
        _ => return None,
    })
}

/// The message for a burst of events (at most [`MOST_LINES`] listed).
pub(super) fn message(lang: &str, told: &[EventView]) -> String {
    let mut lines: Vec<String> = told.iter().take(MOST_LINES).map(|e| say(lang, Said::Event(e))).collect();
    if told.len() > MOST_LINES {
        lines.push(say(lang, Said::More(told.len() - MOST_LINES)));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::events::{KINDS, takes};
    use crate::store::telegram::LANGS;

    /// Every kind of event the bot can be told of (the webhooks' test event is not one).
    fn kinds() -> Vec<&'static str> {
        KINDS.iter().copied().filter(|kind| takes("*", kind)).collect()
    }

    /// An event of `kind` whose every value needs escaping.
    fn event(kind: &str) -> EventView {
        let data = json!({
            "user": { "id": 7, "name": "u<1>&" },
            "node": { "name": "n<2>&" },
            "edge": { "name": "e<3>&" },
            "to": { "name": "t<4>&" },
            "fields": ["quota", "f<5>&"],
            "error": "x<6>&",
            "address": "a<7>&",
            "why": "w<8>&",
            "used": 10_737_418_240u64,
            "quota": 10_737_418_240u64,
            "percent": 80,
            "serial": 3,
            "release": 12,
        });
        EventView { id: 1, kind: kind.into(), at: 0, subject: String::new(), data }
    }

    /// The values of [`event`] as its lines must show them.
    const ESCAPED: [&str; 8] = [
        "u&lt;1&gt;&amp;",
        "n&lt;2&gt;&amp;",
        "e&lt;3&gt;&amp;",
        "t&lt;4&gt;&amp;",
        "f&lt;5&gt;&amp;",
        "x&lt;6&gt;&amp;",
        "a&lt;7&gt;&amp;",
        "w&lt;8&gt;&amp;",
    ];

    /// Whether `text` is written in `lang`'s own script (not English left as it was).
    fn in_its_script(lang: &str, text: &str) -> bool {
        match lang {
            "fa" => text.chars().any(|c| ('\u{0621}'..='\u{06CC}').contains(&c)),
            "zh" => text.chars().any(|c| ('\u{4E00}'..='\u{9FFF}').contains(&c)),
            "ru" => text.chars().any(|c| ('\u{0410}'..='\u{044F}').contains(&c)),
            _ => true,
        }
    }

    /// The same text in every language: each one there, whole, and its own.
    fn check_each_language(what: &str, texts: &[String], distinct: bool) {
        for (lang, text) in LANGS.iter().zip(texts) {
            assert!(!text.trim().is_empty(), "{what} in {lang} is empty");
            assert!(!text.contains(['{', '}']), "{what} in {lang} left a placeholder: {text}");
            if distinct {
                assert!(in_its_script(lang, text), "{what} in {lang} is not in its language: {text}");
            }
        }
        if distinct {
            let unique: std::collections::HashSet<&String> = texts.iter().collect();
            assert_eq!(unique.len(), texts.len(), "{what} is the same in two languages: {texts:?}");
        }
    }

    #[test]
    fn every_event_is_told_in_every_language() {
        for kind in kinds() {
            let event = event(kind);
            let texts: Vec<String> = LANGS.iter().map(|lang| say(lang, Said::Event(&event))).collect();
            check_each_language(kind, &texts, true);
            let english = &texts[0];
            assert!(!english.starts_with("• "), "{kind} has no text of its own");
            for (lang, text) in LANGS.iter().zip(&texts) {
                assert!(!text.contains('<') && !text.contains("<1>"), "{kind} in {lang} is not escaped: {text}");
                // Every value the English line names, as often, escaped.
                for value in ESCAPED {
                    let (want, got) = (english.matches(value).count(), text.matches(value).count());
                    assert_eq!(got, want, "{kind} in {lang} names {value} {got} times, English {want}: {text}");
                }
            }
            if !matches!(kind, "key.rotated" | "release.rolled_out") {
                assert!(english.contains("&lt;"), "{kind} names no value: {english}");
            }
        }
        // A kind the bot does not know is named as it is.
        let unknown = event("made.<up>");
        for lang in LANGS {
            assert_eq!(say(lang, Said::Event(&unknown)), "• made.&lt;up&gt;");
        }
    }

    /// What the bot says to the owner, each kind once, with values that need escaping.
    fn everything_said(event: &EventView) -> Vec<(&'static str, Said<'_>, bool)> {
        vec![
            ("Hello", Said::Hello { bot: "b<1>&" }, true),
            ("Event", Said::Event(event), true),
            ("More", Said::More(10), false),
            ("Help", Said::Help, false),
            ("NoSuchUser", Said::NoSuchUser("u<1>&"), true),
            ("Done", Said::Done("u<1>&: active"), true),
            ("Status", Said::Status { users: "active: 3, <x>&", online: 2, nodes: 3, pending: 1 }, true),
        ]
    }

    #[test]
    fn everything_said_is_said_in_every_language() {
        let event = event("node.offline");
        for (what, said, escaped) in everything_said(&event) {
            let texts: Vec<String> = LANGS.iter().map(|lang| say(lang, said)).collect();
            // What was done is told as it is, in any language.
            check_each_language(what, &texts, what != "Done");
            for (lang, text) in LANGS.iter().zip(&texts) {
                assert!(!text.contains('<'), "{what} in {lang} is not escaped: {text}");
                assert_eq!(text.contains("&lt;"), escaped, "{what} in {lang}: {text}");
            }
        }
        // A language the bot does not speak is English.
        for code in ["", "de", "EN", "fa-IR"] {
            assert_eq!(say(code, Said::Help), say("en", Said::Help), "{code}");
        }
    }

    #[test]
    fn persian_and_chinese_as_they_read() {
        let near = |percent| EventView {
            data: json!({ "user": { "name": "u<0>" }, "percent": percent }),
            ..event("user.near_quota")
        };
        assert_eq!(message("fa", &[near(80)]), "⚠️ کاربر u&lt;0&gt; 80٪ از سهمیه‌اش را مصرف کرده است");
        assert_eq!(message("zh", &[near(95)]), "⚠️ 用户 u&lt;0&gt; 已使用配额的 95%");
        let offline = EventView { data: json!({ "node": { "name": "fra-1" } }), ..event("node.offline") };
        assert_eq!(say("fa", Said::Event(&offline)), "🔴 نود fra-1 آفلاین است");
        assert_eq!(say("zh", Said::Event(&offline)), "🔴 节点 fra-1 已离线");
        assert_eq!(
            say("fa", Said::Event(&event("user.over_quota"))),
            "📉 سهمیهٔ کاربر u&lt;1&gt;&amp; تمام شد (10.0 GiB از 10.0 GiB)"
        );
        assert_eq!(say("zh", Said::More(12)), "……另有 12 条（详见面板）");
        assert_eq!(say("fa", Said::More(12)), "… و 12 مورد دیگر (در پنل ببینید)");
        assert_eq!(
            say("zh", Said::Status { users: "active: 3", online: 2, nodes: 3, pending: 0 }),
            "用户 — active: 3\n在线节点：2 / 3\n等待推送到边缘服务器的更改：0"
        );
        // Persian lines that begin with a command are laid out right to left all the same.
        assert!(say("fa", Said::Help).lines().all(|line| line.starts_with("\u{200f}\u{200e}/")));
        // English and Russian as they always were.
        assert_eq!(say("en", Said::Event(&offline)), "🔴 Node fra-1 is offline");
        assert_eq!(say("ru", Said::Event(&offline)), "🔴 Узел fra-1 недоступен");
    }

    /// Whether `html` is Telegram HTML that Telegram takes: only `b`, `i`, `code` and `pre`,
    /// each closed in order, and `&` only in the entities `escape` writes.
    fn balanced(html: &str) -> Result<(), String> {
        let mut open: Vec<&str> = Vec::new();
        let mut rest = html;
        while let Some(at) = rest.find(['<', '>', '&']) {
            let after = &rest[at..];
            if after.starts_with('>') {
                return Err(format!("a bare > at {after:?}"));
            }
            if after.starts_with('&') {
                let entity = ["&lt;", "&gt;", "&amp;", "&quot;", "&#39;"]
                    .into_iter()
                    .find(|e| after.starts_with(e))
                    .ok_or_else(|| format!("a bare & at {after:?}"))?;
                rest = &after[entity.len()..];
                continue;
            }
            let end = after.find('>').ok_or_else(|| format!("a tag not closed at {after:?}"))?;
            let tag = &after[1..end];
            match tag.strip_prefix('/') {
                Some(name) => {
                    if open.pop() != Some(name) {
                        return Err(format!("</{name}> closes nothing open"));
                    }
                }
                None => {
                    if !["b", "i", "code", "pre"].contains(&tag) {
                        return Err(format!("<{tag}> is not a tag the bot uses"));
                    }
                    open.push(tag);
                }
            }
            rest = &after[end + 1..];
        }
        if open.is_empty() { Ok(()) } else { Err(format!("left open: {open:?}")) }
    }

    #[tokio::test]
    async fn every_text_is_balanced_telegram_html() {
        assert!(balanced("<b>a &amp; b</b> <pre>x</pre>").is_ok());
        for bad in ["<b>a", "a</b>", "<a href=\"x\">x</a>", "a & b", "a > b", "<b><i>x</b></i>"] {
            assert!(balanced(bad).is_err(), "{bad}");
        }
        // A user as the bot reads it, with a name and status that need escaping.
        let control = crate::testing::TestControl::new(false);
        let state = control.app.clone();
        let mut user = control
            .app
            .db
            .write(move |tx| {
                let input = crate::store::users::UserInput { name: Some("ann".into()), ..Default::default() };
                let id = crate::users::create(tx, &state.signer, "test", &input, 1)?.id;
                crate::store::users::get(tx, id)
            })
            .await
            .unwrap();
        user.name = "u<1>&".into();
        user.status = "<active>".into();
        user.quota = 10_737_418_240;
        user.used_down = 1_610_612_736;
        user.expires_at = 1_798_761_600;
        let burst: Vec<EventView> = kinds().iter().cycle().take(MOST_LINES + 5).map(|kind| event(kind)).collect();
        for lang in LANGS {
            let mut texts = vec![message(lang, &burst)];
            texts.extend(everything_said(&burst[0]).into_iter().map(|(_, said, _)| say(lang, said)));
            texts.extend(kinds().iter().map(|kind| say(lang, Said::Event(&event(kind)))));
            for link in [None, Some("https://sub.example/s/a<b>&c")] {
                let card = card(lang, &user, link);
                assert!(card.starts_with("<b>u&lt;1&gt;&amp;</b> (&lt;active&gt;)\n"), "{lang}: {card}");
                assert!(!card.contains(['{', '}']), "{lang}: {card}");
                texts.push(card);
            }
            for text in texts {
                if let Err(e) = balanced(&text) {
                    panic!("{lang}: {e}: {text}");
                }
            }
        }
        assert_eq!(
            card("en", &user, None),
            "<b>u&lt;1&gt;&amp;</b> (&lt;active&gt;)\nTraffic: 1.5 GiB / 10.0 GiB\nExpires: 2027-01-01"
        );
        assert_eq!(
            card("fa", &user, None),
            "<b>u&lt;1&gt;&amp;</b> (&lt;active&gt;)\nترافیک: \u{200e}1.5 GiB / 10.0 GiB\nانقضا: \u{200e}2027-01-01"
        );
        assert_eq!(
            card("zh", &user, None),
            "<b>u&lt;1&gt;&amp;</b> (&lt;active&gt;)\n流量：1.5 GiB / 10.0 GiB\n到期：2027-01-01"
        );
    }
}
