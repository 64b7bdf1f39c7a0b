//! The edge's settings: the same names as Worker vars and secrets, natively as environment
//! variables or keys of a TOML file. Validated once, here.
//!
//! Every setting is in [`SETTINGS`], which the manual's table is made from
//! (docs/reference/generated/edge-settings.md).

use std::fmt;

use hearth_shared::agent::UaRule;
use hearth_shared::keys::{PublicKey, Role};
use hearth_shared::ratelimit::{BucketLimit, MissLimit, WindowLimit};
use hearth_shared::settings::Setting;
use hearth_shared::trust::{RoleKeys, Trust};

/// Every setting: a Worker var or secret, natively an environment variable or the key of a
/// TOML file (`--config`) that is its name without `HEARTH_`, in lowercase. The tests check
/// that this file reads exactly these, and that the manual shows this list.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "root_key",
        env: "HEARTH_ROOT_KEY",
        default: "required",
        meaning: "the root public key (base64), from `hearth-control keys show`",
    },
    Setting {
        key: "push_token",
        env: "HEARTH_PUSH_TOKEN",
        default: "required",
        meaning: "the secret control presents to push and drain (at least 32 characters)",
    },
    Setting {
        key: "api_prefix",
        env: "HEARTH_API_PREFIX",
        default: "required",
        meaning: "the secret first path segment of the API (at least 16 characters)",
    },
    Setting {
        key: "sub_prefix",
        env: "HEARTH_SUB_PREFIX",
        default: "`s`",
        meaning: "the first path segment of subscription links",
    },
    Setting {
        key: "limits",
        env: "HEARTH_LIMITS",
        default: "`on`",
        meaning: "`off` switches every rate limit off (benchmarks only)",
    },
    Setting {
        key: "link_limit",
        env: "HEARTH_LINK_LIMIT",
        default: "`60`",
        meaning: "fetches per link per window, worldwide",
    },
    Setting {
        key: "link_window_secs",
        env: "HEARTH_LINK_WINDOW_SECS",
        default: "`3600`",
        meaning: "that window, in seconds",
    },
    Setting {
        key: "network_burst",
        env: "HEARTH_NETWORK_BURST",
        default: "`120`",
        meaning: "fetches at once from one client network (IPv4 /24, IPv6 /48)",
    },
    Setting {
        key: "network_per_minute",
        env: "HEARTH_NETWORK_PER_MINUTE",
        default: "`600`",
        meaning: "fetches a minute from one client network, sustained",
    },
    Setting {
        key: "ua_rules",
        env: "HEARTH_UA_RULES",
        default: "none",
        meaning: "the edge operator's User-Agent rules, JSON: `[{\"contains\":\"MyApp\",\"target\":\"sing-box\"}]` (targets: `base64`, `mihomo`, `sing-box`, `surge`, `loon`, `page`); checked first, then the rules the owner sets in the panel (pushed signed by control; the Worker rereads them within a minute), then the built-in table",
    },
    Setting {
        key: "shards",
        env: "HEARTH_SHARDS",
        default: "`16`",
        meaning: "Worker only: the Durable Objects the links are spread over (at most 1,024; set it once, before the first push)",
    },
    Setting {
        key: "feed_secs",
        env: "HEARTH_FEED_SECS",
        default: "`5`",
        meaning: "Worker only: how long an isolate serves links from memory before it asks what changed (at most 300): a disabled, expired or deleted user stops being served within this",
    },
    Setting {
        key: "trusted_proxies",
        env: "HEARTH_TRUSTED_PROXIES",
        default: "none",
        meaning: "native edge only: reverse proxies (CIDRs, comma-separated; in the TOML file a list) whose `CF-Connecting-IP`, else the right-most `X-Forwarded-For` hop not itself trusted, is taken as the client's address, and whose `X-Forwarded-Proto` is believed; those headers from anyone else are ignored (on Cloudflare the address is always `CF-Connecting-IP`)",
    },
];

/// Whether `name` is one of the edge's settings (`HEARTH_*`).
pub fn is_setting(name: &str) -> bool {
    SETTINGS.iter().any(|setting| setting.env == name)
}

/// The secret control presents. `Debug` does not show it; compare with [`PushToken::matches`].
#[derive(Clone)]
pub struct PushToken(String);

impl PushToken {
    /// Whether an `Authorization` header carries this token (`Bearer <token>`), in constant
    /// time.
    pub fn matches(&self, authorization: Option<&str>) -> bool {
        let presented = authorization.and_then(|value| value.strip_prefix("Bearer ")).unwrap_or("");
        hearth_shared::ct_eq(presented.as_bytes(), self.0.as_bytes())
    }
}

impl fmt::Debug for PushToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PushToken(****)")
    }
}

/// The rate limits; `enabled: false` turns all of them off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Whether limits apply at all.
    pub enabled: bool,
    /// Per link.
    pub link: WindowLimit,
    /// Per client network.
    pub network: BucketLimit,
    /// Unknown tokens per client network.
    pub misses: MissLimit,
}

/// The edge's validated settings.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// The root keys every envelope chains to.
    pub root: RoleKeys,
    /// Control's push secret.
    pub push_token: PushToken,
    /// The API's secret path segment.
    pub api_prefix: String,
    /// The subscription links' path segment.
    pub sub_prefix: String,
    /// Rate limits.
    pub limits: Limits,
    /// Operator User-Agent rules.
    pub ua_rules: Vec<UaRule>,
    /// How many Durable Objects hold the links on Cloudflare.
    pub shards: u32,
    /// How long a Worker isolate believes what it heard of the links (ms).
    pub feed_ms: u64,
    /// The reverse proxies whose forwarding headers are believed (the native edge; on
    /// Cloudflare the client address is Cloudflare's `CF-Connecting-IP`).
    pub trusted_proxies: Vec<Cidr>,
}

pub use hearth_shared::forwarded::{Cidr, trusted};

/// A setting that is missing or wrong. Never carries a secret's value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("setting {name}: {problem}")]
pub struct ConfigError {
    /// The setting.
    pub name: &'static str,
    /// What is wrong.
    pub problem: String,
}

fn error(name: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError { name, problem: problem.into() }
}

impl EdgeConfig {
    /// Reads and validates the settings from `get` (a Worker's env, or the process's).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<EdgeConfig, ConfigError> {
        let get = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let required = |name: &'static str| get(name).ok_or_else(|| error(name, "is required"));
        let number = |name: &'static str, default: u32| -> Result<u32, ConfigError> {
            get(name).map_or(Ok(default), |v| {
                v.parse().ok().filter(|n| *n > 0).ok_or_else(|| error(name, "must be a whole number above 0"))
            })
        };
        let root: PublicKey = required("HEARTH_ROOT_KEY")?
            .parse()
            .map_err(|_| error("HEARTH_ROOT_KEY", "is not a public key (32 bytes of base64)"))?;
        let push_token = required("HEARTH_PUSH_TOKEN")?;
        if push_token.len() < 32 {
            return Err(error("HEARTH_PUSH_TOKEN", "must be at least 32 characters"));
        }
        let api_prefix = required("HEARTH_API_PREFIX")?;
        let sub_prefix = get("HEARTH_SUB_PREFIX").unwrap_or_else(|| "s".to_owned());
        for (name, value, min) in [("HEARTH_API_PREFIX", &api_prefix, 16), ("HEARTH_SUB_PREFIX", &sub_prefix, 1)] {
            if value.len() < min || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(error(name, format!("must be at least {min} letters, digits, '-' or '_'")));
            }
        }
        if api_prefix == sub_prefix || sub_prefix == "healthz" {
            return Err(error("HEARTH_SUB_PREFIX", "must differ from the API prefix and from 'healthz'"));
        }
        let enabled = match get("HEARTH_LIMITS").as_deref() {
            None | Some("on") => true,
            Some("off") => false,
            Some(_) => return Err(error("HEARTH_LIMITS", "must be 'on' or 'off'")),
        };
        let limits = Limits {
            enabled,
            link: WindowLimit {
                limit: number("HEARTH_LINK_LIMIT", 60)?,
                window_ms: u64::from(number("HEARTH_LINK_WINDOW_SECS", 3600)?) * 1000,
            },
            network: BucketLimit {
                burst: number("HEARTH_NETWORK_BURST", BucketLimit::PER_NETWORK.burst)?,
                per_minute: number("HEARTH_NETWORK_PER_MINUTE", BucketLimit::PER_NETWORK.per_minute)?,
            },
            misses: MissLimit::DEFAULT,
        };
        let ua_rules = match get("HEARTH_UA_RULES") {
            None => Vec::new(),
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| error("HEARTH_UA_RULES", format!("is not a JSON list of rules: {e}")))?,
        };
        let shards = number("HEARTH_SHARDS", 16)?;
        if shards > 1024 {
            return Err(error("HEARTH_SHARDS", "must be at most 1024"));
        }
        let feed_secs = number("HEARTH_FEED_SECS", 5)?;
        if feed_secs > 300 {
            return Err(error("HEARTH_FEED_SECS", "must be at most 300"));
        }
        let trusted_proxies = get("HEARTH_TRUSTED_PROXIES")
            .map(|list| hearth_shared::forwarded::parse_list([list.as_str()]))
            .transpose()
            .map_err(|problem| error("HEARTH_TRUSTED_PROXIES", problem.to_string()))?
            .unwrap_or_default();
        Ok(EdgeConfig {
            shards,
            feed_ms: u64::from(feed_secs) * 1000,
            trusted_proxies,
            root: RoleKeys::single(root),
            push_token: PushToken(push_token),
            api_prefix,
            sub_prefix,
            limits,
            ua_rules,
        })
    }
}

impl EdgeConfig {
    /// The trust to verify with: what earlier pushes stored, unless the operator has since
    /// configured another root that was never rotated in (then start over from it).
    pub fn trust(&self, stored: Option<Trust>) -> Trust {
        match stored {
            Some(trust) if trust.role_version(Role::Root) != Some(0) || trust.role(Role::Root) == Some(&self.root) => {
                trust
            }
            _ => Trust::new(self.root.clone()),
        }
    }

    /// The shard that holds a link.
    pub fn shard_of(&self, token_hash: &hearth_shared::Digest) -> u32 {
        u32::from(u16::from_be_bytes([token_hash[0], token_hash[1]])) % self.shards.max(1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(crate) fn vars() -> HashMap<&'static str, String> {
        let root = hearth_shared::keys::SecretKey::from_seed(hearth_shared::keys::Role::Root, &[1; 32]);
        HashMap::from([
            ("HEARTH_ROOT_KEY", root.public().to_string()),
            ("HEARTH_PUSH_TOKEN", "p".repeat(40)),
            ("HEARTH_API_PREFIX", "api-0123456789abcdef".to_owned()),
        ])
    }

    pub(crate) fn config() -> EdgeConfig {
        let vars = vars();
        EdgeConfig::from_vars(|name| vars.get(name).cloned()).unwrap()
    }

    #[test]
    fn defaults_and_errors() {
        let config = config();
        assert_eq!(config.sub_prefix, "s");
        assert!(config.limits.enabled);
        assert_eq!(config.limits.link.limit, 60);
        assert!(config.push_token.matches(Some(&format!("Bearer {}", "p".repeat(40)))));
        assert!(!config.push_token.matches(Some("Bearer nope")));
        assert!(!config.push_token.matches(None));
        assert_eq!(format!("{:?}", config.push_token), "PushToken(****)");

        let cases: &[(&str, &str, &str)] = &[
            ("HEARTH_ROOT_KEY", "nope", "is not a public key"),
            ("HEARTH_PUSH_TOKEN", "short", "at least 32 characters"),
            ("HEARTH_API_PREFIX", "short", "at least 16"),
            ("HEARTH_SUB_PREFIX", "a/b", "at least 1 letters"),
            ("HEARTH_LIMITS", "maybe", "'on' or 'off'"),
            ("HEARTH_LINK_LIMIT", "0", "above 0"),
            ("HEARTH_UA_RULES", "{", "JSON list"),
            ("HEARTH_TRUSTED_PROXIES", "10.0.0.0/33", "not an address or a CIDR"),
            ("HEARTH_TRUSTED_PROXIES", "proxy.example", "not an address or a CIDR"),
        ];
        for (name, value, message) in cases {
            let mut vars = vars();
            vars.insert(name, (*value).to_owned());
            let err = EdgeConfig::from_vars(|n| vars.get(n).cloned()).unwrap_err();
            assert_eq!(err.name, *name);
            assert!(err.to_string().contains(message), "{err}");
            assert!(!err.to_string().contains(&"p".repeat(40)));
        }
        let mut vars = vars();
        vars.insert("HEARTH_TRUSTED_PROXIES", "10.0.0.0/8, 2001:db8::/32,192.0.2.7".to_owned());
        // What a range holds is hearth_shared::forwarded's to test; here, that the list is read.
        let proxies = EdgeConfig::from_vars(|n| vars.get(n).cloned()).unwrap().trusted_proxies;
        let expected = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"].map(|range| range.parse::<Cidr>().unwrap());
        assert_eq!(proxies, expected);
        vars.remove("HEARTH_PUSH_TOKEN");
        assert_eq!(EdgeConfig::from_vars(|n| vars.get(n).cloned()).unwrap_err().problem, "is required");
    }
}

/// [`SETTINGS`] is what this file reads and what the manual shows.
#[cfg(test)]
mod settings_tests {
    use std::collections::BTreeSet;

    use hearth_shared::settings::{table, variables_named};

    use super::*;

    #[test]
    fn every_variable_read_is_listed_and_every_listed_one_is_read() {
        let read = variables_named(include_str!("config.rs"), "pub const SETTINGS");
        let listed: BTreeSet<String> = SETTINGS.iter().map(|setting| setting.env.to_owned()).collect();
        assert_eq!(read, listed, "read by edge/src/config.rs, against SETTINGS");
        for setting in SETTINGS {
            assert_eq!(
                setting.key,
                setting.env["HEARTH_".len()..].to_ascii_lowercase(),
                "the file key of {}",
                setting.env
            );
        }
    }

    /// The manual's table is made from [`SETTINGS`]; `HEARTH_BLESS=1` writes it.
    #[test]
    fn the_manual_shows_every_setting() {
        let bless = "HEARTH_BLESS=1 cargo test -p hearth-edge --lib settings_tests";
        let made =
            format!("<!-- Made from SETTINGS in edge/src/config.rs by its tests: {bless} -->\n{}", table(SETTINGS));
        hearth_io::made::check("docs/reference/generated/edge-settings.md", &made, bless);
    }
}
