//! What control tells the edge of a user's devices, inside the sealed snapshot (the edge's
//! registry of them is [`crate::devices`]).

use serde::{Deserialize, Serialize};

/// A device's key: the first 16 bytes of SHA-256 of its `x-hwid`.
pub type DeviceKey = [u8; 16];

/// What control tells the edge about a user's devices, inside the sealed snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HwidPolicy {
    /// The most devices the link serves (0: not limited at the edge).
    pub limit: u32,
    /// Devices the owner deleted: each leaves the registry (a device that fetches again after
    /// `before` is a new device).
    pub forgotten: Vec<Forgotten>,
}

impl HwidPolicy {
    /// Whether the snapshot carries nothing of it (and keeps the encoding edges before it read).
    pub fn is_off(&self) -> bool {
        self.limit == 0 && self.forgotten.is_empty()
    }
}

/// A device the owner deleted, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// The device.
    pub key: DeviceKey,
    /// Registered at or before this (Unix seconds): deleted.
    pub before: u64,
}
