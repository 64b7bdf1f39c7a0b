//! The owner's second sign-in factor: time-based one-time codes (RFC 6238 with HMAC-SHA-1,
//! 30-second steps, 6 digits: what every authenticator app reads from an `otpauth://` QR
//! code), and single-use recovery codes for a lost phone.

use hmac::{Hmac, Mac as _};
use sha1::Sha1;
use subtle::ConstantTimeEq as _;

/// Seconds per code.
pub(crate) const STEP: u64 = 30;
/// How many recovery codes an enrollment makes.
pub(crate) const RECOVERY_CODES: usize = 10;

/// The 6-digit code of `secret` at time step `step` (RFC 4226's HOTP).
pub(crate) fn code_at(secret: &[u8], step: u64) -> u32 {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(&step.to_be_bytes());
    let digest = mac.finalize().into_bytes();
    let offset = usize::from(digest[19] & 0x0f);
    let word = u32::from_be_bytes([digest[offset], digest[offset + 1], digest[offset + 2], digest[offset + 3]]);
    (word & 0x7fff_ffff) % 1_000_000
}

/// Digits only: people type codes with spaces.
fn digits(code: &str) -> String {
    code.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Checks `code` against `secret` at `now`, one step either side for clocks that drift. Only
/// steps after `last_step` count (a code works once). Gives the step that matched.
pub(crate) fn check(secret: &[u8], code: &str, now: u64, last_step: u64) -> Option<u64> {
    let code = digits(code);
    if code.len() != 6 {
        return None;
    }
    let step = now / STEP;
    let mut matched = None;
    // Every candidate is compared, in constant time, whatever matched first.
    for candidate in step.saturating_sub(1)..=step + 1 {
        let expected = format!("{:06}", code_at(secret, candidate));
        if bool::from(expected.as_bytes().ct_eq(code.as_bytes())) && candidate > last_step && matched.is_none() {
            matched = Some(candidate);
        }
    }
    matched
}

/// RFC 4648 base32 without padding: how `otpauth://` URIs carry the secret.
pub(crate) fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// The `otpauth://` URI an authenticator app scans.
pub(crate) fn uri(secret: &[u8], issuer: &str, login: &str) -> String {
    let escape = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    format!(
        "otpauth://totp/{}:{}?secret={}&issuer={}&algorithm=SHA1&digits=6&period={STEP}",
        escape(issuer),
        escape(login),
        base32(secret),
        escape(issuer)
    )
}

/// New recovery codes: 10 of 12 letters and digits (about 60 bits each), grouped for reading.
pub(crate) fn recovery_codes() -> Vec<String> {
    // No 0/o, 1/l/i: easy to read back from paper.
    const ALPHABET: &[u8; 31] = b"abcdefghjkmnpqrstuvwxyz23456789";
    (0..RECOVERY_CODES)
        .map(|_| {
            let bytes = crate::secrets::random_bytes::<12>();
            let chars: String = bytes.iter().map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()])).collect();
            format!("{}-{}-{}", &chars[..4], &chars[4..8], &chars[8..])
        })
        .collect()
}

/// What is stored of a recovery code: SHA-256 of its letters, lowercased, without dashes.
pub(crate) fn recovery_hash(code: &str) -> [u8; 32] {
    let normal: String = code.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    hearth_shared::sha256(normal.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_rfc_6238() {
        // RFC 6238 appendix B, SHA-1 (the last six of its eight digits).
        let secret = b"12345678901234567890";
        for (time, code) in
            [(59, "287082"), (1_111_111_109, "081804"), (1_234_567_890, "005924"), (2_000_000_000, "279037")]
        {
            assert_eq!(format!("{:06}", code_at(secret, time / STEP)), code);
            assert_eq!(check(secret, code, time, 0), Some(time / STEP));
        }
    }

    #[test]
    fn a_code_works_once_within_a_step_of_now() {
        let secret = b"12345678901234567890";
        let now = 1_234_567_890;
        let code = format!("{:06}", code_at(secret, now / STEP));
        assert_eq!(check(secret, &format!("{} {}", &code[..3], &code[3..]), now, 0), Some(now / STEP));
        assert_eq!(check(secret, &code, now + STEP, 0), Some(now / STEP), "a step late still works");
        assert_eq!(check(secret, &code, now + 3 * STEP, 0), None, "too late");
        assert_eq!(check(secret, &code, now, now / STEP), None, "already used");
        assert_eq!(check(secret, "12345", now, 0), None);
        assert_eq!(check(b"another secret", &code, now, 0), None);
    }

    #[test]
    fn base32_and_uri_are_what_apps_read() {
        assert_eq!(base32(b""), "");
        assert_eq!(base32(b"f"), "MY");
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI");
        assert_eq!(
            uri(b"12345678901234567890", "Hearth", "me@home"),
            "otpauth://totp/Hearth:me%40home?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=Hearth&algorithm=SHA1&digits=6&period=30"
        );
    }

    #[test]
    fn recovery_codes_are_distinct_and_hash_however_typed() {
        let codes = recovery_codes();
        assert_eq!(codes.len(), RECOVERY_CODES);
        let unique: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(unique.len(), RECOVERY_CODES);
        let code = &codes[0];
        assert_eq!(code.len(), 14);
        assert_eq!(recovery_hash(code), recovery_hash(&code.to_uppercase().replace('-', " ")));
    }
}
