//! The edge's settings: the same names as Worker vars and secrets, natively as environment
//! variables or keys of a TOML file. Validated once, here.
//!
//! | name | meaning | default |
//! |---|---|---|
//! | `HEARTH_ROOT_KEY` | the root public key (base64), from `hearth-control keys show` | required |
//! | `HEARTH_PUSH_TOKEN` | the secret control presents to push and drain (at least 32 characters) | required |
//! | `HEARTH_API_PREFIX` | the secret first path segment of the API (at least 16 characters) | required |
//! | `HEARTH_SUB_PREFIX` | the first path segment of subscription links | `s` |
//! | `HEARTH_LIMITS` | `on`, or `off` to switch every rate limit off (benchmarks only) | `on` |
//! | `HEARTH_LINK_LIMIT` | fetches per link per window, worldwide | `60` |
//! | `HEARTH_LINK_WINDOW_SECS` | that window, in seconds | `3600` |
//! | `HEARTH_NETWORK_BURST` | fetches at once from one /24 or /48 | `120` |
//! | `HEARTH_NETWORK_PER_MINUTE` | fetches a minute from one /24 or /48, sustained | `600` |
//! | `HEARTH_SHARDS` | Durable Objects the links are spread over (Worker only; set once) | `16` |
//! | `HEARTH_FEED_SECS` | how long a Worker isolate serves links from memory before it asks what changed: a disabled or deleted user stops being served within this (Worker only) | `5` |
//! | `HEARTH_UA_RULES` | operator User-Agent rules, JSON: `[{"contains":"...","target":"sing-box"}]` | none |
//! | `HEARTH_TRUSTED_PROXIES` | reverse proxies (CIDRs, comma-separated) whose `CF-Connecting-IP`, `X-Forwarded-For` and `X-Forwarded-Proto` are believed (native edge only) | none |

use std::fmt;

use hearth_shared::agent::UaRule;
use hearth_shared::keys::{PublicKey, Role};
use hearth_shared::ratelimit::{BucketLimit, MissLimit, WindowLimit};
use hearth_shared::trust::{RoleKeys, Trust};

/// Every setting name, for checking a file for typos.
pub const NAMES: &[&str] = &[
    "HEARTH_ROOT_KEY",
    "HEARTH_PUSH_TOKEN",
    "HEARTH_API_PREFIX",
    "HEARTH_SUB_PREFIX",
    "HEARTH_LIMITS",
    "HEARTH_LINK_LIMIT",
    "HEARTH_LINK_WINDOW_SECS",
    "HEARTH_NETWORK_BURST",
    "HEARTH_NETWORK_PER_MINUTE",
    "HEARTH_UA_RULES",
    "HEARTH_SHARDS",
    "HEARTH_FEED_SECS",
    "HEARTH_TRUSTED_PROXIES",
];

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
