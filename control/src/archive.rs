//! Control's state archive: everything a new control box needs to take over, pushed to the
//! edge after changes and on a schedule, for `hearth-control restore`.
//!
//! An archive holds a snapshot of the database (without what is rebuilt anyway: the signed
//! streams and sign-in sessions) and the files of the data directory but the two
//! secret keys the owner keeps offline (root and recovery). It is compressed, encrypted to the
//! owner's recovery key in chunks ([`ArchiveSealer`]) and signed as a [`Kind::Archive`]
//! envelope for control itself, at a version above the one the edge holds. It is written to a
//! file in the data directory as it is made and sent from there: at 100,000 users it is tens
//! of megabytes, and never whole in control's memory.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Draft, Framed, Kind};
use hearth_shared::keys::RecoverySecret;
use hearth_shared::seal::ArchiveSealer;
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

/// A [`Payload`] up to its database, which is written after it from a file.
#[derive(Serialize)]
struct PayloadHead<'a> {
    format: u32,
    created: u64,
    files: &'a [(String, serde_bytes::ByteBuf)],
}

/// Writes a payload's encoding (what `wire::encode` makes of a [`Payload`]) to `out`, its
/// database read from `database` as it goes: `len` bytes, no more are read, fewer fail.
fn write_payload(
    out: &mut impl Write,
    created: u64,
    files: &[(String, serde_bytes::ByteBuf)],
    database: impl Read,
    len: u64,
) -> std::io::Result<()> {
    out.write_all(&wire::encode(&PayloadHead { format: FORMAT, created, files }))?;
    out.write_all(&wire::encode(&len))?;
    let copied = std::io::copy(&mut database.take(len), out)?;
    if copied != len {
        return Err(std::io::Error::other(format!("the database copy ended after {copied} of {len} bytes")));
    }
    Ok(())
}

/// The data directory's files an archive holds ([`FILES`]), by name.
fn files(dir: &Path) -> Result<Vec<(String, serde_bytes::ByteBuf)>> {
    let mut files = Vec::new();
    for name in FILES {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => files.push(((*name).to_owned(), serde_bytes::ByteBuf::from(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        }
    }
    Ok(files)
}

/// Where the sealed archive waits in the data directory until every edge holds it; made under
/// [`SEALING`] and renamed, so a push still reading the one before reads it whole.
const SEALED: &str = "archive.sealed";
const SEALING: &str = "archive.sealing";
/// The database's copy, while it is made and written into the archive.
const STAGED: &str = "archive.staged.db";

/// Removes what a control stopped while it made or kept an archive left behind: archives are
/// not kept across restarts.
pub(crate) fn clear_leftovers(dir: &Path) {
    for name in [SEALED, SEALING, STAGED] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// Bytes written, and their SHA-256, on their way to `inner`.
struct Hashed<W> {
    inner: W,
    len: u64,
    hash: sha2::Sha256,
}

impl<W: Write> Write for Hashed<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        use sha2::Digest as _;
        let written = self.inner.write(bytes)?;
        self.hash.update(&bytes[..written]);
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An archive made: its envelope, signed around the sealed body that waits in a file.
pub(crate) struct Made {
    framed: Framed,
    body: PathBuf,
}

impl Made {
    /// The envelope's length.
    pub(crate) fn len(&self) -> u64 {
        self.framed.encoded_len()
    }

    /// The envelope as a request body, read from its file as it is sent (a few chunks in
    /// memory at a time).
    pub(crate) fn body(&self) -> std::io::Result<reqwest::Body> {
        let mut file = std::fs::File::open(&self.body)?;
        let (head, tail, len) = (self.framed.head.clone(), self.framed.tail.clone(), self.framed.header.body_len);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let send = |bytes: std::io::Result<bytes::Bytes>| tx.blocking_send(bytes).is_ok();
            if !send(Ok(head.into())) {
                return;
            }
            let mut left = len;
            while left > 0 {
                let mut chunk = vec![0; usize::try_from(left.min(64 * 1024)).unwrap_or(64 * 1024)];
                let read = match file.read(&mut chunk) {
                    Ok(0) => Err(std::io::Error::other("the sealed archive is shorter than its envelope says")),
                    read => read,
                };
                let Ok(read) = read.map_err(|e| send(Err(e))) else { return };
                chunk.truncate(read);
                left -= read as u64;
                if !send(Ok(chunk.into())) {
                    return;
                }
            }
            send(Ok(tail.into()));
        });
        Ok(reqwest::Body::wrap(Streamed { rx, left: self.len() }))
    }

    /// The whole envelope, in memory (tests).
    #[cfg(test)]
    pub(crate) fn read(&self) -> Vec<u8> {
        [self.framed.head.clone(), std::fs::read(&self.body).unwrap(), self.framed.tail.clone()].concat()
    }
}

/// A request body from a channel, of a length known beforehand (sent as `Content-Length`).
struct Streamed {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    left: u64,
}

impl http_body::Body for Streamed {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::io::Result<http_body::Frame<bytes::Bytes>>>> {
        self.rx.poll_recv(cx).map(|next| {
            next.map(|bytes| {
                let bytes = bytes?;
                self.left = self.left.saturating_sub(bytes.len() as u64);
                Ok(http_body::Frame::data(bytes))
            })
        })
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// Makes the archive at `version`: the database copied and trimmed, written with the data
/// directory's files into a payload that is compressed, encrypted to the owner's recovery key
/// ([`ArchiveSealer`]) and written to a file as it goes, then signed around that file as a
/// [`Kind::Archive`] envelope for control itself. Neither the payload nor the archive is ever
/// whole in memory.
pub(crate) fn make(
    dir: &Path,
    conn: &rusqlite::Connection,
    signer: &crate::publish::Signer,
    version: u64,
    now: u64,
) -> Result<Made, Error> {
    let internal = |e: anyhow::Error| Error::Internal(format!("{e:#}"));
    let staged = dir.join(STAGED);
    let _ = std::fs::remove_file(&staged);
    let sealed = (|| {
        store::archive::copy_into(conn, &staged.to_string_lossy()).context("copying the database")?;
        let copy = rusqlite::Connection::open(&staged)?;
        // The envelopes stay out (the edge holds them), but not what each stream was at: a
        // restore takes an envelope from the edge only at that version or above.
        store::archive::trim_copy(&copy).context("trimming the database copy")?;
        drop(copy);
        let files = files(dir)?;
        let database = std::fs::File::open(&staged).context("reading the database copy")?;
        let len = database.metadata()?.len();
        let sealing = dir.join(SEALING);
        let out = crate::private_file::replace_private(&sealing).context("creating the archive's file")?;
        let out = Hashed { inner: std::io::BufWriter::new(out), len: 0, hash: sha2::Sha256::default() };
        let sealer = ArchiveSealer::new(out, &signer.recovery, &mut OsRng)?;
        let mut deflate = flate2::write::DeflateEncoder::new(sealer, flate2::Compression::default());
        write_payload(&mut deflate, now, &files, std::io::BufReader::new(database), len)?;
        let Hashed { inner, len, hash } = deflate.finish()?.finish()?;
        inner.into_inner().map_err(std::io::IntoInnerError::into_error)?;
        std::fs::rename(&sealing, dir.join(SEALED))?;
        Ok::<_, anyhow::Error>((len, sha2::Digest::finalize(hash).into()))
    })();
    let _ = std::fs::remove_file(&staged);
    let (len, hash) = sealed.map_err(|e| {
        let _ = std::fs::remove_file(dir.join(SEALING));
        internal(e.context("writing the archive"))
    })?;
    let max = Kind::Archive.max_len() as u64;
    let online = signer.online(conn)?;
    let framed = Draft {
        kind: Kind::Archive,
        stream: stream::ARCHIVE.to_owned(),
        version,
        epoch: signer.epoch,
        issued: now,
        expires: now + LIFETIME_SECS,
        audience: Audience::Control,
        prev: [0; 32],
    }
    .sign_framed(len, hash, &[&online.key]);
    if framed.encoded_len() > max {
        let _ = std::fs::remove_file(dir.join(SEALED));
        return Err(Error::Internal(format!(
            "the archive is {} bytes, more than an edge keeps ({max}): a restore will need --from-snapshots",
            framed.encoded_len()
        )));
    }
    Ok(Made { framed, body: dir.join(SEALED) })
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
async fn seal_once(app: &Arc<App>, marker: Marker) -> Result<(i64, Made), Error> {
    let state = app.clone();
    // Its own connection: `VACUUM INTO` cannot run inside the pool's read transactions.
    tokio::task::spawn_blocking(move || {
        let conn = state.db.connect()?;
        let version = u64::try_from(store::get_state(&conn, "archive_version")?).unwrap_or(0) + 1;
        let made = make(&state.config.data_dir, &conn, &state.signer, version, now())?;
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
        Ok::<_, Error>((version, made))
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

/// The last archive made, kept until every edge holds it (its file is removed then, and is
/// not kept across restarts: an edge that lacks it later gets a new one).
struct Sealed {
    version: i64,
    marker: Marker,
    envelope: Option<Made>,
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
        clear_leftovers(&app.config.data_dir);
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
                Ok((version, made)) => {
                    self.sealed = Some(Sealed { version, marker: current, envelope: Some(made) });
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
            let sent = match envelope.body() {
                Ok(body) => {
                    crate::outbox::send_to_edge(
                        app,
                        target,
                        reqwest::Method::PUT,
                        "archive",
                        body,
                        Duration::from_secs(120),
                    )
                    .await
                }
                Err(e) => Err(crate::outbox::EdgeError {
                    text: format!("could not read the archive's file: {e}"),
                    stream: None,
                    refused: false,
                }),
            };
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
        if everywhere
            && let Some(sealed) = sealed
            && let Some(made) = sealed.envelope.take()
        {
            let _ = std::fs::remove_file(&made.body);
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
        let framed = Draft {
            kind: Kind::Archive,
            stream: stream::ARCHIVE.to_owned(),
            version: 4,
            epoch: 1,
            issued: 1000,
            expires: 2000,
            audience: Audience::Control,
            prev: [0; 32],
        }
        .sign_framed(0, [0; 32], &[]);
        let kept = Sealed { version: 4, marker: at, envelope: Some(Made { framed, body: PathBuf::new() }) };
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
        let made = make(t.dir.path(), &conn, &app.signer, 3, now).unwrap();
        let envelope = made.read();
        assert_eq!(envelope.len() as u64, made.len());
        let leftovers: Vec<String> = std::fs::read_dir(t.dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("archive."))
            .collect();
        assert_eq!(leftovers, [SEALED], "only the sealed archive stays, until every edge holds it");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(t.dir.path().join(SEALED)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "only control reads the sealed archive");
        }
        let trust = crate::keyring::load_trust(t.dir.path(), now).unwrap();
        let recovery = t.recovery();

        let (version, opened) = open(&envelope, &trust, &recovery, now).unwrap();
        assert_eq!((version, opened.created), (3, now));
        let names: Vec<&str> = opened.files.iter().map(|(name, _)| name.as_str()).collect();
        assert!(names.contains(&"signing.key") && names.contains(&"master.key"), "{names:?}");
        assert!(
            !names.contains(&"root.key") && !names.contains(&"recovery.key"),
            "offline keys never leave: {names:?}"
        );
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

    /// A payload written as it goes, its database read from a file, is the encoding of the
    /// same payload made whole: a restore decodes both alike. A database shorter than said
    /// fails.
    #[test]
    fn a_payload_written_as_it_goes_is_the_payload_encoded_whole() {
        for len in [0usize, 1, 127, 128, 300_000] {
            let database: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let files = vec![
                ("control.toml".to_owned(), serde_bytes::ByteBuf::from(b"listen = 1".to_vec())),
                ("master.key".to_owned(), serde_bytes::ByteBuf::from(vec![9; 32])),
            ];
            let mut written = Vec::new();
            write_payload(&mut written, 77, &files, database.as_slice(), len as u64).unwrap();
            let whole = Payload { format: FORMAT, created: 77, files: files.clone(), database };
            assert_eq!(written, wire::encode(&whole), "a database of {len} bytes");
        }
        let err = write_payload(&mut Vec::new(), 1, &[], &[1u8, 2][..], 3).unwrap_err();
        assert!(err.to_string().contains("2 of 3 bytes"), "{err}");
    }

    /// The archive sent from its file arrives whole, with its length said beforehand; a file
    /// cut short fails the request instead of sending less.
    #[tokio::test]
    async fn an_archive_is_sent_from_its_file_whole_and_only_whole() {
        use http_body_util::BodyExt as _;
        let t = TestControl::new(false);
        let conn = t.app.db.connect().unwrap();
        let made = make(t.dir.path(), &conn, &t.app.signer, 1, now()).unwrap();
        let body = made.body().unwrap();
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(made.len()));
        let sent = body.collect().await.unwrap().to_bytes();
        assert_eq!(sent.as_ref(), made.read().as_slice());

        // On the wire: its length said first (an edge can refuse an archive too large before
        // reading it), not sent in chunks of unknown length.
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/archive", listener.local_addr().unwrap());
        let edge = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0; 64 * 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended in its head");
                got.extend_from_slice(&buf[..n]);
            }
            let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let mut body = got[end..].to_vec();
            // Without a length, nothing more is read: the checks below fail.
            while made_len(&head) != u64::MAX && (body.len() as u64) < made_len(&head) {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the body ended early");
                body.extend_from_slice(&buf[..n]);
            }
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
            (head, body)
        });
        fn made_len(head: &str) -> u64 {
            head.lines().find_map(|l| l.strip_prefix("content-length: ")?.trim().parse().ok()).unwrap_or(u64::MAX)
        }
        let answer = t.app.http.put(&url).body(made.body().unwrap()).send().await.unwrap();
        assert!(answer.status().is_success());
        let (head, body) = edge.await.unwrap();
        assert_eq!(made_len(&head), made.len(), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        assert_eq!(body, made.read());

        let file = std::fs::OpenOptions::new().write(true).open(&made.body).unwrap();
        file.set_len(made.framed.header.body_len / 2).unwrap();
        let Err(err) = made.body().unwrap().collect().await else { panic!("a short file sent as a whole body") };
        let said = hearth_io::capped::without_url(&err);
        assert!(said.contains("shorter than its envelope"), "{said}");
    }
}
