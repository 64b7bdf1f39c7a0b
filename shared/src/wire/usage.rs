//! What a node tells control through the edge and what control answers: the node's usage
//! reports ([`UsageReport`]: traffic, who is on it, its release, the users it kicked) and their
//! acknowledgement ([`UsageAck`]), with the node's registration ([`NodeRecord`]), the key by
//! which its reports are checked.

use serde::{Deserialize, Serialize};

use super::codec::{NodeId, UserId, WireError, encode};
use super::stream;
use crate::keys::PublicKey;

/// A node's registration, signed by control: the edge learns node keys only from these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node.
    pub node: NodeId,
    /// Its key, or `None` once the node is removed.
    pub key: Option<PublicKey>,
}

/// Bytes one user moved through a node during a report's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserUsage {
    /// The user.
    pub user: UserId,
    /// Bytes the user sent.
    pub up: u64,
    /// Bytes the user received.
    pub down: u64,
}

/// Who of one user is on a node at the end of a report's period, and what the node refused
/// the user during it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// The user.
    pub user: UserId,
    /// Devices connected (distinct client addresses: an IPv4 address, an IPv6 /64).
    pub devices: u32,
    /// Open connections.
    pub connections: u32,
    /// Devices refused over the user's device allowance, or connections dropped to make room
    /// for a new device.
    pub refused_devices: u32,
    /// BitTorrent connections and packets refused by the abuse guard.
    pub refused_torrent: u32,
    /// Connections to port 25 refused by the abuse guard.
    pub refused_smtp: u32,
}

/// A node's usage report, signed by the node's key on the stream `usage/<node>`, with the
/// sequence number as the envelope version: control applies each sequence number once.
///
/// Four encodings, each a prefix of the next: without presence, the five fields alone (what
/// every control and edge reads); with it, the five fields and the presence list after them;
/// with the node's release, both and then the release; with users kicked through the node's
/// traffic stats API, all of that and then the users. [`UsageReport::decode`] takes any; a
/// report always takes the shortest that holds what it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    /// The node.
    pub node: NodeId,
    /// The sequence number (also the envelope's version).
    pub seq: u64,
    /// Start of the period, Unix seconds.
    pub period_start: u64,
    /// End of the period, Unix seconds.
    pub period_end: u64,
    /// Per-user counts; users with no traffic are left out.
    pub users: Vec<UserUsage>,
    /// Every user with a device connected at the end of the period or something refused
    /// during it, sorted by user, once each; a user left out has nobody on the node.
    pub presence: Vec<Presence>,
    /// What the node runs and why it last refused a release: in the first report after that
    /// changes (`None`: as last said). Control reads it as it
    /// reads the headers of a pull, so a node that reaches only an edge is heard through it.
    pub release: Option<NodeRelease>,
    /// Users kicked at the node through its traffic stats API during the period, sorted, once
    /// each: control kicks them as the panel does (everywhere) and records it.
    pub kicked: Vec<UserId>,
}

/// What a node says of its release, as in the headers of its pulls
/// ([`crate::nodeauth::NODE_VERSION_HEADER`], [`crate::nodeauth::NODE_UPDATE_HEADER`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRelease {
    /// `<version>@<release>`: the version it runs and the release envelope it came in.
    pub running: String,
    /// `<release> <reason>` for the release it last refused or rolled back; empty when none.
    pub update: String,
}

impl NodeRelease {
    /// The longest either text may be, in bytes.
    pub const MAX_LEN: usize = 512;
}

/// A report as nodes before presence sent it.
#[derive(Serialize, Deserialize)]
struct ReportV1 {
    node: NodeId,
    seq: u64,
    period_start: u64,
    period_end: u64,
    users: Vec<UserUsage>,
}

/// A report as nodes before the release in it sent it.
#[derive(Serialize, Deserialize)]
struct ReportV2 {
    node: NodeId,
    seq: u64,
    period_start: u64,
    period_end: u64,
    users: Vec<UserUsage>,
    presence: Vec<Presence>,
}

/// A report as nodes before the traffic stats API's kicks sent it.
#[derive(Serialize, Deserialize)]
struct ReportV3 {
    node: NodeId,
    seq: u64,
    period_start: u64,
    period_end: u64,
    users: Vec<UserUsage>,
    presence: Vec<Presence>,
    release: Option<NodeRelease>,
}

impl UsageReport {
    /// The most presence entries a report carries (a node's users all online).
    pub const MAX_PRESENCE: usize = 200_000;

    /// The canonical encoding (see the type).
    pub fn encode(&self) -> Vec<u8> {
        let UsageReport { node, seq, period_start, period_end, ref users, ref presence, ref release, ref kicked } =
            *self;
        match (presence.is_empty(), release, kicked.is_empty()) {
            (true, None, true) => encode(&ReportV1 { node, seq, period_start, period_end, users: users.clone() }),
            (false, None, true) => encode(&ReportV2 {
                node,
                seq,
                period_start,
                period_end,
                users: users.clone(),
                presence: presence.clone(),
            }),
            (_, Some(_), true) => encode(&ReportV3 {
                node,
                seq,
                period_start,
                period_end,
                users: users.clone(),
                presence: presence.clone(),
                release: release.clone(),
            }),
            (_, _, false) => encode(self),
        }
    }

    /// Decodes strictly any encoding; refuses presence or kicked users out of order or
    /// repeated (or more than [`UsageReport::MAX_PRESENCE`]), and a release's texts over
    /// [`NodeRelease::MAX_LEN`].
    pub fn decode(bytes: &[u8]) -> Result<UsageReport, WireError> {
        const WHAT: &str = "usage report";
        let report = if let Ok((old, [])) = postcard::take_from_bytes::<ReportV1>(bytes) {
            let ReportV1 { node, seq, period_start, period_end, users } = old;
            let (presence, release, kicked) = (Vec::new(), None, Vec::new());
            UsageReport { node, seq, period_start, period_end, users, presence, release, kicked }
        } else if let Ok((old, [])) = postcard::take_from_bytes::<ReportV2>(bytes) {
            let ReportV2 { node, seq, period_start, period_end, users, presence } = old;
            UsageReport { node, seq, period_start, period_end, users, presence, release: None, kicked: Vec::new() }
        } else if let Ok((old, [])) = postcard::take_from_bytes::<ReportV3>(bytes) {
            let ReportV3 { node, seq, period_start, period_end, users, presence, release } = old;
            UsageReport { node, seq, period_start, period_end, users, presence, release, kicked: Vec::new() }
        } else {
            postcard::from_bytes::<UsageReport>(bytes).map_err(|_| WireError::Malformed(WHAT))?
        };
        if report.presence.len() > UsageReport::MAX_PRESENCE
            || report.presence.windows(2).any(|pair| pair[0].user >= pair[1].user)
        {
            return Err(WireError::Malformed("usage report (presence)"));
        }
        if report.kicked.len() > UsageReport::MAX_PRESENCE || report.kicked.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(WireError::Malformed("usage report (kicked)"));
        }
        if report.release.as_ref().is_some_and(|r| r.running.len().max(r.update.len()) > NodeRelease::MAX_LEN) {
            return Err(WireError::Malformed("usage report (release)"));
        }
        if report.encode() != bytes {
            return Err(WireError::Malformed(WHAT));
        }
        Ok(report)
    }

    /// How long a signed report stays acceptable: long enough to outlast any outage of
    /// control, as the node keeps every report until it is acknowledged.
    pub const LIFETIME_SECS: u64 = 365 * 86_400;

    /// Signs this report with the node's key, as control expects it: stream `usage/<node>`,
    /// version = sequence number, addressed to control.
    pub fn sign(&self, key: &crate::keys::SecretKey, now: u64) -> crate::envelope::Envelope {
        crate::envelope::Draft {
            kind: crate::envelope::Kind::UsageReport,
            stream: stream::usage(self.node),
            version: self.seq,
            epoch: 1,
            issued: now,
            expires: now + UsageReport::LIFETIME_SECS,
            audience: crate::envelope::Audience::Control,
            prev: [0; 32],
        }
        .sign(self.encode(), &[key])
    }
}

/// Control's acknowledgement: every report of this node up to `seq` is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageAck {
    /// The node.
    pub node: NodeId,
    /// The highest sequence number applied.
    pub seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report without presence encodes as before presence existed (what older controls and
    /// edges read); with it, it carries the list; both decode; presence must be sorted.
    #[test]
    fn usage_reports_carry_presence_only_when_someone_is_there() {
        let report = UsageReport {
            node: 2,
            seq: 5,
            period_start: 10,
            period_end: 70,
            users: vec![UserUsage { user: 1, up: 5, down: 6 }],
            presence: Vec::new(),
            release: None,
            kicked: Vec::new(),
        };
        #[derive(Serialize)]
        struct Before {
            node: NodeId,
            seq: u64,
            period_start: u64,
            period_end: u64,
            users: Vec<UserUsage>,
        }
        let before = encode(&Before { node: 2, seq: 5, period_start: 10, period_end: 70, users: report.users.clone() });
        assert_eq!(report.encode(), before);
        assert_eq!(UsageReport::decode(&before).unwrap(), report);
        let present = |user| Presence { user, devices: 1, connections: 2, ..Presence::default() };
        let with = UsageReport { presence: vec![present(1), present(4)], ..report.clone() };
        assert!(with.encode().starts_with(&before) && with.encode().len() > before.len());
        assert_eq!(UsageReport::decode(&with.encode()).unwrap(), with);
        let unsorted = UsageReport { presence: vec![present(4), present(1)], ..report.clone() };
        assert!(UsageReport::decode(&unsorted.encode()).is_err());
        let twice = UsageReport { presence: vec![present(4), present(4)], ..report.clone() };
        assert!(UsageReport::decode(&twice.encode()).is_err());
        let mut trailing = with.encode();
        trailing.push(0);
        assert!(UsageReport::decode(&trailing).is_err());
        // An empty list written out is not the canonical form of a report without presence.
        let mut empty = before.clone();
        empty.push(0);
        assert!(UsageReport::decode(&empty).is_err());
    }

    /// The release a node runs rides after presence (with or without anyone there), so
    /// controls and edges that read only the first two encodings read those as before; an
    /// absent release written out, or an overlong one, is refused.
    #[test]
    fn usage_reports_carry_the_nodes_release_after_everything_else() {
        let present = Presence { user: 1, devices: 1, connections: 1, ..Presence::default() };
        let report = UsageReport {
            node: 2,
            seq: 5,
            period_start: 10,
            period_end: 70,
            users: Vec::new(),
            presence: vec![present],
            release: None,
            kicked: Vec::new(),
        };
        let release = NodeRelease { running: "0.4.0@6".into(), update: "7 exited at start".into() };
        for presence in [vec![present], Vec::new()] {
            let bare = UsageReport { presence: presence.clone(), ..report.clone() };
            let with = UsageReport { release: Some(release.clone()), ..bare.clone() };
            let bytes = with.encode();
            assert!(bytes.len() > bare.encode().len());
            assert_eq!(UsageReport::decode(&bytes).unwrap(), with);
            if !presence.is_empty() {
                assert!(bytes.starts_with(&bare.encode()), "the encoding with presence is a prefix");
            }
            // `None` written out is not canonical: a report without a release takes a shorter form.
            let mut none = encode(&(2u64, 5u64, 10u64, 70u64, Vec::<UserUsage>::new(), presence.clone()));
            none.push(0);
            assert!(UsageReport::decode(&none).is_err());
        }
        let long = NodeRelease { update: "x".repeat(NodeRelease::MAX_LEN + 1), ..release.clone() };
        let overlong = UsageReport { release: Some(long), ..report.clone() };
        assert!(UsageReport::decode(&overlong.encode()).is_err());
        let at_most = NodeRelease { update: "x".repeat(NodeRelease::MAX_LEN), ..release };
        let longest = UsageReport { release: Some(at_most), ..report };
        assert_eq!(UsageReport::decode(&longest.encode()).unwrap(), longest);
    }

    /// Users kicked through a node's traffic stats API ride after everything else, so a
    /// report without any is read by controls and edges from before them; with or without a
    /// release and presence, the earlier encoding is a prefix; the list must be sorted and
    /// unique, and an empty one written out is not canonical.
    #[test]
    fn usage_reports_carry_kicks_after_the_release() {
        let present = Presence { user: 1, devices: 1, connections: 1, ..Presence::default() };
        let release = NodeRelease { running: "0.4.0@6".into(), update: String::new() };
        for (presence, release) in [(vec![present], None), (Vec::new(), Some(release.clone())), (Vec::new(), None)] {
            let bare = UsageReport {
                node: 2,
                seq: 5,
                period_start: 10,
                period_end: 70,
                users: vec![UserUsage { user: 3, up: 1, down: 2 }],
                presence,
                release,
                kicked: Vec::new(),
            };
            let with = UsageReport { kicked: vec![3, 9], ..bare.clone() };
            let bytes = with.encode();
            assert_eq!(UsageReport::decode(&bytes).unwrap(), with);
            let before = encode(&ReportV3 {
                node: 2,
                seq: 5,
                period_start: 10,
                period_end: 70,
                users: bare.users.clone(),
                presence: bare.presence.clone(),
                release: bare.release.clone(),
            });
            assert!(bytes.starts_with(&before), "the encoding before kicks is a prefix");
            assert_eq!(UsageReport::decode(&bare.encode()).unwrap(), bare);
            for bad in [vec![9, 3], vec![3, 3]] {
                let refused = UsageReport { kicked: bad, ..bare.clone() };
                assert!(UsageReport::decode(&refused.encode()).is_err());
            }
            let mut empty = before.clone();
            empty.push(0);
            assert!(UsageReport::decode(&empty).is_err(), "an empty list written out");
        }
    }
}
