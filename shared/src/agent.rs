//! Matching a client's User-Agent to what it wants: a profile format, or a web page.
//!
//! The operator's own rules come first (case-insensitive substrings, first match wins), then
//! the built-in table of known clients (an app's name anywhere in the User-Agent, so one with a
//! browser-like prefix is still the app), then browser detection; anything else gets the
//! base64 list, which every Hysteria2 client imports. HiddifyNext is matched before any
//! other rule because its User-Agent also names clash, v2ray and sing-box.

use crate::render::format::{Format, SingBoxVersion};

/// What a client wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wants {
    /// A profile in this format.
    Profile(Format),
    /// A person in a browser: the subscription page.
    Page,
}

pub use crate::wire::{RuleTarget, UaRule};

/// How a built-in entry matches the lowercased User-Agent.
enum Pattern {
    /// An app's name and its `/`: at the start, or as a token after a separator anywhere (some
    /// apps send a browser-like `Mozilla/5.0 (...)` before their own name).
    Token(&'static str),
    Contains(&'static str),
    /// The whole User-Agent (OpenClash's own is just `Clash`).
    Exact(&'static str),
}

/// Whether `token` stands in `lower` at its start or right after a character that is not a
/// letter or a digit (so `sfa/` is found in `mozilla/5.0 (...) sfa/1.11` but not in `xsfa/1`).
fn has_token(lower: &str, token: &str) -> bool {
    lower.match_indices(token).any(|(at, _)| at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric())
}

/// The built-in table, in order: apps that name another app in their User-Agent (NekoBox
/// says "Prefer ClashMeta Format") come before the app they name. Patterns are lowercase.
const BUILT_IN: &[(Pattern, RuleTarget)] = &[
    (Pattern::Token("hiddifynext/"), RuleTarget::SingBox),
    (Pattern::Token("sfa/"), RuleTarget::SingBox),
    (Pattern::Token("sfi/"), RuleTarget::SingBox),
    (Pattern::Token("sfm/"), RuleTarget::SingBox),
    (Pattern::Token("sft/"), RuleTarget::SingBox),
    (Pattern::Contains("karing"), RuleTarget::SingBox),
    (Pattern::Token("sing-box"), RuleTarget::SingBox),
    (Pattern::Token("v2rayn/"), RuleTarget::Base64),
    (Pattern::Token("v2rayng/"), RuleTarget::Base64),
    (Pattern::Token("happ/"), RuleTarget::Base64),
    (Pattern::Contains("streisand"), RuleTarget::Base64),
    (Pattern::Contains("nekobox"), RuleTarget::Base64),
    (Pattern::Token("shadowrocket/"), RuleTarget::Base64),
    // Surge and Loon read profiles of their own (Surge iOS 5.8 and Mac 5.4 on, with Hysteria
    // 2): `Surge iOS/3374`, `Surge Mac/2978`, `Loon/877 CFNetwork/... Darwin/...`. Only these
    // words with their `/`: an older `Surge/1129 CFNetwork/...` has no Hysteria 2 and gets the
    // list, and `Loon/` as a word of its own is not `Balloon/`. Before the Clash apps, so an
    // app of these two that names a Clash core still gets its own format.
    (Pattern::Token("surge ios/"), RuleTarget::Surge),
    (Pattern::Token("surge mac/"), RuleTarget::Surge),
    (Pattern::Token("loon/"), RuleTarget::Loon),
    (Pattern::Contains("clash-verge"), RuleTarget::Mihomo),
    (Pattern::Contains("flclash"), RuleTarget::Mihomo),
    (Pattern::Contains("mihomo"), RuleTarget::Mihomo),
    (Pattern::Contains("clashx meta"), RuleTarget::Mihomo),
    (Pattern::Token("stash/"), RuleTarget::Mihomo),
    (Pattern::Contains("clash.meta"), RuleTarget::Mihomo),
    (Pattern::Contains("clashmeta"), RuleTarget::Mihomo),
    // Clash apps whose own names say no "meta" (their source's User-Agent): Clash Nyanpasu
    // (`clash-nyanpasu/v1.6.1`), Clash Mi (`ClashMi/1.0.28 platform/android ...`), OpenClash
    // (`Clash`, or its own `openclash`), and any `Clash/x.y`: none can read a base64 list.
    (Pattern::Token("clash-nyanpasu/"), RuleTarget::Mihomo),
    (Pattern::Token("clashmi/"), RuleTarget::Mihomo),
    (Pattern::Contains("openclash"), RuleTarget::Mihomo),
    (Pattern::Token("clash/"), RuleTarget::Mihomo),
    (Pattern::Exact("clash"), RuleTarget::Mihomo),
];

/// Engines that only browsers name.
const BROWSER_ENGINES: &[&str] = &["applewebkit/", "gecko/", "trident/", "presto/"];

/// What the client behind `user_agent` wants, given the operator's `rules`.
pub fn match_user_agent(user_agent: &str, rules: &[UaRule]) -> Wants {
    let lower = user_agent.to_ascii_lowercase();
    let target = rules
        .iter()
        .find(|rule| !rule.contains.is_empty() && lower.contains(&rule.contains.to_ascii_lowercase()))
        .map(|rule| rule.target)
        .or_else(|| {
            BUILT_IN
                .iter()
                .find(|(pattern, _)| match pattern {
                    Pattern::Token(p) => has_token(&lower, p),
                    Pattern::Contains(p) => lower.contains(p),
                    Pattern::Exact(p) => lower.trim() == *p,
                })
                .map(|(_, target)| *target)
        })
        .unwrap_or_else(|| if is_browser(&lower) { RuleTarget::Page } else { RuleTarget::Base64 });
    match target {
        RuleTarget::Base64 => Wants::Profile(Format::Base64),
        RuleTarget::Mihomo => Wants::Profile(Format::Mihomo),
        RuleTarget::SingBox => Wants::Profile(Format::SingBox(sing_box_version(&lower))),
        RuleTarget::Surge => Wants::Profile(Format::Surge),
        RuleTarget::Loon => Wants::Profile(Format::Loon),
        RuleTarget::Page => Wants::Page,
    }
}

/// The format a `?format=` query asks for, for apps that send no telling User-Agent:
/// `base64` (or `v2ray`), `clash` (or `mihomo`), `sing-box` (or `singbox`, optionally with a
/// version: `sing-box-1.12`), `surge`, `loon`, `page`.
pub fn format_override(query: &str) -> Option<Wants> {
    let value = query.split('&').find_map(|pair| pair.strip_prefix("format="))?;
    let value = value.to_ascii_lowercase();
    Some(match value.as_str() {
        "base64" | "v2ray" => Wants::Profile(Format::Base64),
        "clash" | "mihomo" => Wants::Profile(Format::Mihomo),
        "surge" => Wants::Profile(Format::Surge),
        "loon" => Wants::Profile(Format::Loon),
        "page" => Wants::Page,
        other => {
            let rest = other.strip_prefix("sing-box").or_else(|| other.strip_prefix("singbox"))?;
            let version = if rest.is_empty() {
                SingBoxVersion::OLDEST
            } else {
                sing_box_version(&format!("sing-box{}", rest.trim_start_matches('-')))
            };
            Wants::Profile(Format::SingBox(version))
        }
    })
}

/// A browser says `Mozilla/` and names a browser engine; apps built on web views usually add
/// their own name, which the table above has caught already.
fn is_browser(lower: &str) -> bool {
    lower.starts_with("mozilla/") && BROWSER_ENGINES.iter().any(|engine| lower.contains(engine))
}

/// The sing-box version a User-Agent names (`... sing-box 1.12.4 ...` or `sing-box/1.12`);
/// [`SingBoxVersion::OLDEST`] when it names none.
fn sing_box_version(lower: &str) -> SingBoxVersion {
    let parse = |rest: &str| {
        let mut parts = rest.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(SingBoxVersion { major, minor })
    };
    lower
        .match_indices("sing-box")
        .find_map(|(at, name)| {
            let rest = lower[at + name.len()..].trim_start_matches([' ', '/', 'v']);
            parse(rest)
        })
        .unwrap_or(SingBoxVersion::OLDEST)
        .at_least_oldest()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: fn(u16, u16) -> Wants = |major, minor| Wants::Profile(Format::SingBox(SingBoxVersion { major, minor }));

    #[test]
    fn built_in_table() {
        let base64 = Wants::Profile(Format::Base64);
        let mihomo = Wants::Profile(Format::Mihomo);
        let surge = Wants::Profile(Format::Surge);
        let loon = Wants::Profile(Format::Loon);
        let cases: &[(&str, Wants)] = &[
            ("HiddifyNext/2.5.7 (android) like ClashMeta v2rayNG v2rayN sing-box", V(1, 11)),
            ("SFA/1.12.4 (Android 14; sing-box 1.12.4; language en_US)", V(1, 12)),
            ("SFI/1.13.0 (Apple iOS 18.1; sing-box 1.13.0)", V(1, 13)),
            ("SFM/1.10.1 (sing-box 1.10.1)", V(1, 11)),
            ("SFT/1.14.4 (sing-box 1.14.4)", V(1, 14)),
            ("sing-box 1.13.2", V(1, 13)),
            ("Karing/1.1.2.605 android", V(1, 11)),
            ("clash-verge/v2.2.3", mihomo),
            ("FlClash/v0.8.80 clash-verge", mihomo),
            ("mihomo/1.19.10", mihomo),
            ("ClashX Meta/v1.4.6", mihomo),
            ("Stash/2.4.7 Clash/1.9.0", mihomo),
            ("ClashMetaForAndroid/2.11.5.Meta", mihomo),
            ("clash-nyanpasu/v1.6.1", mihomo),
            ("ClashMi/1.0.28.1406 platform/android ClashMeta/1.19.30; mihomo/1.19.30", mihomo),
            ("ClashMi/1.0.17.300 platform/ios", mihomo),
            ("Clash", mihomo),
            ("OpenClash/0.46", mihomo),
            ("Clash/1.18.0", mihomo),
            ("v2rayN/7.12.5", base64),
            ("v2rayNG/1.10.5", base64),
            ("Happ/3.2.1", base64),
            ("Streisand/1.6.48", base64),
            ("NekoBox/Android/1.3.9 (Prefer ClashMeta Format)", base64),
            ("Shadowrocket/2678 CFNetwork/1568.300.101 Darwin/24.2.0", base64),
            ("Surge iOS/3374", surge),
            ("Surge iOS/2920 CFNetwork/1335.0.3.2 Darwin/21.6.0", surge),
            ("Surge Mac/2978", surge),
            ("Loon/877 CFNetwork/3826.500.131 Darwin/24.5.0", loon),
            ("Loon/786", loon),
            // Surge before 5 (no Hysteria 2) names no platform; a balloon is not Loon.
            ("Surge/1129 CFNetwork/1335.0.3.2 Darwin/21.6.0", base64),
            ("Balloon/1.0", base64),
            ("mySurge iOS/1", base64),
            ("curl/8.5.0", base64),
            ("", base64),
        ];
        for (ua, wants) in cases {
            assert_eq!(match_user_agent(ua, &[]), *wants, "{ua}");
        }
    }

    /// Apps built on web views put a browser's words before their own name: the name wins.
    #[test]
    fn an_app_named_after_a_browser_prefix_is_the_app() {
        let webview = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36";
        assert_eq!(match_user_agent(&format!("{webview} Happ/2.9.1"), &[]), Wants::Profile(Format::Base64));
        assert_eq!(match_user_agent(&format!("{webview} v2rayNG/1.9.30"), &[]), Wants::Profile(Format::Base64));
        assert_eq!(
            match_user_agent(&format!("{webview} SFA/1.12.4 (sing-box 1.12.4)"), &[]),
            Wants::Profile(Format::SingBox(SingBoxVersion { major: 1, minor: 12 }))
        );
        assert_eq!(match_user_agent(&format!("{webview} (Stash/2.7)"), &[]), Wants::Profile(Format::Mihomo));
        assert_eq!(match_user_agent(&format!("{webview} Loon/877"), &[]), Wants::Profile(Format::Loon));
        assert_eq!(match_user_agent(&format!("{webview} Surge iOS/3374"), &[]), Wants::Profile(Format::Surge));
        // A name inside another word is not the app: this is still a browser.
        assert_eq!(match_user_agent(&format!("{webview} xhapp/1 mysfa/2"), &[]), Wants::Page);
        assert_eq!(match_user_agent(webview, &[]), Wants::Page);
    }

    #[test]
    fn browsers_get_the_page() {
        for ua in [
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        ] {
            assert_eq!(match_user_agent(ua, &[]), Wants::Page, "{ua}");
        }
        assert_eq!(match_user_agent("Mozilla/5.0 (compatible)", &[]), Wants::Profile(Format::Base64));
    }

    #[test]
    fn format_query_overrides() {
        assert_eq!(format_override("format=clash"), Some(Wants::Profile(Format::Mihomo)));
        assert_eq!(format_override("a=1&format=base64"), Some(Wants::Profile(Format::Base64)));
        assert_eq!(format_override("format=sing-box"), Some(V(1, 11)));
        assert_eq!(format_override("format=singbox-1.13"), Some(V(1, 13)));
        assert_eq!(format_override("format=page"), Some(Wants::Page));
        assert_eq!(format_override("format=surge"), Some(Wants::Profile(Format::Surge)));
        assert_eq!(format_override("x=1&format=Loon"), Some(Wants::Profile(Format::Loon)));
        assert_eq!(format_override("format=nonsense"), None);
        assert_eq!(format_override(""), None);
    }

    #[test]
    fn operator_rules_override_in_order() {
        let rules = vec![
            UaRule { contains: "".into(), target: RuleTarget::Page },
            UaRule { contains: "MyRouter".into(), target: RuleTarget::Mihomo },
            UaRule { contains: "hiddify".into(), target: RuleTarget::Base64 },
            UaRule { contains: "router".into(), target: RuleTarget::SingBox },
            UaRule { contains: "FamilyTablet".into(), target: RuleTarget::Surge },
            UaRule { contains: "Loon/".into(), target: RuleTarget::Base64 },
        ];
        assert_eq!(match_user_agent("myrouter/1.0", &rules), Wants::Profile(Format::Mihomo));
        assert_eq!(match_user_agent("HiddifyNext/2.5.7", &rules), Wants::Profile(Format::Base64));
        assert_eq!(match_user_agent("other-router sing-box/1.12", &rules), V(1, 12));
        assert_eq!(match_user_agent("v2rayN/7", &rules), Wants::Profile(Format::Base64));
        assert_eq!(match_user_agent("FamilyTablet/2", &rules), Wants::Profile(Format::Surge));
        assert_eq!(match_user_agent("Loon/877", &rules), Wants::Profile(Format::Base64), "the rule, not the table");
        assert_eq!(match_user_agent("Loon/877", &[]), Wants::Profile(Format::Loon));
    }

    /// Rules name their targets in kebab-case (what the panel and `HEARTH_UA_RULES` write),
    /// and each keeps its postcard position (what signed settings carry): the targets from
    /// before Surge and Loon read as they were signed.
    #[test]
    fn rule_targets_are_kebab_case_and_keep_their_wire_positions() {
        for (target, name, position) in [
            (RuleTarget::Base64, "base64", 0u8),
            (RuleTarget::Mihomo, "mihomo", 1),
            (RuleTarget::SingBox, "sing-box", 2),
            (RuleTarget::Page, "page", 3),
            (RuleTarget::Surge, "surge", 4),
            (RuleTarget::Loon, "loon", 5),
        ] {
            assert_eq!(serde_json::to_string(&target).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<RuleTarget>(&format!("\"{name}\"")).unwrap(), target);
            assert_eq!(postcard::to_allocvec(&target).unwrap(), [position], "{name}");
            assert_eq!(postcard::from_bytes::<RuleTarget>(&[position]).unwrap(), target);
        }
    }
}
