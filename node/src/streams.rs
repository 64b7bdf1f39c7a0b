//! The TCP streams the node relays, for `/dump/streams` of the traffic stats API
//! ([`crate::stats`]): who opened each, on which connection, to where, in which state, and
//! what it moved. Kept only while the API is on ([`Streams::enable`]); otherwise tracing a
//! stream costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use hearth_shared::wire::UserId;

/// Where a stream is, in the official server's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Opened by the client; its request not read yet.
    Initial = 0,
    /// Connecting to the target.
    Connecting = 2,
    /// Relaying.
    Established = 3,
}

impl State {
    /// The official server's name for a state (`hook` is its sniffing, which Hearth has not).
    pub(crate) fn name(state: u8) -> &'static str {
        match state {
            0 => "init",
            1 => "hook",
            2 => "connect",
            3 => "estab",
            _ => "closed",
        }
    }
}

/// One stream's record.
#[derive(Debug)]
pub(crate) struct Traced {
    pub(crate) user: UserId,
    /// The connection's number (the official server's `connection`).
    pub(crate) connection: u32,
    /// The QUIC stream id.
    pub(crate) stream: u64,
    state: AtomicU8,
    /// `host:port` as the client asked for it.
    req_addr: OnceLock<String>,
    /// Bytes from the client (its upload).
    tx: AtomicU64,
    /// Bytes to the client (its download).
    rx: AtomicU64,
    /// When the stream opened, nanoseconds since the Unix epoch.
    initial: u64,
    /// When it last moved a byte (or opened), nanoseconds since the Unix epoch.
    last_active: AtomicU64,
}

/// A stream's record as read at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) state: &'static str,
    pub(crate) user: UserId,
    pub(crate) connection: u32,
    pub(crate) stream: u64,
    pub(crate) req_addr: String,
    pub(crate) tx: u64,
    pub(crate) rx: u64,
    pub(crate) initial: u64,
    pub(crate) last_active: u64,
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Traced {
    pub(crate) fn set(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub(crate) fn requested(&self, address: &str) {
        let _ = self.req_addr.set(address.to_owned());
    }

    /// Counts bytes from the client.
    pub(crate) fn up(&self, bytes: u64) {
        self.tx.fetch_add(bytes, Ordering::Relaxed);
        self.last_active.store(now_nanos(), Ordering::Relaxed);
    }

    /// Counts bytes to the client.
    pub(crate) fn down(&self, bytes: u64) {
        self.rx.fetch_add(bytes, Ordering::Relaxed);
        self.last_active.store(now_nanos(), Ordering::Relaxed);
    }

    fn seen(&self) -> Seen {
        Seen {
            state: State::name(self.state.load(Ordering::Relaxed)),
            user: self.user,
            connection: self.connection,
            stream: self.stream,
            req_addr: self.req_addr.get().cloned().unwrap_or_default(),
            tx: self.tx.load(Ordering::Relaxed),
            rx: self.rx.load(Ordering::Relaxed),
            initial: self.initial,
            last_active: self.last_active.load(Ordering::Relaxed),
        }
    }
}

/// The streams open now, when the API is on.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    on: AtomicBool,
    next_connection: AtomicU32,
    open: Mutex<HashMap<(u32, u64), Arc<Traced>>>,
}

/// Keeps a stream in [`Streams`] while it lives.
pub(crate) struct Tracing<'a> {
    streams: &'a Streams,
    traced: Arc<Traced>,
}

impl std::ops::Deref for Tracing<'_> {
    type Target = Traced;

    fn deref(&self) -> &Traced {
        &self.traced
    }
}

impl Drop for Tracing<'_> {
    fn drop(&mut self) {
        let key = (self.traced.connection, self.traced.stream);
        self.streams.open.lock().expect("streams lock").remove(&key);
    }
}

impl Streams {
    /// Starts keeping streams (the API is on).
    pub(crate) fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// A number for a new connection (0 when streams are not kept).
    pub(crate) fn connection(&self) -> u32 {
        if !self.on.load(Ordering::Relaxed) {
            return 0;
        }
        self.next_connection.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// Keeps `stream` of `connection` (a number from [`Streams::connection`]) until the value
    /// is dropped; `None` when streams are not kept.
    pub(crate) fn trace(&self, user: UserId, connection: u32, stream: u64) -> Option<Tracing<'_>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let now = now_nanos();
        let traced = Arc::new(Traced {
            user,
            connection,
            stream,
            state: AtomicU8::new(State::Initial as u8),
            req_addr: OnceLock::new(),
            tx: AtomicU64::new(0),
            rx: AtomicU64::new(0),
            initial: now,
            last_active: AtomicU64::new(now),
        });
        self.open.lock().expect("streams lock").insert((connection, stream), traced.clone());
        Some(Tracing { streams: self, traced })
    }

    /// Every stream open now, by user (as text, as the official server sorts its ids), then
    /// connection, then stream.
    pub(crate) fn dump(&self) -> Vec<Seen> {
        let mut seen: Vec<Seen> = self.open.lock().expect("streams lock").values().map(|t| t.seen()).collect();
        seen.sort_by_cached_key(|s| (s.user.to_string(), s.connection, s.stream));
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_kept_only_while_on_and_while_they_live() {
        let streams = Streams::default();
        assert_eq!(streams.connection(), 0);
        assert!(streams.trace(1, 0, 0).is_none());
        streams.enable();
        let (first, second) = (streams.connection(), streams.connection());
        assert!(first != 0 && second != first);
        let a = streams.trace(10, first, 0).unwrap();
        let b = streams.trace(9, second, 4).unwrap();
        a.requested("example.com:443");
        a.set(State::Established);
        a.up(5);
        a.down(7);
        let dump = streams.dump();
        assert_eq!(dump.iter().map(|s| s.user).collect::<Vec<_>>(), vec![10, 9], "\"10\" sorts before \"9\"");
        assert_eq!(
            (dump[0].state, dump[0].req_addr.as_str(), dump[0].tx, dump[0].rx),
            ("estab", "example.com:443", 5, 7)
        );
        assert_eq!((dump[1].state, dump[1].req_addr.as_str()), ("init", ""));
        assert!(dump[0].last_active >= dump[0].initial);
        drop(a);
        assert_eq!(streams.dump().len(), 1);
        drop(b);
        assert!(streams.dump().is_empty());
    }
}
