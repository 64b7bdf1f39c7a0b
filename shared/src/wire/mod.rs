//! The types that travel inside envelopes, and the names of the streams they travel on.
//!
//! All of them encode with postcard (as the envelope does); lists that must have one
//! encoding (a credential set's users, a batch's entries) are kept sorted and free of repeats
//! by their constructors and checked again by [`CredentialSet::decode`] and
//! [`BatchManifest::decode`].

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};

use crate::keys::PublicKey;

mod hwid;
mod ua;
use crate::{Digest, sha256};
pub use hwid::{DeviceKey, Forgotten, HwidPolicy};
pub use ua::{RuleTarget, UaRule};

/// A user's stable id (control's row id). It survives link rotation and restores.
pub type UserId = u64;
/// A node's stable id.
pub type NodeId = u64;

/// A stream, typed: what it carries and for whom. A version is strictly increasing within
/// one stream. Its name (`Display`) is what envelopes, batches and stores carry; `FromStr`
/// takes only the canonical name of each (a node id in decimal without leading zeros, a
/// link's token hash in 64 lowercase hex digits), so every stream has exactly one name and
/// every name is parsed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The sealed snapshot behind one subscription link, by the SHA-256 of its token
    /// (`sub/<hex>`).
    Snapshot(Digest),
    /// A node's credential set (`creds/<node>`).
    Creds(NodeId),
    /// A node's set as a change to its last full set (`creds-delta/<node>`, [`CredDelta`]).
    CredsDelta(NodeId),
    /// A node's registration: its public key (`node/<node>`).
    Node(NodeId),
    /// A node's usage reports, version = sequence number (`usage/<node>`).
    Usage(NodeId),
    /// Control's acknowledgements to one node (`ack/<node>`).
    UsageAck(NodeId),
    /// The key record of a role (`keys/<role>`).
    Keys(crate::keys::Role),
    /// Control's batch manifests (`batch`).
    Batch,
    /// Control's state archive (`archive`).
    Archive,
    /// Node release manifests (`release`).
    Release,
    /// The operator's edge settings (`edge-settings`).
    EdgeSettings,
    /// Which nodes take which release (`rollout`).
    Rollout,
}

impl Stream {
    /// The kind and audience of what control pushes to the edge on this stream; `None` for
    /// a stream that never goes there that way.
    pub fn pushed(&self) -> Option<(crate::envelope::Kind, crate::envelope::Audience)> {
        use crate::envelope::{Audience, Kind};
        Some(match *self {
            Stream::Snapshot(_) => (Kind::Snapshot, Audience::Edge),
            Stream::Creds(node) => (Kind::CredentialSet, Audience::Node(node)),
            Stream::CredsDelta(node) => (Kind::CredDelta, Audience::Node(node)),
            Stream::UsageAck(node) => (Kind::UsageAck, Audience::Node(node)),
            Stream::Node(_) => (Kind::NodeRecord, Audience::Edge),
            Stream::EdgeSettings => (Kind::EdgeSettings, Audience::Edge),
            Stream::Rollout => (Kind::Rollout, Audience::Edge),
            Stream::Usage(_) | Stream::Keys(_) | Stream::Batch | Stream::Archive | Stream::Release => return None,
        })
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Snapshot(hash) => write!(f, "sub/{}", hex::encode(hash)),
            Stream::Creds(node) => write!(f, "creds/{node}"),
            Stream::CredsDelta(node) => write!(f, "creds-delta/{node}"),
            Stream::Node(node) => write!(f, "node/{node}"),
            Stream::Usage(node) => write!(f, "usage/{node}"),
            Stream::UsageAck(node) => write!(f, "ack/{node}"),
            Stream::Keys(role) => write!(f, "keys/{role}"),
            Stream::Batch => f.write_str("batch"),
            Stream::Archive => f.write_str("archive"),
            Stream::Release => f.write_str("release"),
            Stream::EdgeSettings => f.write_str("edge-settings"),
            Stream::Rollout => f.write_str("rollout"),
        }
    }
}

impl std::str::FromStr for Stream {
    type Err = WireError;

    fn from_str(name: &str) -> Result<Stream, WireError> {
        const BAD: WireError = WireError::Malformed("stream name");
        let node = |id: &str| -> Result<NodeId, WireError> {
            let canonical =
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && (!id.starts_with('0') || id == "0");
            canonical.then(|| id.parse().ok()).flatten().ok_or(BAD)
        };
        Ok(match name.split_once('/') {
            Some(("sub", hash)) => {
                let digest: Digest = hex::decode(hash).ok().and_then(|d| d.try_into().ok()).ok_or(BAD)?;
                if hex::encode(digest) != hash {
                    return Err(BAD);
                }
                Stream::Snapshot(digest)
            }
            Some(("creds", id)) => Stream::Creds(node(id)?),
            Some(("creds-delta", id)) => Stream::CredsDelta(node(id)?),
            Some(("node", id)) => Stream::Node(node(id)?),
            Some(("usage", id)) => Stream::Usage(node(id)?),
            Some(("ack", id)) => Stream::UsageAck(node(id)?),
            Some(("keys", role)) => {
                let parsed: crate::keys::Role = role.parse().map_err(|_| BAD)?;
                Stream::Keys(parsed)
            }
            Some(_) => return Err(BAD),
            None => match name {
                "batch" => Stream::Batch,
                "archive" => Stream::Archive,
                "release" => Stream::Release,
                "edge-settings" => Stream::EdgeSettings,
                "rollout" => Stream::Rollout,
                _ => return Err(BAD),
            },
        })
    }
}

/// Stream names as strings, for the places that store or compare them (all made by
/// [`Stream`]'s `Display`).
pub mod stream {
    use super::Stream;
    use crate::keys::Role;
    use crate::wire::NodeId;

    /// The snapshot behind one subscription link, named by the token's hash (hex).
    pub fn snapshot(token_hash: &crate::Digest) -> String {
        Stream::Snapshot(*token_hash).to_string()
    }
    /// A node's credential set.
    pub fn creds(node: NodeId) -> String {
        Stream::Creds(node).to_string()
    }
    /// A node's set as a change to its last full set.
    pub fn creds_delta(node: NodeId) -> String {
        Stream::CredsDelta(node).to_string()
    }
    /// A node's registration (its public key).
    pub fn node(node: NodeId) -> String {
        Stream::Node(node).to_string()
    }
    /// A node's usage reports (version = sequence number).
    pub fn usage(node: NodeId) -> String {
        Stream::Usage(node).to_string()
    }
    /// The node whose usage stream this is.
    pub fn parse_usage(name: &str) -> Option<NodeId> {
        match name.parse() {
            Ok(Stream::Usage(node)) => Some(node),
            _ => None,
        }
    }
    /// Acknowledgements to one node.
    pub fn usage_ack(node: NodeId) -> String {
        Stream::UsageAck(node).to_string()
    }
    /// The key record of a role.
    pub fn keys(role: Role) -> String {
        Stream::Keys(role).to_string()
    }
    /// Control's batch manifests.
    pub const BATCH: &str = "batch";
    /// Control's state archive.
    pub const ARCHIVE: &str = "archive";
    /// Node release manifests.
    pub const RELEASE: &str = "release";
    /// The operator's edge settings.
    pub const EDGE_SETTINGS: &str = "edge-settings";
    /// Which nodes take which release.
    pub const ROLLOUT: &str = "rollout";
}

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

/// Where a user stands. Only [`Status::Active`] and [`Status::NotStarted`] can connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Status {
    /// Can connect.
    Active,
    /// Turned off by the operator.
    Disabled,
    /// Past the expiry date.
    Expired,
    /// The traffic quota is used up.
    OverQuota,
    /// Can connect; the expiry clock starts at first use.
    NotStarted,
}

impl Status {
    /// Whether this user may connect.
    pub fn can_connect(self) -> bool {
        matches!(self, Status::Active | Status::NotStarted)
    }

    /// What a person is told about this status.
    pub fn describe(self) -> &'static str {
        match self {
            Status::Active => "Active",
            Status::Disabled => "Account disabled",
            Status::Expired => "Subscription expired",
            Status::OverQuota => "Traffic quota used up",
            Status::NotStarted => "Not started (starts at first use)",
        }
    }
}

/// When a user's used traffic goes back to zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResetStrategy {
    /// Never.
    Never,
    /// Every day at midnight UTC.
    Daily,
    /// Every Monday.
    Weekly,
    /// On the first of every month.
    Monthly,
    /// Every 30 days from the user's start.
    Rolling30,
}

/// An inclusive UDP port range for port hopping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRange {
    /// The first port.
    pub start: u16,
    /// The last port (at least `start`).
    pub end: u16,
}

/// One server a user can connect to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The name a client shows.
    pub name: String,
    /// Host name or IP address.
    pub host: String,
    /// The UDP port.
    pub port: u16,
    /// Port hopping range, if the node listens on one.
    pub hop: Option<PortRange>,
    /// TLS server name, when it differs from `host`.
    pub sni: Option<String>,
    /// SHA-256 of the leaf certificate's DER (share links' `pinSHA256`, mihomo's
    /// `fingerprint`).
    pub cert_sha256: Option<Digest>,
    /// SHA-256 of the leaf's SubjectPublicKeyInfo (sing-box's
    /// `certificate_public_key_sha256`).
    pub spki_sha256: Option<Digest>,
    /// The node's certificate is self-signed: no CA vouches for it, so apps check it by its
    /// pins or by the certificate itself ([`Identity`]), never by the chain (and an app that
    /// can do neither is refused, unless the owner allows it: [`Identity::unverified`]).
    pub insecure: bool,
    /// Salamander obfuscation password, if the node uses it.
    pub obfs: Option<String>,
    /// What else apps may check the node by. Encoded after the rest of the snapshot (see
    /// [`Snapshot::encode`]), so that edges from before it read the snapshot as before.
    #[serde(skip)]
    pub identity: Identity,
}

/// How apps check a self-signed node beyond its pins, carried by a snapshot after the device
/// policy and the alias.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The node's self-signed certificate (DER), for apps that can trust exactly one
    /// certificate but pin nothing (sing-box before 1.13: `tls.certificate`).
    pub certificate: Option<Vec<u8>>,
    /// The name that certificate is made out to, which such apps check (their server name).
    pub name: Option<String>,
    /// The owner lets apps that can check nothing at all connect without a check (the node's
    /// "allow unverified clients": anyone on the path can then pose as the node to them).
    pub unverified: bool,
}

impl Endpoint {
    /// An entry that connects nowhere, named to tell a person why (a user who cannot connect,
    /// a device over the limit).
    pub fn placeholder(name: &str) -> Endpoint {
        Endpoint {
            name: name.to_owned(),
            host: "127.0.0.1".to_owned(),
            port: 1,
            hop: None,
            sni: None,
            cert_sha256: None,
            spki_sha256: None,
            insecure: true,
            obfs: None,
            identity: Identity::default(),
        }
    }
}

/// Per-subscription presentation: title, notices, links, refresh interval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// The profile's title in clients.
    pub title: String,
    /// A notice clients show (Happ, Hiddify).
    pub announce: Option<String>,
    /// Where to get help.
    pub support_url: Option<String>,
    /// The operator's page.
    pub web_page_url: Option<String>,
    /// How often clients should refresh, in hours.
    pub update_interval_hours: u32,
}

/// Everything a subscription link serves for one user. Sealed before it leaves control.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The user's stable id.
    pub user: UserId,
    /// The user's display name.
    pub name: String,
    /// Whether and why not the user can connect.
    pub status: Status,
    /// Bytes sent by the user.
    pub used_up: u64,
    /// Bytes received by the user.
    pub used_down: u64,
    /// The quota in bytes; 0 is unlimited.
    pub quota: u64,
    /// Expiry in Unix seconds; 0 is never.
    pub expires_at: u64,
    /// When used traffic resets.
    pub reset: ResetStrategy,
    /// The user's Hysteria2 credential.
    pub credential: String,
    /// The servers, in the order clients should list them.
    pub endpoints: Vec<Endpoint>,
    /// Presentation.
    pub profile: Profile,
    /// The devices the edge admits by the headers apps send. Encoded after the rest, only
    /// when set (see [`Snapshot::encode`]).
    #[serde(skip)]
    pub hwid: HwidPolicy,
    /// The alias this snapshot is sealed for (an old subscription path, see
    /// [`SubToken::for_alias`]), `None` for the user's own link: a restore tells them apart
    /// by it. Encoded after the rest, as `hwid` is.
    #[serde(skip)]
    pub alias: Option<String>,
    /// The owner's Telegram bot, when it takes users: the subscription page links to it with
    /// a one-time code that binds the user's own chat. Encoded last, after the identities.
    #[serde(skip)]
    pub telegram: Option<TelegramLink>,
}

/// A link to the owner's Telegram bot that binds a user's own chat to it, once:
/// `https://t.me/<bot>?start=<code>-<lang>` (the page adds its language, so the bot speaks it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelegramLink {
    /// The bot's username, without `@`.
    pub bot: String,
    /// The one-time code (lowercase letters, digits and `-`).
    pub code: String,
}

impl TelegramLink {
    /// Whether the link can be written into a page as it is: a Telegram username (5 to 32
    /// letters, digits and `_`) and a code that leaves room in Telegram's 64-character start
    /// parameter for the page's `-<lang>`.
    pub fn is_valid(&self) -> bool {
        (5..=32).contains(&self.bot.len())
            && self.bot.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && (1..=56).contains(&self.code.len())
            && self.code.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }

    /// The link, with the page's language.
    pub fn url(&self, lang: &str) -> String {
        format!("https://t.me/{}?start={}-{lang}", self.bot, self.code)
    }
}

/// What a snapshot carries after the fields every edge reads.
#[derive(Serialize, Deserialize)]
struct SnapshotExtra<'a> {
    hwid: std::borrow::Cow<'a, HwidPolicy>,
    alias: Option<std::borrow::Cow<'a, str>>,
}

impl Snapshot {
    /// The encoding sealed: the fields; then the device policy and the alias when either is
    /// set or a later part follows; then the endpoints' identities, one each, when any has one
    /// or the Telegram link follows; then the Telegram link, when there is one. An edge from
    /// before each part stops reading where its own parts end (a trailing part is never read),
    /// so it serves the link as it did.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = encode(self);
        let identities = self.endpoints.iter().any(|e| e.identity != Identity::default()) || self.telegram.is_some();
        if !self.hwid.is_off() || self.alias.is_some() || identities {
            bytes.extend(encode(&SnapshotExtra {
                hwid: std::borrow::Cow::Borrowed(&self.hwid),
                alias: self.alias.as_deref().map(std::borrow::Cow::Borrowed),
            }));
        }
        if identities {
            let identities: Vec<&Identity> = self.endpoints.iter().map(|e| &e.identity).collect();
            bytes.extend(encode(&identities));
        }
        if let Some(telegram) = &self.telegram {
            bytes.extend(encode(telegram));
        }
        bytes
    }

    /// Decodes bytes already proven genuine (opened with the token), any of the encodings.
    pub fn decode_authenticated(bytes: &[u8]) -> Result<Snapshot, WireError> {
        let (mut snapshot, rest) =
            postcard::take_from_bytes::<Snapshot>(bytes).map_err(|_| WireError::Malformed("snapshot"))?;
        if !rest.is_empty() {
            let (extra, rest) = postcard::take_from_bytes::<SnapshotExtra<'_>>(rest)
                .map_err(|_| WireError::Malformed("snapshot (extra)"))?;
            snapshot.hwid = extra.hwid.into_owned();
            snapshot.alias = extra.alias.map(std::borrow::Cow::into_owned);
            if !rest.is_empty() {
                let (identities, rest) = postcard::take_from_bytes::<Vec<Identity>>(rest)
                    .map_err(|_| WireError::Malformed("snapshot (identities)"))?;
                if identities.len() != snapshot.endpoints.len() {
                    return Err(WireError::Malformed("snapshot (identities)"));
                }
                for (endpoint, identity) in snapshot.endpoints.iter_mut().zip(identities) {
                    endpoint.identity = identity;
                }
                if !rest.is_empty() {
                    snapshot.telegram = Some(decode_authenticated(rest, "snapshot (telegram)")?);
                }
            }
        }
        Ok(snapshot)
    }
}

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
    /// How many devices (client addresses, see the README) the user may have connected to
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

/// The credential-set format a node of this version reads at most (see
/// [`CredentialSet::encode`]).
pub const CREDS_FORMAT: u64 = 5;

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
    users: Vec<CredEntry>,
    edges: Vec<EdgeAddress>,
    policy: DevicePolicy,
    routing: Option<Vec<u8>>,
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
struct EntryV4 {
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
struct EntryV5(EntryV4, u16);

/// What changed between two credential sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredDiff {
    /// Users that are new.
    pub added: Vec<CredEntry>,
    /// Users that are gone: their connections must be closed.
    pub removed: Vec<UserId>,
    /// Users whose credential changed: their connections must be closed too.
    pub changed: Vec<CredEntry>,
    /// Users whose limits alone changed (speed, devices, kick count, guard): their
    /// connections stay open (a node closes them on a new kick count itself).
    pub limited: Vec<CredEntry>,
}

impl CredDiff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty() && self.limited.is_empty()
    }

    /// How many users it names.
    pub fn len(&self) -> usize {
        self.added.len() + self.removed.len() + self.changed.len() + self.limited.len()
    }

    /// What it says of `user`: `Some(Some(entry))` added, changed or limited,
    /// `Some(None)` removed, `None` not named (its lists are sorted, as [`CredentialSet::diff`]
    /// makes them and [`CredentialSet::apply`] takes them).
    pub fn entry(&self, user: UserId) -> Option<Option<&CredEntry>> {
        if self.removed.binary_search(&user).is_ok() {
            return Some(None);
        }
        [&self.added, &self.changed, &self.limited].into_iter().find_map(|list| entry_of(list, user)).map(Some)
    }

    /// Says what `user`'s entry now is (`None`: not in the set) of a diff from a set in which
    /// it was `base` (`None`: not in it), in place of whatever the diff said of the user
    /// before; the lists stay sorted. Control changes its latest delta this way by the users
    /// a change touched, without building the whole set again.
    pub fn restate(&mut self, user: UserId, base: Option<&CredEntry>, now: Option<CredEntry>) {
        self.removed.retain(|named| *named != user);
        for list in [&mut self.added, &mut self.changed, &mut self.limited] {
            list.retain(|entry| entry.user != user);
        }
        let insert = |list: &mut Vec<CredEntry>, entry: CredEntry| {
            let at = list.partition_point(|named| named.user < entry.user);
            list.insert(at, entry);
        };
        match (base, now) {
            (None, None) => {}
            (Some(_), None) => {
                let at = self.removed.partition_point(|named| *named < user);
                self.removed.insert(at, user);
            }
            (None, Some(now)) => insert(&mut self.added, now),
            (Some(base), Some(now)) if base.hash != now.hash => insert(&mut self.changed, now),
            (Some(base), Some(now)) if *base != now => insert(&mut self.limited, now),
            (Some(_), Some(_)) => {}
        }
    }

    /// The users it names (a user is named once, each list in order).
    fn users(&self) -> impl Iterator<Item = UserId> + '_ {
        let entries = self.added.iter().chain(&self.changed).chain(&self.limited).map(|entry| entry.user);
        entries.chain(self.removed.iter().copied())
    }
}

/// A user whose entry differs between two sets: what it was (`None`: not in the first) and
/// what it is (`None`: not in the second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touched {
    /// The user.
    pub user: UserId,
    /// Its entry in the first set.
    pub before: Option<CredEntry>,
    /// Its entry in the second.
    pub after: Option<CredEntry>,
}

/// A node's credential set as a change to the last full set it was sent: control signs one
/// of these (on the node's `creds-delta/<node>` stream) instead of the whole set when few
/// users changed, so a change costs bytes in proportion to it at control, the edge and the
/// node. It always runs from the full set at `base` to the set as it is now (never from the
/// delta before it), so a node that missed deltas needs only the latest; and it names the
/// digest of the set it makes, so a node that applies it holds exactly the set control built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredDelta {
    /// The node.
    pub node: NodeId,
    /// The version of the full set it applies to (on the node's `creds/<node>` stream).
    pub base: u64,
    /// SHA-256 of that set's encoding (the body of its envelope).
    pub base_digest: Digest,
    /// What changed since that set.
    pub diff: CredDiff,
    /// SHA-256 of the encoding of the set it makes.
    pub result: Digest,
}

/// The encoding of a [`CredDelta`], every list sorted by user without repeats: format 1 with
/// format 4's entries ([`EntryV4`]), format 2 with format 5's ([`EntryV5`]), written when an
/// entry it names has a rule set.
#[derive(Serialize, Deserialize)]
struct DeltaOf<E> {
    format: u64,
    node: NodeId,
    base: u64,
    base_digest: Digest,
    added: Vec<E>,
    removed: Vec<UserId>,
    changed: Vec<E>,
    limited: Vec<E>,
    result: Digest,
}

/// The prefix of a [`CredDelta`]'s encoding: which node and base it is for.
#[derive(Deserialize)]
struct DeltaPrefix {
    format: u64,
    node: NodeId,
    base: u64,
}

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
fn entry_of(list: &[CredEntry], user: UserId) -> Option<&CredEntry> {
    list.binary_search_by_key(&user, |entry| entry.user).ok().map(|at| &list[at])
}

/// Whether users are sorted by id without repeats.
fn strictly_sorted(users: impl Iterator<Item = UserId>) -> bool {
    let mut last = None;
    users.into_iter().all(|user| last.replace(user).is_none_or(|before| before < user))
}

impl CredDelta {
    /// The newest delta format this version writes and reads.
    pub const FORMAT: u64 = 2;

    /// The delta from `base` (the full set signed at `version`, whose encoding hashes to
    /// `base_digest`) to `new` (whose encoding hashes to `result`). `None` when a delta cannot
    /// say it: another node, or other edges, device policy or routing (a full set).
    pub fn between(
        base: &CredentialSet,
        version: u64,
        base_digest: Digest,
        new: &CredentialSet,
        result: Digest,
    ) -> Option<CredDelta> {
        let same_rest = base.node == new.node
            && base.edges == new.edges
            && base.policy == new.policy
            && base.routing == new.routing;
        same_rest.then(|| CredDelta { node: new.node, base: version, base_digest, diff: base.diff(new), result })
    }

    /// The canonical encoding: format 1, or format 2 when an entry it names has a rule set.
    pub fn encode(&self) -> Vec<u8> {
        let diff = &self.diff;
        let with_rules = diff.added.iter().chain(&diff.changed).chain(&diff.limited).any(|entry| entry.rules != 0);
        if with_rules { self.encode_as::<EntryV5>(2) } else { self.encode_as::<EntryV4>(1) }
    }

    fn encode_as<E: Serialize + for<'e> From<&'e CredEntry>>(&self, format: u64) -> Vec<u8> {
        let entries = |list: &[CredEntry]| list.iter().map(E::from).collect::<Vec<_>>();
        encode(&DeltaOf {
            format,
            node: self.node,
            base: self.base,
            base_digest: self.base_digest,
            added: entries(&self.diff.added),
            removed: self.diff.removed.clone(),
            changed: entries(&self.diff.changed),
            limited: entries(&self.diff.limited),
            result: self.result,
        })
    }

    /// Decodes strictly: format 1 or 2, every list sorted by user without repeats, the one
    /// canonical encoding.
    pub fn decode(bytes: &[u8]) -> Result<CredDelta, WireError> {
        const MALFORMED: WireError = WireError::Malformed("credential delta");
        let format = postcard::take_from_bytes::<u64>(bytes).map_err(|_| MALFORMED)?.0;
        let delta = match format {
            1 => Self::decode_as::<EntryV4>(bytes)?,
            2 => Self::decode_as::<EntryV5>(bytes)?,
            newer if newer > Self::FORMAT => return Err(WireError::NewerFormat(newer)),
            _ => return Err(MALFORMED),
        };
        if delta.encode() != bytes {
            return Err(WireError::Malformed("credential delta (not canonical)"));
        }
        Ok(delta)
    }

    fn decode_as<E: Serialize + serde::de::DeserializeOwned + Into<CredEntry>>(
        bytes: &[u8],
    ) -> Result<CredDelta, WireError> {
        let wire: DeltaOf<E> = decode(bytes, "credential delta")?;
        let entries = |list: Vec<E>| list.into_iter().map(Into::into).collect::<Vec<CredEntry>>();
        let diff = CredDiff {
            added: entries(wire.added),
            removed: wire.removed,
            changed: entries(wire.changed),
            limited: entries(wire.limited),
        };
        let sorted = |list: &[CredEntry]| strictly_sorted(list.iter().map(|e| e.user));
        if !sorted(&diff.added)
            || !sorted(&diff.changed)
            || !sorted(&diff.limited)
            || !strictly_sorted(diff.removed.iter().copied())
        {
            return Err(WireError::Malformed("credential delta (users out of order)"));
        }
        Ok(CredDelta { node: wire.node, base: wire.base, base_digest: wire.base_digest, diff, result: wire.result })
    }

    /// Whether it applies to the full set signed at `version` whose encoding hashes to
    /// `digest`.
    pub fn is_on(&self, version: u64, digest: &Digest) -> bool {
        self.base == version && self.base_digest == *digest
    }

    /// The node and base version of an encoded delta, read from its first bytes alone (for an
    /// edge choosing what to answer a pull with; the node checks the whole delta itself).
    pub fn base_of(bytes: &[u8]) -> Option<(NodeId, u64)> {
        let (prefix, _) = postcard::take_from_bytes::<DeltaPrefix>(bytes).ok()?;
        (1..=Self::FORMAT).contains(&prefix.format).then_some((prefix.node, prefix.base))
    }
}

/// The header an edge's answer to a push carries when it keeps and serves credential deltas
/// (`creds-delta/<node>` streams): control signs deltas only once every edge said so, and
/// pushes none to an edge that has not (an older edge refuses a push with a kind it cannot
/// read).
pub const DELTAS_HEADER: &str = "hearth-edge-deltas";

/// A header of a native edge's answer to a push: the address of a peer it does not trust that
/// sent forwarding headers (`X-Forwarded-For`, `CF-Connecting-IP`...): a proxy in front of the
/// edge that is not in its `HEARTH_TRUSTED_PROXIES`, so every client looks like that proxy.
pub const UNTRUSTED_FORWARDING_HEADER: &str = "hearth-untrusted-forwarding";

/// The words an edge answers a write with when its disk is full (HTTP 507, code `disk_full`),
/// which control looks for to say so and tell the owner.
pub const EDGE_DISK_FULL: &str = "the edge's disk is full";

/// Which of a node's two credential streams answers its pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredsAnswer {
    /// The full set (`creds/<node>`).
    Full,
    /// The latest delta (`creds-delta/<node>`).
    Delta,
}

/// What answers a node's pull, from what it says it holds (`after`: the version of the set
/// or delta it applied last; `base`: the version of the full set under it, `None` from a node
/// that takes no deltas) and what is stored (the full set's version; the latest delta's
/// version and base). `None`: nothing newer for it.
pub fn creds_answer(
    after: u64,
    base: Option<u64>,
    full: Option<u64>,
    delta: Option<(u64, u64)>,
) -> Option<CredsAnswer> {
    match (full, delta) {
        // The delta on the full set the node holds, newer than both it and what the node has.
        (Some(full), Some((version, on))) if version > full.max(after) && on == full && base == Some(full) => {
            Some(CredsAnswer::Delta)
        }
        (Some(full), _) if full > after => Some(CredsAnswer::Full),
        _ => None,
    }
}

/// Why wire data was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes do not decode, or decode to a non-canonical value.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A user appears twice.
    #[error("user {0} appears twice")]
    DuplicateUser(UserId),
    /// A diff does not fit the set it is applied to.
    #[error("diff does not apply: {0}")]
    DiffMismatch(&'static str),
    /// A credential set in a format this version does not read.
    #[error("credential set format {0} is newer than this node reads (format {CREDS_FORMAT} at most): update the node")]
    NewerFormat(u64),
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

    /// What changes from `self` to `new`, in one pass over both sorted lists.
    pub fn diff(&self, new: &CredentialSet) -> CredDiff {
        let mut diff = CredDiff::default();
        let (mut old, mut new) = (self.users.iter().peekable(), new.users.iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (Some(a), Some(b)) if a.user == b.user => {
                    if a.hash != b.hash {
                        diff.changed.push(**b);
                    } else if a != b {
                        diff.limited.push(**b);
                    }
                    old.next();
                    new.next();
                }
                (Some(a), Some(b)) if a.user < b.user => {
                    diff.removed.push(a.user);
                    old.next();
                }
                (Some(_), Some(b)) | (None, Some(b)) => {
                    diff.added.push(**b);
                    new.next();
                }
                (Some(a), None) => {
                    diff.removed.push(a.user);
                    old.next();
                }
                (None, None) => return diff,
            }
        }
    }

    /// Applies a diff made by [`CredentialSet::diff`]; refuses one that does not fit (a user
    /// removed or changed that the set lacks, one added that it has, lists out of order). One
    /// pass over the set: a node applies a delta to a set of 100,000 users on every change.
    pub fn apply(&self, diff: &CredDiff) -> Result<CredentialSet, WireError> {
        let mut replaced: Vec<&CredEntry> = diff.changed.iter().chain(&diff.limited).collect();
        replaced.sort_unstable_by_key(|entry| entry.user);
        if !strictly_sorted(diff.removed.iter().copied())
            || !strictly_sorted(replaced.iter().map(|entry| entry.user))
            || !strictly_sorted(diff.added.iter().map(|entry| entry.user))
        {
            return Err(WireError::DiffMismatch("users out of order or named twice"));
        }
        let (mut removed, mut replaced) = (diff.removed.iter().peekable(), replaced.into_iter().peekable());
        let mut kept = Vec::with_capacity(self.users.len() + diff.added.len());
        for entry in &self.users {
            if removed.next_if(|user| **user == entry.user).is_some() {
                continue;
            }
            kept.push(*replaced.next_if(|new| new.user == entry.user).unwrap_or(entry));
        }
        if removed.next().is_some() {
            return Err(WireError::DiffMismatch("removes a user not in the set"));
        }
        if replaced.next().is_some() {
            return Err(WireError::DiffMismatch("changes a user not in the set"));
        }
        let mut users = Vec::with_capacity(kept.len() + diff.added.len());
        let mut added = diff.added.iter().peekable();
        for entry in kept {
            while let Some(new) = added.next_if(|new| new.user <= entry.user) {
                if new.user == entry.user {
                    return Err(WireError::DiffMismatch("adds a user already in the set"));
                }
                users.push(*new);
            }
            users.push(entry);
        }
        users.extend(added.copied());
        Ok(CredentialSet {
            node: self.node,
            users,
            edges: self.edges.clone(),
            policy: self.policy,
            routing: self.routing.clone(),
        })
    }

    /// The users whose entries differ between this set with `before` applied (`None`: this
    /// set itself) and this set with `after` applied, sorted: what a node that served the
    /// one and takes the other must change, found from the two diffs alone (a node swaps its
    /// table of 100,000 users by the few a delta names, not by comparing the whole sets).
    pub fn touched(&self, before: Option<&CredDiff>, after: &CredDiff) -> Vec<Touched> {
        let mut users: Vec<UserId> = after.users().chain(before.into_iter().flat_map(CredDiff::users)).collect();
        users.sort_unstable();
        users.dedup();
        let entry = |diff: Option<&CredDiff>, user| match diff.and_then(|diff| diff.entry(user)) {
            Some(named) => named.copied(),
            None => self.entry(user).copied(),
        };
        users
            .into_iter()
            .map(|user| Touched { user, before: entry(before, user), after: entry(Some(after), user) })
            .filter(|touched| touched.before != touched.after)
            .collect()
    }

    /// The set a delta makes of this one (the full set it names as its base): refused when it
    /// is for another node, does not fit, or does not make the very set control built (the
    /// digest of its encoding is not the delta's `result`).
    pub fn patched(&self, delta: &CredDelta) -> Result<CredentialSet, WireError> {
        if delta.node != self.node {
            return Err(WireError::DiffMismatch("for another node"));
        }
        let set = self.apply(&delta.diff)?;
        if crate::sha256(&set.encode()) != delta.result {
            return Err(WireError::DiffMismatch("it does not make the set control signed"));
        }
        Ok(set)
    }
}

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

/// One entry of a batch manifest: a stream's new version and the hash of its item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry {
    /// The stream.
    pub stream: String,
    /// Its new version.
    pub version: u64,
    /// SHA-256 of the item envelope's whole encoding, signatures included (so the edge
    /// stores exactly what control signed without checking every item's signature), or
    /// `None` to delete the stream at this version (a rotated link).
    pub digest: Option<Digest>,
}

/// The body of a batch envelope: one signature covers every item of a push. Entries are
/// sorted by stream, one per stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchManifest {
    entries: Vec<BatchEntry>,
}

impl BatchManifest {
    /// Builds a manifest; refuses a stream listed twice.
    pub fn new(mut entries: Vec<BatchEntry>) -> Result<BatchManifest, WireError> {
        entries.sort_by(|a, b| a.stream.cmp(&b.stream));
        if entries.windows(2).any(|pair| pair[0].stream == pair[1].stream) {
            return Err(WireError::Malformed("batch manifest (a stream listed twice)"));
        }
        Ok(BatchManifest { entries })
    }

    /// The entries, sorted by stream.
    pub fn entries(&self) -> &[BatchEntry] {
        &self.entries
    }

    /// The entry for a stream.
    pub fn get(&self, stream: &str) -> Option<&BatchEntry> {
        self.entries.binary_search_by(|entry| entry.stream.as_str().cmp(stream)).ok().map(|at| &self.entries[at])
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding into a Vec cannot fail")
    }

    /// Decodes strictly: sorted, unique, canonical.
    pub fn decode(bytes: &[u8]) -> Result<BatchManifest, WireError> {
        let manifest: BatchManifest =
            postcard::from_bytes(bytes).map_err(|_| WireError::Malformed("batch manifest"))?;
        if manifest.entries.windows(2).any(|pair| pair[0].stream >= pair[1].stream) {
            return Err(WireError::Malformed("batch manifest (entries out of order)"));
        }
        if manifest.encode() != bytes {
            return Err(WireError::Malformed("batch manifest (not canonical)"));
        }
        Ok(manifest)
    }
}

/// What control sends the edge in one push: key records first (rotations, applied before
/// anything else), then the signed batch manifest, then the item envelopes it lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushBundle {
    /// Encoded [`crate::envelope::Kind::KeyRecord`] envelopes.
    pub key_records: Vec<serde_bytes::ByteBuf>,
    /// The encoded [`crate::envelope::Kind::Batch`] envelope.
    #[serde(with = "serde_bytes")]
    pub manifest: Vec<u8>,
    /// The encoded item envelopes, in any order.
    pub items: Vec<serde_bytes::ByteBuf>,
}

/// One stream as an edge holds it, for a restore of control.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportItem {
    /// The stream (a link's is `sub/<token hash>`).
    pub stream: String,
    /// Its version.
    pub version: u64,
    /// Its envelope; `None` for a deleted stream (kept so versions continue above it).
    #[serde(with = "serde_bytes")]
    pub envelope: Option<Vec<u8>>,
}

/// A page of everything an edge holds (`GET /<api>/export?after=<cursor>`), for
/// `hearth-control restore`: streams first, then links, in a stable order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportPage {
    /// The streams of this page.
    pub items: Vec<ExportItem>,
    /// Pass this as `after` for the next page; `None` after the last.
    pub next: Option<String>,
    /// The key records of the last push, as nodes get them
    /// ([`crate::trust::chain_to_header`]).
    pub keys: Option<String>,
    /// The version of the last batch manifest the edge applied (a restored control numbers
    /// its pushes above it).
    pub batch: u64,
}

impl ExportItem {
    /// What it takes of a page's [`ExportPage::ITEM_BYTES`]: its stream's name and envelope.
    pub fn size(&self) -> usize {
        self.stream.len() + self.envelope.as_ref().map_or(0, Vec::len)
    }
}

const MIB: usize = 1024 * 1024;

impl ExportPage {
    /// The most items one page holds.
    pub const MAX_ITEMS: usize = 500;
    /// The most bytes of items ([`ExportItem::size`]) one page holds: an edge adds no item
    /// that would take a page past it (but the first, so every page makes way). The largest
    /// envelope an edge exports, a credential set ([`crate::envelope::Kind::max_len`]: 8 MiB),
    /// is half of it.
    pub const ITEM_BYTES: usize = 16 * MIB;
    /// The longest page control reads: the items' bytes and 1 MiB for the rest (at most 32
    /// bytes of framing an item, the cursor, which names a stream or a link's hash in hex,
    /// and the key records, which nodes take in the headers of a pull's answer and are far
    /// smaller).
    pub const MAX_LEN: usize = Self::ITEM_BYTES + MIB;
    /// The most pages one export takes: an edge holding the 100k users one control is built
    /// for (a link each, the deleted links kept as tombstones) and its nodes' streams fits in
    /// a few hundred pages, some 1,600 if every snapshot were as large as one can be. A
    /// restore stops an export that goes on past this.
    pub const MAX_PAGES: usize = 10_000;

    /// Whether a page that holds `items` has room for `next` (a page always has room for one).
    pub fn room_for(items: &[ExportItem], next: &ExportItem) -> bool {
        items.is_empty()
            || (items.len() < Self::MAX_ITEMS
                && items.iter().map(ExportItem::size).sum::<usize>() + next.size() <= Self::ITEM_BYTES)
    }
}

/// What the edge hands control when it drains queued usage reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageDrain {
    /// Pass this as `after` next time; everything up to it is then dropped from the queue.
    pub cursor: u64,
    /// Encoded [`crate::envelope::Kind::UsageReport`] envelopes, oldest first.
    pub reports: Vec<serde_bytes::ByteBuf>,
}

impl UsageDrain {
    /// The most reports one drain hands out.
    pub const MAX_REPORTS: usize = 500;
    /// The most bytes of reports one drain hands out: an edge adds no report that would take
    /// it past this (but the first). A report is at most 4 MiB
    /// ([`crate::envelope::Kind::max_len`]), so each fits.
    pub const REPORT_BYTES: usize = 8 * MIB;
    /// The longest drain control reads: the reports and their framing (at most 10 bytes a
    /// report, and the cursor).
    pub const MAX_LEN: usize = Self::REPORT_BYTES + 16 * 1024;

    /// Whether this drain has room for a report of `len` bytes (it always has for one).
    pub fn room_for(&self, len: usize) -> bool {
        self.reports.is_empty()
            || (self.reports.len() < Self::MAX_REPORTS
                && self.reports.iter().map(|r| r.len()).sum::<usize>() + len <= Self::REPORT_BYTES)
    }
}

/// Encodes any wire value with postcard.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("encoding into a Vec cannot fail")
}

/// Decodes a wire value strictly (no trailing bytes, canonical form).
pub fn decode<T: Serialize + serde::de::DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, WireError> {
    let value: T = postcard::from_bytes(bytes).map_err(|_| WireError::Malformed(what))?;
    if encode(&value) != bytes {
        return Err(WireError::Malformed(what));
    }
    Ok(value)
}

/// Decodes a wire value whose bytes are already proven genuine (opened with an AEAD key, or
/// covered by a signature checked when they arrived), without the canonical-form check of
/// [`decode`]: it is on the hot path of serving a link, where re-encoding to compare took a
/// tenth of the work.
pub fn decode_authenticated<'de, T: Deserialize<'de>>(bytes: &'de [u8], what: &'static str) -> Result<T, WireError> {
    postcard::from_bytes(bytes).map_err(|_| WireError::Malformed(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: UserId, fill: u8) -> CredEntry {
        CredEntry::new(user, [fill; 32])
    }

    #[test]
    fn diff_finds_added_removed_changed() {
        let a = CredentialSet::new(1, vec![entry(1, 1), entry(2, 2), entry(3, 3)]).unwrap();
        let b = CredentialSet::new(1, vec![entry(4, 4), entry(2, 9), entry(3, 3)]).unwrap();
        let diff = a.diff(&b);
        assert_eq!(diff.added, vec![entry(4, 4)]);
        assert_eq!(diff.removed, vec![1]);
        assert_eq!(diff.changed, vec![entry(2, 9)]);
        assert_eq!(a.apply(&diff).unwrap(), b);
        assert!(a.diff(&a).is_empty());
        assert!(b.apply(&diff).is_err());
    }

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

    fn limited(user: UserId, fill: u8, up: u64, down: u64) -> CredEntry {
        CredEntry { limit: SpeedLimit { up, down }, ..entry(user, fill) }
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
    fn pages_filled_to_their_budget_stay_under_what_control_reads() {
        use crate::envelope::Kind;
        // Envelopes as large as an edge exports, and as many small ones as a page takes; key
        // records as long as a pull's headers can carry.
        let keys = Some("k".repeat(408 * 1024));
        for size in [Kind::CredentialSet.max_len(), Kind::Snapshot.max_len(), 200] {
            let mut page = ExportPage { keys: keys.clone(), batch: u64::MAX, ..ExportPage::default() };
            loop {
                let stream = format!("creds/{}", u64::MAX - page.items.len() as u64);
                let item = ExportItem { stream, version: u64::MAX, envelope: Some(vec![7; size]) };
                if !ExportPage::room_for(&page.items, &item) {
                    break;
                }
                page.items.push(item);
            }
            let fit = if size == 200 { ExportPage::MAX_ITEMS } else { ExportPage::ITEM_BYTES / (size + 64) };
            assert_eq!(page.items.len(), fit, "{size}-byte items a page");
            page.next = page.items.last().map(|last| format!("s.{}", hex::encode(&last.stream)));
            let len = encode(&page).len();
            assert!(len <= ExportPage::MAX_LEN, "a page of {size}-byte items is {len} bytes");
        }
        for size in [Kind::UsageReport.max_len(), 100] {
            let mut drain = UsageDrain { cursor: u64::MAX, reports: Vec::new() };
            while drain.room_for(size) {
                drain.reports.push(vec![7; size].into());
            }
            assert!(drain.reports.len() >= 2, "{size}-byte reports: {} a drain", drain.reports.len());
            let len = encode(&drain).len();
            assert!(len <= UsageDrain::MAX_LEN, "a drain of {size}-byte reports is {len} bytes");
        }
    }

    #[test]
    fn batch_manifests_are_canonical() {
        let e = |s: &str| BatchEntry { stream: s.into(), version: 1, digest: Some([1; 32]) };
        let manifest = BatchManifest::new(vec![e("b"), e("a")]).unwrap();
        assert_eq!(manifest.entries()[0].stream, "a");
        assert_eq!(manifest.get("b").unwrap().stream, "b");
        assert!(manifest.get("c").is_none());
        assert_eq!(BatchManifest::decode(&manifest.encode()).unwrap(), manifest);
        assert!(BatchManifest::new(vec![e("a"), e("a")]).is_err());
        let unsorted = BatchManifest { entries: vec![e("b"), e("a")] };
        assert!(BatchManifest::decode(&unsorted.encode()).is_err());
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

    #[test]
    fn a_delta_is_refused_when_it_does_not_fit_or_is_not_canonical() {
        let a = CredentialSet::new(5, vec![entry(1, 1), entry(2, 2), entry(3, 3)]).unwrap();
        let b = CredentialSet::new(5, vec![entry(1, 1), entry(3, 9), entry(4, 4)]).unwrap();
        let digest = |set: &CredentialSet| crate::sha256(&set.encode());
        let delta = CredDelta::between(&a, 7, digest(&a), &b, digest(&b)).unwrap();
        assert!(delta.is_on(7, &digest(&a)));
        assert!(!delta.is_on(6, &digest(&a)) && !delta.is_on(7, &digest(&b)));
        assert_eq!(delta.diff.removed, [2]);
        assert_eq!(delta.diff.changed, [entry(3, 9)]);
        assert_eq!(delta.diff.added, [entry(4, 4)]);
        // Another node's set, or other edges or policy: a full set says it, not a delta.
        let elsewhere = CredentialSet::new(6, b.users().to_vec()).unwrap();
        assert_eq!(CredDelta::between(&a, 7, digest(&a), &elsewhere, digest(&elsewhere)), None);
        let strict = b.clone().with_policy(DevicePolicy::DropOldest);
        assert_eq!(CredDelta::between(&a, 7, digest(&a), &strict, digest(&strict)), None);
        assert_eq!(
            a.patched(&CredDelta { node: 6, ..delta.clone() }),
            Err(WireError::DiffMismatch("for another node"))
        );
        // On a set it was not made for: a user it removes or changes is missing.
        let smaller = CredentialSet::new(5, vec![entry(1, 1), entry(3, 3)]).unwrap();
        assert_eq!(smaller.patched(&delta), Err(WireError::DiffMismatch("removes a user not in the set")));
        // Lists out of order, or a user named twice, do not decode.
        let mut bytes = delta.encode();
        let mut twice = delta.clone();
        twice.diff.removed = vec![2, 2];
        assert!(CredDelta::decode(&twice.encode()).is_err());
        assert!(a.apply(&twice.diff).is_err());
        // Trailing bytes, or a newer format.
        bytes.push(0);
        assert_eq!(CredDelta::decode(&bytes), Err(WireError::Malformed("credential delta")));
        let mut newer = delta.encode();
        newer[0] = 3;
        assert_eq!(CredDelta::decode(&newer), Err(WireError::NewerFormat(3)));
        assert_eq!(CredDelta::base_of(&newer), None);
        // Format 2 for a delta that names no rule set: not canonical.
        let mut padded = delta.encode_as::<EntryV5>(2);
        assert!(CredDelta::decode(&padded).is_err());
        padded.truncate(1);
        assert!(CredDelta::decode(&padded).is_err());
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

    #[test]
    fn a_pull_is_answered_with_the_delta_only_on_the_full_set_the_node_holds() {
        use CredsAnswer::{Delta, Full};
        // (after, base, full, delta): what the node holds, what is stored.
        let cases = [
            // Nothing stored, or nothing newer.
            (0, None, None, None, None),
            (5, Some(5), Some(5), None, None),
            (9, Some(5), Some(5), Some((9, 5)), None),
            // A node with nothing, or on an older full set: the full set first.
            (0, None, Some(5), Some((9, 5)), Some(Full)),
            (3, Some(3), Some(5), Some((9, 5)), Some(Full)),
            // A node that takes no deltas gets the full set, even when a delta is newer.
            (5, None, Some(5), Some((9, 5)), None),
            // On the full set: the delta, whichever delta it applied before.
            (5, Some(5), Some(5), Some((9, 5)), Some(Delta)),
            (7, Some(5), Some(5), Some((9, 5)), Some(Delta)),
            // A delta on an older full set is never sent, nor one older than the full set.
            (5, Some(5), Some(5), Some((9, 3)), None),
            (3, Some(3), Some(10), Some((9, 3)), Some(Full)),
        ];
        for (after, base, full, delta, want) in cases {
            assert_eq!(creds_answer(after, base, full, delta), want, "{after} {base:?} {full:?} {delta:?}");
        }
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

    fn set_strategy() -> impl proptest::strategy::Strategy<Value = CredentialSet> {
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

    proptest::proptest! {
        /// Applying `a.diff(b)` to `a` gives `b`, and the diff lists each user once.
        #[test]
        fn diff_then_apply_gives_the_new_set(a in set_strategy(), b in set_strategy()) {
            let diff = a.diff(&b);
            proptest::prop_assert_eq!(a.apply(&diff).unwrap(), b.clone());
            proptest::prop_assert_eq!(CredentialSet::decode(&b.encode()).unwrap(), b.clone());
            let touched = diff.added.len() + diff.removed.len() + diff.changed.len() + diff.limited.len();
            let mut users: Vec<UserId> =
                diff.added.iter().chain(&diff.changed).chain(&diff.limited).map(|e| e.user).collect();
            users.extend(&diff.removed);
            users.sort_unstable();
            users.dedup();
            proptest::prop_assert_eq!(users.len(), touched);
            proptest::prop_assert_eq!(a.diff(&b).is_empty(), a == b);
        }

        /// A delta from `a` to `b` survives its encoding, makes `b` of `a` and nothing of `b`
        /// (unless they are the same set), and its first bytes name its node and base.
        #[test]
        fn a_delta_makes_the_set_it_names(a in set_strategy(), b in set_strategy(), base in 1u64..1 << 40) {
            let (a_digest, b_digest) = (crate::sha256(&a.encode()), crate::sha256(&b.encode()));
            let delta = CredDelta::between(&a, base, a_digest, &b, b_digest).unwrap();
            let bytes = delta.encode();
            proptest::prop_assert_eq!(CredDelta::decode(&bytes).unwrap(), delta.clone());
            proptest::prop_assert_eq!(CredDelta::base_of(&bytes), Some((5, base)));
            proptest::prop_assert_eq!(a.patched(&delta).unwrap(), b.clone());
            proptest::prop_assert_eq!(b.patched(&delta).is_ok(), delta.diff.is_empty());
            // Any change to what it makes is refused.
            let mut other = delta.clone();
            other.result[0] ^= 1;
            proptest::prop_assert!(a.patched(&other).is_err());
        }

        /// The users two diffs on one set touch are those whose entries differ between the
        /// sets they make, with those entries.
        #[test]
        fn touched_names_what_differs_between_two_deltas(
            base in set_strategy(), a in set_strategy(), b in set_strategy(), from_base in proptest::prelude::any::<bool>()
        ) {
            let (to_a, to_b) = (base.diff(&a), base.diff(&b));
            let before = if from_base { &base } else { &a };
            let find = |set: &CredentialSet, user| set.users().iter().find(|entry| entry.user == user).copied();
            let mut users: Vec<UserId> = before.users().iter().chain(b.users()).map(|entry| entry.user).collect();
            users.sort_unstable();
            users.dedup();
            let want: Vec<Touched> = users
                .into_iter()
                .map(|user| Touched { user, before: find(before, user), after: find(&b, user) })
                .filter(|touched| touched.before != touched.after)
                .collect();
            proptest::prop_assert_eq!(base.touched((!from_base).then_some(&to_a), &to_b), want);
        }

        /// A diff restated user by user to another set is the diff to that set.
        #[test]
        fn a_diff_restated_by_user_is_the_diff_to_the_new_set(
            base in set_strategy(), a in set_strategy(), b in set_strategy()
        ) {
            let mut diff = base.diff(&a);
            let find = |set: &CredentialSet, user| set.users().iter().find(|entry| entry.user == user).copied();
            let mut users: Vec<UserId> = base.users().iter().chain(a.users()).chain(b.users()).map(|e| e.user).collect();
            users.sort_unstable();
            users.dedup();
            // In an order of its own, so that insertion keeps the lists sorted whatever comes first.
            users.reverse();
            for user in users {
                diff.restate(user, find(&base, user).as_ref(), find(&b, user));
            }
            proptest::prop_assert_eq!(&diff, &base.diff(&b));
            proptest::prop_assert_eq!(base.apply(&diff).unwrap(), b.clone());
        }

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

        /// The strict decoders never panic and accept only canonical input.
        #[test]
        fn decoders_take_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(set) = CredentialSet::decode(&bytes) {
                proptest::prop_assert_eq!(set.encode(), bytes.clone());
            }
            if let Ok(manifest) = BatchManifest::decode(&bytes) {
                proptest::prop_assert_eq!(manifest.encode(), bytes.clone());
            }
            if let Ok(report) = UsageReport::decode(&bytes) {
                proptest::prop_assert_eq!(report.encode(), bytes.clone());
            }
            if let Ok(delta) = CredDelta::decode(&bytes) {
                proptest::prop_assert_eq!(delta.encode(), bytes.clone());
            }
            let _ = decode::<Snapshot>(&bytes, "snapshot");
            let _ = crate::seal::open(&bytes, &SubToken::from_bytes([1; 32]));
        }
    }

    /// Every stream's name parses back to it; a name that is not the canonical one of a
    /// stream does not parse; the string constants are the streams' names.
    #[test]
    fn stream_names_parse_back_and_only_canonically() {
        use crate::keys::Role;
        let all = [
            Stream::Snapshot([0xab; 32]),
            Stream::Creds(0),
            Stream::Creds(17),
            Stream::CredsDelta(17),
            Stream::Node(u64::MAX),
            Stream::Usage(3),
            Stream::UsageAck(4),
            Stream::Keys(Role::Signing),
            Stream::Batch,
            Stream::Archive,
            Stream::Release,
            Stream::EdgeSettings,
            Stream::Rollout,
        ];
        for stream in all {
            assert_eq!(stream.to_string().parse::<Stream>(), Ok(stream), "{stream}");
        }
        let constants = [stream::BATCH, stream::ARCHIVE, stream::RELEASE, stream::EDGE_SETTINGS, stream::ROLLOUT];
        for (name, parsed) in constants.iter().zip([
            Stream::Batch,
            Stream::Archive,
            Stream::Release,
            Stream::EdgeSettings,
            Stream::Rollout,
        ]) {
            assert_eq!(name.parse::<Stream>(), Ok(parsed));
        }
        let upper = format!("sub/{}", "AB".repeat(32));
        for bad in [
            "creds/01",
            "creds/",
            "creds/+1",
            "creds/1/2",
            "creds-delta/01",
            "ack/x",
            "sub/ab",
            upper.as_str(),
            "keys/god",
            "Batch",
            "stuff/1",
            "",
        ] {
            assert!(bad.parse::<Stream>().is_err(), "{bad:?}");
        }
        assert_eq!(
            Stream::Creds(5).pushed(),
            Some((crate::envelope::Kind::CredentialSet, crate::envelope::Audience::Node(5)))
        );
        assert_eq!(
            Stream::CredsDelta(5).pushed(),
            Some((crate::envelope::Kind::CredDelta, crate::envelope::Audience::Node(5)))
        );
        assert_eq!(Stream::Usage(5).pushed(), None, "reports go the other way");
    }

    #[test]
    fn usage_streams_parse_canonically() {
        assert_eq!(stream::parse_usage(&stream::usage(42)), Some(42));
        assert_eq!(stream::parse_usage("usage/0"), Some(0));
        assert_eq!(stream::parse_usage("usage/042"), None);
        assert_eq!(stream::parse_usage("usage/+4"), None);
        assert_eq!(stream::parse_usage("creds/4"), None);
    }

    /// Endpoints' identities travel after the device policy and the alias: every edge reads
    /// what it knows of (one from before identities, one from before the policy), a snapshot
    /// without identities encodes as before, and a count that does not match is refused.
    #[test]
    fn snapshots_carry_identities_edges_before_them_skip() {
        let with = crate::render::tests::sample_snapshot();
        assert!(with.endpoints[0].identity.certificate.is_some());
        let bytes = with.encode();
        assert_eq!(Snapshot::decode_authenticated(&bytes).unwrap(), with);
        // An edge from before identities reads the policy and the alias; one from before them
        // reads the rest; neither sees the certificate.
        let (before, rest) = postcard::take_from_bytes::<Snapshot>(&bytes).unwrap();
        let _: SnapshotExtra<'_> = decode_authenticated(rest, "extra").unwrap();
        assert_eq!(before.endpoints[0].identity, Identity::default());
        assert_eq!(before.endpoints[0].cert_sha256, with.endpoints[0].cert_sha256);
        let mut without = with.clone();
        for endpoint in &mut without.endpoints {
            endpoint.identity = Identity::default();
        }
        assert_eq!(without.encode(), encode(&without), "no identity: the encoding of before");
        // With a policy and no identity, nothing follows the policy.
        let mut policy = without.clone();
        policy.alias = Some("/sub/old".into());
        assert_eq!(Snapshot::decode_authenticated(&policy.encode()).unwrap(), policy);
        // One identity too few is refused.
        let mut short = encode(&without);
        short.extend(encode(&SnapshotExtra { hwid: std::borrow::Cow::Owned(Default::default()), alias: None }));
        short.extend(encode(&vec![Identity::default(); with.endpoints.len() - 1]));
        assert_eq!(Snapshot::decode_authenticated(&short), Err(WireError::Malformed("snapshot (identities)")));
    }

    /// The Telegram link rides last: an edge from before it reads every other part (and the
    /// identities, which it forces, as they were); with and without identities, it round-trips.
    #[test]
    fn snapshots_carry_the_telegram_link_last() {
        let link = TelegramLink { bot: "hearth_test_bot".into(), code: "42-0123abcd".into() };
        assert!(link.is_valid());
        assert_eq!(link.url("fa"), "https://t.me/hearth_test_bot?start=42-0123abcd-fa");
        for alias in [None, Some("/sub/old".to_owned())] {
            let mut snapshot = crate::render::tests::sample_snapshot();
            snapshot.alias = alias;
            snapshot.telegram = Some(link.clone());
            let bytes = snapshot.encode();
            assert_eq!(Snapshot::decode_authenticated(&bytes).unwrap(), snapshot);
            // What an edge from before the link reads: everything but the link.
            let (mut before, rest) = postcard::take_from_bytes::<Snapshot>(&bytes).unwrap();
            let (extra, rest) = postcard::take_from_bytes::<SnapshotExtra<'_>>(rest).unwrap();
            let identities: Vec<Identity> = decode_authenticated(rest, "identities").unwrap();
            before.hwid = extra.hwid.into_owned();
            before.alias = extra.alias.map(std::borrow::Cow::into_owned);
            for (endpoint, identity) in before.endpoints.iter_mut().zip(identities) {
                endpoint.identity = identity;
            }
            assert_eq!(before, Snapshot { telegram: None, ..snapshot.clone() });
        }
        let mut bare = crate::render::tests::sample_snapshot();
        for endpoint in &mut bare.endpoints {
            endpoint.identity = Identity::default();
        }
        bare.telegram = Some(link);
        assert_eq!(Snapshot::decode_authenticated(&bare.encode()).unwrap(), bare, "no identities, a link");
        for bad in [
            TelegramLink { bot: "abc".into(), code: "1-a".into() },
            TelegramLink { bot: "hearth bot".into(), code: "1-a".into() },
            TelegramLink { bot: "hearth_bot".into(), code: "1-A".into() },
            TelegramLink { bot: "hearth_bot".into(), code: "x".repeat(57) },
            TelegramLink { bot: "hearth_bot".into(), code: "1\"a".into() },
        ] {
            assert!(!bad.is_valid(), "{bad:?}");
        }
    }
}
