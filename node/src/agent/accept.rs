//! A pulled credential set or delta verified and applied, with the key records that came
//! with it (a key rotation); what refuses one ([`AcceptError`]).

use std::sync::Arc;

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::Role;
use hearth_shared::trust::{self, Expect, Trust, VerifyError};
use hearth_shared::wire::{self, CredentialSet, NodeId, stream};

use super::state::{Agent, Held};
use crate::state::{Basis, CREDS_FILE, DELTA_FILE, DeltaError};

/// Why a pulled credential set was not applied. In every case the live table, the set held
/// and the set on disk are as they were: the node goes on serving the set it holds.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    /// The envelope does not verify (size, form, signer and role, audience, stream, version,
    /// expiry, body hash): not control's, not for this node, or not newer than the set held.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// The envelope verifies but its body is not a credential set.
    #[error("bad body: not a credential set: {0}")]
    NotASet(wire::WireError),
    /// A credential set in a format newer than this node reads: the node needs an update.
    #[error(
        "a credential set in format {0}, newer than this node reads (format {max} at most): update the node",
        max = wire::CREDS_FORMAT
    )]
    NewerFormat(u64),
    /// A delta that verifies but does not apply: its body, the full set it is on (the next
    /// pull brings the full set), or the set it makes.
    #[error(transparent)]
    Delta(#[from] DeltaError),
    /// A credential set, addressed to this node and on its stream, that names another node.
    #[error("a set for another node (node {found})")]
    OtherNode {
        /// The node the set names.
        found: NodeId,
    },
    /// The set is good but could not be written to the state directory (a full or read-only
    /// disk, a missing directory): the node's problem, not the set's. It was not applied, as
    /// a set is applied only once a restart would read it back.
    #[error("could not write it to the state directory: {0:#}")]
    Store(anyhow::Error),
}

impl Agent {
    /// The trust after the key records that came with a pull (the held trust when there are
    /// none, or they do not verify: a rotation only ever comes signed by the root).
    fn with_chain(&self, chain: Option<&[Vec<u8>]>) -> Trust {
        let mut trust = self.trust.lock().expect("trust lock").clone();
        if let Some(chain) = chain
            && let Err(e) = trust.accept_chain(chain, crate::now())
        {
            tracing::warn!(error = %e, "refused the key records sent with the pull");
            return self.trust.lock().expect("trust lock").clone();
        }
        trust
    }

    /// Keeps a trust that took a rotation: on disk first, so a restart verifies with it.
    fn adopt(&self, trust: Trust) {
        let mut held = self.trust.lock().expect("trust lock");
        if *held == trust {
            return;
        }
        let kept = self
            .state
            .write("trust.prev.bin", &hearth_shared::wire::encode(&*held))
            .and_then(|()| self.state.write("trust.bin", &hearth_shared::wire::encode(&trust)));
        if let Err(e) = kept {
            tracing::error!(error = %e, "could not keep the rotated keys; trying again at the next pull");
            return;
        }
        for role in [Role::Root, Role::Signing, Role::Release] {
            if trust.role(role) != held.role(role) {
                tracing::info!(role = %role, version = trust.role_version(role), "took a key rotation");
            }
        }
        *held = trust;
    }

    /// Takes the key records of an answer that brought no new set. A new signing key waits
    /// for the set it signs: the set on disk must stay verifiable by the trust on disk.
    pub(super) fn take_chain(&self, chain: Option<&[Vec<u8>]>) {
        let trust = self.with_chain(chain);
        if trust.role(Role::Signing) == self.trust.lock().expect("trust lock").role(Role::Signing) {
            self.adopt(trust);
        }
    }

    /// Verifies and applies a pulled set or delta, with the key records that came with it.
    /// Returns whether it was new. When it is refused, or cannot be stored, the live table
    /// and the set held are as they were ([`AcceptError`] says which). A full set becomes the
    /// basis deltas apply to; a delta applies to that basis and must make the very set
    /// control built. What it logs is in a span that names the version once it verifies.
    #[tracing::instrument(level = "warn", skip_all, fields(version = tracing::field::Empty))]
    pub(crate) fn accept(&self, bytes: &[u8], chain: Option<&[Vec<u8>]>) -> Result<bool, AcceptError> {
        // From the answer in hand to the live table: what a change waits for at the node.
        let received = std::time::Instant::now();
        let node = self.settings.node;
        let held = self.held.lock().expect("held lock").state;
        let candidate = self.with_chain(chain);
        // Versions run across both streams, so what was applied last is held against either.
        let verify = |kind, name: &str| {
            let expect = Expect { kind, audience: Audience::Node(node), stream: name };
            trust::verify(bytes, &candidate, &expect, held.as_ref(), crate::now())
        };
        let (verified, is_delta) = match verify(Kind::CredentialSet, &stream::creds(node)) {
            Err(VerifyError::WrongType { found: Kind::CredDelta, .. }) => {
                (verify(Kind::CredDelta, &stream::creds_delta(node))?, true)
            }
            verified => (verified?, false),
        };
        let version = verified.envelope.header.version;
        tracing::Span::current().record("version", version);
        if verified.unchanged {
            self.take_chain(chain);
            return Ok(false);
        }
        // A delta is applied by the users it touches, and becomes what the basis serves; a
        // full set becomes the basis.
        let (set, basis, touched) = if is_delta {
            let basis = self.held.lock().expect("held lock").basis.clone();
            let Some(basis) = basis else {
                let base = wire::CredDelta::base_of(&verified.envelope.body).map_or(0, |(_, base)| base);
                return Err(DeltaError::OtherBase { base }.into());
            };
            let (set, diff) = basis.take(&verified.envelope.body)?;
            let touched = basis.touched(&diff);
            (Arc::new(set), Basis { served: Some(Arc::new(diff)), ..basis }, Some(touched))
        } else {
            let set = CredentialSet::decode(&verified.envelope.body).map_err(|e| match e {
                wire::WireError::NewerFormat(format) => AcceptError::NewerFormat(format),
                e => AcceptError::NotASet(e),
            })?;
            if set.node != node {
                return Err(AcceptError::OtherNode { found: set.node });
            }
            let set = Arc::new(set);
            let basis = Basis { version, digest: verified.envelope.header.body_hash, set: set.clone(), served: None };
            (set, basis, None)
        };
        let verified_in = received.elapsed();
        // The trust first: a set on disk signed by a retired key is still read at start with
        // the trust it replaced (`trust.prev.bin`), never a new set without its trust.
        self.adopt(candidate);
        // Not on disk, not applied: the next pull tries again. A full set replaces the delta
        // on the set before it (one left by a crash here names an older base: not read).
        if is_delta {
            self.state.write(DELTA_FILE, bytes).map_err(AcceptError::Store)?;
        } else {
            self.state.write(CREDS_FILE, bytes).map_err(AcceptError::Store)?;
            let _ = std::fs::remove_file(self.state.path(DELTA_FILE));
        }
        let stored_in = received.elapsed() - verified_in;
        let started = std::time::Instant::now();
        let applied = match &touched {
            Some(touched) => self.live.apply_touched(&set, touched),
            None => self.live.apply(&set),
        };
        self.live.route_by(set.routing(), &self.key, &self.settings.geo_files());
        self.take_edges(&set);
        *self.held.lock().expect("held lock") = Held { state: Some(verified.state()), basis: Some(basis) };
        self.live.version.store(version, std::sync::atomic::Ordering::Relaxed);
        self.live.expires.store(verified.envelope.header.expires, std::sync::atomic::Ordering::Relaxed);
        // `version` stays on the line as well as in the span: the suite's tools read it there,
        // as `version=<n>` (tests/src/bin/hearth-suite.rs).
        tracing::info!(
            version,
            delta = is_delta,
            bytes = bytes.len(),
            users = applied.users,
            removed = applied.removed,
            closed = applied.closed,
            limits_changed = applied.limited,
            micros = started.elapsed().as_micros() as u64,
            verify_micros = verified_in.as_micros() as u64,
            store_micros = stored_in.as_micros() as u64,
            total_micros = received.elapsed().as_micros() as u64,
            "applied a new credential set"
        );
        Ok(true)
    }
}
