//! What the line-based profiles of Surge and Loon ([`super::surge`], [`super::loon`]) share:
//! a proxy is one line `Name = type, host, port, key=value, ...`, a policy group lists names
//! separated by commas, and a line that starts with `#` or `;` is a comment.
//!
//! Neither app documents an escape for a comma, an equals sign or a double quote, so names
//! get those in their full-width forms (`，` `＝` `＂`: a person reads the same name), and a
//! name never starts like a comment or a section (`;`, `/`, `[`) nor holds a `#` (which
//! starts a comment) or `//` (Surge reads `//!REQUIREMENT` at the end of a line). A value the
//! profile cannot carry as it is (a password with a double quote or a line break, a host with
//! a comma or a space) is never written altered: its server is left out, with a comment
//! saying why, since a changed password or a cut line would fail or say something else.

use super::entries::{Entry, INACTIVE_CREDENTIAL, entries, unique_names};
use crate::wire::{Endpoint, Snapshot};

/// The name a profile gives a server it can write none of: the one entry left, which cannot
/// connect, so the app shows why.
pub(crate) const NONE_READABLE: &str = "No server this app can read";

/// `name` with what would end it, or make its line something else, in full-width forms.
pub(crate) fn clean_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut previous = None;
    for (i, original) in name.chars().enumerate() {
        let c = match original {
            ',' => '，',
            '=' => '＝',
            '"' => '＂',
            '#' => '＃',
            ';' if i == 0 => '；',
            '[' if i == 0 => '［',
            '/' if i == 0 || previous == Some('/') => '／',
            c => c,
        };
        previous = Some(original);
        out.push(c);
    }
    out
}

/// Whether `value` can stand bare between commas: a host, a server name.
pub(crate) fn is_bare(value: &str) -> bool {
    !value.is_empty() && !value.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, ',' | '"' | '='))
}

/// Whether `value` can stand between double quotes: a password.
pub(crate) fn is_quotable(value: &str) -> bool {
    !value.chars().any(|c| c.is_control() || c == '"')
}

/// Why an endpoint cannot be written in these profiles, if it cannot.
pub(crate) fn unwritable(endpoint: &Endpoint, credential: &str) -> Option<&'static str> {
    if !is_bare(&endpoint.host) {
        Some("its address has a character these profiles cannot carry")
    } else if endpoint.sni.as_deref().is_some_and(|sni| !is_bare(sni)) {
        Some("its server name has a character these profiles cannot carry")
    } else if !is_quotable(credential) {
        Some("the password has a character these profiles cannot carry")
    } else if endpoint.obfs.as_deref().is_some_and(|obfs| !is_quotable(obfs)) {
        Some("its obfuscation password has a character these profiles cannot carry")
    } else {
        None
    }
}

/// The entries of a Surge or Loon profile: [`entries`] with names made safe for the format
/// (and unique again after that), the ones that cannot be written apart, each with its name
/// and why. When none can be written, one entry that cannot connect is left, named so.
pub(crate) fn profile_entries<'a>(
    snapshot: &'a Snapshot,
    reserved: &[&str],
) -> (Vec<Entry<'a>>, Vec<(String, &'static str)>) {
    let mut all = entries(snapshot, reserved);
    let cleaned: Vec<String> = all.iter().map(|entry| clean_name(&entry.name)).collect();
    for (entry, name) in all.iter_mut().zip(unique_names(cleaned.iter().map(String::as_str), reserved)) {
        entry.name = name;
    }
    let (written, left_out): (Vec<Entry<'a>>, Vec<Entry<'a>>) =
        all.into_iter().partition(|entry| unwritable(&entry.endpoint, entry.credential).is_none());
    let left_out = left_out
        .into_iter()
        .map(|entry| {
            let why = unwritable(&entry.endpoint, entry.credential).unwrap_or_default();
            (entry.name, why)
        })
        .collect();
    if written.is_empty() {
        let placeholder = Entry {
            name: unique_names([NONE_READABLE], reserved).remove(0),
            endpoint: std::borrow::Cow::Owned(Endpoint::placeholder(NONE_READABLE)),
            credential: INACTIVE_CREDENTIAL,
        };
        return (vec![placeholder], left_out);
    }
    (written, left_out)
}

/// What follows `[General]` in a Surge or Loon profile: the `[Proxy]` section (a comment for
/// each server left out, and a line for each entry, written by `line`), a `select` group named
/// `group` over every entry (its names joined by `join`), and the rule that sends everything
/// through it.
pub(crate) fn proxies_and_group(
    out: &mut String,
    (entries, left_out): (&[Entry<'_>], &[(String, &'static str)]),
    group: &str,
    join: &str,
    line: impl Fn(&mut String, &Entry<'_>),
) {
    use std::fmt::Write as _;
    out.push_str("\n[Proxy]\n");
    for (name, why) in left_out {
        let _ = writeln!(out, "# {name}: left out, {why}");
    }
    for entry in entries {
        line(out, entry);
    }
    let _ = write!(out, "\n[Proxy Group]\n{group} = select");
    for entry in entries {
        let _ = write!(out, "{join}{}", entry.name);
    }
    let _ = write!(out, "\n\n[Rule]\nFINAL,{group}\n");
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One line of a profile split the way both apps read it: the name before the first `=`,
    /// then the values between commas (a comma between double quotes is part of its value),
    /// `key=value` pairs apart from the plain values before them.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) struct Line {
        pub name: String,
        pub plain: Vec<String>,
        pub keys: Vec<(String, String)>,
    }

    pub(crate) fn split_line(line: &str) -> Line {
        let (name, rest) = line.split_once('=').unwrap_or_else(|| panic!("no `=` in {line:?}"));
        let mut fields = Vec::new();
        let (mut field, mut quoted) = (String::new(), false);
        for c in rest.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    field.push(c);
                }
                ',' if !quoted => fields.push(std::mem::take(&mut field)),
                c => field.push(c),
            }
        }
        assert!(!quoted, "an unclosed quote in {line:?}");
        fields.push(field);
        let mut out = Line { name: name.trim().to_owned(), plain: Vec::new(), keys: Vec::new() };
        for field in fields {
            let field = field.trim();
            match field.split_once('=') {
                Some((key, value)) if !field.starts_with('"') => {
                    out.keys.push((key.trim().to_owned(), value.trim().to_owned()))
                }
                _ => {
                    assert!(out.keys.is_empty(), "a plain value after a key in {line:?}");
                    out.plain.push(field.to_owned());
                }
            }
        }
        out
    }

    /// The sections of a profile, in order, with their lines (comments and blank lines left
    /// out); what comes before the first section under "".
    pub(crate) fn sections(profile: &str) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![(String::new(), Vec::new())];
        for line in profile.lines() {
            if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                out.push((section.to_owned(), Vec::new()));
            } else if !line.trim().is_empty() && !line.starts_with('#') && !line.starts_with(';') {
                out.last_mut().expect("a section").1.push(line.to_owned());
            }
        }
        out
    }

    #[test]
    fn names_never_end_a_value_or_start_a_comment() {
        assert_eq!(clean_name("Tokyo, Japan = fast \"x\""), "Tokyo， Japan ＝ fast ＂x＂");
        assert_eq!(clean_name("#1 [a] #2"), "＃1 [a] ＃2");
        assert_eq!(clean_name("[EU] Paris"), "［EU] Paris");
        assert_eq!(clean_name(";x"), "；x");
        assert_eq!(clean_name("//!REQUIREMENT a//b c/d"), "／／!REQUIREMENT a/／b c/d");
        assert_eq!(clean_name("Tokyo 🇯🇵"), "Tokyo 🇯🇵");
    }

    #[test]
    fn lines_split_as_the_apps_read_them() {
        let line = split_line("A = hysteria2, h, 443, password=\"a,b=c\", sni=x");
        assert_eq!(line.name, "A");
        assert_eq!(line.plain, ["hysteria2", "h", "443"]);
        assert_eq!(line.keys, [("password".into(), "\"a,b=c\"".into()), ("sni".into(), "x".into())]);
        let loon = split_line("B = Hysteria2,h,443,\"p=w,d\",udp=true");
        assert_eq!(loon.plain, ["Hysteria2", "h", "443", "\"p=w,d\""]);
        assert_eq!(loon.keys, [("udp".into(), "true".into())]);
    }
}
