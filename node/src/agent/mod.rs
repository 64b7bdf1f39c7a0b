//! The agent: pulls the node's signed credential set and applies it live.
//!
//! Pulls long-poll control; when control does not answer they go to the edges the set lists
//! (or the one edge the node learned), in turn. A new set is verified (signature, role,
//! audience = this node, stream, version, expiry), written to disk atomically, then swapped
//! into the live table. A refused envelope changes nothing and is logged as what it is
//! ([`AcceptError`]); a set that could not be stored is not applied, and the next pull tries
//! again. The key records that come with a pull are taken here too (a key rotation).
//!
//! Its decisions are plain data with time passed in, tested without IO: where to fall back
//! to ([`edges`]) and when to ask again ([`pulls`]); [`pull`] asks and [`accept`] verifies,
//! stores and applies around them. The agent's other duties live beside it, as more methods
//! on [`Agent`]: usage reports in [`crate::usage`], self-updates after each answered pull in
//! `crate::update::drive`, and the TLS pin to control in [`crate::pin`]. Every request they
//! make is signed in [`state`] ([`Agent::signed`]) and goes to control or to the edges
//! [`edges`] picks.

mod accept;
mod edges;
mod pull;
mod pulls;
mod state;
#[cfg(test)]
mod tests;

pub(crate) use edges::{Base, Edges};
pub(crate) use state::{Agent, Held, initial_edge};
