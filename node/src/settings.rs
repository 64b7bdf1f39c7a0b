//! The node's settings as data: every key of `node.toml` ([`crate::state::Settings`]), its
//! default and what it means. The tests check this list against the keys `node.toml` takes,
//! and the manual's table (docs/reference/generated/node-settings.md) is made from it.

#[cfg(test)]
use hearth_shared::settings::Setting;

/// Every key of `node.toml` (`enroll` writes the file; a key it does not know stops the node
/// at start with its name). Only the tests read it: they hold it to the keys
/// [`crate::state::Settings`] takes, both ways.
#[cfg(test)]
pub(crate) const SETTINGS: &[Setting] = &[
    Setting { key: "node", env: "", default: "from enrollment", meaning: "the node's id at control" },
    Setting {
        key: "listen",
        env: "",
        default: "`0.0.0.0:<port from control>`",
        meaning: "the UDP address to serve on",
    },
    Setting {
        key: "control_url, control_pin, api_prefix",
        env: "",
        default: "from enrollment",
        meaning: "where and how to reach control",
    },
    Setting {
        key: "edge_url",
        env: "",
        default: "from enrollment",
        meaning: "the edge, used when control does not answer (`edge.url` beside it, written when control names a new edge, wins)",
    },
    Setting { key: "obfs", env: "", default: "from control's node settings", meaning: "Salamander password" },
    Setting {
        key: "hop",
        env: "",
        default: "from control's node settings (`--hop`)",
        meaning: "port hopping: a UDP port range (`\"20000-30000\"`, at most 16,384 ports) the node also answers on, one socket a port, beside `listen`; each port is an open file (the systemd unit allows 1,048,576); a port that cannot be bound stops the node at start with the port and the reason",
    },
    Setting {
        key: "tls_name",
        env: "",
        default: "from control's node settings, else `localhost`",
        meaning: "the name the node's self-signed certificate is made out to (when `tls.crt` is missing, a new one is made for it)",
    },
    Setting {
        key: "acme.domain, acme.directory, acme.email, acme.eab_kid, acme.eab_hmac_key, acme.ca_root, acme.challenge, acme.http_listen",
        env: "",
        default: "from control's node settings (`--domain`)",
        meaning: "a certificate from a public CA for `domain` ([A certificate from a public CA](../running/nodes.md#a-certificate-from-a-public-ca)): `directory`, `email`, `eab_kid`/`eab_hmac_key`, `ca_root` (a root for the CA's own HTTPS, relative to the state directory), `challenge` (`tls-alpn-01` on `masquerade_tcp`, or `http-01`; the first when `masquerade_tcp` is set), `http_listen` (`0.0.0.0:80`)",
    },
    Setting { key: "edge_poll_secs, report_secs", env: "", default: "`5`, `10`", meaning: "poll and report intervals" },
    Setting { key: "allow_private", env: "", default: "`false`", meaning: "let clients reach private addresses" },
    Setting {
        key: "geoip, geosite",
        env: "",
        default: "none: such a rule refuses its users' connections",
        meaning: "for rules that name `geoip:` or `geosite:` ([Routing per user](../users/routing.md)): v2fly's `geoip.dat` (or a MaxMind DB, `GeoLite2-Country.mmdb` or Clash's `Country.mmdb`, by its countries' `iso_code`) and `geosite.dat`, at most 64 MiB each; read when a rule set needs them, only what the rules name kept",
    },
    Setting {
        key: "metrics_listen",
        env: "",
        default: "`127.0.0.1:9464`",
        meaning: "where `/healthz` and Prometheus `/metrics` answer (empty: nowhere); the node says where at start (`hearth-node metrics on http://127.0.0.1:9464/metrics`), and a port another program holds (a second node on the machine needs its own) stops it with a message naming the setting",
    },
    Setting {
        key: "traffic_stats.listen, traffic_stats.secret",
        env: "",
        default: "none: off",
        meaning: "the official Hysteria2 server's Traffic Stats API, for the scripts, exporters and bots written for it ([The official traffic stats API](../running/nodes.md#the-official-traffic-stats-api)): `listen` (a TCP address, `\"127.0.0.1:9999\"`) and `secret` (what requests carry as their `Authorization` header; required unless `listen` is a loopback address, else the node does not start)",
    },
    Setting {
        key: "update_health_secs",
        env: "",
        default: "`60`",
        meaning: "how long a new release must run healthy before it is kept",
    },
    Setting {
        key: "update_grace_secs",
        env: "",
        default: "`60`",
        meaning: "how much longer a new release may take to get there before the previous binary is put back",
    },
    Setting {
        key: "update_drain_secs",
        env: "",
        default: "`300`",
        meaning: "with a new release in place, how long the node keeps serving the transfers under way before it restarts into it (it restarts as soon as its clients go quiet)",
    },
    Setting {
        key: "congestion",
        env: "",
        default: "`bbr`",
        meaning: "the controller for clients that announce no rate ([Nodes](../running/nodes.md) says when each runs): `bbr` (Hearth's own), `quinn-bbr` (quinn's, for comparison), or `cubic` for clean paths when the box is short of CPU",
    },
    Setting {
        key: "bandwidth.up",
        env: "",
        default: "none: what the client announces",
        meaning: "the most Brutal sends one client, in bits a second: `\"200 mbps\"`, `\"1 gbps\"`, or a number of Mbit/s",
    },
    Setting {
        key: "bandwidth.down",
        env: "",
        default: "none: `0`, no limit",
        meaning: "the rate announced to clients (`Hysteria-CC-RX`), which Brutal clients send no faster than",
    },
    Setting {
        key: "ignore_client_bandwidth",
        env: "",
        default: "`false`",
        meaning: "no Brutal: the `congestion` controller for everyone, and `auto` announced",
    },
    Setting {
        key: "masquerade",
        env: "",
        default: "`404`: nginx's 404 page",
        meaning: "what anyone who does not authenticate gets over HTTP/3 (the node's own answers carry `Server: nginx`, `Date`, `Content-Type` and `Content-Length`, as nginx's do) (control's node setting `masquerade`, a web site's address, is written here as a `proxy` at enrollment): `{ type = \"404\" }`, `{ type = \"string\", content = \"...\", status = 200, content_type = \"text/html; charset=utf-8\" }`, `{ type = \"file\", dir = \"/srv/site\" }` (its files; `index.html` for a directory; nothing outside it, not through `..` nor links; files up to 8 MiB), or `{ type = \"proxy\", url = \"https://example.net/\" }` (another web server's answers for the same path and query, with its headers, `Content-Length` among them, whether asked over HTTP/3, HTTP/2 or HTTP/1.1: request bodies up to 1 MiB, answers up to 8 MiB within 8 s, else 413 or 502). At most 8 answers read from files or the other server are held at once, node-wide (64 MiB); more wait their turn. A masquerade that cannot work (no such directory, a bad URL) keeps the node from starting",
    },
    Setting {
        key: "masquerade_tcp",
        env: "",
        default: "none: nothing on TCP",
        meaning: "also answer with the masquerade over HTTPS on this TCP address (`\"0.0.0.0:443\"`), in HTTP/2 or HTTP/1.1 (ALPN `h2`, `http/1.1`, as web servers offer), with the node's certificate and an `Alt-Svc` header naming its UDP port for HTTP/3, so a prober on TCP 443 finds the same site: at most 256 connections (16 from one network), a handshake and request headers (16 KiB) within 10 s each, 120 s a connection; an address that cannot be bound stops the node at start",
    },
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use hearth_shared::settings::{Setting, expected_fields, table};

    use super::*;
    use crate::state::Settings;

    /// The fields `node.toml` (or one of its tables) takes, from the error an unknown one gets.
    fn fields(text: &str) -> Vec<String> {
        let refused = toml::from_str::<Settings>(&format!("node = 1\n{text}")).unwrap_err().to_string();
        let fields = expected_fields(&refused);
        assert!(!fields.is_empty(), "{refused}");
        fields
    }

    #[test]
    fn every_key_of_node_toml_is_listed_and_every_listed_one_is_a_key() {
        let tables = ["acme", "bandwidth", "traffic_stats"];
        let mut keys: BTreeSet<String> =
            fields("zz_not_a_key = 1").into_iter().filter(|key| !tables.contains(&key.as_str())).collect();
        for table in tables {
            keys.extend(
                fields(&format!("[{table}]\nzz_not_a_key = 1")).into_iter().map(|key| format!("{table}.{key}")),
            );
        }
        let listed: BTreeSet<String> = SETTINGS.iter().flat_map(Setting::keys).map(str::to_owned).collect();
        assert_eq!(keys, listed, "the keys node.toml takes, against SETTINGS");
        // The masquerade's kinds and their fields are in its row.
        let masquerade = SETTINGS.iter().find(|setting| setting.key == "masquerade").unwrap().meaning;
        for kind in fields("masquerade = { type = \"zz-not-a-kind\" }") {
            assert!(masquerade.contains(&format!("type = \"{kind}\"")), "masquerade {kind} is not in its row");
            if kind != "404" {
                for field in fields(&format!("masquerade = {{ type = \"{kind}\", zz_not_a_key = 1 }}")) {
                    assert!(
                        masquerade.contains(&format!("{field} = ")),
                        "masquerade {kind}'s {field} is not in its row"
                    );
                }
            }
        }
    }

    /// The manual's table is made from [`SETTINGS`]; `HEARTH_BLESS=1` writes it.
    #[test]
    fn the_manual_shows_every_setting() {
        let bless = "HEARTH_BLESS=1 cargo test -p hearth-node --bin hearth-node settings";
        let made =
            format!("<!-- Made from SETTINGS in node/src/settings.rs by its tests: {bless} -->\n{}", table(SETTINGS));
        hearth_io::made::check("docs/reference/generated/node-settings.md", &made, bless);
    }
}
