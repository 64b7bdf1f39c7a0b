//! How the server behaves: what the node's settings say of who may be reached and of the rates
//! it sends and announces.

use std::net::IpAddr;
use std::sync::Arc;

use hearth_shared::Rate;

/// How the server behaves.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// Let clients reach private, loopback and link-local addresses (tests on loopback).
    pub(crate) allow_private: bool,
    /// The node's own address that the client reached (set per connection): refused as a
    /// destination too, unless `allow_private`.
    pub(crate) own: Option<IpAddr>,
    /// The node's own rates (`bandwidth` in `node.toml`).
    pub(crate) bandwidth: crate::state::Bandwidth,
    /// Keep the node's controller whatever clients announce, and tell them `auto`.
    pub(crate) ignore_client_bandwidth: bool,
    /// What anyone who does not authenticate gets.
    pub(crate) site: Arc<crate::masquerade::Site>,
}

impl Options {
    /// What the node answers in `Hysteria-CC-RX`: `auto` when it ignores clients' rates (they
    /// use their own controller then), else the rate it receives at in bytes a second (0: no
    /// limit, a Brutal client sends at its own `up`).
    /// A user limited to `limit_up` bytes a second is told the smaller of the two.
    pub(super) fn announced(&self, limit_up: u64) -> String {
        if self.ignore_client_bandwidth {
            return "auto".to_owned();
        }
        let down = self.bandwidth.down.map_or(0, Rate::bytes_per_sec);
        if down == 0 || limit_up == 0 { down.max(limit_up) } else { down.min(limit_up) }.to_string()
    }

    /// Brutal's rate for a client that announced it receives `client_rx` bytes a second (0:
    /// not given): that, held to `bandwidth.up`; 0 (the default controller) when the client
    /// gave none or the node ignores it.
    pub(super) fn brutal_rate(&self, client_rx: u64) -> u64 {
        if self.ignore_client_bandwidth {
            return 0;
        }
        self.bandwidth.up.map_or(client_rx, |up| client_rx.min(up.bytes_per_sec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brutal_rates_and_what_the_node_announces() {
        let plain = Options::default();
        assert_eq!(
            (plain.announced(0).as_str(), plain.brutal_rate(0), plain.brutal_rate(5_000_000)),
            ("0", 0, 5_000_000)
        );
        let capped = Options {
            bandwidth: crate::state::Bandwidth {
                up: Some(Rate::from_bytes_per_sec(1_000_000)),
                down: Some(Rate::from_bytes_per_sec(2_500_000)),
            },
            ..Options::default()
        };
        assert_eq!(capped.announced(0), "2500000");
        // A user's up limit, where it is lower: a Brutal client then sends no faster.
        assert_eq!((capped.announced(625_000), capped.announced(9_000_000)), ("625000".into(), "2500000".into()));
        assert_eq!(plain.announced(625_000), "625000");
        assert_eq!(
            (capped.brutal_rate(0), capped.brutal_rate(600_000), capped.brutal_rate(9_000_000)),
            (0, 600_000, 1_000_000)
        );
        let ignoring = Options { ignore_client_bandwidth: true, ..capped };
        assert_eq!((ignoring.announced(0).as_str(), ignoring.brutal_rate(9_000_000)), ("auto", 0));
    }
}
