//! The time control reckons with: Unix seconds (and milliseconds), UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now.
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
