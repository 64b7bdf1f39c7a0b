//! Hearth's edge as a Cloudflare Worker.
//!
//! The logic is `hearth-edge`'s; this crate puts it on Cloudflare's runtime:
//!
//! - the Worker itself ([`front`]) routes every request, answers subscription fetches (it
//!   opens and renders the sealed snapshot, so the token never reaches storage), and checks
//!   control's push token;
//! - `Links` Durable Objects ([`links`]) hold the links, sharded by token hash, each row with
//!   its hourly window, so one call both checks the limit and reads the snapshot;
//! - one `Network` Durable Object per client network ([`network`]) holds its token bucket and
//!   its unknown-link guard;
//! - one `Control` Durable Object ([`control`]) holds the trust, node credential sets and
//!   registrations, the usage queue and the archive, and takes pushes.
//!
//! Every Durable Object keeps its state in SQLite (no KV: it is eventually consistent). On
//! anything but wasm32 this crate is empty: the native edge is `hearth-edge`'s binary.

#[cfg(target_arch = "wasm32")]
mod control;
#[cfg(target_arch = "wasm32")]
mod front;
#[cfg(target_arch = "wasm32")]
mod links;
#[cfg(target_arch = "wasm32")]
mod network;
#[cfg(target_arch = "wasm32")]
mod runtime;
