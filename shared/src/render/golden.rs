//! Golden files for every format: the renderers' output for fixed snapshots, compared byte
//! for byte with `shared/tests/golden/`. The sing-box files are also fed to the real
//! `sing-box check` by the integration tests (`tests/tests/sing_box.rs`); the Surge and Loon
//! files (what the edge serves for [`LINK`]) are checked here against the keys each app's
//! manual documents (no app of theirs runs here).
//!
//! After a deliberate change of output, rewrite them with
//! `HEARTH_BLESS=1 cargo test -p hearth-shared golden` and review the diff.

use std::path::PathBuf;

use super::tests::sample_snapshot;
use super::{Format, SingBoxVersion, answer, headers, render, uri};
use crate::agent::Wants;
use crate::wire::{Snapshot, Status};

/// The link the Surge and Loon files are served for (Surge's managed profile names it).
const LINK: &str = "https://edge.example.net/s/TOKEN";

fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("HEARTH_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(expected == actual, "{name} differs from its golden file:\n--- golden\n{expected}\n--- rendered\n{actual}");
}

const V1_11: Format = Format::SingBox(SingBoxVersion { major: 1, minor: 11 });
const V1_13: Format = Format::SingBox(SingBoxVersion { major: 1, minor: 13 });

fn all(prefix: &str, snapshot: &Snapshot) {
    check(&format!("{prefix}.links.txt"), &format!("{}\n", uri::links(snapshot)));
    check(&format!("{prefix}.base64.txt"), &render(snapshot, Format::Base64));
    check(&format!("{prefix}.mihomo.yaml"), &render(snapshot, Format::Mihomo));
    check(&format!("{prefix}.sing-box-1.11.json"), &render(snapshot, V1_11));
    check(&format!("{prefix}.sing-box-1.13.json"), &render(snapshot, V1_13));
    let surge = answer(snapshot, Wants::Profile(Format::Surge), LINK).body;
    super::surge::tests::check(&surge);
    check(&format!("{prefix}.surge.conf"), &surge);
    let loon = answer(snapshot, Wants::Profile(Format::Loon), LINK).body;
    super::loon::tests::check(&loon);
    check(&format!("{prefix}.loon.conf"), &loon);
    let mut text = String::new();
    for format in [Format::Base64, Format::Mihomo, V1_11, Format::Surge, Format::Loon] {
        text.push_str(&format!("# {format:?}\n"));
        for (name, value) in headers(snapshot, format) {
            text.push_str(&format!("{name}: {value}\n"));
        }
    }
    check(&format!("{prefix}.headers.txt"), &text);
}

#[test]
fn golden_active() {
    all("active", &sample_snapshot());
}

#[test]
fn golden_expired() {
    let mut snapshot = sample_snapshot();
    snapshot.status = Status::Expired;
    snapshot.profile.announce = None;
    snapshot.profile.support_url = None;
    snapshot.profile.web_page_url = None;
    all("expired", &snapshot);
}
