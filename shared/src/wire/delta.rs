//! How a node's credential set changes: what differs between two sets ([`CredDiff`],
//! [`Touched`]) and how a set takes a change, the signed change to the last full set a node
//! holds ([`CredDelta`]), and which of the full set and the delta answers a node's pull.

use serde::{Deserialize, Serialize};

use super::codec::{NodeId, UserId, WireError, decode, encode};
use super::creds::{CredEntry, CredentialSet, EntryV4, EntryV5, entry_of};
use crate::Digest;

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

// How a set changes: the set itself is `creds`'s; what changes in it, and the delta that
// carries the change, are this module's.
impl CredentialSet {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::DevicePolicy;
    use crate::wire::creds::testing::{entry, set_strategy};

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

        /// A delta from `a` to `b` survives its encoding, makes `b` of `a` and nothing but `b`
        /// of `b`, and its first bytes name its node and base.
        #[test]
        fn a_delta_makes_the_set_it_names(a in set_strategy(), b in set_strategy(), base in 1u64..1 << 40) {
            let (a_digest, b_digest) = (crate::sha256(&a.encode()), crate::sha256(&b.encode()));
            let delta = CredDelta::between(&a, base, a_digest, &b, b_digest).unwrap();
            let bytes = delta.encode();
            proptest::prop_assert_eq!(CredDelta::decode(&bytes).unwrap(), delta.clone());
            proptest::prop_assert_eq!(CredDelta::base_of(&bytes), Some((5, base)));
            proptest::prop_assert_eq!(a.patched(&delta).unwrap(), b.clone());
            // On the set it makes it is refused, or makes that set again (a diff of changed
            // entries `b` already holds): never another set.
            if let Ok(made) = b.patched(&delta) {
                proptest::prop_assert_eq!(made, b.clone());
            }
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

    }
}
