//! Every profile renderer on any snapshot (a real one from the corpus, mutated, or one built
//! field by field): the sing-box profile parses as JSON with unique tags, the mihomo profile
//! as YAML with the proxies' names unique, the base64 list decodes to one `hysteria2://` link
//! per entry (when the hosts are ones control accepts), the Surge and Loon profiles keep their
//! shape (no value ends a line or starts a section; the group lists exactly the proxies, whose
//! names are unique), and the headers are printable ASCII.
//! One format an execution, chosen by the sum of the input's bytes (so the corpus stays plain
//! snapshots, and almost any mutation of one is checked in another format): each check parses what it renders, and all of them at once ran 700 times a
//! second. (The subscription page has a target of its own, `page`.)
#![no_main]

use base64::Engine as _;
use hearth_fuzz::snapshot;
use hearth_shared::agent::Wants;
use hearth_shared::render::{self, Format, SingBoxVersion, loon, mihomo, singbox, surge, uri};
use hearth_shared::wire::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let snapshot = snapshot(data);
    let entries = render::entries(&snapshot, &[]).len();
    let format = match data.iter().map(|&b| u32::from(b)).sum::<u32>() % 5 {
        0 => {
            sing_box(&snapshot, entries);
            Format::SingBox(SingBoxVersion::OLDEST)
        }
        1 => {
            mihomo(&snapshot, entries);
            Format::Mihomo
        }
        2 => {
            line_profile(&surge::render(&snapshot, Some("https://edge.example.net/s/x")), " = hysteria2, ", entries);
            Format::Surge
        }
        3 => {
            line_profile(&loon::render(&snapshot), " = Hysteria2,", entries);
            Format::Loon
        }
        _ => {
            base64_list(&snapshot, entries);
            Format::Base64
        }
    };
    let answer = render::answer(&snapshot, Wants::Profile(format), "https://edge.example.net/s/x");
    for (name, value) in &answer.headers {
        assert!(value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()), "header {name}: {value:?}");
    }
});

fn sing_box(snapshot: &Snapshot, entries: usize) {
    for version in [SingBoxVersion::OLDEST, SingBoxVersion::PINS_PUBLIC_KEY, SingBoxVersion { major: 1, minor: 99 }] {
        let json = singbox::render(snapshot, version);
        let value: serde_json::Value = serde_json::from_str(&json).expect("the sing-box profile is JSON");
        let outbounds = value["outbounds"].as_array().expect("outbounds");
        let mut tags: Vec<&str> = outbounds.iter().map(|o| o["tag"].as_str().expect("a tag")).collect();
        assert_eq!(tags.len(), entries + 2, "the selector, one outbound per entry, direct");
        tags.sort_unstable();
        assert!(tags.windows(2).all(|pair| pair[0] != pair[1]), "tags are unique");
    }
}

fn mihomo(snapshot: &Snapshot, entries: usize) {
    let yaml = mihomo::render(snapshot);
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).expect("the mihomo profile is YAML");
    let proxies = value["proxies"].as_sequence().expect("proxies");
    assert_eq!(proxies.len(), entries);
    let mut names: Vec<String> = proxies.iter().map(|p| p["name"].as_str().expect("a name").to_lowercase()).collect();
    names.push(mihomo::GROUP.to_lowercase());
    names.sort_unstable();
    assert!(names.windows(2).all(|pair| pair[0] != pair[1]), "mihomo refuses a profile with a name twice");
}

fn base64_list(snapshot: &Snapshot, entries: usize) {
    let list = uri::base64_list(snapshot);
    let links = base64::engine::general_purpose::STANDARD.decode(&list).expect("the list is base64");
    let links = String::from_utf8(links).expect("the links are text");
    assert_eq!(links, uri::links(snapshot));
    let hosts_control_accepts = snapshot.endpoints.iter().all(|endpoint| {
        endpoint.host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    });
    if hosts_control_accepts {
        assert_eq!(links.split('\n').count(), entries, "one link per line");
        assert!(links.split('\n').all(|link| link.starts_with("hysteria2://") && link.matches('#').count() == 1));
    }
}

/// A Surge or Loon profile: its sections in order, every line in `[Proxy]` a comment or one
/// proxy (`kind` after its name) and at most one per entry, the group listing exactly them,
/// names unique (any case), `FINAL` last.
fn line_profile(profile: &str, kind: &str, entries: usize) {
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in profile.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name, Vec::new()));
        } else if !line.is_empty() && !line.starts_with('#') {
            sections.last_mut().expect("nothing before [General] but comments").1.push(line);
        }
    }
    let names: Vec<&str> = sections.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["General", "Proxy", "Proxy Group", "Rule"], "{profile}");
    let proxies: Vec<&str> = sections[1]
        .1
        .iter()
        .map(|line| line.split_once(kind).unwrap_or_else(|| panic!("not a proxy: {line:?}")).0)
        .collect();
    assert!(!proxies.is_empty() && proxies.len() <= entries.max(1), "{profile}");
    let mut lower: Vec<String> = proxies.iter().map(|name| name.to_lowercase()).collect();
    lower.sort_unstable();
    assert!(lower.windows(2).all(|pair| pair[0] != pair[1]), "names are unique");
    let (group, members) = sections[2].1[0].split_once(" = select").expect("the select group");
    assert_eq!(group, "Proxy");
    let members: Vec<&str> = members.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
    assert_eq!(members, proxies);
    assert_eq!(sections[3].1, ["FINAL,Proxy"]);
}
