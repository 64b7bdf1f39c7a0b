//! Control's settings as data: every key of `control.toml`, its environment variable, its
//! default and what it means. Only the tests read it: they hold it to what `config.rs` reads,
//! both ways, and make the manual's table from it (docs/reference/generated/control-settings.md).

use hearth_shared::settings::Setting;

/// Every key of `control.toml` and the environment variable that overrides it.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting {
        key: "listen",
        env: "HEARTH_LISTEN",
        default: "`127.0.0.1:8443`",
        meaning: "where control listens (`0.0.0.0:8443` on a VPS)",
    },
    Setting {
        key: "public_url",
        env: "HEARTH_PUBLIC_URL",
        default: "`https://<listen>`",
        meaning: "how nodes and browsers reach control",
    },
    Setting {
        key: "admin_prefix",
        env: "HEARTH_ADMIN_PREFIX",
        default: "random, from `init`",
        meaning: "the secret path of the admin API (and panel)",
    },
    Setting {
        key: "edge_url",
        env: "HEARTH_EDGE_URL",
        default: "none",
        meaning: "the `main` edge to push to; without one (and no other edge), control serves links itself. The panel (setup, Settings) or `PATCH /api/settings` change it at run time: the new edge gets every stream, nodes learn it from control's next answer; an edit here wins again at the next start. More edges: `edge add` (they live in the database only)",
    },
    Setting {
        key: "sub_url",
        env: "HEARTH_SUB_URL",
        default: "`<edge_url or public_url>/<sub prefix>`",
        meaning: "the public base of subscription links (also settable in the panel, like `edge_url`)",
    },
    Setting {
        key: "tls",
        env: "HEARTH_TLS",
        default: "`self-signed`",
        meaning: "`self-signed` (from `init`), `files`, or `off` behind a TLS proxy",
    },
    Setting {
        key: "tls_cert, tls_key",
        env: "HEARTH_TLS_CERT, HEARTH_TLS_KEY",
        default: "`tls.crt`, `tls.key`",
        meaning: "PEM files (relative to the data directory)",
    },
    Setting {
        key: "log_format",
        env: "HEARTH_LOG_FORMAT",
        default: "`text`",
        meaning: "`json` for structured logs; `HEARTH_LOG=debug` for more",
    },
    Setting {
        key: "metrics_token",
        env: "HEARTH_METRICS_TOKEN",
        default: "none",
        meaning: "lets a Prometheus scraper read `/<admin prefix>/metrics`",
    },
    Setting {
        key: "telegram_api",
        env: "HEARTH_TELEGRAM_API",
        default: "`https://api.telegram.org`",
        meaning: "the Bot API the owner's Telegram bot is reached at",
    },
    Setting {
        key: "archive_after_secs",
        env: "HEARTH_ARCHIVE_AFTER_SECS",
        default: "`30`",
        meaning: "a change is archived to the edge once nothing else changed for this long",
    },
    Setting {
        key: "archive_every_secs",
        env: "HEARTH_ARCHIVE_EVERY_SECS",
        default: "`3600`",
        meaning: "usage moves without changes: an archive is also made this often when it moved",
    },
    Setting {
        key: "release_timeout_secs",
        env: "HEARTH_RELEASE_TIMEOUT_SECS",
        default: "`900`",
        meaning: "a node told to run a release must run it within this long, or the rollout stops",
    },
    Setting {
        key: "edge_failover_secs",
        env: "HEARTH_EDGE_FAILOVER_SECS",
        default: "`600`",
        meaning: "the primary edge failing this long (every push to it refused or unanswered) while another active edge takes pushes: control marks it blocked, so links move to that one, audited and told (`edge.failover`); they move back when the owner marks it active again (0: never)",
    },
    Setting {
        key: "node_binaries",
        env: "HEARTH_NODE_BINARIES",
        default: "the directory of `hearth-control` itself",
        meaning: "where the `hearth-node` binaries shipped with control are (`hearth-node`, its architecture read from it, and `hearth-node-linux-<arch>`): the panel publishes them as a release in one click",
    },
    Setting {
        key: "trusted_proxies",
        env: "HEARTH_TRUSTED_PROXIES",
        default: "none",
        meaning: "reverse proxies in front of control (CIDRs; a list in the file, comma-separated in the variable): for a connection from one, the client is its `CF-Connecting-IP`, else the right-most `X-Forwarded-For` hop not itself a proxy, so sign-in lockouts and budgets count each client on its own; those headers from anyone else are ignored",
    },
    Setting {
        key: "acme.directory",
        env: "HEARTH_ACME_DIRECTORY",
        default: "Let's Encrypt",
        meaning: "the ACME CA (RFC 8555) nodes with a domain (and the panel) get certificates from: ZeroSSL, any other; given to nodes at enrollment",
    },
    Setting {
        key: "acme.email, acme.eab_kid, acme.eab_hmac_key",
        env: "HEARTH_ACME_EMAIL",
        default: "none",
        meaning: "where the CA may write, and External Account Binding for CAs that ask for it (ZeroSSL)",
    },
    Setting {
        key: "acme.ca_root",
        env: "HEARTH_ACME_CA_ROOT",
        default: "none",
        meaning: "a root (PEM file) to trust for the CA's own HTTPS instead of the system's (a private CA); given to nodes too",
    },
    Setting {
        key: "acme.domain",
        env: "HEARTH_ACME_DOMAIN",
        default: "none",
        meaning: "the panel's own domain: control gets a certificate for it and serves it to browsers that ask for that name (its self-signed one to anyone else, nodes pinning it included)",
    },
    Setting {
        key: "acme.challenge, acme.http_listen",
        env: "HEARTH_ACME_CHALLENGE, HEARTH_ACME_HTTP_LISTEN",
        default: "`tls-alpn-01`, `0.0.0.0:80`",
        meaning: "how the CA checks the panel's domain: on `listen` (which must then be TCP 443 as the CA sees it), or by HTTP-01 on `http_listen`",
    },
    Setting {
        key: "profile.title, profile.announce, profile.support_url, profile.update_interval_hours",
        env: "",
        default: "`Hearth`, none, none, `12`",
        meaning: "what apps show for the subscription; the panel (Settings) or `PATCH /api/settings` change it at run time, and an edit of this file wins again at the next start (the last change wins). Letters beyond ASCII in the support link's path are kept percent-encoded (apps read it from a header); a domain beyond ASCII is refused with a request for its ASCII (`xn--`) form",
    },
];

/// [`SETTINGS`] is what `config.rs` reads and what the manual shows.
mod tests {
    use std::collections::BTreeSet;

    use hearth_shared::settings::{expected_fields, table, variables_named};

    use super::*;
    use crate::config::FileConfig;

    #[test]
    fn every_variable_read_is_listed_and_every_listed_one_is_read() {
        let read = variables_named(include_str!("../config.rs"), "");
        let listed: BTreeSet<String> = SETTINGS.iter().flat_map(Setting::envs).map(str::to_owned).collect();
        assert_eq!(read, listed, "read by control/src/config.rs, against SETTINGS");
    }

    #[test]
    fn every_key_of_the_file_is_listed_and_every_listed_one_is_a_key() {
        let fields = |table: &str| {
            let text =
                if table.is_empty() { "zz_not_a_key = 1".to_owned() } else { format!("[{table}]\nzz_not_a_key = 1") };
            let refused = toml::from_str::<FileConfig>(&text).unwrap_err().to_string();
            let fields = expected_fields(&refused);
            assert!(!fields.is_empty(), "{refused}");
            fields
                .into_iter()
                .map(|field| if table.is_empty() { field } else { format!("{table}.{field}") })
                .collect::<Vec<_>>()
        };
        let tables = ["acme", "profile"];
        let mut keys: BTreeSet<String> = fields("").into_iter().filter(|key| !tables.contains(&key.as_str())).collect();
        for table in tables {
            keys.extend(fields(table));
        }
        let listed: BTreeSet<String> = SETTINGS.iter().flat_map(Setting::keys).map(str::to_owned).collect();
        assert_eq!(keys, listed, "the keys control.toml takes, against SETTINGS");
    }

    /// The manual's table is made from [`SETTINGS`]; `HEARTH_BLESS=1` writes it.
    #[test]
    fn the_manual_shows_every_setting() {
        let bless = "HEARTH_BLESS=1 cargo test -p hearth-control --bin hearth-control config::settings";
        let made = format!(
            "<!-- Made from SETTINGS in control/src/config/settings.rs by its tests: {bless} -->\n{}",
            table(SETTINGS)
        );
        hearth_io::made::check("docs/reference/generated/control-settings.md", &made, bless);
    }
}
