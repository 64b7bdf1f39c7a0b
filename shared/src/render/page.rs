//! The page a person sees when they open their subscription link in a browser: who they are,
//! whether they can connect, how much they used and until when, one-tap import into the
//! common apps, and a QR code for the link and for every server.
//!
//! Plain HTML with inline CSS (light and dark follow the system), no script, so it works
//! under a `default-src 'none'` Content-Security-Policy ([`CSP`]).

use std::fmt::Write as _;

use percent_encoding::utf8_percent_encode;

use super::{entries, title, uri};
use crate::wire::Snapshot;

/// The Content-Security-Policy the page is served with.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

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

/// `bytes` in binary units, one decimal: "1.5 GiB".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// A Unix time as a UTC calendar date, "2026-11-29" (Howard Hinnant's days-to-civil).
pub fn date(unix: u64) -> String {
    let days = (unix / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
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

/// Apps that import a subscription from a link, and how.
fn import_links(sub_url: &str, name: &str) -> [(&'static str, String); 4] {
    let url = utf8_percent_encode(sub_url, percent_encoding::NON_ALPHANUMERIC).to_string();
    let name = utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string();
    [
        ("Hiddify", format!("hiddify://import/{sub_url}#{name}")),
        ("sing-box", format!("sing-box://import-remote-profile?url={url}#{name}")),
        ("Clash / mihomo", format!("clash://install-config?url={url}&name={name}")),
        ("Happ", format!("happ://add/{sub_url}")),
    ]
}

/// The page for `snapshot`, whose subscription link is `sub_url`.
pub fn render(snapshot: &Snapshot, sub_url: &str) -> String {
    render_at(snapshot, sub_url, &crate::wire::Mobility::default())
}

/// [`render`] knowing where links went: a link that moved offers the link at the primary
/// (with a notice), and every mirror is listed.
pub fn render_at(snapshot: &Snapshot, fetched: &str, mobility: &crate::wire::Mobility) -> String {
    let sub_url = mobility.moved_to.as_deref().unwrap_or(fetched);
    let title = escape(title(snapshot));
    let status = snapshot.status;
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title><style>{STYLE}</style></head><body><main>\
         <h1>{title}</h1><p class=\"who\">{name}</p><p class=\"status {class}\">{state}</p><dl>",
        name = escape(&snapshot.name),
        class = if status.can_connect() { "ok" } else { "off" },
        state = escape(status.describe()),
    );
    let used = snapshot.used_up.saturating_add(snapshot.used_down);
    let quota = if snapshot.quota == 0 { "unlimited".to_owned() } else { human_bytes(snapshot.quota) };
    let _ = write!(html, "<dt>Used</dt><dd>{} of {quota}</dd>", human_bytes(used));
    let expires = if snapshot.expires_at == 0 { "never".to_owned() } else { date(snapshot.expires_at) };
    let _ = write!(html, "<dt>Expires</dt><dd>{expires}</dd></dl>");
    if let Some(to) = &mobility.moved_to {
        let _ = write!(
            html,
            "<p class=\"announce\">This link moved. Use the new one below: add it to your app again.<br>{}</p>",
            escape(to)
        );
    }
    if let Some(announce) = snapshot.profile.announce.as_deref().filter(|a| !a.trim().is_empty()) {
        let _ = write!(html, "<p class=\"announce\">{}</p>", escape(announce));
    }
    let _ = write!(
        html,
        "<section><h2>Add to your app</h2><p class=\"apps\">{}</p><figure>{}<figcaption>Scan to import this \
         subscription</figcaption></figure><input readonly value=\"{}\" aria-label=\"Subscription link\"></section>",
        // The title as the owner wrote it: percent-encoded into the links, and the links
        // HTML-escaped once, here (escaped twice, `&` reached the app as `&amp;`).
        import_links(sub_url, super::title(snapshot))
            .iter()
            .map(|(app, link)| format!("<a href=\"{}\">{app}</a>", escape(link)))
            .collect::<Vec<_>>()
            .join(" "),
        qr_svg(sub_url),
        escape(sub_url),
    );
    let others: Vec<&String> = mobility.mirrors.iter().filter(|m| m.as_str() != sub_url).collect();
    if !others.is_empty() {
        html.push_str("<section><h2>If this link stops working</h2><p>The same subscription, at other addresses:</p>");
        for mirror in others {
            let _ = write!(html, "<input readonly value=\"{}\" aria-label=\"Mirror link\">", escape(mirror));
        }
        html.push_str("</section>");
    }
    if status.can_connect() {
        html.push_str("<section><h2>Servers</h2>");
        for entry in entries(snapshot, &[]) {
            let link = uri::link(&entry);
            let _ = write!(
                html,
                "<details><summary>{}</summary><figure>{}</figure><input readonly value=\"{}\" \
                 aria-label=\"Server link\"></details>",
                escape(&entry.name),
                qr_svg(&link),
                escape(&link),
            );
        }
        html.push_str("</section>");
    }
    if let Some(support) = snapshot.profile.support_url.as_deref() {
        let _ = write!(html, "<p><a href=\"{}\">Get help</a></p>", escape(support));
    }
    html.push_str("</main></body></html>");
    html
}

const STYLE: &str = "\
:root{color-scheme:light dark;--bg:#fafaf7;--fg:#1c1c1a;--muted:#6b6b66;--card:#fff;--ok:#1f7a3d;--off:#b3261e}\
@media(prefers-color-scheme:dark){:root{--bg:#151513;--fg:#ecece8;--muted:#a3a39d;--card:#20201d;--ok:#6fcf8f;--off:#f2a39c}}\
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.5 system-ui,sans-serif}\
main{max-width:34rem;margin:0 auto;padding:1.5rem 1rem}h1{margin:0 0 .25rem;font-size:1.5rem}\
.who{margin:0;color:var(--muted)}.status{font-weight:600}.ok{color:var(--ok)}.off{color:var(--off)}\
dl{display:grid;grid-template-columns:auto 1fr;gap:.25rem 1rem}dt{color:var(--muted)}dd{margin:0}\
section,.announce{background:var(--card);border-radius:.75rem;padding:1rem;margin:1rem 0}\
.apps a{display:inline-block;margin:.25rem .5rem .25rem 0;padding:.5rem .75rem;border-radius:.5rem;\
background:var(--fg);color:var(--bg);text-decoration:none}\
figure{margin:1rem 0;text-align:center}figure svg{width:200px;height:200px;background:#fff;padding:8px}\
input{width:100%;box-sizing:border-box;font:inherit;padding:.5rem;border-radius:.5rem;border:1px solid var(--muted);\
background:var(--bg);color:var(--fg)}summary{cursor:pointer;padding:.25rem 0}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;
    use crate::wire::Status;

    #[test]
    fn dates_and_sizes() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_798_761_600), "2027-01-01");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(52_428_800), "50.0 MiB");
        assert_eq!(human_bytes(107_374_182_400), "100.0 GiB");
    }

    /// The import buttons give apps the title as the owner wrote it: percent-encoded in the
    /// link, the link HTML-escaped once in the page (a browser undoes that), never `&amp;`.
    #[test]
    fn import_links_carry_the_title_unescaped() {
        let mut snapshot = sample_snapshot();
        snapshot.profile.title = "Tom & Jerry <\"VPN\">".into();
        let page = render(&snapshot, "https://edge.example/s/TOKEN");
        let raw = percent_encoding::utf8_percent_encode(&snapshot.profile.title, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        for (app, href) in import_links("https://edge.example/s/TOKEN", &snapshot.profile.title) {
            assert!(page.contains(&format!("<a href=\"{}\">{app}</a>", escape(&href))), "{app}");
            if app != "Happ" {
                assert!(href.contains(&raw), "{app}: {href}");
            }
            for entity in ["%26amp%3B", "%26lt%3B", "%26quot%3B"] {
                assert!(!href.contains(entity), "{app}: {href}");
            }
        }
        assert!(page.contains("<title>Tom &amp; Jerry &lt;&quot;VPN&quot;&gt;</title>"));
    }

    #[test]
    fn page_shows_the_user_and_escapes_everything() {
        let mut snapshot = sample_snapshot();
        snapshot.name = "<script>alert(1)</script>".into();
        let page = render(&snapshot, "https://edge.example/s/TOKEN");
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("51.0 MiB of 100.0 GiB"));
        assert!(page.contains("2027-01-01"));
        assert!(page.contains("sing-box://import-remote-profile?url=https%3A%2F%2Fedge%2Eexample%2Fs%2FTOKEN"));
        assert_eq!(page.matches("<svg").count(), 4, "one QR code for the link and one per server");
        assert!(page.contains("Quote &quot; colon: hash #"));

        snapshot.status = Status::Disabled;
        let page = render(&snapshot, "https://edge.example/s/TOKEN");
        assert!(page.contains("Account disabled"));
        assert!(!page.contains("hysteria2://"), "no server links for a user who cannot connect");
    }
}
