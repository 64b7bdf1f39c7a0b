//! What Hearth's native programs (control and the node) share beyond `hearth-shared`, which
//! does no IO (it builds for wasm): reading a peer's HTTP answer with a cap on its size
//! ([`capped`]), and how logs are set up ([`logs`]); for the tests, the check of the manual's
//! pages the code makes ([`made`], feature `made`).

pub mod capped;
pub mod logs;
#[cfg(feature = "made")]
pub mod made;
