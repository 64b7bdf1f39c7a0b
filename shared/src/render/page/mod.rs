//! The page a person sees when they open their subscription link in a browser, in their
//! language ([`text`]): who they are, whether they can connect and what to do when they
//! cannot, how much they used and until when, and the set-up steps for their device
//! ([`guide`]): which app to install, one button that imports the subscription into it, what
//! to tap. A computer also gets a QR code to scan with a phone; every server has its link.
//!
//! Plain HTML with inline CSS (light and dark follow the system) and one small script (the
//! copy button; the page works without it), both allowed by their hashes in a strict
//! Content-Security-Policy ([`csp`]): nothing else loads or runs.

pub mod guide;
pub mod text;

use std::fmt::Write as _;
use std::sync::LazyLock;

use base64::Engine as _;
use sha2::Digest as _;

pub use guide::Platform;
pub use text::Lang;

use super::entries::{entries, title};
use super::uri;
use crate::wire::{Snapshot, Status};

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `bytes` in binary units, one decimal: "1.5 GiB" (English; [`Lang::size`] for the others).
pub fn human_bytes(bytes: u64) -> String {
    Lang::En.size(bytes)
}

/// Who is looking at the page: the language and the device it speaks to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Viewer {
    /// The language.
    pub lang: Lang,
    /// The device the set-up steps are for.
    pub platform: Platform,
}

impl Viewer {
    /// The viewer a request names: `?lang=` and `?os=` (the page's switches) first, then the
    /// `Accept-Language` and `User-Agent` headers.
    pub fn of(user_agent: &str, accept_language: &str, query: &str) -> Viewer {
        let param = |key: &str| query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='));
        Viewer {
            lang: param("lang").and_then(Lang::from_tag).unwrap_or_else(|| Lang::from_accept_language(accept_language)),
            platform: param("os")
                .and_then(Platform::from_code)
                .unwrap_or_else(|| Platform::from_user_agent(user_agent)),
        }
    }

    /// The query of the page for `lang` and `platform`, HTML-escaped for an `href`.
    fn href(lang: Lang, platform: Platform) -> String {
        format!("?lang={}&amp;os={}", lang.text().code, platform.code())
    }
}

/// The page for `snapshot`, whose subscription link is `sub_url`, in English for Android.
pub fn render(snapshot: &Snapshot, sub_url: &str) -> String {
    render_at(snapshot, sub_url, &crate::wire::Mobility::default(), Viewer::default())
}

/// [`render`] for `viewer`, knowing where links went: a link that moved offers the link at the
/// primary (with a notice), and every mirror is listed.
pub fn render_at(snapshot: &Snapshot, fetched: &str, mobility: &crate::wire::Mobility, viewer: Viewer) -> String {
    let t = viewer.lang.text();
    let sub_url = mobility.moved_to.as_deref().unwrap_or(fetched);
    let title = escape(title(snapshot));
    let mut html = String::with_capacity(16 * 1024);
    head(&mut html, &title, viewer);
    let (state, todo) = standing(snapshot, t);
    account(&mut html, snapshot, &title, viewer.lang, state, todo);
    let help = help(snapshot, t);
    // A link that moved says so whatever the account's state: the old domain may be the only
    // one this person still reaches, and the new link is theirs once the account works again.
    if let Some(to) = &mobility.moved_to {
        let _ = write!(html, "<p class=\"announce\">{}<br>{}</p>", t.moved, escape(to));
    }
    if todo.is_some() {
        // Nothing to import: an app would only show why it cannot connect.
        html.push_str(&help);
        html.push_str("</main></body></html>");
        return html;
    }
    if let Some(announce) = snapshot.profile.announce.as_deref().filter(|a| !a.trim().is_empty()) {
        let _ = write!(html, "<p class=\"announce\">{}</p>", escape(announce));
    }
    setup(&mut html, viewer, sub_url, super::entries::title(snapshot));
    link(&mut html, t, sub_url);
    mirrors(&mut html, t, mobility, sub_url);
    servers(&mut html, snapshot, t, viewer.platform);
    html.push_str(&help);
    let _ = write!(html, "<script>{SCRIPT}</script></main></body></html>");
    html
}

/// The page's head (`title` escaped) and the switch between its languages.
fn head(html: &mut String, title: &str, viewer: Viewer) {
    let Viewer { lang, platform } = viewer;
    let t = lang.text();
    let _ = write!(
        html,
        "<!doctype html><html lang=\"{code}\" dir=\"{dir}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title><style>{STYLE}</style></head><body><main>\
         <nav class=\"langs\" aria-label=\"{label}\">",
        code = t.code,
        dir = if t.rtl { "rtl" } else { "ltr" },
        label = t.language,
    );
    for other in Lang::ALL {
        let _ = write!(
            html,
            "<a href=\"{}\" hreflang=\"{code}\" lang=\"{code}\"{current}>{}</a>",
            Viewer::href(other, platform),
            other.text().name,
            code = other.text().code,
            current = if other == lang { " aria-current=\"true\"" } else { "" },
        );
    }
    html.push_str("</nav>");
}

/// Where the account stands, in `t`'s words, and what to do when it cannot connect (`None`:
/// nothing, it can).
fn standing(snapshot: &Snapshot, t: &'static text::Text) -> (&'static str, Option<&'static str>) {
    match snapshot.status {
        // No server to reach yet (none set up, or none in the person's groups): nothing to import.
        _ if snapshot.status.can_connect() && snapshot.endpoints.is_empty() => (t.preparing, Some(t.todo_preparing)),
        Status::Active => (t.active, None),
        Status::NotStarted => (t.not_started, None),
        Status::Disabled => (t.disabled, Some(t.todo_disabled)),
        Status::Expired => (t.expired, Some(t.todo_expired)),
        Status::OverQuota => (t.over_quota, Some(t.todo_over_quota)),
    }
}

/// Whose the page is (`title` escaped), where the account stands ([`standing`]) and what it
/// used until when.
fn account(html: &mut String, snapshot: &Snapshot, title: &str, lang: Lang, state: &str, todo: Option<&str>) {
    let t = lang.text();
    let _ = write!(
        html,
        "<h1>{title}</h1><p class=\"who\">{name}</p><p class=\"status {class}\">{state}</p>",
        name = escape(&snapshot.name),
        class = if todo.is_none() { "ok" } else { "off" },
    );
    if let Some(todo) = todo {
        let same = if snapshot.status.can_connect() { "" } else { t.same_link };
        let _ = write!(html, "<p class=\"todo\">{todo} {same}</p>");
    }
    let used = snapshot.used_up.saturating_add(snapshot.used_down);
    let used = match snapshot.quota {
        0 => t.used_no_limit.replace("{used}", &lang.size(used)),
        quota => t.used_of.replace("{used}", &lang.size(used)).replace("{total}", &lang.size(quota)),
    };
    let expires = if snapshot.expires_at == 0 { t.never.to_owned() } else { lang.date(snapshot.expires_at) };
    let _ = write!(html, "<dl><dt>{}</dt><dd>{used}</dd><dt>{}</dt><dd>{expires}</dd></dl>", t.used, t.expires);
}

/// Where to get help, shown last whatever the account's state: the owner's support link, and
/// the owner's bot.
fn help(snapshot: &Snapshot, t: &text::Text) -> String {
    let mut help = snapshot
        .profile
        .support_url
        .as_deref()
        .map(|support| format!("<p><a class=\"button\" href=\"{}\">{}</a></p>", escape(support), t.help))
        .unwrap_or_default();
    // The owner's bot, for reminders and the link in a chat: bound with a one-time code.
    if let Some(telegram) = snapshot.telegram.as_ref().filter(|link| link.is_valid()) {
        let _ = write!(
            help,
            "<section><h2>{}</h2><p>{}</p><p><a class=\"button\" href=\"{}\" rel=\"noopener\">{}</a></p></section>",
            t.telegram,
            t.telegram_text,
            escape(&telegram.url(t.code)),
            t.telegram_button,
        );
    }
    help
}

/// The subscription link, with its copy button.
fn link(html: &mut String, t: &text::Text, sub_url: &str) {
    let _ = write!(
        html,
        "<section><h2 id=\"link-h\">{heading}</h2><p>{hint}</p><div class=\"copy\"><input id=\"link\" readonly \
         value=\"{url}\" aria-labelledby=\"link-h\"><button type=\"button\" class=\"button\" data-copy=\"link\" \
         data-done=\"{copied}\" aria-live=\"polite\" hidden>{copy}</button></div></section>",
        heading = t.link,
        hint = t.link_hint,
        url = escape(sub_url),
        copied = t.copied,
        copy = t.copy,
    );
}

/// The link's mirrors but the one offered (`sub_url`), if it has any.
fn mirrors(html: &mut String, t: &text::Text, mobility: &crate::wire::Mobility, sub_url: &str) {
    let others: Vec<&String> = mobility.mirrors.iter().filter(|m| m.as_str() != sub_url).collect();
    if !others.is_empty() {
        let _ = write!(html, "<section><h2>{}</h2><p>{}</p>", t.mirrors, t.mirrors_text);
        for mirror in others {
            let _ = write!(html, "<input readonly value=\"{}\" aria-label=\"{}\">", escape(mirror), t.mirror_label);
        }
        html.push_str("</section>");
    }
}

/// Every server's own link, each with its QR code on a computer.
fn servers(html: &mut String, snapshot: &Snapshot, t: &text::Text, platform: Platform) {
    let _ = write!(html, "<section><h2>{}</h2>", t.servers);
    for entry in entries(snapshot, &[]) {
        let link = uri::link(&entry);
        let _ = write!(
            html,
            "<details class=\"server\"><summary>{}</summary>{}<input readonly value=\"{}\" aria-label=\"{}\"></details>",
            escape(&entry.name),
            // A phone has no use for a code it would have to scan with itself.
            if platform.is_phone() { String::new() } else { format!("<figure>{}</figure>", qr_svg(&link)) },
            escape(&link),
            t.server_label,
        );
    }
    html.push_str("</section>");
}

/// The set-up steps for the viewer's platform: install the first app, import with one
/// button, connect; on a computer a QR code to scan with a phone; the other apps folded away.
fn setup(html: &mut String, viewer: Viewer, sub_url: &str, name: &str) {
    let Viewer { lang, platform } = viewer;
    let t = lang.text();
    let _ = write!(
        html,
        "<section class=\"setup\"><h2>{}</h2><nav class=\"devices\" aria-label=\"{}\">",
        t.setup.replace("{platform}", platform.name()),
        t.device,
    );
    for other in Platform::ALL {
        let _ = write!(
            html,
            "<a href=\"{}\"{}>{}</a>",
            Viewer::href(lang, other),
            if other == platform { " aria-current=\"true\"" } else { "" },
            other.name(),
        );
    }
    let apps = platform.apps();
    let first = &apps[0];
    // A phone is tapped, a computer clicked.
    let tap = match first.import {
        guide::Import::Hiddify if platform.is_phone() => t.tap_hiddify.to_owned(),
        guide::Import::Hiddify => t.click_hiddify.to_owned(),
        _ => t.tap_other.replace("{app}", first.name),
    };
    let _ = write!(
        html,
        "</nav><ol class=\"steps\"><li><strong>{install}</strong> <span class=\"stores\">{stores}</span></li>\
         <li><strong>{add}</strong> {button}</li><li>{tap}</li></ol>",
        install = t.install.replace("{app}", first.name),
        stores = stores(t, first),
        add = t.add,
        button = import_button(t, first, sub_url, name),
    );
    if !platform.is_phone() {
        let _ = write!(html, "<figure>{}<figcaption>{}</figcaption></figure>", qr_svg(sub_url), t.scan);
    }
    let _ = write!(html, "<details class=\"apps\"><summary>{}</summary><ul>", t.other_apps);
    for app in &apps[1..] {
        let _ = write!(
            html,
            "<li><strong>{}</strong> <span class=\"stores\">{}</span> {}</li>",
            app.name,
            stores(t, app),
            import_button(t, app, sub_url, name),
        );
    }
    html.push_str("</ul></details></section>");
}

/// The links to where `app` is downloaded.
fn stores(t: &text::Text, app: &guide::App) -> String {
    app.stores
        .iter()
        .map(|(store, url)| {
            // A file's name reads left to right inside a right-to-left sentence too.
            let file = |name: &str| format!("<bdi dir=\"ltr\">{}</bdi>", escape(name));
            let label = match store {
                guide::Store::GooglePlay => "Google Play".to_owned(),
                guide::Store::AppStore => "App Store".to_owned(),
                guide::Store::File => t.download.replace("{file}", &file(guide::Store::file_name(url))),
                guide::Store::Newest(ending) => t.newest.replace("{file}", &file(ending)),
            };
            format!("<a href=\"{url}\">{label}</a>")
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The button that imports the subscription into `app`. The title goes in as the owner wrote
/// it: percent-encoded into the link, and the link HTML-escaped once, here (escaped twice, `&`
/// reached the app as `&amp;`).
fn import_button(t: &text::Text, app: &guide::App, sub_url: &str, name: &str) -> String {
    format!(
        "<a class=\"button\" href=\"{}\">{}</a>",
        escape(&app.import.link(sub_url, name)),
        t.add_to.replace("{app}", app.name)
    )
}

/// The copy button's script: it shows the buttons (hidden where scripts do not run) and copies
/// the field a button names, by the clipboard API or, where that is refused, the old way.
const SCRIPT: &str = "for(const b of document.querySelectorAll('button[data-copy]')){b.hidden=false;\
b.addEventListener('click',async()=>{const f=document.getElementById(b.dataset.copy);\
try{await navigator.clipboard.writeText(f.value)}catch(e){f.select();document.execCommand('copy')}\
b.textContent=b.dataset.done})}";

/// The Content-Security-Policy the page is served with: nothing loads, and only the page's
/// own style and script apply, named by their SHA-256.
pub fn csp() -> &'static str {
    static CSP: LazyLock<String> = LazyLock::new(|| {
        let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes()));
        format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; img-src data:; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'",
            hash(SCRIPT),
            hash(STYLE)
        )
    });
    &CSP
}

/// A QR code of `data` as an SVG element (empty if `data` is too long for one).
#[cfg(not(fuzzing))]
pub fn qr_svg(data: &str) -> String {
    use qrcode::QrCode;
    use qrcode::render::svg;
    match QrCode::new(data.as_bytes()) {
        Ok(code) => code
            .render::<svg::Color<'_>>()
            .min_dimensions(200, 200)
            .dark_color(svg::Color("#000"))
            .light_color(svg::Color("#fff"))
            .build()
            // Drop the XML declaration: the SVG sits inside HTML.
            .split_once("?>")
            .map_or_else(String::new, |(_, svg)| svg.trim().to_owned()),
        Err(_) => String::new(),
    }
}

/// A QR code of `data` as text (two rows a line, in block characters) for a monospaced chat
/// message; empty if `data` is too long for one.
pub fn qr_text(data: &str) -> String {
    use qrcode::QrCode;
    use qrcode::render::unicode::Dense1x2;
    match QrCode::new(data.as_bytes()) {
        Ok(code) => code.render::<Dense1x2>().quiet_zone(true).build(),
        Err(_) => String::new(),
    }
}

/// Under the fuzzer (`cargo fuzz` sets `--cfg fuzzing`): whether `data` fits in a QR code is
/// decided as above, but the code is not drawn. Drawing (the qrcode crate choosing a mask on
/// data it accepted) took 95 % of a page under coverage tracing, 30 pages a second; the
/// `page` target checks the page around it.
#[cfg(fuzzing)]
pub fn qr_svg(data: &str) -> String {
    match qrcode::bits::encode_auto(data.as_bytes(), qrcode::EcLevel::M) {
        Ok(_) => "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 1 1\"></svg>".to_owned(),
        Err(_) => String::new(),
    }
}

const STYLE: &str = "\
:root{color-scheme:light dark;--bg:#fafaf7;--fg:#1c1c1a;--muted:#5f5f5a;--card:#fff;--ok:#1f7a3d;--off:#b3261e}\
@media(prefers-color-scheme:dark){:root{--bg:#151513;--fg:#ecece8;--muted:#a3a39d;--card:#20201d;--ok:#6fcf8f;--off:#f2a39c}}\
[hidden]{display:none!important}\
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.5 system-ui,sans-serif}\
main{max-width:34rem;margin:0 auto;padding:1rem}h1{margin:.5rem 0 .25rem;font-size:1.5rem}h2{font-size:1.15rem;margin:0 0 .5rem}\
a{color:inherit}.who{margin:0;color:var(--muted)}.status{font-weight:600;margin:.5rem 0}.ok{color:var(--ok)}.off{color:var(--off)}\
.todo{font-size:1.1rem}\
nav{display:flex;flex-wrap:wrap;gap:.25rem .75rem;margin:0 0 .75rem}nav a{padding:.25rem 0}\
nav a[aria-current]{font-weight:700;text-decoration:none;border-block-end:2px solid}\
dl{display:grid;grid-template-columns:auto 1fr;gap:.25rem 1rem}dt{color:var(--muted)}dd{margin:0}\
section,.announce{background:var(--card);border-radius:.75rem;padding:1rem;margin:1rem 0}\
.steps{padding-inline-start:1.25rem;margin:0}.steps li{margin:0 0 .75rem}:lang(fa) .steps{list-style-type:persian}\
.stores{display:inline-block}\
.button{display:inline-block;margin-block:.25rem;padding:.6rem 1rem;border-radius:.5rem;border:0;font:inherit;\
background:var(--fg);color:var(--bg);text-decoration:none;cursor:pointer}\
.apps ul{list-style:none;padding:0}.apps li{margin:.5rem 0}\
figure{margin:1rem 0;text-align:center}figure svg{width:200px;height:200px;background:#fff;padding:8px}\
.copy{display:flex;gap:.5rem;align-items:center}\
input{width:100%;box-sizing:border-box;font:inherit;padding:.5rem;border-radius:.5rem;border:1px solid var(--muted);\
background:var(--bg);color:var(--fg);direction:ltr}summary{cursor:pointer;padding:.25rem 0}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;
    use crate::wire::Mobility;

    const LINK: &str = "https://edge.example/s/TOKEN";

    fn page(snapshot: &Snapshot, lang: Lang, platform: Platform) -> String {
        render_at(snapshot, LINK, &Mobility::default(), Viewer { lang, platform })
    }

    /// The import buttons give apps the title as the owner wrote it: percent-encoded in the
    /// link, the link HTML-escaped once in the page (a browser undoes that), never `&amp;`.
    #[test]
    fn import_links_carry_the_title_unescaped() {
        let mut snapshot = sample_snapshot();
        snapshot.profile.title = "Tom & Jerry <\"VPN\">".into();
        let raw = percent_encoding::utf8_percent_encode(&snapshot.profile.title, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        for platform in Platform::ALL {
            let page = page(&snapshot, Lang::En, platform);
            for app in platform.apps() {
                let href = app.import.link(LINK, &snapshot.profile.title);
                assert!(page.contains(&format!("href=\"{}\">Add to {}</a>", escape(&href), app.name)), "{}", app.name);
                if app.import.names_the_subscription() {
                    assert!(href.contains(&raw), "{}: {href}", app.name);
                }
                for entity in ["%26amp%3B", "%26lt%3B", "%26quot%3B"] {
                    assert!(!href.contains(entity), "{}: {href}", app.name);
                }
            }
            assert!(page.contains("<title>Tom &amp; Jerry &lt;&quot;VPN&quot;&gt;</title>"));
        }
    }

    #[test]
    fn page_shows_the_user_and_escapes_everything() {
        let mut snapshot = sample_snapshot();
        snapshot.name = "<script>alert(1)</script>".into();
        let page = page(&snapshot, Lang::En, Platform::MacOs);
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("51.0 MiB of 100.0 GiB"));
        assert!(page.contains("1 January 2027"));
        assert!(page.contains("sing-box://import-remote-profile?url=https%3A%2F%2Fedge%2Eexample%2Fs%2FTOKEN"));
        assert!(page.contains("Quote &quot; colon: hash #"));
        assert_eq!(page.matches("<details class=\"server\">").count(), 3);
        assert_eq!(page.matches("<script>").count(), 1, "the copy button's script, once");
    }

    /// A phone holding the page is the phone the app runs on: buttons, no code to scan; a
    /// computer gets the subscription's code and one a server.
    #[test]
    fn phones_get_buttons_and_computers_the_code() {
        let snapshot = sample_snapshot();
        for platform in Platform::ALL {
            let page = page(&snapshot, Lang::En, platform);
            let codes = page.matches("<svg").count();
            if platform.is_phone() {
                assert_eq!(codes, 0, "{platform:?}");
            } else {
                assert_eq!(codes, 4, "{platform:?}: the link's and three servers'");
                assert!(page.contains("Or scan this code with the app on your phone"));
            }
            let first = platform.apps()[0];
            assert!(page.contains(&format!("<strong>Install {}</strong>", first.name)), "{platform:?}");
            for (_, store) in first.stores {
                assert!(page.contains(&format!("<a href=\"{store}\">")), "{platform:?}: {store}");
            }
            assert!(page.contains(&format!("aria-current=\"true\">{}</a>", platform.name())));
            for other in Platform::ALL {
                assert!(page.contains(&format!("?lang=en&amp;os={}", other.code())), "the switch offers {other:?}");
            }
        }
    }

    /// Each language says everything in its own words, with its own numbers and dates, in its
    /// own direction; no English is left in the others.
    #[test]
    fn each_language_speaks_its_own() {
        let snapshot = sample_snapshot();
        let english = page(&snapshot, Lang::En, Platform::Windows);
        for (lang, used, date) in [
            (Lang::Ru, "51,0 МиБ из 100,0 ГиБ", "1 января 2027 г."),
            (Lang::Fa, "۵۱٫۰ MiB از ۱۰۰٫۰ GiB", "۱۱ دی ۱۴۰۵"),
            (Lang::Zh, "51.0 MiB / 100.0 GiB", "2027年1月1日"),
        ] {
            let t = lang.text();
            let page = page(&snapshot, lang, Platform::Windows);
            assert!(page.contains(&format!(
                "<html lang=\"{}\" dir=\"{}\">",
                t.code,
                if t.rtl { "rtl" } else { "ltr" }
            )));
            assert!(page.contains(used), "{lang:?}");
            assert!(page.contains(date), "{lang:?}");
            for (ours, theirs) in [
                (t.active, EN_ACTIVE),
                (t.link, text::EN.link),
                (t.click_hiddify, text::EN.click_hiddify),
                (t.copy, text::EN.copy),
                (t.scan, text::EN.scan),
                (t.other_apps, text::EN.other_apps),
            ] {
                assert!(page.contains(ours), "{lang:?}: {ours}");
                assert!(!page.contains(&format!(">{theirs}<")), "{lang:?} still says {theirs}");
            }
            assert_ne!(page, english);
        }
        assert!(english.contains("<html lang=\"en\" dir=\"ltr\">"));
        assert!(page(&snapshot, Lang::Fa, Platform::Android).contains("dir=\"rtl\""));
    }
    const EN_ACTIVE: &str = text::EN.active;

    /// Disabled, expired or over its quota: the page says so and what to do, in the person's
    /// language, and offers nothing to import (no button, no link, no code, no script).
    #[test]
    fn an_account_that_cannot_connect_says_so_and_offers_no_import() {
        let mut snapshot = sample_snapshot();
        snapshot.profile.support_url = Some("https://t.me/family_help".into());
        for lang in Lang::ALL {
            let t = lang.text();
            for (status, state, todo) in [
                (Status::Disabled, t.disabled, t.todo_disabled),
                (Status::Expired, t.expired, t.todo_expired),
                (Status::OverQuota, t.over_quota, t.todo_over_quota),
            ] {
                snapshot.status = status;
                for platform in [Platform::Android, Platform::Windows] {
                    let page = page(&snapshot, lang, platform);
                    assert!(page.contains(&format!("<p class=\"status off\">{state}</p>")), "{lang:?} {status:?}");
                    assert!(page.contains(todo), "{lang:?} {status:?}");
                    assert!(page.contains(&format!("href=\"https://t.me/family_help\">{}</a>", t.help)));
                    for offered in ["hiddify://", "<input", "<svg", "<script", "hysteria2://", LINK] {
                        assert!(!page.contains(offered), "{lang:?} {status:?} {platform:?} offers {offered}");
                    }
                }
            }
        }
    }

    /// With the owner's bot taking users, the page links to it with its one-time code and the
    /// page's language (so the bot speaks it), whatever the account's state; a link that is
    /// not a Telegram username and code is left out, and nothing shows without one.
    #[test]
    fn the_owners_bot_is_linked_with_the_code_and_the_pages_language() {
        let mut snapshot = sample_snapshot();
        for lang in Lang::ALL {
            assert!(!page(&snapshot, lang, Platform::Android).contains("?start="), "no bot, no link");
        }
        snapshot.telegram = Some(crate::wire::TelegramLink { bot: "family_vpn_bot".into(), code: "7-00ff".into() });
        for status in [Status::Active, Status::Expired] {
            snapshot.status = status;
            for lang in Lang::ALL {
                let t = lang.text();
                let page = page(&snapshot, lang, Platform::Windows);
                let link = format!("https://t.me/family_vpn_bot?start=7-00ff-{}", t.code);
                assert!(
                    page.contains(&format!("href=\"{link}\" rel=\"noopener\">{}</a>", t.telegram_button)),
                    "{page}"
                );
                assert!(page.contains(t.telegram) && page.contains(t.telegram_text), "{lang:?}");
            }
        }
        snapshot.telegram = Some(crate::wire::TelegramLink { bot: "x\"><script>".into(), code: "7-00ff".into() });
        assert!(!page(&snapshot, Lang::En, Platform::Android).contains("?start="), "an invalid link is left out");
    }

    /// A subscription that works but reaches no server yet (none set up, or none in its
    /// groups) says so in the person's language, and shows no dummy line to import: not
    /// "Active", not "No servers available" in English (issue 45, 7).
    #[test]
    fn a_subscription_without_servers_says_it_is_being_set_up() {
        let mut snapshot = sample_snapshot();
        snapshot.endpoints.clear();
        for status in [Status::Active, Status::NotStarted] {
            snapshot.status = status;
            for lang in Lang::ALL {
                let t = lang.text();
                for platform in [Platform::Android, Platform::Windows] {
                    let page = page(&snapshot, lang, platform);
                    assert!(page.contains(&format!("<p class=\"status off\">{}</p>", t.preparing)), "{lang:?}");
                    assert!(page.contains(t.todo_preparing), "{lang:?}");
                    assert!(!page.contains(t.same_link), "nothing stopped working: {lang:?}");
                    for offered in ["No servers available", "hysteria2://", "hiddify://", "<input", "<svg", LINK] {
                        assert!(!page.contains(offered), "{lang:?} {platform:?} shows {offered}");
                    }
                }
            }
        }
    }

    /// The policy names the page's one style and one script by their hashes; the page loads
    /// nothing from anywhere and has no inline style or handler the policy would block.
    #[test]
    fn the_policy_allows_the_page_style_and_script_and_nothing_else() {
        let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes()));
        let policy = csp();
        assert!(policy.starts_with("default-src 'none'; "));
        assert!(policy.contains(&format!("script-src 'sha256-{}'", hash(SCRIPT))));
        assert!(policy.contains(&format!("style-src 'sha256-{}'", hash(STYLE))));
        let mut snapshot = sample_snapshot();
        snapshot.profile.support_url = Some("https://help.example/".into());
        for lang in Lang::ALL {
            for platform in Platform::ALL {
                let page = page(&snapshot, lang, platform);
                assert_eq!(page.matches("<script").count(), 1);
                assert!(page.contains(&format!("<script>{SCRIPT}</script>")));
                assert_eq!(page.matches("<style").count(), 1);
                assert!(page.contains(&format!("<style>{STYLE}</style>")));
                for loads in [" src=", " style=", "url(", "<link", "<iframe", "<object", "@import"] {
                    assert!(!page.contains(loads), "{lang:?} {platform:?}: {loads}");
                }
                let handler = |rest: &str| {
                    rest.split('=').next().is_some_and(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()))
                };
                assert!(!page.split(" on").skip(1).any(handler), "{lang:?} {platform:?}: an event handler attribute");
            }
        }
    }

    /// Where an account stands: a working one without servers is being set up, a stopped one
    /// says what to do.
    #[test]
    fn the_standing_of_an_account() {
        let t = Lang::En.text();
        let mut snapshot = sample_snapshot();
        for (status, standing_is) in [
            (Status::Active, (t.active, None)),
            (Status::NotStarted, (t.not_started, None)),
            (Status::Disabled, (t.disabled, Some(t.todo_disabled))),
            (Status::Expired, (t.expired, Some(t.todo_expired))),
            (Status::OverQuota, (t.over_quota, Some(t.todo_over_quota))),
        ] {
            snapshot.status = status;
            assert_eq!(standing(&snapshot, t), standing_is, "{status:?}");
        }
        snapshot.endpoints.clear();
        for status in [Status::Active, Status::NotStarted] {
            snapshot.status = status;
            assert_eq!(standing(&snapshot, t), (t.preparing, Some(t.todo_preparing)), "{status:?}");
        }
        snapshot.status = Status::Expired;
        assert_eq!(standing(&snapshot, t), (t.expired, Some(t.todo_expired)), "stopped, whatever its servers");
    }

    #[test]
    fn the_viewer_from_the_switches_then_the_headers() {
        let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X)";
        assert_eq!(Viewer::of(iphone, "fa-IR,fa;q=0.9", ""), Viewer { lang: Lang::Fa, platform: Platform::Ios });
        assert_eq!(
            Viewer::of(iphone, "fa-IR", "lang=zh&os=windows"),
            Viewer { lang: Lang::Zh, platform: Platform::Windows }
        );
        assert_eq!(
            Viewer::of(iphone, "ru", "format=page&lang=xx&os=plan9"),
            Viewer { lang: Lang::Ru, platform: Platform::Ios },
            "a switch the page does not know falls back to the headers"
        );
        assert_eq!(Viewer::of("", "", ""), Viewer::default());
    }

    /// A link that moved offers the new link (to import and to copy) and names every mirror.
    #[test]
    fn a_moved_link_offers_the_new_one() {
        let moved = Mobility {
            moved_to: Some("https://new.example/s/TOKEN".into()),
            mirrors: vec!["https://new.example/s/TOKEN".into(), "https://m2.example/s/TOKEN".into()],
            retired: false,
        };
        let page = render_at(&sample_snapshot(), LINK, &moved, Viewer { lang: Lang::Ru, platform: Platform::Android });
        assert!(page.contains(text::RU.moved));
        assert!(page.contains("value=\"https://new.example/s/TOKEN\""));
        assert!(page.contains("hiddify://import/https://new.example/s/TOKEN#"));
        assert!(page.contains("value=\"https://m2.example/s/TOKEN\" aria-label=\"Запасная ссылка\""));
        assert!(!page.contains(LINK));
    }

    /// The install steps speak to the device (issue 45, 14): a phone is tapped and a computer
    /// clicked, the store links go to a store or the very file (its name shown, left to right
    /// in Persian too), Persian steps are numbered in Persian digits, and a subscription with
    /// no quota says how much was used and that there is no limit.
    #[test]
    fn the_install_steps_speak_to_the_device() {
        let snapshot = sample_snapshot();
        for lang in Lang::ALL {
            let t = lang.text();
            for platform in Platform::ALL {
                let page = page(&snapshot, lang, platform);
                let (said, not) = if platform.is_phone() {
                    (t.tap_hiddify, t.click_hiddify)
                } else {
                    (t.click_hiddify, t.tap_hiddify)
                };
                assert!(page.contains(said), "{lang:?} {platform:?}");
                assert!(said == not || !page.contains(not), "{lang:?} {platform:?}");
                for site in ["/releases/latest\">", "happ.su", "sagernet.org"] {
                    let first = page.split("</li>").next().unwrap();
                    assert!(!first.contains(site), "{lang:?} {platform:?}: the first step links {site}");
                }
            }
        }
        let en = page(&snapshot, Lang::En, Platform::Windows);
        assert!(en.contains(
            "<a href=\"https://github.com/hiddify/hiddify-app/releases/latest/download/Hiddify-Windows-Setup-x64.exe\">\
             Download <bdi dir=\"ltr\">Hiddify-Windows-Setup-x64.exe</bdi></a>"
        ));
        assert!(en.contains("the newest file ending in <bdi dir=\"ltr\">x64-setup.exe</bdi>"), "{en}");
        assert!(en.contains("Open Hiddify and click the large button"));
        let phone = page(&snapshot, Lang::En, Platform::Android);
        assert!(phone.contains("Open Hiddify and tap the large button"));
        assert!(phone.contains("https://play.google.com/store/apps/details?id=com.happproxy"));
        assert!(STYLE.contains(":lang(fa) .steps{list-style-type:persian}"));

        let mut free = sample_snapshot();
        free.quota = 0;
        free.used_up = 0;
        free.used_down = 0;
        assert!(page(&free, Lang::En, Platform::Android).contains("<dd>0 B used, no limit</dd>"));
        assert!(
            page(&free, Lang::Fa, Platform::Android)
                .contains(&text::FA.used_no_limit.replace("{used}", &Lang::Fa.size(0)))
        );
        assert!(!page(&free, Lang::En, Platform::Android).contains("of unlimited"));
    }

    /// A moved link says where it went even when there is nothing to import yet or the
    /// account is stopped: the blocked domain may be all the person still reaches.
    #[test]
    fn a_moved_link_says_so_before_anything_can_be_imported() {
        let moved = Mobility { moved_to: Some("https://new.example/s/TOKEN".into()), mirrors: vec![], retired: false };
        let viewer = Viewer { lang: Lang::En, platform: Platform::Linux };
        let mut setting_up = sample_snapshot();
        setting_up.endpoints.clear();
        let mut disabled = sample_snapshot();
        disabled.status = Status::Disabled;
        for snapshot in [setting_up, disabled] {
            let page = render_at(&snapshot, LINK, &moved, viewer);
            assert!(page.contains(text::EN.moved) && page.contains("https://new.example/s/TOKEN"), "{page}");
            assert!(!page.contains("hysteria2://") && !page.contains("<input"), "{page}");
        }
    }
}
