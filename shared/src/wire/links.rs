//! Subscription links: the token a link carries ([`SubToken`]), the aliases that stand for the
//! links of the panel Hearth took users over from, and the edge settings that say where every
//! edge serves links and where a blocked or retired one's links went.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};

use super::codec::{WireError, decode, encode};
use super::ua::UaRule;
use crate::{Digest, sha256};

/// Settings the owner makes in control that the edge applies: its User-Agent rules, checked
/// before the built-in table (after the rules in the edge's own `HEARTH_UA_RULES`), and where
/// every edge serves links (so an edge whose domain is blocked or retired can tell apps where
/// links went).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeSettings {
    /// The rules, first match wins.
    pub ua_rules: Vec<UaRule>,
    /// Every edge's link base, in the owner's order.
    pub links: Vec<LinkBase>,
    /// Where aliases live (`/sub/`, `/api/sub/`): paths under these the edge looks up as
    /// aliases ([`SubToken::for_alias`]); others get the decoy without a lookup. Encoded after
    /// the rest, only when set (see [`EdgeSettings::encode`]).
    #[serde(skip)]
    pub alias_prefixes: Vec<String>,
}

impl EdgeSettings {
    /// The most link bases a settings record holds.
    pub const MAX_LINKS: usize = 16;

    /// The most alias prefixes a settings record holds.
    pub const MAX_ALIAS_PREFIXES: usize = 16;

    /// The canonical encoding: rules and link bases, then the alias prefixes when there are
    /// any (so an edge from before aliases reads a record without them as it always did).
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = encode(self);
        if !self.alias_prefixes.is_empty() {
            bytes.extend(encode(&self.alias_prefixes));
        }
        bytes
    }

    /// Decodes strictly, also a record from before link bases (rules alone) or aliases.
    pub fn decode(body: &[u8]) -> Result<EdgeSettings, WireError> {
        #[derive(Deserialize, Serialize)]
        struct RulesOnly {
            ua_rules: Vec<UaRule>,
        }
        let settings = match postcard::take_from_bytes::<EdgeSettings>(body) {
            Ok((mut settings, rest)) => {
                if !rest.is_empty() {
                    settings.alias_prefixes = decode(rest, "edge settings (aliases)")?;
                }
                if settings.encode() != body {
                    return Err(WireError::Malformed("edge settings"));
                }
                settings
            }
            Err(_) => decode::<RulesOnly>(body, "edge settings")
                .map(|old| EdgeSettings { ua_rules: old.ua_rules, ..EdgeSettings::default() })?,
        };
        if settings.links.len() > EdgeSettings::MAX_LINKS
            || !settings.links.iter().all(|link| link.base.len() <= 512 && crate::is_web_address(&link.base))
        {
            return Err(WireError::Malformed("edge settings (links)"));
        }
        if settings.alias_prefixes.len() > EdgeSettings::MAX_ALIAS_PREFIXES
            || !settings.alias_prefixes.iter().all(|prefix| is_alias_prefix(prefix))
        {
            return Err(WireError::Malformed("edge settings (alias prefixes)"));
        }
        Ok(settings)
    }

    /// The alias a request path names, when it is under one of the alias prefixes (under `/`,
    /// the root: a path of one segment, `/<id>`, so deeper paths still cost no lookup).
    pub fn alias(&self, path: &str) -> Option<SubToken> {
        let under = |prefix: &String| match prefix.as_str() {
            "/" => path.len() > 1 && !path[1..].trim_end_matches('/').contains('/'),
            prefix => path.starts_with(prefix),
        };
        if !self.alias_prefixes.iter().any(under) {
            return None;
        }
        SubToken::for_alias(path)
    }

    /// Where links went, for a fetch of `token` at `fetched` (the link as requested): when the
    /// base it came in on is blocked or retired, the same link at the primary (the first base
    /// offered); and the link at every base offered (the mirrors).
    pub fn mobility(&self, fetched: &str, token: &SubToken) -> Mobility {
        // Most edges know no other: nothing to work out on every answer.
        if self.links.is_empty() {
            return Mobility::default();
        }
        let token = token.to_link_form();
        let strip = |url: &str| -> String {
            let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
            rest.trim_end_matches('/').to_ascii_lowercase()
        };
        let here = strip(fetched);
        let came = self
            .links
            .iter()
            .filter(|link| here.starts_with(&format!("{}/", strip(&link.base))))
            .max_by_key(|link| link.base.len());
        let offered: Vec<&LinkBase> = self.links.iter().filter(|link| link.state == LinkState::Active).collect();
        let at = |link: &LinkBase| format!("{}/{token}", link.base.trim_end_matches('/'));
        Mobility {
            moved_to: came
                .filter(|link| link.state != LinkState::Active)
                .and_then(|_| offered.first().map(|link| at(link))),
            retired: came.is_some_and(|link| link.state == LinkState::Retired),
            mirrors: offered.iter().map(|link| at(link)).collect(),
        }
    }
}

/// Whether `prefix` can hold aliases: an alias path itself, with a `/` at both ends, at most 64
/// bytes; or `/`, the root, for aliases of one segment (a subscription page served at
/// `https://sub.example/<id>`).
pub fn is_alias_prefix(prefix: &str) -> bool {
    prefix == "/"
        || prefix.len() <= 64
            && prefix.len() >= 3
            && prefix.ends_with('/')
            && alias_path(prefix).is_some_and(|path| path.len() + 1 == prefix.len())
}

/// Where one edge serves links, and whether they are offered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkBase {
    /// The base a token is appended to (`https://sub.example/s`).
    pub base: String,
    /// Whether its links are offered.
    pub state: LinkState,
}

/// Whether an edge's links are offered (named in lowercase in JSON; postcard carries the
/// variant's index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    /// Offered; the first is the primary.
    Active,
    /// Its domain is blocked: links moved to the primary; it still serves whoever reaches it.
    Blocked,
    /// Given up: fetches are sent to the primary.
    Retired,
}

impl LinkState {
    /// The state's name: `active`, `blocked` or `retired`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Active => "active",
            LinkState::Blocked => "blocked",
            LinkState::Retired => "retired",
        }
    }

    /// The state of that name.
    pub fn from_name(text: &str) -> Option<LinkState> {
        [LinkState::Active, LinkState::Blocked, LinkState::Retired].into_iter().find(|state| state.as_str() == text)
    }
}

/// What an edge tells an app about where its link went ([`EdgeSettings::mobility`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mobility {
    /// The link at the primary, when the one fetched is blocked or retired.
    pub moved_to: Option<String>,
    /// The link fetched is retired: the fetch is redirected.
    pub retired: bool,
    /// The link at every edge offering links, in the owner's order.
    pub mirrors: Vec<String>,
}

/// A subscription token: 32 random bytes, written in links as 43 characters of unpadded
/// base64url. The edge looks a link up by [`SubToken::hash`] and never stores the token.
/// `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SubToken([u8; 32]);

impl SubToken {
    /// A new random token.
    pub fn generate(rng: &mut impl CryptoRngCore) -> SubToken {
        let mut bytes = [0u8; 32];
        rng.fill_bytes(&mut bytes);
        SubToken(bytes)
    }

    /// The token from its raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> SubToken {
        SubToken(bytes)
    }

    /// Parses the form used in links; `None` for anything else.
    pub fn parse(text: &str) -> Option<SubToken> {
        if text.len() != 43 {
            return None;
        }
        let bytes = B64URL.decode(text).ok()?;
        let token = SubToken(bytes.try_into().ok()?);
        // Refuse non-canonical spellings (stray low bits in the last character).
        (token.to_link_form() == text).then_some(token)
    }

    /// The form used in links.
    pub fn to_link_form(&self) -> String {
        B64URL.encode(self.0)
    }

    /// The raw bytes (the sealing key derives from them).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// SHA-256 of the raw bytes: how the edge and control look a link up.
    pub fn hash(&self) -> Digest {
        sha256(&self.0)
    }

    /// The token of an alias: an old subscription path a user's app still fetches (from the
    /// panel Hearth took the user over from), served like a link. The path is the secret, as
    /// a link's token is; `None` when it is not an alias path ([`alias_path`]).
    pub fn for_alias(path: &str) -> Option<SubToken> {
        let path = alias_path(path)?;
        Some(SubToken(sha256(&[b"hearth alias v1\0".as_slice(), path.as_bytes()].concat())))
    }
}

/// The most bytes of an alias path.
pub const MAX_ALIAS_PATH: usize = 256;

/// An alias path as it is matched: `/` and at least one more character, at most
/// [`MAX_ALIAS_PATH`] bytes of what URLs carry unescaped in a path (no `?`, `#`, `//` or
/// `..` segment), without a trailing `/` (a fetch with one is the same alias).
pub fn alias_path(path: &str) -> Option<&str> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let fine = path.len() >= 2
        && path.len() <= MAX_ALIAS_PATH
        && path.starts_with('/')
        && !path.contains("//")
        && !path.split('/').any(|segment| segment == ".." || segment == ".")
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'/' || ALIAS_PUNCTUATION.contains(&b));
    fine.then_some(path)
}

/// What an alias path's segments carry as it is, besides letters and digits.
const ALIAS_PUNCTUATION: &[u8] = b"-._~%+=:@,!$&'()*;";

/// `text` (an old panel's subscription id) as one segment of an alias path, as an app
/// requests it: every other byte percent-encoded, uppercase, as HTTP clients write it
/// (`a b` is `a%20b`, a `/` is `%2F`).
pub fn alias_segment(text: &str) -> String {
    const ESCAPED: &percent_encoding::AsciiSet = &{
        let mut set = percent_encoding::NON_ALPHANUMERIC.remove(ALIAS_PUNCTUATION[0]);
        let mut i = 1;
        while i < ALIAS_PUNCTUATION.len() {
            set = set.remove(ALIAS_PUNCTUATION[i]);
            i += 1;
        }
        set
    };
    percent_encoding::utf8_percent_encode(text, ESCAPED).to_string()
}

impl fmt::Debug for SubToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SubToken(****)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RuleTarget;

    /// A subscription id becomes one segment of a path the alias check takes, escaped as an
    /// app escapes it.
    #[test]
    fn subscription_ids_become_alias_segments_as_apps_request_them() {
        assert_eq!(alias_segment("alicesub0000001x"), "alicesub0000001x");
        assert_eq!(alias_segment("carol sub \u{fc}"), "carol%20sub%20%C3%BC");
        assert_eq!(alias_segment("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(alias_segment("-._~%+=:@,!$&'()*;"), "-._~%+=:@,!$&'()*;");
        for id in ["carol sub \u{fc}", "a/b?c#d", "\u{44f}\u{449}"] {
            assert!(alias_path(&format!("/sub/{}", alias_segment(id))).is_some(), "{id}");
        }
    }

    /// Where a fetched link went: by the base it came in on (scheme and case aside, the
    /// longest base that holds it), only when that base is not offered; the mirrors are the
    /// offered bases, in order.
    #[test]
    fn a_blocked_or_retired_base_names_the_primary() {
        let base = |base: &str, state| LinkBase { base: base.into(), state };
        let settings = EdgeSettings {
            ua_rules: Vec::new(),
            links: vec![
                base("https://old.example/s", LinkState::Blocked),
                base("https://sub.mirror.example/m", LinkState::Active),
                base("https://gone.example/s", LinkState::Retired),
                base("https://third.example/s", LinkState::Active),
            ],
            alias_prefixes: Vec::new(),
        };
        let mirrors = ["https://sub.mirror.example/m/TOKEN".to_owned(), "https://third.example/s/TOKEN".to_owned()];
        let token = SubToken::from_bytes([7; 32]);
        let t = token.to_link_form();
        let mirrors: Vec<String> = mirrors.iter().map(|m| m.replace("TOKEN", &t)).collect();
        let moved = settings.mobility(&format!("http://OLD.example/s/{t}"), &token);
        assert_eq!(moved, Mobility { moved_to: Some(mirrors[0].clone()), retired: false, mirrors: mirrors.clone() });
        let retired = settings.mobility(&format!("https://gone.example/s/{t}"), &token);
        assert!(retired.retired && retired.moved_to.as_deref() == Some(mirrors[0].as_str()));
        for at_home in ["https://third.example/s/TOKEN", "https://unknown.example/s/TOKEN", "https://old.example/sx/T"]
        {
            assert_eq!(settings.mobility(at_home, &token).moved_to, None, "{at_home}");
        }
        // Nothing offered: nowhere to send anyone.
        let none =
            EdgeSettings { links: vec![base("https://old.example/s", LinkState::Blocked)], ..EdgeSettings::default() };
        assert_eq!(none.mobility("https://old.example/s/T", &token), Mobility::default());

        // The record decodes strictly, also as it was before link bases.
        assert_eq!(EdgeSettings::decode(&encode(&settings)), Ok(settings.clone()));
        let rules = vec![UaRule { contains: "App".into(), target: RuleTarget::Mihomo }];
        #[derive(Serialize)]
        struct Before {
            ua_rules: Vec<UaRule>,
        }
        let old = EdgeSettings::decode(&encode(&Before { ua_rules: rules.clone() })).unwrap();
        assert_eq!(old, EdgeSettings { ua_rules: rules, ..EdgeSettings::default() });
        let mut bad = settings.clone();
        bad.links[0].base = "javascript:alert(1)".into();
        assert!(EdgeSettings::decode(&encode(&bad)).is_err());

        // Alias prefixes follow the rest, only when there are any; an edge from before reads
        // the rest as it did.
        assert_eq!(settings.encode(), encode(&settings));
        let mut aliased = settings.clone();
        aliased.alias_prefixes = vec!["/sub/".into(), "/api/sub/".into()];
        let bytes = aliased.encode();
        assert_eq!(EdgeSettings::decode(&bytes), Ok(aliased.clone()));
        let before: EdgeSettings = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(before.links, settings.links);
        for wrong in ["", "//", "sub/", "/sub", "/a//b/", "/../", "/sub?x/"] {
            let mut bad = aliased.clone();
            bad.alias_prefixes = vec![wrong.into()];
            assert!(EdgeSettings::decode(&bad.encode()).is_err(), "{wrong}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(EdgeSettings::decode(&trailing).is_err());
    }

    #[test]
    fn aliases_are_paths_under_their_prefixes_with_a_token_of_their_own() {
        let settings = EdgeSettings { alias_prefixes: vec!["/sub/".into()], ..EdgeSettings::default() };
        let token = settings.alias("/sub/Ab3xYz").unwrap();
        assert_eq!(settings.alias("/sub/Ab3xYz/"), Some(token.clone()), "a trailing / is the same alias");
        assert_ne!(settings.alias("/sub/Ab3xYZ"), Some(token.clone()), "paths are case-sensitive");
        assert_eq!(settings.alias("/json/Ab3xYz"), None, "not under a prefix");
        assert_eq!(settings.alias("/sub/a?b"), None);
        assert_eq!(settings.alias("/sub/../s/x"), None);
        assert_eq!(SubToken::for_alias("/sub/Ab3xYz"), Some(token));
        assert_eq!(alias_path(&format!("/{}", "a".repeat(MAX_ALIAS_PATH))), None);
        assert!(alias_path("/sub/eyJ1c2VyIjoxfQ,1700000000.abc_-").is_some());

        // At the root: one segment only.
        let root = EdgeSettings { alias_prefixes: vec!["/".into()], ..EdgeSettings::default() };
        assert_eq!(EdgeSettings::decode(&root.encode()), Ok(root.clone()));
        let token = root.alias("/x7Kp2mQv9LdN4tRb").unwrap();
        assert_eq!(root.alias("/x7Kp2mQv9LdN4tRb/"), Some(token));
        assert_eq!(root.alias("/x7Kp2mQv9LdN4tRb/json"), None, "deeper paths cost no lookup");
        assert_eq!(root.alias("/wp-admin/setup.php"), None);
        assert_eq!(root.alias("/"), None);
    }

    #[test]
    fn tokens_parse_only_their_canonical_form() {
        let token = SubToken::from_bytes([0xab; 32]);
        let text = token.to_link_form();
        assert_eq!(text.len(), 43);
        assert_eq!(SubToken::parse(&text), Some(token.clone()));
        assert_eq!(SubToken::parse(&text[..42]), None);
        assert_eq!(SubToken::parse(&format!("{text}=")), None);
        // The last character carries 4 spare bits: a different spelling of the same bytes.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let last = ALPHABET.iter().position(|&c| c == text.as_bytes()[42]).unwrap();
        assert_eq!(last % 4, 0, "the spare bits of a canonical token are zero");
        let sibling = format!("{}{}", &text[..42], ALPHABET[last + 1] as char);
        assert_eq!(SubToken::parse(&sibling), None);
        assert_eq!(format!("{token:?}"), "SubToken(****)");
    }
}
