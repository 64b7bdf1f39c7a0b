//! Control's state archive: everything a new control box needs to take over, pushed to the
//! edge after changes and on a schedule, for `hearth-control restore`.
//!
//! An archive holds a snapshot of the database (without what is rebuilt anyway: the signed
//! streams and sign-in sessions) and the files of the data directory but the two
//! secret keys the owner keeps offline (root and recovery). It is compressed, encrypted to the
//! owner's recovery key ([`hearth_shared::seal::seal_archive`]) and signed as a
//! [`Kind::Archive`] envelope for control itself, at a version above the one the edge holds.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::keys::RecoverySecret;
use hearth_shared::trust::{Expect, Trust, verify};
use hearth_shared::wire::{self, stream};
use rand_core::OsRng;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::app::{App, now};
use crate::error::Error;
use crate::store;

/// The archive's format; a restore refuses any other.
const FORMAT: u32 = 1;
/// How long an archive is accepted: a restore years after the box was lost still works.
const LIFETIME_SECS: u64 = 10 * 365 * 86_400;
/// The largest archive a restore inflates.
const MAX_INFLATED: u64 = 1 << 30;

/// The files of a data directory an archive holds. Never `root.key` or `recovery.key`.
pub(crate) const FILES: &[&str] = &[
    "control.toml",
    "edge.toml",
    "master.key",
    "root.pub",
    "root.chain",
    "signing.key",
    "signing.pub",
    "signing.record",
    "release.key",
    "release.pub",
    "release.record",
    "recovery.pub",
    "tls.crt",
    "tls.key",
];

/// What an archive holds.
#[derive(Serialize, Deserialize)]
pub(crate) struct Payload {
    /// [`FORMAT`].
    pub(crate) format: u32,
    /// When it was made (Unix seconds).
    pub(crate) created: u64,
    /// The data directory's files, by name.
    pub(crate) files: Vec<(String, serde_bytes::ByteBuf)>,
    /// The database, as one SQLite file.
    #[serde(with = "serde_bytes")]
    pub(crate) database: Vec<u8>,
}

/// Reads the data directory and a copy of the database into a payload.
pub(crate) fn collect(dir: &Path, conn: &rusqlite::Connection, now: u64) -> Result<Payload> {
    let copy = dir.join("archive.staged.db");
    let _ = std::fs::remove_file(&copy);
    store::archive::copy_into(conn, &copy.to_string_lossy()).context("copying the database")?;
    let database = (|| {
        let staged = rusqlite::Connection::open(&copy)?;
        // The envelopes stay out (the edge holds them), but not what each stream was at: a
        // restore takes an envelope from the edge only at that version or above.
        store::archive::trim_copy(&staged)?;
        drop(staged);
        Ok::<_, anyhow::Error>(std::fs::read(&copy)?)
    })();
    let _ = std::fs::remove_file(&copy);
    let database = database.context("trimming the database copy")?;
    let mut files = Vec::new();
    for name in FILES {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => files.push(((*name).to_owned(), serde_bytes::ByteBuf::from(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        }
    }
    Ok(Payload { format: FORMAT, created: now, files, database })
}

/// Compresses, encrypts and signs a payload at `version`.
pub(crate) fn seal(
    payload: &Payload,
    signer: &crate::publish::Signer,
    conn: &rusqlite::Connection,
    version: u64,
    now: u64,
) -> Result<Vec<u8>, Error> {
    let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    deflate.write_all(&wire::encode(payload)).map_err(|e| Error::Internal(e.to_string()))?;
    let compressed = zeroize::Zeroizing::new(deflate.finish().map_err(|e| Error::Internal(e.to_string()))?);
    let body = hearth_shared::seal::seal_archive(&compressed, &signer.recovery, &mut OsRng);
    let online = signer.online(conn)?;
    Ok(Draft {
        kind: Kind::Archive,
        stream: stream::ARCHIVE.to_owned(),
        version,
        epoch: signer.epoch,
        issued: now,
        expires: now + LIFETIME_SECS,
        audience: Audience::Control,
        prev: [0; 32],
    }
    .sign(body, &[&online.key])
    .encode())
}

/// Checks an archive's signature against `trust` and opens it with the recovery key.
pub(crate) fn open(envelope: &[u8], trust: &Trust, recovery: &RecoverySecret, now: u64) -> Result<(u64, Payload)> {
    let expect = Expect { kind: Kind::Archive, audience: Audience::Control, stream: stream::ARCHIVE };
    let verified = verify(envelope, trust, &expect, None, now).context(
        "the archive does not verify (one made just before a key rotation is signed by the retired key: \
         restore with --from-snapshots --root-key instead)",
    )?;
    let compressed = hearth_shared::seal::open_archive(&verified.envelope.body, recovery)
        .context("the recovery key does not open the archive")?;
    let mut inflated = zeroize::Zeroizing::new(Vec::new());
    flate2::read::DeflateDecoder::new(compressed.as_slice())
        .take(MAX_INFLATED)
        .read_to_end(&mut inflated)
        .context("the archive does not inflate")?;
    let payload: Payload = wire::decode(&inflated, "archive").context("the archive is malformed")?;
    if payload.format != FORMAT {
        bail!("the archive has format {}, this control reads format {FORMAT}", payload.format);
    }
    Ok((verified.envelope.header.version, payload))
}

/// Where the state stands, as far as the archive cares: the last audited change, the key
/// rotation, and the usage reports applied (usage moves without audited changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marker {
    audit: i64,
    keys: i64,
    usage: i64,
}

impl Marker {
    /// What a change archives soon for: an audited change or a key rotation (usage alone
    /// waits for the schedule).
    fn changes(self) -> (i64, i64) {
        (self.audit, self.keys)
    }
}

/// Where the state stands now; `None` before anything was ever pushed.
fn marker(conn: &rusqlite::Connection) -> Result<Option<Marker>, Error> {
    if store::get_state(conn, "batch")? == 0 {
        return Ok(None);
    }
    let audit = store::archive::last_audit(conn)?;
    let usage = store::archive::usage_reports(conn)?;
    Ok(Some(Marker { audit, keys: store::get_state(conn, "keys_serial")?, usage }))
}

/// The last archive made, as the database remembers it across restarts: its version, where
/// the state stood when it was made and when that was. `None` before the first.
fn last_sealed(conn: &rusqlite::Connection) -> Result<Option<(Sealed, u64)>, Error> {
    let version = store::get_state(conn, "archive_version")?;
    let at = store::get_state(conn, "archive_sealed_at")?;
    if version == 0 || at == 0 {
        return Ok(None);
    }
    let marker = Marker {
        audit: store::get_state(conn, "archive_audit")?,
        keys: store::get_state(conn, "archive_keys")?,
        usage: store::get_state(conn, "archive_usage")?,
    };
    Ok(Some((Sealed { version, marker, envelope: None }, u64::try_from(at).unwrap_or(0))))
}

/// Makes one archive at the next version, of the state at `marker` (or later: a change
/// that lands meanwhile is in it, and archived once more). Returns the version and the
/// envelope; the database remembers what was archived.
async fn seal_once(app: &Arc<App>, marker: Marker) -> Result<(i64, Vec<u8>), Error> {
    let state = app.clone();
    // Its own connection: `VACUUM INTO` cannot run inside the pool's read transactions.
    tokio::task::spawn_blocking(move || {
        let conn = state.db.connect()?;
        let version = u64::try_from(store::get_state(&conn, "archive_version")?).unwrap_or(0) + 1;
        let payload = collect(&state.config.data_dir, &conn, now()).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let envelope = seal(&payload, &state.signer, &conn, version, now())?;
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        let at = i64::try_from(now()).unwrap_or(i64::MAX);
        let tx = conn.unchecked_transaction()?;
        for (key, value) in [
            ("archive_version", version),
            ("archive_sealed_at", at),
            ("archive_audit", marker.audit),
            ("archive_keys", marker.keys),
            ("archive_usage", marker.usage),
        ] {
            store::set_state(&tx, key, value)?;
        }
        tx.commit()?;
        Ok::<_, Error>((version, envelope))
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
}

/// When the state last changed and the last archive was made, and the settings that time
/// them (`archive_after_secs`, `archive_every_secs`).
#[derive(Clone, Copy)]
struct Timing {
    changed_at: u64,
    last_seal: u64,
    after: u64,
    every: u64,
}

/// Whether a new archive is wanted at `now`, with the state at `current`, the last archive
/// made (`sealed`) and the archive version each edge holds (`held`).
fn wanted(sealed: Option<&Sealed>, current: Marker, held: &[i64], timing: Timing, now: u64) -> bool {
    let archived = sealed.map(|s| s.marker);
    // A key rotation is archived at once: an archive signed by a retired key cannot be
    // restored from.
    let rotated = archived.is_some_and(|archived| archived.keys != current.keys);
    let settled = archived.map(Marker::changes) != Some(current.changes())
        && (rotated || now >= timing.changed_at + timing.after);
    // Usage moves without changes: archived on the schedule, when it moved.
    let due = archived != Some(current) && now >= timing.last_seal + timing.every;
    // An edge that lacks the last archive, when its envelope is no longer kept (made before a
    // restart, or dropped once every edge then held it): a new one.
    let lacking = sealed.is_some_and(|s| s.envelope.is_none() && held.iter().any(|&version| version < s.version));
    settled || due || lacking
}

/// The last archive made, kept until every edge holds it (the envelope is dropped then, and
/// is not kept across restarts: an edge that lacks it later gets a new one).
struct Sealed {
    version: i64,
    marker: Marker,
    envelope: Option<Vec<u8>>,
}

/// Retries per edge: failures so far, and not before when.
#[derive(Default)]
struct Retry(HashMap<i64, (u32, u64)>);

impl Retry {
    fn due(&self, id: i64) -> bool {
        self.0.get(&id).is_none_or(|&(_, at)| now() >= at)
    }
    fn ok(&mut self, id: i64) {
        self.0.remove(&id);
    }
    fn failed(&mut self, id: i64) -> u64 {
        let entry = self.0.entry(id).or_default();
        entry.0 += 1;
        let wait = (5u64 << entry.0.min(6)).min(300);
        entry.1 = now() + wait;
        wait
    }
}

/// Makes the archive once changes have settled, and on a schedule, and hands it to every edge
/// that holds everything else (so it knows the key the archive is signed with); also hands
/// each edge the release being rolled out.
pub(crate) async fn archiver(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let tick = Duration::from_secs(1);
    let mut archiver = Archiver::start(&app).await;
    loop {
        let targets = crate::outbox::targets(&app).await.unwrap_or_default();
        archiver.hand_releases(&app, &targets).await;
        if !targets.is_empty()
            && let Ok(Some(current)) = app.db.read(marker).await
        {
            archiver.seal_if_wanted(&app, current, &targets).await;
            archiver.hand_archive(&app, &targets).await;
        }
        if crate::tasks::stopped(&mut shutdown, tick).await {
            return;
        }
    }
}

/// The edges control pushes to, and where each is reached.
type Targets = [(crate::store::edges::Edge, crate::outbox::Target)];

/// What the archiver remembers from one round to the next.
struct Archiver {
    /// The last archive made, and when it was made.
    sealed: Option<Sealed>,
    last_seal: u64,
    /// What the state was at when last seen, and since when.
    seen: Option<Marker>,
    changed_at: u64,
    /// Archives that could not be made in a row.
    failures: u32,
    archive_retry: Retry,
    release_retry: Retry,
}

impl Archiver {
    /// What was archived before a restart is not archived again: a start with nothing
    /// changed uploads nothing.
    async fn start(app: &Arc<App>) -> Archiver {
        let remembered = match app.db.read(last_sealed).await {
            Ok(remembered) => remembered,
            Err(e) => {
                tracing::warn!(error = %e, "could not read which archive was made last; making a new one");
                None
            }
        };
        let (sealed, last_seal) = match remembered {
            Some((sealed, at)) => (Some(sealed), at),
            None => (None, 0),
        };
        Archiver {
            sealed,
            last_seal,
            seen: None,
            changed_at: now(),
            failures: 0,
            archive_retry: Retry::default(),
            release_retry: Retry::default(),
        }
    }

    /// Hands each edge the release being rolled out.
    async fn hand_releases(&mut self, app: &Arc<App>, targets: &Targets) {
        for (edge, target) in targets {
            if !self.release_retry.due(edge.id) {
                continue;
            }
            match crate::outbox::sync_release(app, edge, target).await {
                Ok(_) => self.release_retry.ok(edge.id),
                Err(e) => {
                    let wait = self.release_retry.failed(edge.id);
                    tracing::warn!(edge = %edge.name, error = %e, retry_in = wait, "could not hand the release to the edge");
                }
            }
        }
    }

    /// Makes a new archive of the state at `current` when one is [`wanted`] (and the pause
    /// after failures is over).
    async fn seal_if_wanted(&mut self, app: &Arc<App>, current: Marker, targets: &Targets) {
        if self.seen != Some(current) {
            self.seen = Some(current);
            self.changed_at = now();
        }
        let held: Vec<i64> = targets.iter().map(|(edge, _)| edge.archive).collect();
        let timing = Timing {
            changed_at: self.changed_at,
            last_seal: self.last_seal,
            after: app.config.archive_after_secs,
            every: app.config.archive_every_secs,
        };
        let wanted = wanted(self.sealed.as_ref(), current, &held, timing, now());
        let backoff = u64::from(self.failures.min(6)) * 10;
        if wanted && now() >= self.last_seal + backoff {
            self.last_seal = now();
            match seal_once(app, current).await {
                Ok((version, envelope)) => {
                    self.sealed = Some(Sealed { version, marker: current, envelope: Some(envelope) });
                    self.failures = 0;
                }
                Err(e) => {
                    self.failures += 1;
                    tracing::warn!(error = %e, "could not make the state archive; retrying");
                }
            }
        }
    }

    /// Hands the last archive to every edge that lacks it and holds everything else; once
    /// every edge holds it, its envelope is dropped.
    async fn hand_archive(&mut self, app: &Arc<App>, targets: &Targets) {
        let Archiver { sealed, archive_retry, .. } = self;
        let Some(Sealed { version, envelope: Some(envelope), .. }) = sealed.as_ref() else { return };
        let version = *version;
        let mut everywhere = true;
        for (edge, target) in targets {
            if edge.archive >= version {
                continue;
            }
            everywhere = false;
            let pushed = edge.pushed;
            let lacks = app.db.read(move |c| crate::store::edges::pending(c, pushed)).await.unwrap_or(1);
            if lacks > 0 || !archive_retry.due(edge.id) {
                continue;
            }
            let id = edge.id;
            let sent = crate::outbox::send_to_edge(
                app,
                target,
                reqwest::Method::PUT,
                "archive",
                envelope.clone(),
                Duration::from_secs(120),
            )
            .await;
            match sent {
                Ok(_) => {
                    archive_retry.ok(id);
                    let _ = app
                        .db
                        .write(move |tx| {
                            crate::store::edges::set_marker(tx, id, crate::store::edges::Marker::Archive, version)
                        })
                        .await;
                    tracing::info!(edge = %edge.name, bytes = envelope.len(), "pushed the state archive to the edge");
                }
                Err(e) => {
                    let wait = archive_retry.failed(id);
                    tracing::warn!(edge = %edge.name, error = %e.text, retry_in = wait,
                        "could not push the state archive; retrying");
                }
            }
        }
        if everywhere && let Some(sealed) = sealed {
            sealed.envelope = None;
        }
    }
}

/// Writes a payload into a new data directory (the database last).
pub(crate) fn unpack(payload: &Payload, dir: &Path) -> Result<()> {
    for (name, bytes) in &payload.files {
        if !FILES.contains(&name.as_str()) {
            bail!("the archive holds an unexpected file {name:?}");
        }
        crate::private_file::write_private(&dir.join(name), bytes)?;
    }
    crate::private_file::write_private(&crate::keyring::Paths::new(dir).database(), &payload.database)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What makes a new archive, and what does not: nothing changed (after a restart too),
    /// a change before it settled, usage before the schedule.
    #[test]
    fn an_archive_is_made_only_when_something_moved_or_an_edge_lacks_it() {
        let at = Marker { audit: 10, keys: 1, usage: 5 };
        let timing = Timing { changed_at: 1000, last_seal: 1000, after: 30, every: 3600 };
        let remembered = Sealed { version: 4, marker: at, envelope: None };
        let kept = Sealed { version: 4, marker: at, envelope: Some(vec![1]) };
        let now = 1000 + 7200;
        assert!(!wanted(Some(&remembered), at, &[4, 4], timing, now), "nothing moved: no archive, restarted or not");
        let first = Timing { last_seal: 0, ..timing };
        assert!(wanted(None, at, &[], first, now), "none made yet: the first at once");
        let changed = Marker { audit: 11, ..at };
        assert!(!wanted(Some(&kept), changed, &[4], timing, 1010), "a change that has not settled yet");
        assert!(wanted(Some(&kept), changed, &[4], timing, 1030), "a change that settled");
        assert!(wanted(Some(&kept), Marker { keys: 2, ..at }, &[4], timing, 1001), "a key rotation: at once");
        let used = Marker { usage: 6, ..at };
        assert!(!wanted(Some(&kept), used, &[4], timing, 1030), "usage waits for the schedule");
        assert!(wanted(Some(&kept), used, &[4], timing, 1000 + 3600), "usage on the schedule");
        assert!(wanted(Some(&remembered), at, &[4, 0], timing, 1001), "an edge lacks it, and it is not kept");
        assert!(!wanted(Some(&kept), at, &[4, 0], timing, 1001), "an edge lacks it: the one kept goes to it");
    }
    use crate::store::users::UserInput;
    use crate::testing::TestControl;

    #[test]
    fn an_archive_opens_only_with_the_recovery_key_and_unpacks_the_whole_state() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = now();
        let input = UserInput { name: Some("alice".into()), note: Some("kept".into()), ..UserInput::default() };
        app.db.write_blocking(|tx| crate::users::create(tx, &app.signer, "test", &input, now)).unwrap();
        let conn = app.db.connect().unwrap();
        let payload = collect(t.dir.path(), &conn, now).unwrap();
        let names: Vec<&str> = payload.files.iter().map(|(name, _)| name.as_str()).collect();
        assert!(names.contains(&"signing.key") && names.contains(&"master.key"), "{names:?}");
        assert!(
            !names.contains(&"root.key") && !names.contains(&"recovery.key"),
            "offline keys never leave: {names:?}"
        );
        let envelope = seal(&payload, &app.signer, &conn, 3, now).unwrap();
        let trust = crate::keyring::load_trust(t.dir.path(), now).unwrap();
        let recovery = t.recovery();

        let (version, opened) = open(&envelope, &trust, &recovery, now).unwrap();
        assert_eq!((version, opened.created), (3, now));
        let restored = tempfile::tempdir().unwrap();
        unpack(&opened, restored.path()).unwrap();
        let db = rusqlite::Connection::open(crate::keyring::Paths::new(restored.path()).database()).unwrap();
        let note: String = db.query_row("SELECT note FROM users WHERE name = 'alice'", [], |row| row.get(0)).unwrap();
        assert_eq!(note, "kept");
        let streams: i64 = db.query_row("SELECT count(*) FROM streams", [], |row| row.get(0)).unwrap();
        assert_eq!(streams, 0, "signed streams are rebuilt, not archived");
        assert!(unpack(&opened, restored.path()).is_err(), "an unpack never overwrites");

        // Another recovery key, a flipped bit, another verifier: refused, with the reason.
        let stranger = hearth_shared::keys::RecoverySecret::generate(&mut OsRng);
        let err = open(&envelope, &trust, &stranger, now).err().unwrap();
        assert!(format!("{err:#}").contains("recovery key does not open"), "{err:#}");
        let mut tampered = envelope.clone();
        let at = tampered.len() - 100;
        tampered[at] ^= 1;
        let err = open(&tampered, &trust, &recovery, now).err().unwrap();
        assert!(format!("{err:#}").contains("does not verify"), "{err:#}");
        let other = TestControl::new(false);
        let foreign = crate::keyring::load_trust(other.dir.path(), now).unwrap();
        assert!(open(&envelope, &foreign, &recovery, now).is_err(), "an archive of another control");
    }
}
