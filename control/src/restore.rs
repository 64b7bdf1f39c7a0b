//! `hearth-control restore`: a new control box rebuilt from what the edge holds.
//!
//! The edge keeps everything control signed (per-user snapshots, credential sets, node
//! records, acknowledgements, the owner's edge settings), the key records, and the encrypted
//! state archive. A restore reads all of it with the push token from `edge.toml`, checks every
//! envelope against the root key the owner kept, and then either
//!
//! - **from the archive** (the default): opens it with the recovery key and writes the data
//!   directory and database it holds, then brings them up to date with the edge (users
//!   created, changed or deleted since the archive, usage, node keys); or
//! - **from snapshots** (`--from-snapshots`, when there is no archive or no way to open it):
//!   rebuilds users (their links, credentials, limits and usage), nodes and their groups from
//!   the snapshots and credential sets, certifies new online keys with the root key, and says
//!   what it could not recover.
//!
//! Either way the edge's envelopes seed the stream versions, and everything is signed again
//! above them: nodes and the edge refuse nothing as a rollback, nodes keep their enrollment,
//! and every subscription link works unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::keys::{PublicKey, RecoverySecret, Role};
use hearth_shared::trust::{Expect, KeyRecord, RoleKeys, Trust, verify};
use hearth_shared::wire::{
    self, CredentialSet, EdgeSettings, Endpoint, ExportItem, ExportPage, NodeId, NodeRecord, Profile, Snapshot, Status,
    Stream, SubToken, UsageAck, UserId, stream,
};
use hearth_shared::{Digest, sha256};
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::app::now;
use crate::config::EdgeSettings as EdgeToml;
use crate::error::Error;
use crate::keyring::{self, Paths};
use crate::publish::{self, Signer};
use crate::secrets::Purpose;
use crate::store::{self, Db};

/// What the owner hands a restore.
pub(crate) struct Options {
    /// The edge's base URL.
    pub(crate) edge_url: String,
    /// The `edge.toml` the owner kept (root key, push token, API prefix).
    pub(crate) edge_settings: PathBuf,
    /// The owner's recovery key.
    pub(crate) recovery_key: PathBuf,
    /// The root key, to certify new online keys (needed from snapshots, or when the archive
    /// predates a rotation).
    pub(crate) root_key: Option<PathBuf>,
    /// Rebuild from the snapshots instead of the archive.
    pub(crate) from_snapshots: bool,
}

/// What a restore did, for the owner to read.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) archive: Option<(u64, u64)>,
    pub(crate) users: usize,
    pub(crate) nodes: usize,
    pub(crate) signed: usize,
    pub(crate) notes: Vec<String>,
}

/// What the edge holds.
struct Fetched {
    items: Vec<ExportItem>,
    batch: u64,
    chain: Vec<Vec<u8>>,
    archive: Option<Vec<u8>>,
}

fn fetch(edge_url: &str, edge: &EdgeToml) -> Result<Fetched> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .user_agent(concat!("hearth-control/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(15))
            .timeout(std::time::Duration::from_secs(300))
            .build()?;
        let base = format!("{}/{}", edge_url.trim_end_matches('/'), edge.api_prefix);
        // The body of an answer (`what`, at most `max` bytes), or the status of a refusal and
        // what it said.
        let get = |url: String, max: usize, what: &'static str| {
            let request = client.get(url).bearer_auth(&edge.push_token);
            async move {
                let response = request
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("the edge did not answer: {}", hearth_io::capped::without_url(&e)))?;
                let status = response.status();
                if !status.is_success() {
                    return Ok(Err((status, hearth_io::capped::message(response).await)));
                }
                let body = hearth_io::capped::read(response, max, what)
                    .await
                    .with_context(|| format!("reading {what} from the edge"))?;
                Ok::<_, anyhow::Error>(Ok(body))
            }
        };
        let mut fetched = Fetched { items: Vec::new(), batch: 0, chain: Vec::new(), archive: None };
        // The export ends: within as many pages as an edge can hold, each at a cursor not
        // given before (kept by their digests).
        let mut after = String::new();
        let mut given = BTreeSet::from([sha256(after.as_bytes())]);
        for pages in 1.. {
            if pages > ExportPage::MAX_PAGES {
                bail!(
                    "the edge's export goes on past {} pages, more than an edge can hold: stopped",
                    ExportPage::MAX_PAGES
                );
            }
            let body =
                match get(format!("{base}/export?after={after}"), ExportPage::MAX_LEN, "a page of the export").await? {
                    Ok(body) => body,
                    Err((reqwest::StatusCode::UNAUTHORIZED, _)) => {
                        bail!("the edge refused the push token in the edge settings")
                    }
                    Err((status, said)) => bail!("the edge answered {status} to an export: {said}"),
                };
            let page: ExportPage = wire::decode(&body, "export page").context("the edge's export is malformed")?;
            if let Some(keys) = &page.keys {
                fetched.chain = hearth_shared::trust::chain_from_header(keys)
                    .context("the key records the edge holds are malformed")?;
            }
            fetched.batch = fetched.batch.max(page.batch);
            fetched.items.extend(page.items);
            match page.next {
                None => break,
                Some(next) if !given.insert(sha256(next.as_bytes())) => bail!(
                    "the edge's export does not advance: page {pages} gives a cursor an earlier page gave: stopped"
                ),
                Some(next) => after = next,
            }
        }
        match get(format!("{base}/archive"), Kind::Archive.max_len(), "the archive").await? {
            Ok(body) => fetched.archive = Some(body),
            Err((reqwest::StatusCode::NOT_FOUND, _)) => {}
            Err((status, _)) => bail!("the edge answered {status} for the archive"),
        }
        Ok(fetched)
    })
}

/// Checks an envelope the edge keeps as control signed it (its expiry aside: a restore reads
/// what was last published, however long ago).
fn verified(bytes: &[u8], trust: &Trust, kind: Kind, audience: Audience, name: &str) -> Option<Envelope> {
    let envelope = Envelope::decode(bytes, kind.max_len()).ok()?;
    let at = envelope.header.issued.min(envelope.header.expires);
    let expect = Expect { kind, audience, stream: name };
    verify(bytes, trust, &expect, None, at).ok().map(|v| v.envelope)
}

/// A stream's version and envelope digest in the archive's database (no digest once deleted).
type Archived = BTreeMap<String, (u64, Option<Digest>)>;

/// What each stream was at when the archive in `database` was made (taken out of it here:
/// the restored database keeps no such table). An archive from before Hearth kept them has
/// none: `None`.
fn archived_streams(database: &Path) -> Result<Option<Archived>> {
    let conn = Connection::open(database).with_context(|| format!("opening {}", database.display()))?;
    let kept: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'archived_streams')",
        [],
        |row| row.get(0),
    )?;
    if !kept {
        return Ok(None);
    }
    let archived = conn
        .prepare("SELECT name, version, digest FROM archived_streams")?
        .query_map([], |row| Ok((row.get::<_, String>(0)?, (row.get(1)?, row.get(2)?))))?
        .collect::<Result<_, _>>()?;
    conn.execute_batch("DROP TABLE archived_streams")?;
    Ok(Some(archived))
}

/// The signed kind and audience of a stream control publishes to the edge, by its name (a
/// node id only in its canonical form, as control writes it).
fn stream_kind(name: &str) -> Option<(Kind, Audience)> {
    name.parse::<Stream>().ok()?.pushed()
}

/// Why an item of the export was left out.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Dropped {
    /// Not a stream control publishes (or not in its canonical name).
    Unknown,
    /// Not signed by control's keys as the root key certified them, for this stream, kind
    /// and audience (or a snapshot the recovery key does not open, or whose link it is not).
    Unverified,
    /// Listed at another version than the one its envelope was signed at.
    Version,
    /// Older than what the archive holds for its stream.
    Older,
    /// The version the archive holds, with other content.
    Conflict,
}

impl Dropped {
    fn describe(self) -> &'static str {
        match self {
            Dropped::Unknown => "are not streams control publishes",
            Dropped::Unverified => "do not verify against the root key for their stream",
            Dropped::Version => "are listed at another version than they were signed at",
            Dropped::Older => "are older than the archive's",
            Dropped::Conflict => "differ from the archive's at the same version",
        }
    }
}

/// What of the edge's export a restore keeps: envelopes that verify against the root chain
/// for their stream, kind and audience, listed at the version they were signed at, and not
/// behind or against the archive; deletions of streams control publishes, above the archive.
/// Everything else is left out and reported.
struct Screened {
    /// Kept envelopes, as the edge holds them (verified, so read without copying their body).
    kept: Vec<Kept>,
    /// Kept deletions: the stream and the version it was deleted at.
    deleted: Vec<(String, u64)>,
    /// What was left out, and why.
    dropped: BTreeMap<Dropped, Vec<String>>,
}

/// An envelope a restore keeps.
struct Kept {
    stream: String,
    version: u64,
    digest: Digest,
    bytes: Vec<u8>,
}

/// Versions above this are no version control signed: a stream at it could never move on.
const MAX_VERSION: u64 = i64::MAX as u64 >> 1;

fn screen(items: Vec<ExportItem>, trust: &Trust, archived: &Archived) -> Screened {
    let mut screened = Screened { kept: Vec::new(), deleted: Vec::new(), dropped: BTreeMap::new() };
    for item in items {
        let name = item.stream;
        if name == stream::RELEASE {
            // Signed by the release key and kept in the archive's releases: nothing to seed.
            continue;
        }
        let Some((kind, audience)) = stream_kind(&name) else {
            screened.dropped.entry(Dropped::Unknown).or_default().push(name);
            continue;
        };
        let archive = archived.get(&name);
        let Some(bytes) = item.envelope else {
            // A deletion is not signed: taken only above the archive's version, for a stream
            // whose next version control could still sign.
            match archive {
                _ if item.version > MAX_VERSION => screened.dropped.entry(Dropped::Version).or_default().push(name),
                Some((version, _)) if item.version <= *version => {
                    screened.dropped.entry(Dropped::Older).or_default().push(name);
                }
                _ => screened.deleted.push((name, item.version)),
            }
            continue;
        };
        let Some(envelope) = verified(&bytes, trust, kind, audience, &name) else {
            screened.dropped.entry(Dropped::Unverified).or_default().push(name);
            continue;
        };
        let version = envelope.header.version;
        let why = match archive {
            _ if version != item.version || version > MAX_VERSION => Some(Dropped::Version),
            Some((at, _)) if version < *at => Some(Dropped::Older),
            Some((at, digest)) if version == *at && *digest != Some(envelope.digest().0) => Some(Dropped::Conflict),
            _ => None,
        };
        match why {
            Some(why) => screened.dropped.entry(why).or_default().push(name),
            None => screened.kept.push(Kept { stream: name, version, digest: envelope.digest().0, bytes }),
        }
    }
    screened
}

/// What the edge's envelopes say, checked.
#[derive(Default)]
struct Edge {
    snapshots: BTreeMap<UserId, (SubToken, Snapshot)>,
    /// Aliases (old subscription paths) the snapshots were sealed for, by user.
    aliases: BTreeMap<UserId, BTreeSet<String>>,
    /// Token hashes of links that were deleted.
    deleted_links: BTreeSet<Digest>,
    creds: BTreeMap<NodeId, Vec<(UserId, Digest)>>,
    node_keys: BTreeMap<NodeId, Option<PublicKey>>,
    acks: BTreeMap<NodeId, u64>,
    settings: Option<EdgeSettings>,
}

/// Reads what the kept envelopes say. A snapshot the recovery key does not open, or that is
/// not its stream's link, is left out too (it is dropped from `screened`).
fn read_edge(screened: &mut Screened, recovery: &RecoverySecret) -> Edge {
    let mut edge = Edge::default();
    for (name, _) in &screened.deleted {
        if let Ok(Stream::Snapshot(hash)) = name.parse() {
            edge.deleted_links.insert(hash);
        }
    }
    let mut unopened = BTreeSet::new();
    // Each node's full set, and the delta on it when there is a newer one.
    let mut full_sets = BTreeMap::new();
    let mut deltas = BTreeMap::new();
    for kept in &screened.kept {
        let name = kept.stream.as_str();
        let body = Envelope::stored_body(&kept.bytes).unwrap_or_default();
        let ok = match name.parse::<Stream>() {
            Ok(Stream::Snapshot(hash)) => hearth_shared::seal::recover(body, recovery)
                .ok()
                .filter(|(token, _)| token.hash() == hash)
                .map(|(token, snapshot)| match &snapshot.alias {
                    // An alias's snapshot (sealed under its path's token) is not the user's link.
                    Some(path) if SubToken::for_alias(path).is_some_and(|alias| alias == token) => {
                        edge.aliases.entry(snapshot.user).or_default().insert(path.clone());
                    }
                    Some(_) => {}
                    // Two links for one user: the newer one (a rotation the edge saw last).
                    None => {
                        edge.snapshots.insert(snapshot.user, (token, snapshot));
                    }
                }),
            Ok(Stream::Creds(node)) => CredentialSet::decode(body).ok().filter(|set| set.node == node).map(|set| {
                full_sets.insert(node, (kept.version, sha256(body), set));
            }),
            Ok(Stream::CredsDelta(node)) => {
                wire::CredDelta::decode(body).ok().filter(|delta| delta.node == node).map(|delta| {
                    deltas.insert(node, (kept.version, delta));
                })
            }
            Ok(Stream::Node(node)) => wire::decode::<NodeRecord>(body, "node record")
                .ok()
                .filter(|record| record.node == node)
                .map(|record| {
                    edge.node_keys.insert(node, record.key);
                }),
            Ok(Stream::UsageAck(node)) => {
                wire::decode::<UsageAck>(body, "ack").ok().filter(|ack| ack.node == node).map(|ack| {
                    edge.acks.insert(node, ack.seq);
                })
            }
            Ok(Stream::EdgeSettings) => EdgeSettings::decode(body).ok().map(|settings| edge.settings = Some(settings)),
            _ => Some(()),
        };
        if ok.is_none() {
            unopened.insert(name.to_owned());
        }
    }
    for (node, set) in with_deltas(full_sets, deltas) {
        edge.creds.insert(node, set.users().iter().map(|entry| (entry.user, entry.hash)).collect());
    }
    screened.kept.retain(|kept| !unopened.contains(&kept.stream));
    screened.dropped.entry(Dropped::Unverified).or_default().extend(unopened);
    // A link rotated twice keeps only the user's live link: a snapshot whose link was deleted
    // is not the user's any more.
    edge.snapshots.retain(|_, (token, _)| !edge.deleted_links.contains(&token.hash()));
    edge
}

/// Each node's set as the edge held it: its full set (version, body hash, set), with its
/// delta (version, delta) applied when the delta is newer and on that very set; a delta that
/// does not apply leaves the full set.
fn with_deltas(
    full_sets: BTreeMap<NodeId, (u64, Digest, CredentialSet)>,
    mut deltas: BTreeMap<NodeId, (u64, wire::CredDelta)>,
) -> BTreeMap<NodeId, CredentialSet> {
    full_sets
        .into_iter()
        .map(|(node, (version, digest, set))| match deltas.remove(&node) {
            Some((at, delta)) if at > version && delta.is_on(version, &digest) => {
                (node, set.patched(&delta).unwrap_or(set))
            }
            _ => (node, set),
        })
        .collect()
}

/// The owner's notes on what a restore left out of the edge's export.
fn dropped_notes(dropped: &BTreeMap<Dropped, Vec<String>>) -> Vec<String> {
    const NAMED: usize = 5;
    dropped
        .iter()
        .filter(|(_, streams)| !streams.is_empty())
        .map(|(why, streams)| {
            let mut named = streams.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
            if streams.len() > NAMED {
                named.push_str(&format!(" and {} more", streams.len() - NAMED));
            }
            format!("{} items of the edge's export {} and were left out: {named}", streams.len(), why.describe())
        })
        .collect()
}

/// Writes the key records the edge holds, as the trust took them (never as the edge sent
/// them), into the data directory, by role (the root rotations in order, the latest signing
/// and release records).
fn write_chain(dir: &Path, trust: &Trust) -> Result<()> {
    let paths = Paths::new(dir);
    let mut roots = String::new();
    for record in trust.chain() {
        let envelope = Envelope::decode(record, Kind::KeyRecord.max_len()).context("a malformed key record")?;
        let body: KeyRecord = wire::decode(&envelope.body, "key record").context("a malformed key record")?;
        match body.role {
            Role::Root => {
                roots.push_str(&hex::encode(record));
                roots.push('\n');
            }
            role => keyring::replace(&paths.record(role), record)?,
        }
    }
    if !roots.is_empty() {
        keyring::replace(&paths.root_chain(), roots.as_bytes())?;
    }
    Ok(())
}

/// Rebuilds a data directory in `dir` from the edge. It is built beside it and renamed into
/// place only when complete: a restore that fails leaves nothing behind.
pub(crate) fn run(dir: &Path, options: &Options) -> Result<Report> {
    if dir.exists() && std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_some()) {
        bail!("{} is not empty; restore into a new directory", dir.display());
    }
    let mut staging = dir.as_os_str().to_owned();
    staging.push(".restoring");
    let staging = PathBuf::from(staging);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let result = build(&staging, options);
    match result {
        Ok(report) => {
            if dir.exists() {
                std::fs::remove_dir(dir).with_context(|| format!("replacing the empty {}", dir.display()))?;
            }
            std::fs::rename(&staging, dir)
                .with_context(|| format!("moving the restored state to {}", dir.display()))?;
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

fn build(dir: &Path, options: &Options) -> Result<Report> {
    let paths = Paths::new(dir);
    let edge_text = std::fs::read_to_string(&options.edge_settings)
        .with_context(|| format!("reading {}", options.edge_settings.display()))?;
    let edge_toml: EdgeToml =
        toml::from_str(&edge_text).with_context(|| format!("{} is not valid", options.edge_settings.display()))?;
    let anchor: PublicKey = edge_toml.root_key.parse().context("root_key in the edge settings is not a public key")?;
    let recovery = crate::keyring::load_recovery(&options.recovery_key).context("loading the recovery key")?;
    let edge_url = crate::config::check_url("the edge's URL", &options.edge_url)?;
    let now = now();

    let fetched = fetch(&edge_url, &edge_toml)?;
    let mut trust = Trust::new(RoleKeys::single(anchor));
    trust
        .accept_chain(&fetched.chain, now)
        .context("the key records the edge holds do not verify against the root key")?;
    if trust.role(Role::Signing).is_none() {
        bail!("the edge holds no key records: control never pushed to it, so there is nothing to restore");
    }

    let archive_version = fetched
        .archive
        .as_deref()
        .and_then(|bytes| Envelope::decode(bytes, Kind::Archive.max_len()).ok())
        .map_or(0, |e| e.header.version);

    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut report = Report::default();

    let links = fetched
        .items
        .iter()
        .filter(|i| matches!(i.stream.parse(), Ok(Stream::Snapshot(_))) && i.envelope.is_some())
        .count();
    let (edge, screened) = if options.from_snapshots {
        let mut screened = screen(fetched.items, &trust, &Archived::new());
        let edge = read_edge(&mut screened, &recovery);
        if links > 0 && edge.snapshots.is_empty() {
            bail!("the recovery key opens none of the {links} snapshots at the edge: is it the right key?");
        }
        let root_key = options
            .root_key
            .as_deref()
            .context("a restore from snapshots needs --root-key to certify new online keys")?;
        keyring::write_fresh(dir, &anchor, &recovery.public(), &edge_text)?;
        write_chain(dir, &trust)?;
        for role in [Role::Signing, Role::Release] {
            keyring::rotate(dir, role, root_key, None, now).with_context(|| format!("certifying a new {role} key"))?;
        }
        report.notes.push("new signing and release keys were certified by the root key".into());
        (edge, screened)
    } else {
        let archive = fetched.archive.as_deref().context(
            "the edge holds no archive; restore with --from-snapshots --root-key <file> to rebuild from the snapshots",
        )?;
        let (version, payload) = crate::archive::open(archive, &trust, &recovery, now)?;
        crate::archive::unpack(&payload, dir)?;
        report.archive = Some((version, payload.created));
        // The edge's envelopes count only where they agree with the archive: at its version
        // the same, or newer.
        let archived = archived_streams(&paths.database())?;
        if archived.is_none() {
            report.notes.push(
                "the archive is from a Hearth that kept no stream versions: envelopes at the edge were not compared with it"
                    .into(),
            );
        }
        let mut screened = screen(fetched.items, &trust, &archived.unwrap_or_default());
        let edge = read_edge(&mut screened, &recovery);
        // Rotations after the archive was made: the edge's records are the newer ones.
        write_chain(dir, &trust)?;
        let certified = keyring::load_online(dir, 0, now).is_ok();
        if !certified {
            let root_key = options.root_key.as_deref().context(
                "the archive's signing key was retired by a later rotation; add --root-key <file> to certify a new one",
            )?;
            keyring::rotate(dir, Role::Signing, root_key, None, now)?;
            report.notes.push("the archive's signing key was retired since: a new one was certified".into());
        }
        let release = keyring::load_trust(dir, now)?;
        let release_key = keyring::load_key(&paths.secret(Role::Release), Role::Release);
        if release_key.is_ok_and(|key| !release.role(Role::Release).is_some_and(|r| r.keys.contains(&key.public()))) {
            report.notes.push(
                "the release key in the archive was retired since; rotate it with `keys rotate --role release`".into(),
            );
        }
        (edge, screened)
    };

    // The database: the archive's (or a new one), the edge as the newer truth on top.
    let db = Db::open(&paths.database()).with_context(|| format!("opening {}", paths.database().display()))?;
    db.write_blocking(|tx| {
        let config = crate::config::Config::load(dir, &|_| None).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let mut addresses = crate::settings::Addresses::of(&config);
        if addresses.edge_url.is_none() {
            addresses.edge_url = Some(edge_url.clone());
        }
        // Kept as the owner's setting, over a configuration that names no edge.
        let configured = crate::settings::Addresses::of(&config);
        store::set_state(tx, "addresses_file", serde_json::to_string(&configured).expect("addresses serialize"))?;
        crate::settings::save_addresses(tx, &config, &addresses, "restore", now)?;
        // The streams are numbered anew below: every edge is brought up to date from nothing
        // (what an edge already holds, it takes again as a no-op).
        tx.execute("UPDATE edges SET pushed = 0, release = 0, archive = 0", [])?;
        store::set_state(tx, "archive_version", i64::try_from(archive_version).unwrap_or(i64::MAX))?;
        let batch = store::get_state(tx, "batch")?.max(i64::try_from(fetched.batch).unwrap_or(i64::MAX));
        store::set_state(tx, "batch", batch)?;
        Ok(())
    })?;
    drop(db);
    let (_config, db, signer, _) = crate::serve::open_to_serve(dir)?;
    db.write_blocking(|tx| {
        seed_streams(tx, &screened)?;
        if options.from_snapshots {
            rebuild_nodes(tx, &edge, &mut report.notes, now)?;
            report.notes.push(
                "not in snapshots, so not recovered: the owner account and its second factor (a new setup link is printed at start), API tokens, user notes, the duration of users not started yet, daily usage history, node masquerade settings, node domains (a node whose links checked its public certificate comes back as one with a CA's certificate: set its domain again, and enroll it again for its certificate to be renewed under control's eye), the audit log, group names (users keep the nodes they had, in groups named restored-N), when users and nodes were created, the next reset of users on a rolling 30-day reset (counted again from the restore), device limits and abuse guards, node multipliers and monthly caps, users' traffic as measured before multipliers (taken as what it counted for), and what nodes refused users".into(),
            );
        } else {
            update_nodes(tx, &edge)?;
        }
        // Every snapshot carries the profile in force when it was signed: after an archive, a
        // later change of the profile is there.
        if let Some((_, snapshot)) = edge.snapshots.values().next() {
            restore_profile(tx, &signer, &snapshot.profile)?;
        }
        if let Some(settings) = &edge.settings {
            store::set_state(tx, "ua_rules", serde_json::to_string(&settings.ua_rules).expect("rules serialize"))?;
        }
        report.users = merge_users(tx, &signer, &edge, &mut report.notes, now)?;
        for (node, seq) in &edge.acks {
            tx.execute(
                "UPDATE nodes SET usage_digest = NULL, usage_seq = ?2 WHERE id = ?1 AND usage_seq < ?2",
                params![node, seq],
            )?;
        }
        report.nodes = tx.query_row("SELECT count(*) FROM nodes", [], |row| row.get(0))?;
        report.signed = republish(tx, &signer, now)?;
        Ok(())
    })?;
    report.notes.extend(dropped_notes(&screened.dropped));
    Ok(report)
}

/// The kept envelopes become the streams' current versions (and deletions their deleted
/// versions), so everything signed from now on is above what the edge and nodes hold. A
/// stream the archive holds newer keeps the archive's.
fn seed_streams(tx: &Connection, screened: &Screened) -> Result<(), Error> {
    let mut insert = tx.prepare(
        "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
         VALUES (?1, ?2, ?3, NULL, ?4, 0, (SELECT ifnull(max(seq), 0) + 1 FROM streams))
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
           body_sha256 = NULL, envelope = excluded.envelope, seq = excluded.seq
         WHERE excluded.version > streams.version",
    )?;
    for kept in &screened.kept {
        insert.execute(params![kept.stream, kept.version, kept.digest, kept.bytes])?;
    }
    for (name, version) in &screened.deleted {
        insert.execute(params![name, version, None::<Vec<u8>>, None::<Vec<u8>>])?;
    }
    Ok(())
}

/// Signs every user, credential set, node record and the edge settings again.
fn republish(tx: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut signed = publish::republish_users(tx, signer, now)?;
    let nodes: Vec<(NodeId, Option<[u8; 32]>)> = tx
        .prepare("SELECT id, public_key FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (node, key) in nodes {
        signed += usize::from(publish::publish_creds(tx, signer, node, now, true)?);
        let key = key.and_then(|k| PublicKey::from_bytes(&k).ok());
        if key.is_some() {
            publish::publish_node_record(tx, signer, node, key, now)?;
            signed += 1;
        }
    }
    publish::publish_edge_settings(tx, signer, now)?;
    Ok(signed + 1)
}

/// From an archive: node keys enrolled (or nodes removed) after it was made.
fn update_nodes(tx: &Connection, edge: &Edge) -> Result<(), Error> {
    for (node, key) in &edge.node_keys {
        match key {
            Some(key) => {
                tx.execute(
                    "UPDATE nodes SET public_key = ?2, enroll_hash = NULL WHERE id = ?1",
                    params![node, key.to_bytes()],
                )?;
            }
            None => {
                tx.execute("DELETE FROM nodes WHERE id = ?1", [node])?;
            }
        }
    }
    Ok(())
}

/// From snapshots: nodes, with their addresses from the endpoints of the users they let in,
/// and groups that give every user the nodes it had.
fn rebuild_nodes(tx: &Connection, edge: &Edge, notes: &mut Vec<String>, now: u64) -> Result<(), Error> {
    // An active user's endpoints are the enrolled nodes whose sets hold it, in node order.
    let mut endpoints: BTreeMap<NodeId, Endpoint> = BTreeMap::new();
    for (user, (_, snapshot)) in &edge.snapshots {
        let reach: Vec<NodeId> =
            edge.creds.iter().filter(|(_, users)| users.iter().any(|(u, _)| u == user)).map(|(n, _)| *n).collect();
        if !reach.is_empty() && reach.len() == snapshot.endpoints.len() {
            for (node, endpoint) in reach.iter().zip(&snapshot.endpoints) {
                endpoints.entry(*node).or_insert_with(|| endpoint.clone());
            }
        }
    }
    // Nodes with the same users share a group; the largest set is `default`.
    let mut sets: BTreeMap<Vec<UserId>, Vec<NodeId>> = BTreeMap::new();
    for (node, key) in &edge.node_keys {
        if key.is_none() {
            continue;
        }
        let users: Vec<UserId> =
            edge.creds.get(node).map(|u| u.iter().map(|(id, _)| *id).collect()).unwrap_or_default();
        sets.entry(users).or_default().push(*node);
    }
    let mut order: Vec<(&Vec<UserId>, &Vec<NodeId>)> = sets.iter().collect();
    order.sort_by_key(|(users, nodes)| std::cmp::Reverse((nodes.len(), users.len())));
    let default: i64 = tx.query_row("SELECT id FROM groups WHERE name = 'default'", [], |row| row.get(0))?;
    for (at, (_, nodes)) in order.iter().enumerate() {
        let group = if at == 0 {
            default
        } else {
            tx.execute(
                "INSERT INTO groups (name, note) VALUES (?1, 'rebuilt by a restore')",
                [format!("restored-{at}")],
            )?;
            tx.last_insert_rowid()
        };
        for node in *nodes {
            let key = edge.node_keys[node].expect("only enrolled nodes are grouped");
            let (name, host, port, hop, sni, insecure, cert, spki, obfs, identity) = match endpoints.get(node) {
                Some(e) => (
                    publish::node_name_of(&e.name).to_owned(),
                    e.host.clone(),
                    e.port,
                    e.hop,
                    e.sni.clone().unwrap_or_default(),
                    e.insecure,
                    e.cert_sha256,
                    e.spki_sha256,
                    e.obfs.clone().unwrap_or_default(),
                    e.identity.clone(),
                ),
                None => {
                    notes.push(format!(
                        "node {node}: no user reaches it, so no snapshot holds its address; set it with PATCH /nodes/{node}"
                    ));
                    (
                        format!("node-{node}"),
                        "unknown.invalid".to_owned(),
                        443,
                        None,
                        String::new(),
                        true,
                        None,
                        None,
                        String::new(),
                        Default::default(),
                    )
                }
            };
            // The certificate apps check is taken back only when it is the one pinned.
            let certificate = identity
                .certificate
                .as_deref()
                .and_then(|der| crate::store::identity::Certificate::from_der(der).ok())
                .filter(|certificate| Some(certificate.sha256) == cert);
            tx.execute(
                "INSERT INTO nodes (id, name, host, port, hop_start, hop_end, sni, tls, cert_sha256, spki_sha256, obfs,
                                    public_key, created, cert_der, cert_names, allow_unverified)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    node,
                    name,
                    host,
                    port,
                    hop.map_or(0, |h| h.start),
                    hop.map_or(0, |h| h.end),
                    sni,
                    if insecure { "self_signed" } else { "operator" },
                    cert,
                    spki,
                    obfs,
                    key.to_bytes(),
                    now,
                    certificate.as_ref().map(|c| c.der.as_slice()),
                    certificate.as_ref().map(|c| c.names.join("\n")).unwrap_or_default(),
                    identity.unverified,
                ],
            )?;
            tx.execute("INSERT INTO node_groups (node_id, group_id) VALUES (?1, ?2)", params![node, group])?;
        }
    }
    Ok(())
}

/// The subscription profile every snapshot carries becomes the one in force (the one of the
/// configuration file stays recorded as it was when the state was opened).
fn restore_profile(tx: &Connection, signer: &Signer, profile: &Profile) -> Result<(), Error> {
    store::set_state(tx, "profile", serde_json::to_string(profile).expect("profile serializes"))?;
    *signer.profile.write().expect("profile lock") = profile.clone();
    Ok(())
}

/// Brings users up to date with their snapshots: new ones are added, changed ones take the
/// snapshot's link, credential, limits, usage (usage never goes down) and the nodes it names
/// (through their groups), and users whose link was deleted with no other snapshot of theirs
/// were deleted after the archive. Returns how many users there are.
fn merge_users(
    tx: &Connection,
    signer: &Signer,
    edge: &Edge,
    notes: &mut Vec<String>,
    now: u64,
) -> Result<usize, Error> {
    let groups_of_nodes = |nodes: &[NodeId]| -> Result<BTreeSet<i64>, Error> {
        let mut groups = BTreeSet::new();
        let mut query = tx.prepare_cached("SELECT group_id FROM node_groups WHERE node_id = ?1")?;
        for node in nodes {
            for group in query.query_map([node], |row| row.get(0))? {
                groups.insert(group?);
            }
        }
        Ok(groups)
    };
    let names: BTreeMap<String, NodeId> = tx
        .prepare("SELECT name, id FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut renamed = 0;
    for (user, (token, snapshot)) in &edge.snapshots {
        let known: bool =
            tx.query_row("SELECT EXISTS (SELECT 1 FROM users WHERE id = ?1)", [user], |row| row.get(0))?;
        let taken: Option<UserId> = tx
            .query_row("SELECT id FROM users WHERE name = ?1 AND id != ?2", params![snapshot.name, user], |row| {
                row.get(0)
            })
            .optional()?;
        let name = match taken {
            Some(_) => {
                renamed += 1;
                format!("{} (restored {user})", snapshot.name)
            }
            None => snapshot.name.clone(),
        };
        let credential = snapshot.credential.as_bytes();
        let enabled = snapshot.status != Status::Disabled;
        let reset = crate::store::users::reset_name(snapshot.reset);
        // New users are added; known ones take the snapshot's values (usage never goes down;
        // their notes stay, their next reset too unless the reset changed since).
        tx.execute(
            "INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, quota, used_up,
                                used_down, reset, next_reset, expires_at, enabled, created, updated, raw_up, raw_down)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?8, ?9)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, token_hash = excluded.token_hash,
               token_enc = excluded.token_enc, credential_enc = excluded.credential_enc,
               credential_hash = excluded.credential_hash, quota = excluded.quota,
               used_up = max(used_up, excluded.used_up), used_down = max(used_down, excluded.used_down),
               next_reset = CASE WHEN reset = excluded.reset THEN next_reset ELSE excluded.next_reset END,
               reset = excluded.reset, expires_at = excluded.expires_at, enabled = excluded.enabled,
               updated = excluded.updated",
            params![
                user,
                name,
                token.hash(),
                signer.vault.seal(Purpose::Token, token.as_bytes()),
                signer.vault.seal(Purpose::Credential, credential),
                sha256(credential),
                snapshot.quota,
                snapshot.used_up,
                snapshot.used_down,
                reset,
                crate::clock::next_reset(snapshot.reset, now),
                snapshot.expires_at,
                enabled,
                now
            ],
        )?;
        let reach: Vec<NodeId> =
            snapshot.endpoints.iter().filter_map(|e| names.get(publish::node_name_of(&e.name)).copied()).collect();
        if !known {
            let mut groups = groups_of_nodes(&reach)?;
            if groups.is_empty() {
                groups.insert(tx.query_row("SELECT id FROM groups WHERE name = 'default'", [], |row| row.get(0))?);
            }
            for group in groups {
                tx.execute("INSERT INTO user_groups (user_id, group_id) VALUES (?1, ?2)", params![user, group])?;
            }
        } else if reach.len() == snapshot.endpoints.len() {
            // Groups changed since the archive: the user gets the groups of the nodes its
            // snapshot names, as a new user does.
            let had: BTreeSet<NodeId> = tx
                .prepare_cached(
                    "SELECT DISTINCT ng.node_id FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id
                     JOIN nodes n ON n.id = ng.node_id WHERE ug.user_id = ?1 AND n.public_key IS NOT NULL",
                )?
                .query_map([user], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            if had != reach.iter().copied().collect() {
                tx.execute("DELETE FROM user_groups WHERE user_id = ?1", [user])?;
                for group in groups_of_nodes(&reach)? {
                    tx.execute("INSERT INTO user_groups (user_id, group_id) VALUES (?1, ?2)", params![user, group])?;
                }
            }
        }
    }
    if renamed > 0 {
        notes.push(format!(
            "{renamed} users had a name another user took since; they were renamed \"<name> (restored <id>)\""
        ));
    }
    // Aliases of users who have their link back are served again.
    for (user, paths) in &edge.aliases {
        if !edge.snapshots.contains_key(user) {
            continue;
        }
        for path in paths {
            let Some(token) = SubToken::for_alias(path) else { continue };
            if edge.deleted_links.contains(&token.hash()) {
                continue;
            }
            tx.execute(
                "INSERT INTO aliases (path, user_id, token_hash, source, created) VALUES (?1, ?2, ?3, 'restored', ?4)
                 ON CONFLICT (path) DO NOTHING",
                params![path, user, token.hash(), now],
            )?;
        }
    }
    // Deleted after the archive: the link is gone from the edge and no snapshot has the user.
    let stale: Vec<(UserId, Digest)> = tx
        .prepare("SELECT id, token_hash FROM users")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut deleted = 0;
    for (user, hash) in stale {
        if !edge.snapshots.contains_key(&user) && edge.deleted_links.contains(&hash) {
            tx.execute("DELETE FROM users WHERE id = ?1", [user])?;
            deleted += 1;
        }
    }
    if deleted > 0 {
        notes.push(format!("{deleted} users in the archive were deleted after it was made, and stay deleted"));
    }
    let missing = tx.query_row("SELECT count(*) FROM users", [], |row| row.get::<_, i64>(0))? as usize;
    let without_link = missing.saturating_sub(edge.snapshots.len());
    if without_link > 0 {
        notes.push(format!(
            "{without_link} users have no snapshot at the edge (never pushed?); they were kept as archived"
        ));
    }
    Ok(missing)
}

/// Prints what a restore did.
pub(crate) fn print(report: &Report, dir: &Path) {
    out!("Restored control into {}", dir.display());
    if let Some((version, created)) = report.archive {
        out!("  from archive v{version}, made {} s before the restore", now().saturating_sub(created));
    } else {
        out!("  from the signed snapshots and credential sets at the edge");
    }
    out!(
        "  {} users, {} nodes; {} envelopes signed again above the edge's versions",
        report.users,
        report.nodes,
        report.signed
    );
    for note in &report.notes {
        out!("  note: {note}");
    }
    out!("Start it with `hearth-control serve --data-dir {}` on the address nodes know.", dir.display());
}

#[cfg(test)]
mod tests {
    use hearth_shared::wire::CredEntry;

    use super::*;

    /// What a restore reads of a node's set: the full set with the delta on it, never a delta
    /// on another full set, an older one, or one that does not make what it names.
    #[test]
    fn a_nodes_set_is_its_full_set_with_the_delta_on_it() {
        let set = |users: &[u64]| {
            CredentialSet::new(1, users.iter().map(|&u| CredEntry::new(u, [u as u8; 32])).collect()).unwrap()
        };
        let digest = |set: &CredentialSet| sha256(&set.encode());
        let (full, now) = (set(&[1, 2]), set(&[2, 3]));
        let delta = wire::CredDelta::between(&full, 5, digest(&full), &now, digest(&now)).unwrap();
        let read = |version: u64, at: u64, delta: &wire::CredDelta| {
            let full_sets = BTreeMap::from([(1, (version, digest(&full), full.clone()))]);
            with_deltas(full_sets, BTreeMap::from([(1, (at, delta.clone()))]))[&1].clone()
        };
        assert_eq!(read(5, 6, &delta), now, "the delta on the full set");
        assert_eq!(read(7, 8, &delta), full, "a delta on another full set");
        assert_eq!(read(5, 4, &delta), full, "a delta older than the full set");
        let lying = wire::CredDelta { result: digest(&full), ..delta };
        assert_eq!(read(5, 6, &lying), full, "a delta that does not make what it names");
    }
}
