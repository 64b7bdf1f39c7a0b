//! The entries every format writes: a snapshot's endpoints with names made safe and unique,
//! or one entry that cannot connect and names the reason; and the profile's title.

use crate::wire::{Endpoint, Snapshot};

/// One line of a profile: an endpoint with its unique display name and the credential to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The name, cleaned and unique within the profile.
    pub name: String,
    /// The endpoint.
    pub endpoint: std::borrow::Cow<'a, Endpoint>,
    /// The credential to present.
    pub credential: &'a str,
}

/// The credential of the entry a user who cannot connect gets: it matches no user.
pub(super) const INACTIVE_CREDENTIAL: &str = "inactive";

/// The entries of a profile. `reserved` are names the format uses for itself (group tags),
/// which no entry may take.
pub fn entries<'a>(snapshot: &'a Snapshot, reserved: &[&str]) -> Vec<Entry<'a>> {
    if !snapshot.status.can_connect() || snapshot.endpoints.is_empty() {
        let reason = if snapshot.status.can_connect() { "No servers available" } else { snapshot.status.describe() };
        let placeholder = Endpoint::placeholder(reason);
        let name = unique_names([reason], reserved).remove(0);
        return vec![Entry { name, endpoint: std::borrow::Cow::Owned(placeholder), credential: INACTIVE_CREDENTIAL }];
    }
    let names = unique_names(snapshot.endpoints.iter().map(|e| e.name.as_str()), reserved);
    snapshot
        .endpoints
        .iter()
        .zip(names)
        .map(|(endpoint, name)| Entry {
            name,
            endpoint: std::borrow::Cow::Borrowed(endpoint),
            credential: &snapshot.credential,
        })
        .collect()
}

/// Cleans names (no control characters, trimmed, at most 64 characters, never empty) and
/// makes them unique, case-insensitively, by numbering repeats: "Tokyo", "Tokyo (2)".
pub fn unique_names<'n>(names: impl IntoIterator<Item = &'n str>, reserved: &[&str]) -> Vec<String> {
    let mut taken: Vec<String> = reserved.iter().map(|name| name.to_lowercase()).collect();
    let mut out = Vec::new();
    for raw in names {
        let cleaned: String = raw.chars().filter(|c| !c.is_control()).take(64).collect();
        let base = match cleaned.trim() {
            "" => "Server",
            name => name,
        };
        let mut name = base.to_owned();
        let mut n = 1;
        while taken.contains(&name.to_lowercase()) {
            n += 1;
            name = format!("{base} ({n})");
        }
        taken.push(name.to_lowercase());
        out.push(name);
    }
    out
}

/// The profile's title: the configured one, or "Hearth".
pub fn title(snapshot: &Snapshot) -> &str {
    match snapshot.profile.title.trim() {
        "" => "Hearth",
        title => title,
    }
}
