//! What Hearth's native programs (control and the node) share beyond `hearth-shared`, which
//! does no IO (it builds for wasm): reading a peer's HTTP answer with a cap on its size
//! ([`capped`]), and how logs are set up ([`logs`]).

pub mod capped;
pub mod logs;
