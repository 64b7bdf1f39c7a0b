//! What a subscription link serves: everything about one user ([`Snapshot`]: status, traffic,
//! the servers to connect to and how apps present them), sealed by control for the edge, and
//! the parts added after the first edges, which those edges skip.

use serde::{Deserialize, Serialize};

use super::codec::{UserId, WireError, decode_authenticated, encode};
use super::hwid::HwidPolicy;
use crate::Digest;

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
    /// [`SubToken::for_alias`](crate::wire::SubToken::for_alias)), `None` for the user's own
    /// link: a restore tells them apart by it. Encoded after the rest, as `hwid` is.
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

#[cfg(test)]
mod tests {
    use super::*;

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
