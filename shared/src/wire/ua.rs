//! An operator's User-Agent rules as they travel to the edge, signed in its settings (the
//! matching is [`crate::agent`]'s).

use serde::{Deserialize, Serialize};

/// What an operator's rule answers with. The owner's rules reach the edge signed, in
/// postcard, which writes a variant as its position: a new target goes last, so that settings
/// signed before it read as they were signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleTarget {
    /// The base64 list of links.
    Base64,
    /// Mihomo / Clash Meta YAML.
    Mihomo,
    /// sing-box JSON (versioned by the User-Agent when it names a sing-box version).
    SingBox,
    /// The subscription page.
    Page,
    /// A Surge profile.
    Surge,
    /// A Loon profile.
    Loon,
}

/// An operator's rule: a User-Agent containing `contains` (any case) gets `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UaRule {
    /// The substring to look for.
    pub contains: String,
    /// What such a client gets.
    pub target: RuleTarget,
}
