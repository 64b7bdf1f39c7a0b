//! A user's snapshot built from plain data: what its status is, which quota warnings are
//! due, the notices its profile carries and how each node it reaches is named and checked.
//! No IO: [`super::user`] reads the store, keeps what is decided here and signs.

use hearth_shared::Rate;
use hearth_shared::wire::{
    Endpoint, HwidPolicy, Identity, PortRange, Profile, ResetStrategy, Snapshot, Status, TelegramLink, UserId,
};

use crate::clock::civil_date;
use crate::store::identity;
use crate::store::snapshots::{NodeRow, UserRow};
use crate::store::users::parse_reset;

/// The event a change of status to `status` tells the owner, if it is one they hear of.
pub(super) fn status_event(status: Status) -> Option<&'static str> {
    match status {
        Status::Disabled => Some("user.disabled"),
        Status::Expired => Some("user.expired"),
        Status::OverQuota => Some("user.over_quota"),
        _ => None,
    }
}

/// The shares of a quota a user is warned at, as it crosses them, lowest first.
const QUOTA_WARNINGS: [u64; 2] = [80, 95];

/// The quota warnings due for a user who used `used` of `quota` and was last warned at the
/// share `warned`: the share to keep as warned, and each share crossed since, lowest first
/// (none once over the quota: the status change tells). `None` when nothing changed. A reset
/// or a larger quota lowers the share kept, so the warnings can be told again.
pub(super) fn quota_warnings(quota: u64, used: u64, warned: u64, status: Status) -> Option<(u64, Vec<u64>)> {
    let share = if quota == 0 { 0 } else { u64::try_from(u128::from(used) * 100 / u128::from(quota)).unwrap_or(100) };
    let reached = QUOTA_WARNINGS.into_iter().filter(|at| share >= *at).max().unwrap_or(0);
    if reached == warned {
        return None;
    }
    let tell = if status != Status::OverQuota && share < 100 {
        QUOTA_WARNINGS.into_iter().filter(|at| (warned + 1..=reached).contains(at)).collect()
    } else {
        Vec::new()
    };
    Some((reached, tell))
}

/// What a user's snapshot is made of, besides its row: read from the store and the vault.
pub(super) struct Parts {
    pub(super) user: UserId,
    pub(super) row: UserRow,
    pub(super) credential: String,
    /// The nodes the user reaches, in the order apps list them.
    pub(super) endpoints: Vec<Endpoint>,
    /// The owner's profile, before the user's own notices.
    pub(super) profile: Profile,
    /// The rate the user is slowed to over its quota (0: not slowed).
    pub(super) slowed: Rate,
    /// When a device of the user was last refused over its limit (0: never), and its device
    /// limit in force (0: none).
    pub(super) refused: (u64, u32),
    pub(super) hwid: HwidPolicy,
    pub(super) telegram: Option<TelegramLink>,
}

/// The user's snapshot at `now`, its status `status`: a user slowed down rather than cut off
/// can still connect, and its profile says so and why; so does a device refused over the
/// limit in the last day.
pub(super) fn build(parts: Parts, status: Status, now: u64) -> Snapshot {
    let Parts { user, row, credential, endpoints, mut profile, slowed, refused: (refused_at, limit), hwid, telegram } =
        parts;
    if !slowed.is_zero() {
        announce(
            &mut profile,
            format!("Your traffic allowance is used up: your speed is limited to {slowed} until it resets."),
        );
    }
    if refused_at + 86_400 > now && limit > 0 && status.can_connect() {
        announce(
            &mut profile,
            format!(
                "Device limit reached: at most {limit} device{} at once, and another was refused. \
                 Disconnect one you are not using, or ask for a higher limit.",
                if limit == 1 { "" } else { "s" }
            ),
        );
    }
    Snapshot {
        user,
        name: row.name,
        status: if slowed.is_zero() { status } else { Status::Active },
        used_up: row.used_up,
        used_down: row.used_down,
        quota: row.quota,
        expires_at: row.expires_at,
        reset: parse_reset(&row.reset).unwrap_or(ResetStrategy::Never),
        credential,
        endpoints,
        profile,
        hwid,
        alias: None,
        telegram,
    }
}

/// Puts `notice` before what the profile announces already.
fn announce(profile: &mut Profile, notice: String) {
    profile.announce = Some(match profile.announce.take() {
        Some(announce) if !announce.is_empty() => format!("{notice}\n{announce}"),
        _ => notice,
    });
}

/// How apps reach and check `node`. A node with its public certificate for its domain is
/// checked the usual way, by the domain; until then (and a day before it expires) it is
/// pinned like any other self-signed node, by its pins or by its certificate and the name it
/// is made out to (the owner may let apps that can do neither connect unchecked). A node over
/// its monthly cap carries nobody: its name says until when.
pub(super) fn endpoint(node: NodeRow) -> Endpoint {
    let self_signed = node.tls == "self_signed" && !node.acme_public;
    let identity = if self_signed {
        Identity {
            name: identity::check_name(&node.cert_names, &node.sni, &node.host).map(str::to_owned),
            certificate: node.cert_der,
            unverified: node.allow_unverified,
        }
    } else {
        Identity::default()
    };
    let sni = if node.acme_public {
        Some(node.domain)
    } else if !node.domain.is_empty() || !node.acme_domain.is_empty() {
        // Pinned while the node may hold a public certificate: the name its own is made out
        // to, never the domain (which gets the public one).
        identity.name.clone().filter(|name| name.parse::<std::net::IpAddr>().is_err())
    } else {
        (!node.sni.is_empty()).then_some(node.sni)
    };
    let (hop_start, hop_end) = node.hop;
    Endpoint {
        name: if node.limited { limited_name(&node.name, node.quota_next) } else { node.name },
        host: node.host,
        port: node.port,
        hop: (hop_start != 0).then_some(PortRange { start: hop_start, end: hop_end }),
        sni,
        cert_sha256: if self_signed { node.cert_sha256 } else { None },
        spki_sha256: if self_signed { node.spki_sha256 } else { None },
        insecure: self_signed,
        obfs: (!node.obfs.is_empty()).then_some(node.obfs),
        identity,
    }
}

/// What apps show for a node over its monthly cap until `until`.
fn limited_name(name: &str, until: u64) -> String {
    format!("{name}{LIMITED}{})", civil_date(until))
}

/// What [`limited_name`] puts between a node's name and the date.
const LIMITED: &str = " (traffic limit reached until ";

/// The node's own name in an endpoint's name (without what a cap reached adds).
pub(crate) fn node_name_of(endpoint: &str) -> &str {
    match endpoint.rfind(LIMITED) {
        Some(at) if endpoint.ends_with(')') && endpoint.len() - at == LIMITED.len() + 11 => &endpoint[..at],
        _ => endpoint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::users::status_of;

    /// A limited node's endpoint name gives back the node's name, and only such a name.
    #[test]
    fn a_limited_name_gives_back_the_node() {
        let limited = limited_name("Frankfurt", 1_796_083_200);
        assert_eq!(limited, "Frankfurt (traffic limit reached until 2026-12-01)");
        assert_eq!(node_name_of(&limited), "Frankfurt");
        for plain in ["Frankfurt", "A (traffic limit reached until soon)", "B (traffic limit reached until 2026-12-01"]
        {
            assert_eq!(node_name_of(plain), plain);
        }
    }

    #[test]
    fn each_quota_share_is_told_once_as_it_is_crossed() {
        use Status::{Active, OverQuota};
        type Case = (u64, u64, u64, Status, Option<(u64, Vec<u64>)>);
        let cases: [Case; 9] = [
            (100, 79, 0, Active, None),
            (100, 80, 0, Active, Some((80, vec![80]))),
            (100, 90, 80, Active, None),
            // One sweep over both shares tells both, lowest first.
            (100, 96, 0, Active, Some((95, vec![80, 95]))),
            (100, 96, 80, Active, Some((95, vec![95]))),
            // Over the quota: kept, not told (the status change tells).
            (100, 100, 80, OverQuota, Some((95, vec![]))),
            // A reset or a larger quota: told again when crossed again.
            (100, 10, 95, Active, Some((0, vec![]))),
            (1000, 850, 95, Active, Some((80, vec![]))),
            // No quota, no warnings; and a share past u64 is the whole.
            (0, 1 << 40, 0, Active, None),
        ];
        for (quota, used, warned, status, want) in cases {
            assert_eq!(quota_warnings(quota, used, warned, status), want, "{quota} {used} {warned} {status:?}");
        }
        assert_eq!(quota_warnings(1, u64::MAX, 0, OverQuota), Some((95, vec![])));
    }

    fn row() -> UserRow {
        UserRow {
            name: "amir".into(),
            token_enc: Vec::new(),
            credential_enc: Vec::new(),
            quota: 1000,
            used_up: 400,
            used_down: 700,
            reset: "monthly".into(),
            expires_at: 0,
            duration: 0,
            started: 0,
            enabled: true,
            stored_status: "active".into(),
            quota_warned: 95,
            telegram_binds: 0,
        }
    }

    /// Parts of a user slowed to `slowed_kbps` kbit/s over quota (0: not slowed).
    fn parts(slowed_kbps: u64, refused: (u64, u32)) -> Parts {
        Parts {
            user: 7,
            row: row(),
            credential: "secret".into(),
            endpoints: Vec::new(),
            profile: Profile {
                title: "Home".into(),
                announce: Some("Maintenance on Sunday".into()),
                support_url: None,
                web_page_url: None,
                update_interval_hours: 12,
            },
            slowed: Rate::from_kbps(slowed_kbps),
            refused,
            hwid: HwidPolicy::default(),
            telegram: None,
        }
    }

    #[test]
    fn a_user_slowed_over_quota_connects_and_is_told_why_before_the_owners_notice() {
        let now = 1_000_000;
        assert_eq!(row().status(now), Status::OverQuota);
        let snapshot = build(parts(500, (0, 0)), Status::OverQuota, now);
        assert_eq!(snapshot.status, Status::Active);
        assert_eq!(
            snapshot.profile.announce.as_deref(),
            Some(
                "Your traffic allowance is used up: your speed is limited to 0.5 Mbit/s until it resets.\n\
                 Maintenance on Sunday"
            )
        );
        assert_eq!((snapshot.user, snapshot.name.as_str(), snapshot.credential.as_str()), (7, "amir", "secret"));
        assert_eq!((snapshot.used_up, snapshot.used_down, snapshot.quota), (400, 700, 1000));
        assert_eq!(snapshot.reset, ResetStrategy::Monthly);
        // Cut off rather than slowed: the status says so, the profile is the owner's.
        let snapshot = build(parts(0, (0, 0)), Status::OverQuota, now);
        assert_eq!(snapshot.status, Status::OverQuota);
        assert_eq!(snapshot.profile.announce.as_deref(), Some("Maintenance on Sunday"));
    }

    #[test]
    fn a_device_refused_in_the_last_day_is_told_while_the_user_can_connect() {
        let now = 1_000_000;
        let notice = |refused, status| build(parts(0, refused), status, now).profile.announce.unwrap();
        assert!(
            notice((now - 86_399, 1), Status::Active).starts_with("Device limit reached: at most 1 device at once")
        );
        assert!(notice((now - 10, 3), Status::Active).starts_with("Device limit reached: at most 3 devices at once"));
        for (refused, status) in
            [((now - 86_400, 2), Status::Active), ((now, 0), Status::Active), ((now, 2), Status::Expired)]
        {
            assert_eq!(notice(refused, status), "Maintenance on Sunday", "{refused:?} {status:?}");
        }
    }

    fn node() -> NodeRow {
        NodeRow {
            name: "Frankfurt".into(),
            host: "203.0.113.7".into(),
            port: 443,
            hop: (0, 0),
            sni: String::new(),
            tls: "self_signed".into(),
            cert_sha256: Some([1; 32]),
            spki_sha256: Some([2; 32]),
            obfs: String::new(),
            limited: false,
            quota_next: 0,
            cert_der: Some(vec![0x30, 1, 2]),
            cert_names: "203.0.113.7\nnode.example".into(),
            allow_unverified: false,
            domain: String::new(),
            acme_public: false,
            acme_domain: String::new(),
        }
    }

    #[test]
    fn a_self_signed_node_is_pinned_and_named_by_its_certificate() {
        let reached = endpoint(NodeRow { sni: "node.example".into(), hop: (20_000, 30_000), ..node() });
        assert!(reached.insecure);
        assert_eq!((reached.cert_sha256, reached.spki_sha256), (Some([1; 32]), Some([2; 32])));
        assert_eq!(reached.sni.as_deref(), Some("node.example"));
        assert_eq!(reached.hop, Some(PortRange { start: 20_000, end: 30_000 }));
        assert_eq!(reached.identity.certificate, Some(vec![0x30, 1, 2]));
        assert_eq!(reached.identity.name.as_deref(), Some("node.example"));
        // No server name set: the certificate's name for the host.
        let reached = endpoint(node());
        assert_eq!(reached.sni, None);
        assert_eq!(reached.identity.name.as_deref(), Some("203.0.113.7"));
        assert_eq!((reached.hop, reached.obfs), (None, None));
    }

    #[test]
    fn a_node_with_its_public_certificate_is_checked_by_its_domain_alone() {
        let public = NodeRow { domain: "vpn.example".into(), acme_public: true, obfs: "salt".into(), ..node() };
        let reached = endpoint(public);
        assert!(!reached.insecure);
        assert_eq!(reached.sni.as_deref(), Some("vpn.example"));
        assert_eq!((reached.cert_sha256, reached.spki_sha256), (None, None));
        assert_eq!(reached.identity, Identity::default());
        assert_eq!(reached.obfs.as_deref(), Some("salt"));
        // Still waiting for it: pinned, by the name its own certificate is made out to (never
        // the domain, nor an address).
        let waiting = endpoint(NodeRow { domain: "vpn.example".into(), sni: "node.example".into(), ..node() });
        assert!(waiting.insecure);
        assert_eq!(waiting.sni.as_deref(), Some("node.example"));
        let by_address = endpoint(NodeRow { acme_domain: "old.example".into(), ..node() });
        assert_eq!(by_address.sni, None);
    }

    #[test]
    fn a_node_over_its_cap_says_until_when_and_a_ca_node_pins_nothing() {
        let capped = endpoint(NodeRow { limited: true, quota_next: 1_796_083_200, ..node() });
        assert_eq!(capped.name, "Frankfurt (traffic limit reached until 2026-12-01)");
        let ca = endpoint(NodeRow { tls: "operator".into(), sni: "vpn.example".into(), ..node() });
        assert!(!ca.insecure);
        assert_eq!((ca.cert_sha256, ca.identity.clone()), (None, Identity::default()));
        assert_eq!((ca.name.as_str(), ca.sni.as_deref()), ("Frankfurt", Some("vpn.example")));
    }

    #[test]
    fn status_order() {
        assert_eq!(status_of(false, 1, 1, 5, 0, 0, 10), Status::Disabled);
        assert_eq!(status_of(true, 10, 1, 5, 0, 0, 10), Status::Expired);
        assert_eq!(status_of(true, 11, 5, 5, 0, 0, 10), Status::OverQuota);
        assert_eq!(status_of(true, 0, 0, 5, 100, 0, 10), Status::NotStarted);
        assert_eq!(status_of(true, 0, 6, 5, 100, 3, 10), Status::Active);
    }
}
