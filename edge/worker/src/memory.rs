//! What this isolate keeps between fetches: its memory of the links and client networks, the
//! owner's settings read last, and how many fetches were answered at once. Both the full
//! handler ([`crate::front`]) and the synchronous answer ([`crate::held`]) work on it.

use hearth_edge::config::EdgeConfig;
use hearth_edge::isolate::Isolate;
use hearth_edge::serve;

thread_local! {
    /// What this isolate keeps of the links (their envelopes, the set of live ones, their
    /// counts) and of client networks: see [`hearth_edge::isolate`].
    static ISOLATE: std::cell::RefCell<Option<Isolate>> = const { std::cell::RefCell::new(None) };
    /// The owner's settings in force (User-Agent rules, link bases) and when they were read:
    /// asked of the Control object at most once a minute per isolate.
    pub(crate) static OWNER: std::cell::RefCell<(u64, std::rc::Rc<serve::Owner>)> = std::cell::RefCell::new((0, std::rc::Rc::new(serve::Owner::default())));
    /// Fetches answered by [`crate::held`], for the health answer (the tests see the path
    /// taken).
    pub(crate) static ANSWERED_AT_ONCE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Works on this isolate's memory.
pub(crate) fn isolate<T>(config: &EdgeConfig, f: impl FnOnce(&mut Isolate) -> T) -> T {
    ISOLATE.with_borrow_mut(|held| f(held.get_or_insert_with(|| Isolate::new(config.feed_ms))))
}

/// How long an isolate keeps the owner's settings before asking again.
const OWNER_FOR_MS: u64 = 60_000;

/// The owner's settings in force at `now`, when this isolate read them within the minute.
pub(crate) fn owner_read(now: u64) -> Option<std::rc::Rc<serve::Owner>> {
    OWNER.with_borrow(|(read, owner)| (*read != 0 && now < read + OWNER_FOR_MS).then(|| owner.clone()))
}
