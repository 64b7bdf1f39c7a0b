//! Hearth's edge as a Cloudflare Worker.
//!
//! The logic is `hearth-edge`'s; this crate puts it on Cloudflare's runtime:
//!
//! - the Worker itself ([`front`]) routes every request and answers subscription fetches (it
//!   opens and renders the sealed snapshot, so the token never reaches storage) from what
//!   its isolate keeps in memory ([`hearth_edge::isolate`]): a warm fetch makes no Durable
//!   Object call;
//! - `Links` Durable Objects ([`links`]) hold the links, sharded by token hash, each row with
//!   its hourly window, which sums the fetches isolates count;
//! - one `Control` Durable Object ([`control`]) holds the trust, node credential sets and
//!   registrations, the usage queue and the archive, takes pushes, and keeps the [`feed`] of
//!   link changes isolates ask.
//!
//! Every Durable Object keeps its state in SQLite (no KV: it is eventually consistent). On
//! anything but wasm32 this crate is empty: the native edge is `hearth-edge`'s binary.

#[cfg(target_arch = "wasm32")]
mod control;
#[cfg(target_arch = "wasm32")]
mod feed;
#[cfg(target_arch = "wasm32")]
mod front;
#[cfg(target_arch = "wasm32")]
mod held;
#[cfg(target_arch = "wasm32")]
mod links;
#[cfg(target_arch = "wasm32")]
mod memory;
#[cfg(target_arch = "wasm32")]
mod runtime;
#[cfg(target_arch = "wasm32")]
mod values;
