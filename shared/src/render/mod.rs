//! Rendering a snapshot into what each client app wants, and the headers that go with it.
//!
//! Five formats cover the Hysteria2 clients in use (see FACTS in the design docs): a base64
//! list of `hysteria2://` links ([`uri`]), a Mihomo / Clash Meta YAML profile ([`mihomo`]), a
//! sing-box JSON profile ([`singbox`]), versioned because sing-box's schema drifts between
//! releases, and the profiles of the two iOS apps with formats of their own, Surge
//! ([`surge`]) and Loon ([`loon`]). Every renderer works from the same [`entries`]: the
//! endpoints with names made safe and unique, or, for a user who cannot connect, one entry
//! that cannot connect and is named after the reason, so the app shows why.

mod conf;
pub mod loon;
pub mod mihomo;
pub mod page;
pub mod singbox;
pub mod surge;
pub mod uri;

#[cfg(test)]
mod golden;

mod entries;
pub(crate) mod format;
pub use entries::{Entry, entries, title, unique_names};
pub use format::{Format, SingBoxVersion};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::wire::Snapshot;

/// Renders `snapshot` in `format`: the body only (see [`headers`] for the rest).
pub fn render(snapshot: &Snapshot, format: Format) -> String {
    match format {
        Format::Base64 => uri::base64_list(snapshot),
        Format::Mihomo => mihomo::render(snapshot),
        Format::SingBox(version) => singbox::render(snapshot, version),
        Format::Surge => surge::render(snapshot, None),
        Format::Loon => loon::render(snapshot),
    }
}

/// The decoy's status: what a stock nginx answers for a path it does not have. Unknown links,
/// unknown paths, and everything outside control's secret prefixes answer with the decoy, so
/// a prober cannot tell a Hearth edge or control from a plain web server.
pub const DECOY_STATUS: u16 = 404;
/// The decoy's headers.
pub const DECOY_HEADERS: [(&str, &str); 2] = [("content-type", "text/html"), ("server", "nginx")];
/// The decoy's body.
pub const DECOY_BODY: &[u8] = b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

/// A complete answer to a subscription fetch: headers (for GET and HEAD alike) and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The headers, in a fixed order.
    pub headers: Vec<(&'static str, String)>,
    /// The body (left out on HEAD by the server).
    pub body: String,
}

/// Answers a client that wants `wants`; `sub_url` is the link it fetched (for the page, which
/// is in English for Android).
pub fn answer(snapshot: &Snapshot, wants: crate::agent::Wants, sub_url: &str) -> Answer {
    answer_at(snapshot, wants, sub_url, &crate::wire::Mobility::default(), page::Viewer::default())
}

/// [`answer`] at an edge that knows where links went: a link whose domain is blocked answers
/// as usual and tells the app the link at the primary (the announcement and the web page
/// header, which apps that show them show), and the page offers the link at the primary and
/// lists every mirror. A browser gets the page in `viewer`'s language, for its device.
pub fn answer_at(
    snapshot: &Snapshot,
    wants: crate::agent::Wants,
    sub_url: &str,
    mobility: &crate::wire::Mobility,
    viewer: page::Viewer,
) -> Answer {
    match wants {
        crate::agent::Wants::Profile(format) => {
            let mut headers = headers(snapshot, format);
            let moved_to = mobility.moved_to.as_deref().filter(|to| is_header_safe(to));
            // Surge fetches a managed profile again from the link its first line names: the
            // link as asked for, or the link at the primary once this one's domain is blocked.
            let body = match format {
                Format::Surge => surge::render(snapshot, moved_to.or(Some(sub_url).filter(|url| is_header_safe(url)))),
                _ => render(snapshot, format),
            };
            if let Some(to) = moved_to {
                headers.retain(|(name, _)| !matches!(*name, "profile-web-page-url" | "announce"));
                let before = headers.len() - 2;
                let mut announce = format!("This link moved: {to}");
                if let Some(own) = snapshot.profile.announce.as_deref().filter(|a| !a.trim().is_empty()) {
                    announce = format!("{announce} · {own}");
                }
                headers.insert(before, ("profile-web-page-url", to.to_owned()));
                headers.insert(before + 1, ("announce", format!("base64:{}", B64.encode(announce))));
                // Stash takes a first line `#SUBSCRIBED <url>` as where to fetch the profile
                // from now on; to mihomo and the other Clash apps it is a comment.
                if format == Format::Mihomo {
                    return Answer { headers, body: format!("#SUBSCRIBED {to}\n{body}") };
                }
            }
            Answer { headers, body }
        }
        crate::agent::Wants::Page => Answer {
            headers: vec![
                ("content-type", "text/html; charset=utf-8".to_owned()),
                ("cache-control", "no-store".to_owned()),
                ("content-security-policy", page::csp().to_owned()),
                ("content-language", viewer.lang.text().code.to_owned()),
                ("referrer-policy", "no-referrer".to_owned()),
                ("x-content-type-options", "nosniff".to_owned()),
            ],
            body: page::render_at(snapshot, sub_url, mobility, viewer),
        },
    }
}

/// Characters kept as they are in `filename*` (RFC 5987 `attr-char`).
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// The response headers for a profile in `format`, on GET and HEAD alike, in a fixed order.
/// Every value is printable ASCII; an optional URL that is not is left out.
pub fn headers(snapshot: &Snapshot, format: Format) -> Vec<(&'static str, String)> {
    let title = title(snapshot);
    let mut out = vec![
        ("content-type", format.content_type().to_owned()),
        (
            "subscription-userinfo",
            format!(
                "upload={}; download={}; total={}; expire={}",
                snapshot.used_up, snapshot.used_down, snapshot.quota, snapshot.expires_at
            ),
        ),
        ("profile-title", format!("base64:{}", B64.encode(title))),
        ("profile-update-interval", snapshot.profile.update_interval_hours.max(1).to_string()),
    ];
    // A link with letters beyond ASCII in its path (`https://t.me/помощь`) goes out
    // percent-encoded, as browsers send it: a header carries ASCII only. One with a line break
    // or another control character is left out.
    let url = |value: &Option<String>| {
        value
            .as_deref()
            .filter(|v| !v.chars().any(char::is_control))
            .map(crate::encode_beyond_ascii)
            .filter(|v| is_header_safe(v))
    };
    if let Some(page) = url(&snapshot.profile.web_page_url) {
        out.push(("profile-web-page-url", page));
    }
    if let Some(support) = url(&snapshot.profile.support_url) {
        out.push(("support-url", support));
    }
    if let Some(announce) = snapshot.profile.announce.as_deref().filter(|a| !a.trim().is_empty()) {
        out.push(("announce", format!("base64:{}", B64.encode(announce))));
    }
    let ascii: String = title
        .chars()
        .map(|c| if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') { c } else { '_' })
        .collect();
    out.push((
        "content-disposition",
        format!(
            "attachment; filename=\"{}\"; filename*=UTF-8''{}",
            ascii.trim(),
            utf8_percent_encode(title, ATTR_CHAR)
        ),
    ));
    out.push(("cache-control", "no-store".to_owned()));
    out
}

fn is_header_safe(value: &str) -> bool {
    !value.is_empty() && value.len() <= 2048 && value.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::entries::INACTIVE_CREDENTIAL;
    use super::*;
    use crate::wire::Endpoint;
    use crate::wire::{Identity, PortRange, Profile, ResetStrategy, Status};

    /// A user with three endpoints whose names clash and need escaping.
    pub(crate) fn sample_snapshot() -> Snapshot {
        Snapshot {
            user: 42,
            name: "Grandma Li".into(),
            status: Status::Active,
            used_up: 1_048_576,
            used_down: 52_428_800,
            quota: 107_374_182_400,
            expires_at: 1_798_761_600,
            reset: ResetStrategy::Monthly,
            credential: "s3cret pass/with:odd@chars".into(),
            endpoints: vec![
                Endpoint {
                    name: "Tokyo 🇯🇵".into(),
                    host: "tokyo.example.net".into(),
                    port: 443,
                    hop: Some(PortRange { start: 20000, end: 30000 }),
                    sni: Some("cdn.example.net".into()),
                    cert_sha256: Some([0xab; 32]),
                    spki_sha256: Some([0xcd; 32]),
                    insecure: true,
                    obfs: Some("salamander pw".into()),
                    identity: Identity {
                        certificate: Some(include_bytes!("../../tests/golden/node-cert.der").to_vec()),
                        name: Some("cdn.example.net".into()),
                        unverified: false,
                    },
                },
                Endpoint {
                    name: "tokyo 🇯🇵".into(),
                    host: "2001:db8::7".into(),
                    port: 8443,
                    hop: None,
                    sni: None,
                    cert_sha256: None,
                    spki_sha256: None,
                    insecure: false,
                    obfs: None,
                    identity: Identity::default(),
                },
                Endpoint {
                    name: "Quote \" colon: hash # \n".into(),
                    host: "203.0.113.9".into(),
                    port: 443,
                    hop: None,
                    sni: Some("h.example.org".into()),
                    cert_sha256: None,
                    spki_sha256: None,
                    insecure: false,
                    obfs: None,
                    identity: Identity::default(),
                },
            ],
            profile: Profile {
                title: "Family VPN — 家".into(),
                announce: Some("Maintenance Sunday 02:00 UTC".into()),
                support_url: Some("https://t.me/family_help".into()),
                web_page_url: Some("https://family.example.net/".into()),
                update_interval_hours: 12,
            },
            hwid: Default::default(),
            alias: None,
            telegram: None,
        }
    }

    #[test]
    fn names_are_clean_and_unique() {
        let names = unique_names(["A", "a", "", " ", "A (2)", "Proxy", "x\u{7}y"], &["proxy"]);
        assert_eq!(names, ["A", "a (2)", "Server", "Server (2)", "A (2) (2)", "Proxy (2)", "xy"]);
    }

    #[test]
    fn inactive_users_get_one_named_entry_without_their_credential() {
        let mut snapshot = sample_snapshot();
        for (status, name) in [
            (Status::Disabled, "Account disabled"),
            (Status::Expired, "Subscription expired"),
            (Status::OverQuota, "Traffic quota used up"),
        ] {
            snapshot.status = status;
            let entries = entries(&snapshot, &[]);
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0].name, name);
            assert_eq!(entries[0].credential, INACTIVE_CREDENTIAL);
            for format in
                [Format::Base64, Format::Mihomo, Format::SingBox(SingBoxVersion::OLDEST), Format::Surge, Format::Loon]
            {
                let body = render(&snapshot, format);
                assert!(!body.contains("s3cret") && !body.contains("tokyo.example"), "{body}");
            }
        }
        snapshot.status = Status::NotStarted;
        assert_eq!(entries(&snapshot, &[]).len(), 3);
        snapshot.endpoints.clear();
        assert_eq!(entries(&snapshot, &[])[0].name, "No servers available");
    }

    #[test]
    fn headers_are_ascii_and_complete() {
        let snapshot = sample_snapshot();
        let headers = headers(&snapshot, Format::Base64);
        let get = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert_eq!(
            get("subscription-userinfo"),
            Some("upload=1048576; download=52428800; total=107374182400; expire=1798761600")
        );
        assert_eq!(get("profile-update-interval"), Some("12"));
        assert_eq!(get("cache-control"), Some("no-store"));
        assert_eq!(
            get("content-disposition"),
            Some("attachment; filename=\"Family VPN _ _\"; filename*=UTF-8''Family%20VPN%20%E2%80%94%20%E5%AE%B6")
        );
        for (name, value) in &headers {
            assert!(value.bytes().all(|b| (0x20..0x7f).contains(&b)), "{name}: {value}");
        }
        let mut unsafe_url = snapshot.clone();
        unsafe_url.profile.support_url = Some("https://x\r\nset-cookie: a".into());
        assert!(super::headers(&unsafe_url, Format::Base64).iter().all(|(n, _)| *n != "support-url"));
        // Letters beyond ASCII are percent-encoded, not dropped (issue 46, 10).
        let mut cyrillic = snapshot.clone();
        cyrillic.profile.support_url = Some("https://t.me/помощь_семье".into());
        let headers = super::headers(&cyrillic, Format::Base64);
        let support = headers.iter().find(|(n, _)| *n == "support-url").map(|(_, v)| v.as_str());
        assert_eq!(support, Some("https://t.me/%D0%BF%D0%BE%D0%BC%D0%BE%D1%89%D1%8C_%D1%81%D0%B5%D0%BC%D1%8C%D0%B5"));
    }

    /// A link whose domain was blocked answers as usual and names the link at the primary in
    /// the announcement (before the owner's) and the web page header; the page offers the
    /// new link with a notice and lists the mirrors; a link at home changes nothing.
    #[test]
    fn a_moved_link_names_the_primary() {
        use crate::agent::Wants;
        use crate::wire::Mobility;
        let mut snapshot = sample_snapshot();
        snapshot.profile.announce = Some("Be kind".into());
        let to = "https://sub.mirror.example/m/TOKEN";
        let moved = Mobility {
            moved_to: Some(to.into()),
            retired: false,
            mirrors: vec![to.into(), "https://third.example/s/TOKEN".into()],
        };
        let answer = answer_at(
            &snapshot,
            Wants::Profile(Format::Base64),
            "https://old.example/s/TOKEN",
            &moved,
            Default::default(),
        );
        let get = |name: &str| answer.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        assert_eq!(get("profile-web-page-url").as_deref(), Some(to));
        let announce = get("announce").unwrap();
        let announce = String::from_utf8(B64.decode(announce.strip_prefix("base64:").unwrap()).unwrap()).unwrap();
        assert_eq!(announce, format!("This link moved: {to} · Be kind"));
        assert_eq!(answer.body, render(&snapshot, Format::Base64), "the profile itself is the same");
        assert_eq!(answer.headers.last().map(|(n, _)| *n), Some("cache-control"));
        let home = answer_at(&snapshot, Wants::Profile(Format::Base64), to, &Mobility::default(), Default::default());
        assert_eq!(home.headers, headers(&snapshot, Format::Base64));
        let clash = answer_at(
            &snapshot,
            Wants::Profile(Format::Mihomo),
            "https://old.example/s/TOKEN",
            &moved,
            Default::default(),
        );
        assert_eq!(clash.body, format!("#SUBSCRIBED {to}\n{}", render(&snapshot, Format::Mihomo)), "for Stash");
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&clash.body).unwrap();
        assert!(parsed["proxies"].is_sequence(), "still a Clash profile");
        // Surge's managed profile is fetched from the primary from then on; at home, from the
        // link itself; with no link it can name (or one a header could not carry), unmanaged.
        let surge = Wants::Profile(Format::Surge);
        let moved_surge = answer_at(&snapshot, surge, "https://old.example/s/TOKEN", &moved, Default::default());
        assert!(moved_surge.body.starts_with(&format!("#!MANAGED-CONFIG {to} interval=43200 strict=false\n")));
        let home_surge = answer_at(&snapshot, surge, to, &Mobility::default(), Default::default());
        assert_eq!(home_surge.body, moved_surge.body);
        assert_eq!(home_surge.body, surge::render(&snapshot, Some(to)));
        for link in ["", "https://x.example/s/a b", "https://x.example/s/a\nFINAL,DIRECT"] {
            let body = answer_at(&snapshot, surge, link, &Mobility::default(), Default::default()).body;
            assert_eq!(body, render(&snapshot, Format::Surge), "{link:?}");
            assert!(!body.contains("MANAGED-CONFIG"));
        }

        let page = answer_at(&snapshot, Wants::Page, "https://old.example/s/TOKEN", &moved, Default::default()).body;
        assert!(page.contains("This link moved."), "{page}");
        assert!(page.contains(&format!("value=\"{to}\" aria-labelledby=\"link-h\"")), "the new link is offered");
        assert!(page.contains("value=\"https://third.example/s/TOKEN\" aria-label=\"Mirror link\""), "{page}");
        assert!(!page.contains("old.example"), "the blocked link is not offered again");
    }
}
