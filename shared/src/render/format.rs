//! The profile formats Hearth writes, and the sing-box versions whose schemas differ.

/// A profile format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Base64 of newline-separated `hysteria2://` links (v2rayN, v2rayNG, Happ, Shadowrocket...).
    Base64,
    /// Mihomo / Clash Meta YAML (Clash Verge, FlClash, Stash...).
    Mihomo,
    /// sing-box JSON, for the given client version (sing-box apps, Hiddify, Karing).
    SingBox(SingBoxVersion),
    /// A Surge profile (Surge iOS, Surge Mac).
    Surge,
    /// A Loon profile.
    Loon,
}

impl Format {
    /// The `content-type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Base64 => "text/plain; charset=utf-8",
            Format::Mihomo => "text/yaml; charset=utf-8",
            Format::SingBox(_) => "application/json; charset=utf-8",
            // Both apps read a profile as plain UTF-8 text, whatever its type says.
            Format::Surge | Format::Loon => "text/plain; charset=utf-8",
        }
    }
}

/// A sing-box version, to pick the schema a client understands. Older than 1.11 is rendered
/// as 1.11, the oldest schema Hearth writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SingBoxVersion {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}

impl SingBoxVersion {
    /// The oldest schema Hearth writes, and what an unversioned client gets.
    pub const OLDEST: SingBoxVersion = SingBoxVersion { major: 1, minor: 11 };
    /// Since 1.13, outbounds can pin the server's public key.
    pub const PINS_PUBLIC_KEY: SingBoxVersion = SingBoxVersion { major: 1, minor: 13 };

    /// Clamps to the oldest schema Hearth writes.
    pub fn at_least_oldest(self) -> SingBoxVersion {
        self.max(SingBoxVersion::OLDEST)
    }
}
