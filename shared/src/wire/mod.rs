//! The types that travel inside envelopes, and the names of the streams they travel on.
//!
//! All of them encode with postcard (as the envelope does); lists that must have one
//! encoding (a credential set's users, a batch's entries) are kept sorted and free of repeats
//! by their constructors and checked again by [`CredentialSet::decode`] and
//! [`BatchManifest::decode`].
//!
//! Each domain has a module of its own, and every name is re-exported here (`wire::Snapshot`,
//! `wire::stream::creds`):
//! - `codec`: the ids of users and nodes, [`WireError`], and the postcard encoding with its
//!   strict ([`decode`]) and trusting ([`decode_authenticated`]) decoders, which every other
//!   module stands on;
//! - [`stream`]: the streams envelopes travel on ([`Stream`]) and their names;
//! - `links`: subscription tokens ([`SubToken`]), aliases, and the edge settings that say
//!   where links are served ([`EdgeSettings`]);
//! - `snapshot`: what a link serves ([`Snapshot`]), with the devices a user may connect
//!   (`hwid`: [`HwidPolicy`]);
//! - `ua`: the owner's User-Agent rules ([`UaRule`]);
//! - `creds`: what a node lets in ([`CredentialSet`]) and its encodings;
//! - `delta`: how a set changes ([`CredDiff`]) and the delta that carries the change
//!   ([`CredDelta`]);
//! - `usage`: a node's registration ([`NodeRecord`]), its usage reports ([`UsageReport`]) and
//!   their acknowledgement;
//! - `batch`: what control and the edge hand each other in bulk: pushes ([`BatchManifest`]),
//!   exports ([`ExportPage`]) and drains of usage reports ([`UsageDrain`]).

mod batch;
mod codec;
mod creds;
mod delta;
mod hwid;
mod links;
mod snapshot;
pub mod stream;
mod ua;
mod usage;

pub use batch::{
    BatchEntry, BatchManifest, EDGE_DISK_FULL, ExportItem, ExportPage, PushBundle, UNTRUSTED_FORWARDING_HEADER,
    UsageDrain,
};
pub use codec::{CREDS_FORMAT, NodeId, UserId, WireError, decode, decode_authenticated, encode};
pub use creds::{CredEntry, CredentialSet, DevicePolicy, EdgeAddress, Guard, MAX_ROUTING, SpeedLimit};
pub use delta::{CredDelta, CredDiff, CredsAnswer, DELTAS_HEADER, Touched, creds_answer};
pub use hwid::{DeviceKey, Forgotten, HwidPolicy};
pub use links::{
    EdgeSettings, LinkBase, LinkState, MAX_ALIAS_PATH, Mobility, SubToken, alias_path, alias_segment, is_alias_prefix,
};
pub use snapshot::{Endpoint, Identity, PortRange, Profile, ResetStrategy, Snapshot, Status, TelegramLink};
pub use stream::Stream;
pub use ua::{RuleTarget, UaRule};
pub use usage::{NodeRecord, NodeRelease, Presence, UsageAck, UsageReport, UserUsage};
