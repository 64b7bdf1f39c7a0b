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

mod archive;
mod edge;
mod fetch;
mod keys;
mod nodes;
mod screen;
mod streams;
mod users;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Envelope, Kind};
use hearth_shared::trust::Trust;
use hearth_shared::wire::{ExportItem, Stream};
use rusqlite::Connection;

use archive::{Archived, archived_streams};
use edge::{Edge, read_edge};
use fetch::fetch;
use keys::Owner;
use nodes::{rebuild_nodes, take_acks, update_nodes};
use screen::{Screened, dropped_notes, screen};
use streams::{republish, seed_streams};
use users::{merge_users, restore_profile};

use crate::app::now;
use crate::error::Error;
use crate::keyring::Paths;
use crate::publish::Signer;
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

/// A restore under way: where it builds, what the owner asked and kept, and its time.
struct Restoring<'a> {
    dir: &'a Path,
    options: &'a Options,
    owner: Owner,
    now: u64,
}

/// Builds the data directory in `dir` from the edge: the owner's keys read, the edge's export
/// fetched and checked against the root key, the state taken from the archive or rebuilt from
/// the snapshots, and the edge's newer truth merged on top and signed again.
fn build(dir: &Path, options: &Options) -> Result<Report> {
    let owner = Owner::read(&options.edge_settings, &options.recovery_key, &options.edge_url)?;
    let restoring = Restoring { dir, options, owner, now: now() };

    let fetched = fetch(&restoring.owner.edge_url, &restoring.owner.edge)?;
    let trust = keys::trusted(restoring.owner.anchor, &fetched.chain, restoring.now)?;

    let archive_version = fetched
        .archive
        .as_deref()
        .and_then(|bytes| Envelope::decode(bytes, Kind::Archive.max_len()).ok())
        .map_or(0, |e| e.header.version);

    create_private(dir)?;
    let mut report = Report::default();

    let (edge, screened) = if options.from_snapshots {
        from_snapshots(&restoring, &trust, fetched.items, &mut report)?
    } else {
        from_archive(&restoring, &trust, fetched.archive.as_deref(), fetched.items, &mut report)?
    };

    prepare_database(&restoring, archive_version, fetched.batch)?;
    let (_config, db, signer, _) = crate::serve::open_to_serve(dir)?;
    db.write_blocking(|tx| bring_up_to_date(tx, &restoring, &signer, &edge, &screened, &mut report))?;
    report.notes.extend(dropped_notes(&screened.dropped));
    Ok(report)
}

/// Creates the data directory, for its owner only.
fn create_private(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(())
}

/// From snapshots: what the edge's envelopes say (there is no archive to be behind), in a
/// keyring made anew whose online keys the root key certifies.
fn from_snapshots(
    restoring: &Restoring<'_>,
    trust: &Trust,
    items: Vec<ExportItem>,
    report: &mut Report,
) -> Result<(Edge, Screened)> {
    let links =
        items.iter().filter(|i| matches!(i.stream.parse(), Ok(Stream::Snapshot(_))) && i.envelope.is_some()).count();
    let mut screened = screen(items, trust, &Archived::new());
    let edge = read_edge(&mut screened, &restoring.owner.recovery);
    if links > 0 && edge.snapshots.is_empty() {
        bail!("the recovery key opens none of the {links} snapshots at the edge: is it the right key?");
    }
    let root_key = restoring
        .options
        .root_key
        .as_deref()
        .context("a restore from snapshots needs --root-key to certify new online keys")?;
    keys::certify_anew(restoring.dir, &restoring.owner, trust, root_key, restoring.now, &mut report.notes)?;
    Ok((edge, screened))
}

/// From the archive: the data directory and database it holds, what the edge's envelopes say
/// where they agree with it, and its keys brought up to date with rotations since.
fn from_archive(
    restoring: &Restoring<'_>,
    trust: &Trust,
    archive: Option<&[u8]>,
    items: Vec<ExportItem>,
    report: &mut Report,
) -> Result<(Edge, Screened)> {
    let Restoring { dir, options, owner, now } = restoring;
    let archive = archive.context(
        "the edge holds no archive; restore with --from-snapshots --root-key <file> to rebuild from the snapshots",
    )?;
    let (version, payload) = crate::archive::open(archive, trust, &owner.recovery, *now)?;
    crate::archive::unpack(&payload, dir)?;
    report.archive = Some((version, payload.created));
    // The edge's envelopes count only where they agree with the archive: at its version
    // the same, or newer.
    let archived = archived_streams(&Paths::new(dir).database())?;
    if archived.is_none() {
        report.notes.push(
            "the archive is from a Hearth that kept no stream versions: envelopes at the edge were not compared with it"
                .into(),
        );
    }
    let mut screened = screen(items, trust, &archived.unwrap_or_default());
    let edge = read_edge(&mut screened, &owner.recovery);
    keys::bring_archived_up_to_date(dir, trust, options.root_key.as_deref(), *now, &mut report.notes)?;
    Ok((edge, screened))
}

/// The database: the archive's (or a new one), with the owner's addresses (the edge's URL
/// when the configuration names none) and every edge to be brought up to date from nothing.
fn prepare_database(restoring: &Restoring<'_>, archive_version: u64, batch: u64) -> Result<()> {
    let Restoring { dir, owner, now, .. } = restoring;
    let paths = Paths::new(dir);
    let db = Db::open(&paths.database()).with_context(|| format!("opening {}", paths.database().display()))?;
    db.write_blocking(|tx| {
        let config = crate::config::Config::load(dir, &|_| None).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let mut addresses = crate::settings::Addresses::of(&config);
        if addresses.edge_url.is_none() {
            addresses.edge_url = Some(owner.edge_url.clone());
        }
        // Kept as the owner's setting, over a configuration that names no edge.
        let configured = crate::settings::Addresses::of(&config);
        store::set_state(tx, "addresses_file", serde_json::to_string(&configured).expect("addresses serialize"))?;
        crate::settings::save_addresses(tx, &config, &addresses, "restore", *now)?;
        // The streams are numbered anew below: every edge is brought up to date from nothing
        // (what an edge already holds, it takes again as a no-op).
        store::restoring::edges_from_nothing(tx)?;
        store::set_state(tx, "archive_version", i64::try_from(archive_version).unwrap_or(i64::MAX))?;
        let batch = store::get_state(tx, "batch")?.max(i64::try_from(batch).unwrap_or(i64::MAX));
        store::set_state(tx, "batch", batch)?;
        Ok(())
    })?;
    drop(db);
    Ok(())
}

/// The edge as the newer truth on top of the database, in one transaction: the streams
/// seeded, nodes rebuilt (from snapshots) or updated (over an archive), the profile and user
/// agent rules in force, users merged, usage acknowledged, and everything signed again.
fn bring_up_to_date(
    tx: &Connection,
    restoring: &Restoring<'_>,
    signer: &Signer,
    edge: &Edge,
    screened: &Screened,
    report: &mut Report,
) -> Result<(), Error> {
    let now = restoring.now;
    seed_streams(tx, screened)?;
    if restoring.options.from_snapshots {
        rebuild_nodes(tx, edge, &mut report.notes, now)?;
        report.notes.push(
            "not in snapshots, so not recovered: the owner account and its second factor (a new setup link is printed at start), API tokens, user notes, the duration of users not started yet, daily usage history, node masquerade settings, node domains (a node whose links checked its public certificate comes back as one with a CA's certificate: set its domain again, and enroll it again for its certificate to be renewed under control's eye), the audit log, group names (users keep the nodes they had, in groups named restored-N), when users and nodes were created, the next reset of users on a rolling 30-day reset (counted again from the restore), device limits and abuse guards, node multipliers and monthly caps, users' traffic as measured before multipliers (taken as what it counted for), and what nodes refused users".into(),
        );
    } else {
        update_nodes(tx, edge)?;
    }
    // Every snapshot carries the profile in force when it was signed: after an archive, a
    // later change of the profile is there.
    if let Some((_, snapshot)) = edge.snapshots.values().next() {
        restore_profile(tx, signer, &snapshot.profile)?;
    }
    if let Some(settings) = &edge.settings {
        store::set_state(tx, "ua_rules", serde_json::to_string(&settings.ua_rules).expect("rules serialize"))?;
    }
    report.users = merge_users(tx, signer, edge, &mut report.notes, now)?;
    take_acks(tx, edge)?;
    report.nodes = store::restoring::node_count(tx)?;
    report.signed = republish(tx, signer, now)?;
    Ok(())
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
