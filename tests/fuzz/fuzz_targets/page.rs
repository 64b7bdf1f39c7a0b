//! The subscription page on any snapshot, in every language and for every device the fuzzer
//! picks: it renders; everything the snapshot says is escaped (no tag can come from it: the
//! page has exactly the template's server entries, one per entry for a user who can connect
//! to a server and none otherwise, and the template's one script only then); and the answer's headers are
//! printable ASCII. Slower than the other targets: on a computer every server gets a QR code.
#![no_main]

use hearth_fuzz::snapshot;
use hearth_shared::agent::Wants;
use hearth_shared::render::page::{Lang, Platform, Viewer};
use hearth_shared::render::{self, page};
use libfuzzer_sys::fuzz_target;

const LINK: &str = "https://edge.example.net/s/PB3xB6rGXdP0tOEkbqkQpK2ZB0aHcYdzWbNvGRdWUOo";

fuzz_target!(|data: &[u8]| {
    let snapshot = snapshot(data);
    let pick = data.first().copied().unwrap_or(0) as usize;
    let viewer = Viewer { lang: Lang::ALL[pick % Lang::ALL.len()], platform: Platform::ALL[pick / 4 % Platform::ALL.len()] };
    let answer = render::answer_at(&snapshot, Wants::Page, LINK, &Default::default(), viewer);
    for (name, value) in &answer.headers {
        assert!(value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()), "header {name}: {value:?}");
    }
    let html = answer.body;
    assert!(html.starts_with("<!doctype html>") && html.ends_with("</main></body></html>"));
    // A user who can connect but reaches no server yet gets the "being set up" page: nothing to
    // import, so neither servers nor the other apps nor the script.
    let importable = snapshot.status.can_connect() && !snapshot.endpoints.is_empty();
    let servers = if importable { render::entries(&snapshot, &[]).len() } else { 0 };
    let can_connect = usize::from(importable);
    assert_eq!(html.matches("<details class=").count(), servers + can_connect, "the servers and the other apps, none from the snapshot's text");
    assert_eq!(html.matches("<input ").count(), can_connect + servers);
    assert_eq!(html.matches("<script").count(), can_connect);
    for text in [snapshot.name.as_str(), snapshot.profile.title.as_str()] {
        let escaped = page::escape(text);
        assert!(!escaped.contains(['<', '>', '"', '\'']), "escaped: {escaped:?}");
    }
});
