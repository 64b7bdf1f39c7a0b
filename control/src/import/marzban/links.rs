//! Old subscription links checked as the panel checks them: found in a list of the links in
//! use (an access log, or any text), each token's signature checked with the panel's secret
//! (every scheme Marzban and PasarGuard signed with), its user found, and made after the user
//! and after the user's links were last revoked. Those that pass become the user's aliases.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac as _;
use serde_json::Value;
use subtle::ConstantTimeEq as _;

use super::user::{Flavor, Row};
use crate::import::incoming::{MAX_ALIASES, Skipped};

/// The user an old link names, and when it was made.
#[derive(Debug, PartialEq, Eq)]
enum Who {
    Name(String),
    Id(i64),
}

const JWT_HEAD: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.";

fn hmac(secret: &str, text: &str) -> [u8; 32] {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    mac.finalize().into_bytes().into()
}

fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Whom a subscription token names and when it was made, if the panel signed it: Marzban's
/// `b64(username,time)` with the first 10 characters of `b64(sha256(that, secret))` (0.5 and
/// later, and PasarGuard to 3.2), its subscription JWT (before 0.5), and PasarGuard's
/// `b64(v3,id,time)` with 10 hex characters (4.0 to 5.0) or `.` and an HMAC-SHA256 (5.1 on).
fn claim(token: &str, secret: &str, flavor: Flavor) -> Option<(Who, u64)> {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if token.len() < 15 || token.len() > 512 || !token.chars().all(|c| alphabet(c) || c == '.') {
        return None;
    }
    if let Some(rest) = token.strip_prefix(JWT_HEAD) {
        let (body, signature) = rest.split_once('.')?;
        let want = URL_SAFE_NO_PAD.encode(hmac(secret, &format!("{JWT_HEAD}{body}")));
        if !same(&want, signature) {
            return None;
        }
        let body: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        let name = body.get("sub")?.as_str().filter(|s| !s.is_empty())?;
        if body.get("access")?.as_str()? != "subscription" {
            return None;
        }
        return Some((Who::Name(name.to_owned()), body.get("iat")?.as_u64()?));
    }
    let text = match token.rsplit_once('.') {
        Some((payload, signature)) if flavor == Flavor::PasarGuard => {
            same(&URL_SAFE_NO_PAD.encode(hmac(secret, payload)), signature).then_some(payload)?
        }
        Some(_) => return None,
        None => {
            let (payload, signature) = token.split_at(token.len() - 10);
            let digest = hearth_shared::sha256(format!("{payload}{secret}").as_bytes());
            let b64 = URL_SAFE_NO_PAD.encode(digest);
            let hex = hex::encode(digest);
            let ok = same(&b64[..10], signature) || (flavor == Flavor::PasarGuard && same(&hex[..10], signature));
            ok.then_some(payload)?
        }
    };
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(text).ok()?).ok()?;
    let fields: Vec<&str> = text.split(',').collect();
    match fields.as_slice() {
        ["v2" | "v3", id, at] if flavor == Flavor::PasarGuard => Some((Who::Id(id.parse().ok()?), at.parse().ok()?)),
        [name, at] => Some((Who::Name((*name).to_owned()), at.parse().ok()?)),
        [name, at, ..] if flavor == Flavor::Marzban => Some((Who::Name((*name).to_owned()), at.parse().ok()?)),
        _ => None,
    }
}

/// Why an old link is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Refusal {
    NotSigned,
    NoSuchUser,
    BeforeUser,
    Revoked,
}

impl Refusal {
    fn says(self) -> &'static str {
        match self {
            Refusal::NotSigned => "not signed by this panel",
            Refusal::NoSuchUser => "of no user in this panel",
            Refusal::BeforeUser => "made before their user (a user deleted and made again)",
            Refusal::Revoked => "revoked in the panel",
        }
    }
}

/// The most bytes of one line of a links list read (longer lines are cut).
const LINE_BYTES: usize = 64 << 10;
/// The most bytes of a links list read.
pub(crate) const LINKS_BYTES: u64 = 4 << 30;

/// The old links in `list` (an access log, or any text): each `/<path>/<token>` in a request
/// or address, with the client type after it if any (`/sub/<token>/clash-meta`: an alias as
/// the app fetches it), and each line that is a token alone (under `/sub/`). Yields the alias
/// path and the token. The panels' `info` and `usage` pages under a link are not links.
fn candidates(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let bare = line.trim();
    if bare.len() >= 15 && bare.chars().all(token_char) {
        found.push((format!("/sub/{bare}"), bare.to_owned()));
        return found;
    }
    for piece in line.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>')) {
        let path = match piece.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("", |at| &rest[at..]),
            None => piece,
        };
        if !path.starts_with('/') {
            continue;
        }
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let Some(at) = segments.iter().skip(2).position(|s| s.len() >= 15 && s.chars().all(token_char)) else {
            continue;
        };
        let at = at + 2;
        match &segments[at + 1..] {
            [] => {}
            [kind] if !matches!(*kind, "info" | "usage") && kind.len() <= 32 => {}
            _ => continue,
        }
        found.push((segments.join("/"), segments[at].to_owned()));
    }
    found
}

/// The old paths each user (by id in the panel) gets as aliases.
pub(super) type Aliases = HashMap<i64, Vec<String>>;

/// Old links checked: the aliases each user gets (newest first, at most [`MAX_ALIASES`]),
/// and what was refused.
pub(super) fn links(
    list: &mut dyn BufRead,
    rows: &[Row],
    secret: &str,
    flavor: Flavor,
) -> anyhow::Result<(Aliases, Vec<Skipped>)> {
    let by_name: HashMap<&str, &Row> = rows.iter().map(|row| (row.username.as_str(), row)).collect();
    let by_id: HashMap<i64, &Row> = rows.iter().map(|row| (row.id, row)).collect();
    let mut taken: HashMap<i64, Vec<(u64, String)>> = HashMap::new();
    let mut refused: HashMap<Refusal, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut line = Vec::new();
    let mut read = 0u64;
    loop {
        line.clear();
        let n = std::io::Read::take(&mut *list, LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
            .context("reading the links list")?;
        if n == 0 {
            break;
        }
        read += n as u64;
        anyhow::ensure!(read <= LINKS_BYTES, "the links list is over {} GiB", LINKS_BYTES >> 30);
        for (path, token) in candidates(&String::from_utf8_lossy(&line)) {
            if !seen.insert(path.clone()) {
                continue;
            }
            let verdict = match claim(&token, secret, flavor) {
                None => Err(Refusal::NotSigned),
                Some((who, at)) => {
                    let row = match who {
                        Who::Name(name) => by_name.get(name.as_str()),
                        Who::Id(id) => by_id.get(&id),
                    };
                    match row {
                        None => Err(Refusal::NoSuchUser),
                        Some(row) if at < row.created => Err(Refusal::BeforeUser),
                        Some(row) if at < row.revoked => Err(Refusal::Revoked),
                        Some(row) => Ok((row.id, at)),
                    }
                }
            };
            match verdict {
                Ok((id, at)) => taken.entry(id).or_default().push((at, path)),
                // A path that only looks like a link (a long file name) is not counted.
                Err(Refusal::NotSigned) if !path.starts_with("/sub/") => {}
                Err(why) => *refused.entry(why).or_default() += 1,
            }
        }
    }
    let mut aliases = HashMap::new();
    let mut dropped = 0;
    for (id, mut paths) in taken {
        paths.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        dropped += paths.len().saturating_sub(MAX_ALIASES);
        aliases.insert(id, paths.into_iter().take(MAX_ALIASES).map(|(_, path)| path).collect());
    }
    let mut skipped: Vec<Skipped> = {
        let mut refused: Vec<_> = refused.into_iter().collect();
        refused.sort();
        refused
            .into_iter()
            .map(|(why, n)| Skipped {
                id: "old links".to_owned(),
                reason: format!("{n} link{} {}", if n == 1 { "" } else { "s" }, why.says()),
            })
            .collect()
    };
    if dropped > 0 {
        skipped.push(Skipped {
            id: "old links".to_owned(),
            reason: format!("{dropped} older links of users with more than {MAX_ALIASES}: the newest are kept"),
        });
    }
    Ok((aliases, skipped))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rusqlite::{Connection, OpenFlags};

    use super::super::database::rows_of;
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/marzban").join(name)
    }

    fn tokens() -> Value {
        serde_json::from_slice(&std::fs::read(fixture("tokens.json")).unwrap()).unwrap()
    }

    /// Every token of the fixtures (made by the panels' own schemes, with the verdict each
    /// panel gives it) gets the same verdict here.
    #[test]
    fn old_links_are_checked_as_each_panel_checks_them() {
        let all = tokens();
        for (file, flavor, secret) in [
            ("marzban-v0.8.4.sqlite3", Flavor::Marzban, "marzban_secret"),
            ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard, "pasarguard_secret"),
        ] {
            let conn = Connection::open_with_flags(fixture(file), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            let (rows, read_secret) = rows_of(&conn, flavor).unwrap();
            assert_eq!(read_secret.as_deref(), all[secret].as_str(), "{file}");
            let panel = file.trim_end_matches(".sqlite3");
            let mut checked = 0;
            for token in all["tokens"].as_array().unwrap().iter().filter(|t| t["panel"] == panel) {
                let list = format!("{}\n", token["path"].as_str().unwrap());
                let (aliases, refused) =
                    links(&mut list.as_bytes(), &rows, all[secret].as_str().unwrap(), flavor).unwrap();
                let valid = token["valid"].as_bool().unwrap();
                assert_eq!(!aliases.is_empty(), valid, "{panel} {token}");
                assert_eq!(refused.is_empty(), valid, "{panel} {token}: {refused:?}");
                if valid {
                    let user = rows.iter().find(|r| r.username == token["user"].as_str().unwrap()).unwrap();
                    assert_eq!(aliases[&user.id], vec![token["path"].as_str().unwrap().to_owned()]);
                }
                checked += 1;
            }
            assert!(checked >= 15, "{panel}: {checked}");
        }
    }

    #[test]
    fn links_are_found_in_an_access_log_and_addresses() {
        let found = candidates(
            r#"203.0.113.9 - - [01/Dec/2025:12:00:00 +0000] "GET /sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/clash-meta HTTP/1.1" 200 912 "-" "v2rayNG/1.9.16""#,
        );
        assert_eq!(
            found,
            vec![(
                "/sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/clash-meta".to_owned(),
                "YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04".to_owned()
            )]
        );
        assert!(candidates("GET /sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/info HTTP/1.1").is_empty());
        let found = candidates("https://sub.example.com/my-subs/djMsMSwxNzY0NTkwNDAw.aBsjEYsnvkm7t9YM?x=1");
        assert_eq!(found[0].0, "/my-subs/djMsMSwxNzY0NTkwNDAw.aBsjEYsnvkm7t9YM");
        assert_eq!(candidates("YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04")[0].0, "/sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04");
        assert!(candidates("GET /static/app.js HTTP/1.1").is_empty());
    }
}
