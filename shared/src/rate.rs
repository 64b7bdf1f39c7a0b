//! Rates: the one type, [`Rate`], for every speed Hearth holds, converts or shows.
//!
//! Rates come in many units: the panel gives Mbit/s and stores kbit/s, Hysteria's
//! configuration writes bits ("200 mbps"), the wire and the node's congestion controllers and
//! limiter take bytes a second. A [`Rate`] is one of them whatever unit it came in: it is made
//! by a constructor that names the unit ([`Rate::from_kbps`], [`Rate::from_bytes_per_sec`],
//! [`Rate::from_bits_per_sec`]) and read by a reader that names it ([`Rate::kbps`],
//! [`Rate::bytes_per_sec`], [`Rate::bits_per_sec`]), so no bare `* 125` or `/ 1000` is left to
//! get wrong. It is held in bits a second, the unit every other one converts to exactly
//! (kbit/s ×1000, bytes ×8); the arithmetic saturates, so no `u64` makes it panic.
//!
//! The two ways people write rates are parsed here too: Hysteria's syntax in `node.toml`
//! ([`Rate::parse_hysteria`]) and the panel's number of Mbit/s ([`Rate::parse_mbps`]); a rate is
//! shown as people read it ("0.5 Mbit/s", by [`Display`](fmt::Display)).

use std::fmt;

/// The most Mbit/s the panel takes (100 Gbit/s): a number above is surely a mistake.
const PANEL_MAX_MBPS: u64 = 100_000;

/// A rate, held in bits a second. Ordered (a larger rate is faster); the zero rate is what the
/// panel, the wire and `node.toml` mean by "no limit", where they have one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    /// Bits a second.
    bits: u64,
}

impl Rate {
    /// Nothing a second (where a limit is meant: none).
    pub const ZERO: Rate = Rate { bits: 0 };

    /// The fastest rate the panel takes: 100 Gbit/s (see [`Rate::parse_mbps`]).
    pub const PANEL_MAX: Rate = Rate::from_kbps(PANEL_MAX_MBPS * 1000);

    /// `bits` bits a second.
    #[inline]
    pub const fn from_bits_per_sec(bits: u64) -> Rate {
        Rate { bits }
    }

    /// `kbps` kbit/s (1000 bits a second each), as the database stores rates; beyond
    /// `u64::MAX` bits a second, that.
    #[inline]
    pub const fn from_kbps(kbps: u64) -> Rate {
        Rate { bits: kbps.saturating_mul(1000) }
    }

    /// `bytes` bytes a second, as the wire, the congestion controllers and the limiter take
    /// rates; beyond `u64::MAX` bits a second, that.
    #[inline]
    pub const fn from_bytes_per_sec(bytes: u64) -> Rate {
        Rate { bits: bytes.saturating_mul(8) }
    }

    /// Bits a second.
    #[inline]
    pub const fn bits_per_sec(self) -> u64 {
        self.bits
    }

    /// Whole kbit/s (a part of one is dropped).
    #[inline]
    pub const fn kbps(self) -> u64 {
        self.bits / 1000
    }

    /// Whole bytes a second (a part of one is dropped: 81 bits a second are 10 bytes).
    #[inline]
    pub const fn bytes_per_sec(self) -> u64 {
        self.bits / 8
    }

    /// Mbit/s as a number with a fraction, as the panel's JSON shows rates: the nearest `f64`
    /// to the exact value.
    #[inline]
    pub fn mbps_f64(self) -> f64 {
        self.bits as f64 / 1_000_000.0
    }

    /// Whether this is the zero rate.
    #[inline]
    pub const fn is_zero(self) -> bool {
        self.bits == 0
    }

    /// A rate as Hysteria's configuration writes it (`bandwidth.up` in `node.toml`): a whole
    /// number of bits a second and a unit (`bps`, `kbps`, `mbps`, `gbps`, `tbps`, or `b`, `k`,
    /// `kb`... in any case, spaces around it or not), or a bare number of Mbit/s. Refuses a
    /// rate of less than a byte a second and one beyond `u64::MAX` bits a second.
    pub fn parse_hysteria(text: &str) -> Result<Rate, RateError> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u64 = number.parse().map_err(|_| RateError::NotARate(text.to_owned()))?;
        let per_unit = match unit.trim().to_ascii_lowercase().as_str() {
            "b" | "bps" => 1,
            "k" | "kb" | "kbps" => 1_000,
            "" | "m" | "mb" | "mbps" => 1_000_000,
            "g" | "gb" | "gbps" => 1_000_000_000,
            "t" | "tb" | "tbps" => 1_000_000_000_000,
            other => return Err(RateError::NotAUnit(other.to_owned())),
        };
        let rate = number.checked_mul(per_unit).map(Rate::from_bits_per_sec);
        rate.filter(|rate| rate.bytes_per_sec() > 0).ok_or_else(|| RateError::OutOfRange(text.to_owned()))
    }

    /// A rate as the panel (its API and CLI) gives it: a number of Mbit/s from 0 to
    /// [`Rate::PANEL_MAX`], rounded to whole kbit/s (0.001 Mbit/s); a rate above 0 that
    /// rounds to nothing is refused rather than taken as "no limit".
    pub fn parse_mbps(mbps: f64) -> Result<Rate, RateError> {
        if !mbps.is_finite() || !(0.0..=PANEL_MAX_MBPS as f64).contains(&mbps) {
            return Err(RateError::NotAPanelSpeed);
        }
        let kbps = (mbps * 1000.0).round() as u64;
        if mbps > 0.0 && kbps == 0 {
            return Err(RateError::BelowPanelStep);
        }
        Ok(Rate::from_kbps(kbps))
    }
}

/// As people read a rate: Mbit/s, with as many decimals as it needs ("1 Mbit/s",
/// "0.5 Mbit/s", "0.000001 Mbit/s"): the text of `format!("{} Mbit/s", mbit as f64)` for every
/// rate below 2^33 Mbit/s (8.5 Pbit/s), and exact beyond, where an `f64` is not. Takes a
/// width and an alignment.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, mut fraction) = (self.bits / 1_000_000, self.bits % 1_000_000);
        if fraction == 0 {
            return f.pad(&format!("{whole} Mbit/s"));
        }
        let mut digits = 6;
        while fraction % 10 == 0 {
            fraction /= 10;
            digits -= 1;
        }
        f.pad(&format!("{whole}.{fraction:0digits$} Mbit/s"))
    }
}

/// Why a rate was refused: each says it in words for the person who wrote it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// [`Rate::parse_hysteria`]: no whole number where the rate starts (the text, trimmed).
    #[error("{0:?} is not a rate such as \"200 mbps\"")]
    NotARate(String),
    /// [`Rate::parse_hysteria`]: a unit it does not know (the unit, in lower case).
    #[error("{0:?} is not a unit of rate (bps, kbps, mbps, gbps, tbps)")]
    NotAUnit(String),
    /// [`Rate::parse_hysteria`]: less than a byte a second, or beyond `u64::MAX` bits a
    /// second (the text, trimmed).
    #[error("{0:?} is not a rate between 8 bps and 100 tbps")]
    OutOfRange(String),
    /// [`Rate::parse_mbps`]: not a number from 0 to [`Rate::PANEL_MAX`]'s Mbit/s.
    #[error("a speed is a number of Mbit/s from 0 to {PANEL_MAX_MBPS}")]
    NotAPanelSpeed,
    /// [`Rate::parse_mbps`]: above 0 but below the panel's step, 0.001 Mbit/s.
    #[error("a speed is at least 0.001 Mbit/s (or 0 for none)")]
    BelowPanelStep,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn constructors_and_readers_name_their_units() {
        let rate = Rate::from_kbps(500);
        assert_eq!((rate.bits_per_sec(), rate.kbps(), rate.bytes_per_sec()), (500_000, 500, 62_500));
        assert_eq!(Rate::from_bytes_per_sec(62_500), rate);
        assert_eq!(Rate::from_bits_per_sec(500_000), rate);
        // What control's `* 125` did: kbit/s to bytes a second.
        for kbps in [0, 1, 3, 999, 1000, 100_000_000] {
            assert_eq!(Rate::from_kbps(kbps).bytes_per_sec(), kbps * 125);
        }
        // Parts of the larger unit are dropped, as integer division does.
        assert_eq!(Rate::from_bits_per_sec(81).bytes_per_sec(), 10);
        assert_eq!(Rate::from_bits_per_sec(1999).kbps(), 1);
        assert_eq!(Rate::from_bits_per_sec(7).bytes_per_sec(), 0);
        assert_eq!(Rate::from_bytes_per_sec(3).kbps(), 0);
        assert_eq!(Rate::from_kbps(2).mbps_f64(), 0.002);
        assert_eq!(Rate::from_bytes_per_sec(125_000).mbps_f64(), 1.0);
    }

    #[test]
    fn zero_is_no_rate_and_orders_first() {
        assert!(Rate::ZERO.is_zero() && Rate::default().is_zero() && Rate::from_kbps(0).is_zero());
        assert!(!Rate::from_bits_per_sec(1).is_zero());
        assert_eq!(Rate::ZERO.bytes_per_sec(), 0);
        assert!(Rate::ZERO < Rate::from_bits_per_sec(1));
        assert!(Rate::from_kbps(1) < Rate::from_bytes_per_sec(126));
        assert_eq!(Rate::from_kbps(2).max(Rate::from_bytes_per_sec(200)), Rate::from_bytes_per_sec(250));
        assert_eq!(Rate::PANEL_MAX, Rate::from_kbps(100_000_000));
    }

    #[test]
    fn every_u64_is_taken_without_a_panic() {
        let most = |bits: u128| bits.min(u128::from(u64::MAX)) as u64;
        for n in [u64::MAX, u64::MAX / 8 + 1, u64::MAX / 8, u64::MAX / 1000 + 1, u64::MAX / 1000] {
            assert_eq!(Rate::from_kbps(n).bits_per_sec(), most(u128::from(n) * 1000));
            assert_eq!(Rate::from_bytes_per_sec(n).bits_per_sec(), most(u128::from(n) * 8));
        }
        let most = Rate::from_bits_per_sec(u64::MAX);
        assert_eq!(Rate::from_kbps(u64::MAX), most);
        assert_eq!(Rate::from_bytes_per_sec(u64::MAX), most);
        assert_eq!((most.kbps(), most.bytes_per_sec()), (u64::MAX / 1000, u64::MAX / 8));
        assert_eq!(most.to_string(), "18446744073709.551615 Mbit/s");
    }

    #[test]
    fn rates_show_as_people_read_them() {
        assert_eq!(Rate::from_kbps(500).to_string(), "0.5 Mbit/s");
        assert_eq!(Rate::from_kbps(1000).to_string(), "1 Mbit/s");
        assert_eq!(Rate::from_kbps(2750).to_string(), "2.75 Mbit/s");
        assert_eq!(Rate::from_kbps(1).to_string(), "0.001 Mbit/s");
        assert_eq!(Rate::ZERO.to_string(), "0 Mbit/s");
        assert_eq!(Rate::from_bits_per_sec(1).to_string(), "0.000001 Mbit/s");
        assert_eq!(Rate::from_bytes_per_sec(10).to_string(), "0.00008 Mbit/s");
        assert_eq!(Rate::PANEL_MAX.to_string(), "100000 Mbit/s");
        assert_eq!(format!("[{:>12}]", Rate::from_kbps(1500)), "[  1.5 Mbit/s]");
    }

    #[test]
    fn hysteria_rates_are_read_in_bits() {
        let bytes = |text| Rate::parse_hysteria(text).map(Rate::bytes_per_sec);
        assert_eq!(bytes("200 mbps"), Ok(25_000_000));
        assert_eq!(bytes("1gbps"), Ok(125_000_000));
        assert_eq!(bytes("1 GB"), Ok(125_000_000));
        assert_eq!(bytes("800 kbps"), Ok(100_000));
        assert_eq!(bytes(" 3 Tbps "), Ok(375_000_000_000));
        assert_eq!(bytes("80 b"), Ok(10));
        assert_eq!(bytes("8bps"), Ok(1), "a byte a second is the least");
        assert_eq!(bytes("50"), Ok(6_250_000), "a bare number is Mbit/s");
        assert_eq!(Rate::parse_hysteria("81 b"), Ok(Rate::from_bits_per_sec(81)));
    }

    #[test]
    fn hysteria_rates_refused_say_why() {
        let refused = |text| Rate::parse_hysteria(text).unwrap_err().to_string();
        for (text, why) in [
            ("", "\"\" is not a rate such as \"200 mbps\""),
            (" fast ", "\"fast\" is not a rate such as \"200 mbps\""),
            ("mbps", "\"mbps\" is not a rate such as \"200 mbps\""),
            ("-5 mbps", "\"-5 mbps\" is not a rate such as \"200 mbps\""),
            ("1.5 mbps", "\".5 mbps\" is not a unit of rate (bps, kbps, mbps, gbps, tbps)"),
            ("5 Furlongs", "\"furlongs\" is not a unit of rate (bps, kbps, mbps, gbps, tbps)"),
            ("0 mbps", "\"0 mbps\" is not a rate between 8 bps and 100 tbps"),
            ("4 bps", "\"4 bps\" is not a rate between 8 bps and 100 tbps"),
            ("99999999 tbps", "\"99999999 tbps\" is not a rate between 8 bps and 100 tbps"),
            ("99999999999999999999", "\"99999999999999999999\" is not a rate such as \"200 mbps\""),
        ] {
            assert_eq!(refused(text), why, "{text:?}");
        }
        assert_eq!(Rate::parse_hysteria("fast"), Err(RateError::NotARate("fast".into())));
        assert_eq!(Rate::parse_hysteria("5 x"), Err(RateError::NotAUnit("x".into())));
        assert_eq!(Rate::parse_hysteria("0"), Err(RateError::OutOfRange("0".into())));
    }

    #[test]
    fn panel_rates_are_mbps_in_steps_of_a_kbit() {
        assert_eq!(Rate::parse_mbps(0.5), Ok(Rate::from_kbps(500)));
        assert_eq!(Rate::parse_mbps(1e3), Ok(Rate::from_kbps(1_000_000)));
        assert_eq!(Rate::parse_mbps(0.0), Ok(Rate::ZERO));
        assert_eq!(Rate::parse_mbps(-0.0), Ok(Rate::ZERO));
        assert_eq!(Rate::parse_mbps(0.001), Ok(Rate::from_kbps(1)));
        assert_eq!(Rate::parse_mbps(0.0005), Ok(Rate::from_kbps(1)), "rounded to the nearest kbit/s");
        assert_eq!(Rate::parse_mbps(1.2344), Ok(Rate::from_kbps(1234)));
        assert_eq!(Rate::parse_mbps(99_999.999_9), Ok(Rate::PANEL_MAX));
        assert_eq!(Rate::parse_mbps(100_000.0), Ok(Rate::PANEL_MAX));
    }

    #[test]
    fn panel_rates_refused_say_why() {
        let range = "a speed is a number of Mbit/s from 0 to 100000";
        for mbps in [-1.0, -0.0001, 100_000.001, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(Rate::parse_mbps(mbps), Err(RateError::NotAPanelSpeed), "{mbps}");
            assert_eq!(Rate::parse_mbps(mbps).unwrap_err().to_string(), range);
        }
        for mbps in [0.0001, 0.000_499, f64::MIN_POSITIVE] {
            assert_eq!(Rate::parse_mbps(mbps), Err(RateError::BelowPanelStep), "{mbps}");
        }
        assert_eq!(RateError::BelowPanelStep.to_string(), "a speed is at least 0.001 Mbit/s (or 0 for none)");
    }

    proptest! {
        /// The text and the JSON number control showed before there was a `Rate`.
        #[test]
        fn shown_as_control_showed_kbps(kbps in 0u64..(1 << 33) * 1000) {
            let rate = Rate::from_kbps(kbps);
            prop_assert_eq!(rate.to_string(), format!("{} Mbit/s", kbps as f64 / 1000.0));
            prop_assert_eq!(rate.mbps_f64().to_bits(), (kbps as f64 / 1000.0).to_bits());
            prop_assert_eq!(Rate::parse_mbps(rate.mbps_f64()).ok(), (kbps <= 100_000_000).then_some(rate));
        }

        #[test]
        fn shown_as_floats_show_bits(bits in 0u64..(1 << 33) * 1_000_000) {
            let rate = Rate::from_bits_per_sec(bits);
            prop_assert_eq!(rate.to_string(), format!("{} Mbit/s", bits as f64 / 1e6));
        }

        #[test]
        fn units_convert_exactly_back(n in any::<u64>()) {
            prop_assert_eq!(Rate::from_bits_per_sec(n).bits_per_sec(), n);
            prop_assert_eq!(Rate::from_kbps(n / 1000).kbps(), n / 1000);
            prop_assert_eq!(Rate::from_bytes_per_sec(n / 8).bytes_per_sec(), n / 8);
            prop_assert_eq!(Rate::from_bits_per_sec(n).kbps(), n / 1000);
            prop_assert_eq!(Rate::from_bits_per_sec(n).bytes_per_sec(), n / 8);
        }
    }
}
