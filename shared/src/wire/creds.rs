//! What a node lets in: its [`CredentialSet`] (each user's credential hash, speed limit,
//! device allowance, kick count, guard and rule set; the edges to fall back to; what to do
//! with a device over the allowance; the sealed routing), and the set's five encodings,
//! written by hand. How a set changes is [`super::delta`]'s.

use serde::{Deserialize, Serialize};

use super::codec::{CREDS_FORMAT, NodeId, UserId, WireError};
use crate::{Digest, Rate};

/// A user's speed limit on a node, in bytes a second each way (0: none). `up` is what the
/// user sends (the node receives), `down` what the user receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpeedLimit {
    /// Client to node, bytes a second (0: no limit).
    pub up: u64,
    /// Node to client, bytes a second (0: no limit).
    pub down: u64,
}

impl SpeedLimit {
    /// No limit either way.
    pub const NONE: SpeedLimit = SpeedLimit { up: 0, down: 0 };

    /// Whether neither way is limited.
    pub fn is_none(&self) -> bool {
        *self == SpeedLimit::NONE
    }

    /// A limit of `up` and `down` (the zero rate: none), held as the wire holds it, in whole
    /// bytes a second.
    #[inline]
    pub const fn from_rates(up: Rate, down: Rate) -> SpeedLimit {
        SpeedLimit { up: up.bytes_per_sec(), down: down.bytes_per_sec() }
    }
}

/// What a node refuses to carry for a user (the abuse guard), whatever else it carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Guard {
    /// BitTorrent: its TCP handshake, uTP, the DHT and UDP trackers.
    pub torrent: bool,
    /// Outbound connections to port 25 (mail servers).
    pub smtp: bool,
}

impl Guard {
    /// Nothing refused.
    pub const NONE: Guard = Guard { torrent: false, smtp: false };

    /// Whether nothing is refused.
    pub fn is_none(&self) -> bool {
        *self == Guard::NONE
    }
}

/// One user in a node's credential set: never the credential, only its SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredEntry {
    /// The user.
    pub user: UserId,
    /// SHA-256 of the user's Hysteria2 credential.
    pub hash: Digest,
    /// The user's speed limit on this node.
    pub limit: SpeedLimit,
    /// How many devices (client addresses, see docs/users/fair-use.md) the user may have connected to
    /// this node at once: the user's limit less the devices other nodes reported (`None`: no
    /// limit; `Some(0)`: no new device here).
    pub devices: Option<u32>,
    /// The user's kick count: when it changes, the node closes the user's open connections
    /// (clients connect again at once; the count only says "drop what is open now").
    pub kick: u32,
    /// What the node refuses to carry for the user.
    pub guard: Guard,
    /// The user's routing rules: 0 for none (every destination straight out, within the
    /// node's safety policy), else the number (from 1) of a rule set in the set's sealed
    /// routing ([`CredentialSet::routing`]).
    pub rules: u16,
}

impl CredEntry {
    /// A user without limits.
    pub fn new(user: UserId, hash: Digest) -> CredEntry {
        CredEntry { user, hash, limit: SpeedLimit::NONE, devices: None, kick: 0, guard: Guard::NONE, rules: 0 }
    }

    /// Whether the entry needs format 4 (a device limit, a kick or a guard).
    fn needs_format_4(&self) -> bool {
        self.devices.is_some() || self.kick != 0 || !self.guard.is_none()
    }
}

/// What a node does with a new device of a user who already has as many connected as allowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DevicePolicy {
    /// The new device is refused (the default: who is connected stays connected).
    #[default]
    Refuse,
    /// The device connected longest ago is dropped to make room for the new one.
    DropOldest,
}

impl DevicePolicy {
    /// The policy's name: `refuse` or `drop_oldest`.
    pub fn as_str(self) -> &'static str {
        match self {
            DevicePolicy::Refuse => "refuse",
            DevicePolicy::DropOldest => "drop_oldest",
        }
    }

    /// The policy of that name.
    pub fn from_name(text: &str) -> Option<DevicePolicy> {
        [DevicePolicy::Refuse, DevicePolicy::DropOldest].into_iter().find(|p| p.as_str() == text)
    }
}

/// The largest sealed routing a credential set carries, in bytes.
pub const MAX_ROUTING: usize = 2 * 1024 * 1024;

/// An edge a node falls back to when control does not answer: where it is, and the API
/// prefix it answers nodes under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeAddress {
    /// `http(s)://host[:port]`, no path.
    pub url: String,
    /// The edge's API prefix.
    pub api_prefix: String,
}

impl EdgeAddress {
    /// The most edges a set lists.
    pub const MAX: usize = 16;

    fn valid(&self) -> bool {
        self.url.len() <= 512
            && crate::is_web_address(&self.url)
            && (16..=64).contains(&self.api_prefix.len())
            && self.api_prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }
}

/// The users a node must let in, sorted by user id without repeats.
///
/// Three encodings, and the smallest that holds the set is always used, so there is one
/// encoding of every set:
/// - **format 1** (every node reads it), for a set without speed limits or edges: postcard of
///   the node id and the list of `(user, hash)`;
/// - **format 2**, for a set with at least one limit: the node id, an empty format-1 list, the
///   format number 2, then the list of `(user, hash, up, down)`. A node that reads only
///   format 1 finds bytes after its (empty) list and refuses the set as not canonical, so it
///   never takes a format-2 set for an empty one; from format 2 on, a node that meets a
///   higher number says the set is newer than it reads;
/// - **format 3**, for a set that lists the edges a node falls back to (control lists them
///   when it has more than one, or one with its own API prefix): format 2's layout with 3,
///   then the list of edges;
/// - **format 4**, for a set with a device limit, a kick or an abuse guard for any user, or
///   a device policy other than refusing: format 3's layout with 4 and format 4's entries
///   (format 2's, then the device allowance, the kick count and the guard), the list of
///   edges (empty or not), then the device policy;
/// - **format 5**, for a set with routing rules (a user with a rule set, or sealed routing):
///   format 4's layout with 5 and format 5's entries (format 4's, then the rule set's
///   number), the edges, the device policy, then the sealed routing (`Option` of bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialSet {
    /// The node.
    pub node: NodeId,
    pub(super) users: Vec<CredEntry>,
    pub(super) edges: Vec<EdgeAddress>,
    pub(super) policy: DevicePolicy,
    pub(super) routing: Option<Vec<u8>>,
}

/// Format 1's entry.
#[derive(Serialize, Deserialize)]
struct EntryV1 {
    user: UserId,
    hash: Digest,
}

/// Format 2's entry.
#[derive(Serialize, Deserialize)]
struct EntryV2 {
    user: UserId,
    hash: Digest,
    up: u64,
    down: u64,
}

/// Format 4's entry.
#[derive(Serialize, Deserialize)]
pub(super) struct EntryV4 {
    user: UserId,
    hash: Digest,
    up: u64,
    down: u64,
    devices: Option<u32>,
    kick: u32,
    guard: Guard,
}

/// Format 5's entry: format 4's, then the rule set (postcard writes a struct inside a struct
/// as its fields in turn, so the bytes are format 4's entry followed by the number).
#[derive(Serialize, Deserialize)]
pub(super) struct EntryV5(EntryV4, u16);

impl From<&CredEntry> for EntryV4 {
    fn from(e: &CredEntry) -> EntryV4 {
        EntryV4 {
            user: e.user,
            hash: e.hash,
            up: e.limit.up,
            down: e.limit.down,
            devices: e.devices,
            kick: e.kick,
            guard: e.guard,
        }
    }
}

impl From<EntryV4> for CredEntry {
    fn from(e: EntryV4) -> CredEntry {
        CredEntry {
            user: e.user,
            hash: e.hash,
            limit: SpeedLimit { up: e.up, down: e.down },
            devices: e.devices,
            kick: e.kick,
            guard: e.guard,
            rules: 0,
        }
    }
}

impl From<&CredEntry> for EntryV5 {
    fn from(e: &CredEntry) -> EntryV5 {
        EntryV5(EntryV4::from(e), e.rules)
    }
}

impl From<EntryV5> for CredEntry {
    fn from(EntryV5(entry, rules): EntryV5) -> CredEntry {
        CredEntry { rules, ..CredEntry::from(entry) }
    }
}

/// Appends `value` as postcard writes an unsigned integer (LEB128: seven bits a byte, low
/// bits first).
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The entry of `user` in a list sorted by user.
pub(super) fn entry_of(list: &[CredEntry], user: UserId) -> Option<&CredEntry> {
    list.binary_search_by_key(&user, |entry| entry.user).ok().map(|at| &list[at])
}

impl CredentialSet {
    /// Builds a set; refuses a user listed twice.
    pub fn new(node: NodeId, mut users: Vec<CredEntry>) -> Result<CredentialSet, WireError> {
        users.sort_by_key(|entry| entry.user);
        if let Some(pair) = users.windows(2).find(|pair| pair[0].user == pair[1].user) {
            return Err(WireError::DuplicateUser(pair[0].user));
        }
        Ok(CredentialSet { node, users, edges: Vec::new(), policy: DevicePolicy::Refuse, routing: None })
    }

    /// The set with its routing: outbounds and rule sets sealed for its node (the edge that
    /// stores and serves the set cannot read them), at most [`MAX_ROUTING`] bytes.
    pub fn with_routing(mut self, routing: Option<Vec<u8>>) -> Result<CredentialSet, WireError> {
        if routing.as_ref().is_some_and(|sealed| sealed.len() > MAX_ROUTING) {
            return Err(WireError::Malformed("credential set (routing too large)"));
        }
        self.routing = routing;
        Ok(self)
    }

    /// The sealed routing, if the set has one.
    pub fn routing(&self) -> Option<&[u8]> {
        self.routing.as_deref()
    }

    /// The set with what its node does with a device over a user's allowance.
    pub fn with_policy(mut self, policy: DevicePolicy) -> CredentialSet {
        self.policy = policy;
        self
    }

    /// What the node does with a device over a user's allowance.
    pub fn policy(&self) -> DevicePolicy {
        self.policy
    }

    /// The set with the edges a node falls back to, in order (at most [`EdgeAddress::MAX`],
    /// each a web address without a path and a well-formed prefix).
    pub fn with_edges(mut self, edges: Vec<EdgeAddress>) -> Result<CredentialSet, WireError> {
        if edges.len() > EdgeAddress::MAX || !edges.iter().all(EdgeAddress::valid) {
            return Err(WireError::Malformed("credential set (edges)"));
        }
        self.edges = edges;
        Ok(self)
    }

    /// The edges a node falls back to, in order (none: the one it learned otherwise).
    pub fn edges(&self) -> &[EdgeAddress] {
        &self.edges
    }

    /// The users, sorted by id.
    pub fn users(&self) -> &[CredEntry] {
        &self.users
    }

    /// The user's entry, if the set has one.
    pub fn entry(&self, user: UserId) -> Option<&CredEntry> {
        entry_of(&self.users, user)
    }

    /// Whether any user has a speed limit (the set then needs format 2).
    pub fn has_limits(&self) -> bool {
        self.users.iter().any(|entry| !entry.limit.is_none())
    }

    /// Whether the set needs format 5.
    fn needs_format_5(&self) -> bool {
        self.routing.is_some() || self.users.iter().any(|entry| entry.rules != 0)
    }

    /// Whether the set needs format 4.
    fn needs_format_4(&self) -> bool {
        self.policy != DevicePolicy::Refuse || self.users.iter().any(CredEntry::needs_format_4)
    }

    /// The canonical encoding: format 1 without speed limits or edges, format 2 with limits,
    /// format 3 with edges, format 4 with device limits, kicks, guards or a device policy,
    /// format 5 with routing.
    /// The bytes are postcard's for the same values (a test holds them to it); the users are
    /// written directly rather than through serde, as control and every node encode a set of
    /// up to 100,000 users on each change to hash it.
    pub fn encode(&self) -> Vec<u8> {
        let format = if self.needs_format_5() {
            5
        } else if self.needs_format_4() {
            4
        } else if !self.edges.is_empty() {
            3
        } else if self.has_limits() {
            2
        } else {
            1
        };
        let per_user = match format {
            1 => 42,
            2 => 62,
            _ => 72,
        };
        let mut out = Vec::with_capacity(32 + per_user * self.users.len());
        put_varint(&mut out, self.node);
        if format > 1 {
            // An empty format-1 list, then the format's number.
            out.push(0);
            put_varint(&mut out, format);
        }
        put_varint(&mut out, self.users.len() as u64);
        for entry in &self.users {
            put_varint(&mut out, entry.user);
            out.extend_from_slice(&entry.hash);
            if format == 1 {
                continue;
            }
            put_varint(&mut out, entry.limit.up);
            put_varint(&mut out, entry.limit.down);
            if format >= 4 {
                match entry.devices {
                    None => out.push(0),
                    Some(devices) => {
                        out.push(1);
                        put_varint(&mut out, devices.into());
                    }
                }
                put_varint(&mut out, entry.kick.into());
                out.extend_from_slice(&[u8::from(entry.guard.torrent), u8::from(entry.guard.smtp)]);
            }
            if format == 5 {
                put_varint(&mut out, entry.rules.into());
            }
        }
        let routing = self.routing.as_deref().map(serde_bytes::Bytes::new);
        match format {
            3 => postcard::to_extend(&self.edges, out).expect("encoding into a Vec cannot fail"),
            4 => postcard::to_extend(&(&self.edges, self.policy), out).expect("encoding into a Vec cannot fail"),
            5 => {
                postcard::to_extend(&(&self.edges, self.policy, routing), out).expect("encoding into a Vec cannot fail")
            }
            _ => out,
        }
    }

    /// Decodes strictly: either format, the users sorted and unique, the one canonical
    /// encoding of the set.
    pub fn decode(bytes: &[u8]) -> Result<CredentialSet, WireError> {
        const MALFORMED: WireError = WireError::Malformed("credential set");
        let (node, rest) = postcard::take_from_bytes::<NodeId>(bytes).map_err(|_| MALFORMED)?;
        let (v1, rest) = postcard::take_from_bytes::<Vec<EntryV1>>(rest).map_err(|_| MALFORMED)?;
        let mut edges = Vec::new();
        let mut policy = DevicePolicy::Refuse;
        let mut routing = None;
        let limited =
            |e: EntryV2| CredEntry { limit: SpeedLimit { up: e.up, down: e.down }, ..CredEntry::new(e.user, e.hash) };
        let users: Vec<CredEntry> = if rest.is_empty() || !v1.is_empty() {
            v1.into_iter().map(|e| CredEntry::new(e.user, e.hash)).collect()
        } else {
            let (format, rest) = postcard::take_from_bytes::<u64>(rest).map_err(|_| MALFORMED)?;
            match format {
                2 => postcard::from_bytes::<Vec<EntryV2>>(rest)
                    .map_err(|_| MALFORMED)?
                    .into_iter()
                    .map(limited)
                    .collect(),
                3 => {
                    let (users, rest) = postcard::take_from_bytes::<Vec<EntryV2>>(rest).map_err(|_| MALFORMED)?;
                    edges = postcard::from_bytes(rest).map_err(|_| MALFORMED)?;
                    users.into_iter().map(limited).collect()
                }
                4 => {
                    let (users, rest) = postcard::take_from_bytes::<Vec<EntryV4>>(rest).map_err(|_| MALFORMED)?;
                    let (listed, rest) = postcard::take_from_bytes(rest).map_err(|_| MALFORMED)?;
                    edges = listed;
                    policy = postcard::from_bytes(rest).map_err(|_| MALFORMED)?;
                    users.into_iter().map(CredEntry::from).collect()
                }
                5 => {
                    let (users, rest) = postcard::take_from_bytes::<Vec<EntryV5>>(rest).map_err(|_| MALFORMED)?;
                    let (listed, sealed): (_, (DevicePolicy, Option<serde_bytes::ByteBuf>)) =
                        postcard::from_bytes(rest).map_err(|_| MALFORMED)?;
                    (edges, (policy, routing)) = (listed, sealed);
                    users.into_iter().map(CredEntry::from).collect()
                }
                newer if newer > CREDS_FORMAT => return Err(WireError::NewerFormat(newer)),
                _ => return Err(MALFORMED),
            }
        };
        let set = CredentialSet { node, users, edges: Vec::new(), policy, routing: None }
            .with_edges(edges)?
            .with_routing(routing.map(serde_bytes::ByteBuf::into_vec))?;
        if set.users.windows(2).any(|pair| pair[0].user >= pair[1].user) {
            return Err(WireError::Malformed("credential set (users out of order)"));
        }
        if set.encode() != bytes {
            return Err(WireError::Malformed("credential set (not canonical)"));
        }
        Ok(set)
    }
}

/// Entries and sets for the tests of credential sets and of their changes.
#[cfg(test)]
pub(super) mod testing {
    use super::*;

    pub(in crate::wire) fn entry(user: UserId, fill: u8) -> CredEntry {
        CredEntry::new(user, [fill; 32])
    }

    pub(in crate::wire) fn limited(user: UserId, fill: u8, up: u64, down: u64) -> CredEntry {
        CredEntry { limit: SpeedLimit { up, down }, ..entry(user, fill) }
    }

    pub(in crate::wire) fn set_strategy() -> impl proptest::strategy::Strategy<Value = CredentialSet> {
        use proptest::prelude::*;
        prop::collection::btree_map(0u64..64, (any::<u8>(), 0u64..3, 0u64..3), 0..40).prop_map(|users| {
            // Some with a device allowance or a kick, so diffs cover format 4 too.
            let users = users.into_iter().map(|(user, (fill, up, down))| CredEntry {
                devices: (fill % 7 == 0).then_some(u32::from(fill % 3)),
                kick: u32::from(fill % 11 == 0),
                ..limited(user, fill % 4, up, down)
            });
            CredentialSet::new(5, users.collect()).unwrap()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{entry, limited, set_strategy};
    use super::*;
    use crate::wire::CredDelta;

    #[test]
    fn credential_sets_are_canonical() {
        assert_eq!(CredentialSet::new(1, vec![entry(1, 1), entry(1, 2)]), Err(WireError::DuplicateUser(1)));
        let set = CredentialSet::new(9, vec![entry(5, 1), entry(2, 2)]).unwrap();
        assert_eq!(set.users()[0].user, 2);
        assert_eq!(CredentialSet::decode(&set.encode()).unwrap(), set);
        let unsorted = CredentialSet {
            node: 9,
            users: vec![entry(5, 1), entry(2, 2)],
            edges: Vec::new(),
            policy: DevicePolicy::Refuse,
            routing: None,
        };
        assert!(CredentialSet::decode(&unsorted.encode()).is_err());
        let mut trailing = set.encode();
        trailing.push(0);
        assert!(CredentialSet::decode(&trailing).is_err());
    }

    /// Rates go on the wire in whole bytes a second, as they always did.
    #[test]
    fn speed_limits_are_bytes_a_second_of_rates() {
        let limit = SpeedLimit::from_rates(Rate::from_kbps(500), Rate::from_bits_per_sec(81));
        assert_eq!(limit, SpeedLimit { up: 62_500, down: 10 });
        assert!(SpeedLimit::from_rates(Rate::ZERO, Rate::ZERO).is_none());
    }

    /// A set with speed limits takes format 2; without, format 1 (what every node reads); a
    /// format-1 reader (the decoder nodes had before format 2) refuses a format-2 set rather
    /// than take it for an empty one; a format above 2 is named as newer.
    #[test]
    fn speed_limits_take_format_2_and_older_readers_refuse_it() {
        let plain = CredentialSet::new(4, vec![entry(1, 1), entry(2, 2)]).unwrap();
        let with = CredentialSet::new(4, vec![entry(1, 1), limited(2, 2, 2_500_000, 0)]).unwrap();
        assert!(!plain.has_limits() && with.has_limits());
        assert_eq!(CredentialSet::decode(&with.encode()).unwrap(), with);
        assert_eq!(CredentialSet::decode(&plain.encode()).unwrap(), plain);
        assert_eq!(&with.encode()[..3], &[4, 0, 2], "node, an empty format-1 list, format 2");

        #[derive(Deserialize, Serialize)]
        struct FormatOne {
            node: NodeId,
            users: Vec<EntryV1>,
        }
        let format_one = |bytes: &[u8]| -> Option<usize> {
            let set: FormatOne = postcard::from_bytes(bytes).ok()?;
            (postcard::to_allocvec(&set).ok()? == bytes).then_some(set.users.len())
        };
        assert_eq!(format_one(&plain.encode()), Some(2), "format 1 is what nodes before format 2 read");
        assert_eq!(format_one(&with.encode()), None, "a format-1 reader refuses format 2");

        // The same users without limits in format 2: not canonical.
        let mut padded = vec![4, 0, 2, 1, 1];
        padded.extend([1; 32]);
        padded.extend([0, 0]);
        assert_eq!(CredentialSet::decode(&padded), Err(WireError::Malformed("credential set (not canonical)")));
        let mut newer = with.encode();
        newer[2] = 6;
        assert_eq!(CredentialSet::decode(&newer), Err(WireError::NewerFormat(6)));
        assert!(WireError::NewerFormat(5).to_string().contains("update the node"));

        // A limit alone changing is not a credential change: nobody is cut off for it.
        let slower = CredentialSet::new(4, vec![entry(1, 1), limited(2, 2, 1_000_000, 0)]).unwrap();
        let diff = with.diff(&slower);
        assert!(diff.changed.is_empty() && diff.removed.is_empty());
        assert_eq!(diff.limited, vec![limited(2, 2, 1_000_000, 0)]);
        assert_eq!(with.apply(&diff).unwrap(), slower);
        assert_eq!(plain.diff(&with).limited.len(), 1);
    }

    /// A set listing the edges to fall back to takes format 3, whatever its limits; a
    /// format-2 reader finds a format it does not know; each edge is checked; no set lists
    /// an empty list in format 3.
    #[test]
    fn edges_take_format_3() {
        let edges = vec![
            EdgeAddress { url: "https://edge.example".into(), api_prefix: "a".repeat(16) },
            EdgeAddress { url: "http://10.0.0.2:8787".into(), api_prefix: "b_-9".repeat(4) },
        ];
        let set = CredentialSet::new(4, vec![entry(1, 1)]).unwrap().with_edges(edges.clone()).unwrap();
        let bytes = set.encode();
        assert_eq!(&bytes[..3], &[4, 0, 3], "node, an empty format-1 list, format 3");
        let decoded = CredentialSet::decode(&bytes).unwrap();
        assert_eq!((decoded.edges(), &decoded), (edges.as_slice(), &set));
        let limited = CredentialSet::new(4, vec![limited(1, 1, 8_000, 0)]).unwrap().with_edges(edges.clone()).unwrap();
        assert_eq!(CredentialSet::decode(&limited.encode()).unwrap(), limited);
        // Without edges it is format 1 or 2 again, byte for byte.
        let plain = CredentialSet::new(4, vec![entry(1, 1)]).unwrap();
        assert_eq!(set.clone().with_edges(Vec::new()).unwrap().encode(), plain.encode());
        // The edges stay with the set through a diff of its users.
        let more = CredentialSet::new(4, vec![entry(1, 1), entry(2, 2)]).unwrap().with_edges(edges.clone()).unwrap();
        assert_eq!(set.apply(&set.diff(&more)).unwrap(), more);

        for bad in [
            EdgeAddress { url: "ftp://edge.example".into(), api_prefix: "a".repeat(16) },
            EdgeAddress { url: "https://edge.example".into(), api_prefix: "short".into() },
            EdgeAddress { url: "https://edge.example".into(), api_prefix: "a/b".repeat(8) },
        ] {
            assert!(plain.clone().with_edges(vec![bad]).is_err());
        }
        assert!(plain.clone().with_edges(vec![edges[0].clone(); EdgeAddress::MAX + 1]).is_err());
        let mut bad_prefix = bytes.clone();
        let at = bad_prefix.len() - 1;
        bad_prefix[at] = b'/';
        assert!(CredentialSet::decode(&bad_prefix).is_err(), "an edge not well formed is refused");
        let mut empty = vec![4, 0, 3, 1, 1];
        empty.extend([1; 32]);
        empty.extend([0, 0, 0]);
        assert_eq!(CredentialSet::decode(&empty), Err(WireError::Malformed("credential set (not canonical)")));
    }

    /// A device limit, a kick or a guard for any user, or dropping the oldest device, takes
    /// format 4, with or without edges; a format-3 reader finds a format it does not know; a
    /// change of those alone closes nobody's connections in the diff.
    #[test]
    fn device_limits_kicks_and_guards_take_format_4() {
        let plain = CredentialSet::new(4, vec![entry(1, 1), limited(2, 2, 8_000, 0)]).unwrap();
        let family = CredEntry { devices: Some(2), ..entry(3, 3) };
        let set = CredentialSet::new(4, vec![entry(1, 1), limited(2, 2, 8_000, 0), family]).unwrap();
        let bytes = set.encode();
        assert_eq!(&bytes[..3], &[4, 0, 4], "node, an empty format-1 list, format 4");
        assert_eq!(CredentialSet::decode(&bytes).unwrap(), set);
        let edges = vec![EdgeAddress { url: "https://edge.example".into(), api_prefix: "a".repeat(16) }];
        let both = set.clone().with_edges(edges.clone()).unwrap().with_policy(DevicePolicy::DropOldest);
        let decoded = CredentialSet::decode(&both.encode()).unwrap();
        assert_eq!((decoded.edges(), decoded.policy(), &decoded), (edges.as_slice(), DevicePolicy::DropOldest, &both));
        // Dropping the oldest device alone, a kick alone, a guard alone: format 4.
        for variant in [
            plain.clone().with_policy(DevicePolicy::DropOldest),
            CredentialSet::new(4, vec![CredEntry { kick: 1, ..entry(1, 1) }]).unwrap(),
            CredentialSet::new(4, vec![CredEntry { guard: Guard { torrent: false, smtp: true }, ..entry(1, 1) }])
                .unwrap(),
        ] {
            assert_eq!(variant.encode()[2], 4);
            assert_eq!(CredentialSet::decode(&variant.encode()).unwrap(), variant);
        }
        // Without any of it, the set keeps the format it had, byte for byte.
        assert_eq!(plain.encode()[2], 2);
        // Format 4 carrying nothing format 4 needs is not canonical.
        let mut padded = vec![4, 0, 4, 1, 1];
        padded.extend([1; 32]);
        padded.extend([0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(CredentialSet::decode(&padded), Err(WireError::Malformed("credential set (not canonical)")));
        // A new allowance, kick count or guard is a limit change: nobody is cut off for it.
        let kicked =
            CredentialSet::new(4, vec![entry(1, 1), limited(2, 2, 8_000, 0), CredEntry { kick: 1, ..family }]).unwrap();
        let diff = set.diff(&kicked);
        assert!(diff.changed.is_empty() && diff.removed.is_empty() && diff.added.is_empty());
        assert_eq!(diff.limited, vec![CredEntry { kick: 1, ..family }]);
        assert_eq!(set.apply(&diff).unwrap(), kicked);
        assert_eq!(DevicePolicy::from_name("drop_oldest"), Some(DevicePolicy::DropOldest));
        assert_eq!(DevicePolicy::from_name(DevicePolicy::Refuse.as_str()), Some(DevicePolicy::Refuse));
    }

    #[test]
    fn routing_takes_format_5_and_a_rule_set_change_travels_in_a_delta() {
        let mut routed = entry(2, 2);
        routed.rules = 3;
        let set = CredentialSet::new(4, vec![entry(1, 1), routed]).unwrap();
        let bytes = set.encode();
        assert_eq!(bytes[2], 5, "a user with a rule set needs format 5");
        assert_eq!(CredentialSet::decode(&bytes).unwrap(), set);
        let sealed = set.clone().with_routing(Some(vec![7; 100])).unwrap();
        let decoded = CredentialSet::decode(&sealed.encode()).unwrap();
        assert_eq!(decoded.routing(), Some(&[7u8; 100][..]));
        assert_eq!(decoded, sealed);
        // Routing alone (no user routed) still needs format 5; an oversized one is refused.
        let alone = CredentialSet::new(4, vec![entry(1, 1)]).unwrap().with_routing(Some(vec![1])).unwrap();
        assert_eq!(alone.encode()[2], 5);
        assert_eq!(CredentialSet::decode(&alone.encode()).unwrap(), alone);
        assert!(alone.clone().with_routing(Some(vec![0; MAX_ROUTING + 1])).is_err());
        // Format 5 without routing or rules is not canonical: format 1 says it.
        let plain = CredentialSet::new(4, vec![entry(1, 1)]).unwrap();
        let mut padded = vec![4, 0, 5, 1, 1];
        padded.extend([1; 32]);
        padded.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(CredentialSet::decode(&padded).is_err());
        assert_eq!(plain.encode()[0..2], [4, 1]);

        // A user's rule set changing is a limit: connections stay, a delta says it (format 2).
        let mut moved = routed;
        moved.rules = 1;
        let after = CredentialSet::new(4, vec![entry(1, 1), moved]).unwrap().with_routing(Some(vec![7; 100])).unwrap();
        let diff = sealed.diff(&after);
        assert_eq!(diff.limited, vec![moved]);
        let digest = crate::sha256(&sealed.encode());
        let delta = CredDelta::between(&sealed, 1, digest, &after, crate::sha256(&after.encode())).unwrap();
        let encoded = delta.encode();
        assert_eq!(encoded[0], 2);
        assert_eq!(CredDelta::base_of(&encoded), Some((4, 1)));
        let decoded = CredDelta::decode(&encoded).unwrap();
        assert_eq!(sealed.patched(&decoded).unwrap(), after);
        // Other routing is not a delta's to say.
        let rerouted = after.clone().with_routing(Some(vec![8; 100])).unwrap();
        assert!(CredDelta::between(&sealed, 1, digest, &rerouted, crate::sha256(&rerouted.encode())).is_none());
    }

    /// A set's encoding through serde and postcard, as Hearth wrote it before it wrote the
    /// users itself.
    fn postcard_encoding(set: &CredentialSet) -> Vec<u8> {
        let out = postcard::to_allocvec(&set.node).unwrap();
        if set.needs_format_4() {
            let users: Vec<EntryV4> = set.users.iter().map(EntryV4::from).collect();
            postcard::to_extend(&(Vec::<EntryV1>::new(), 4u64, users, &set.edges, set.policy), out).unwrap()
        } else if set.has_limits() || !set.edges.is_empty() {
            let users: Vec<EntryV2> = set
                .users
                .iter()
                .map(|e| EntryV2 { user: e.user, hash: e.hash, up: e.limit.up, down: e.limit.down })
                .collect();
            if set.edges.is_empty() {
                postcard::to_extend(&(Vec::<EntryV1>::new(), 2u64, users), out).unwrap()
            } else {
                postcard::to_extend(&(Vec::<EntryV1>::new(), 3u64, users, &set.edges), out).unwrap()
            }
        } else {
            let users: Vec<EntryV1> = set.users.iter().map(|e| EntryV1 { user: e.user, hash: e.hash }).collect();
            postcard::to_extend(&users, out).unwrap()
        }
    }

    proptest::proptest! {
        /// A set's encoding is postcard's encoding of the same values, in each format.
        #[test]
        fn a_set_encodes_as_postcard_would(set in set_strategy(), edges in 0usize..3, policy in proptest::prelude::any::<bool>(), plain in proptest::prelude::any::<bool>()) {
            let edges: Vec<EdgeAddress> = (0..edges)
                .map(|i| EdgeAddress { url: format!("https://edge{i}.example"), api_prefix: "a".repeat(24) })
                .collect();
            // Without limits too (formats 1 and 3); with numbers of several bytes.
            let users: Vec<CredEntry> = if plain {
                set.users().iter().map(|entry| CredEntry::new(entry.user << 20, entry.hash)).collect()
            } else {
                let wide = |entry: &CredEntry| CredEntry {
                    user: entry.user << 20,
                    limit: SpeedLimit { up: entry.limit.up << 30, down: entry.limit.down * 300 },
                    devices: entry.devices.map(|devices| devices * 200),
                    kick: entry.kick * 1000,
                    ..*entry
                };
                set.users().iter().map(wide).collect()
            };
            let set = CredentialSet::new(set.node, users)
                .unwrap()
                .with_edges(edges)
                .unwrap()
                .with_policy(if policy { DevicePolicy::DropOldest } else { DevicePolicy::Refuse });
            proptest::prop_assert_eq!(set.encode(), postcard_encoding(&set));
            proptest::prop_assert_eq!(CredentialSet::decode(&set.encode()).unwrap(), set);
        }
    }
}
