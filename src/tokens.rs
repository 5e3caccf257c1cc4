//! Token amounts as integer micro-tokens: exact arithmetic inside, decimals only at the edges.

use std::fmt;
use std::str::FromStr;

/// Micro-tokens per token.
pub const MICRO: i64 = 1_000_000;

/// An amount of tokens, stored as signed micro-tokens.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tokens(i64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokensError {
    #[error("'{0}' is not a number of tokens (expected e.g. 12, -3.5 or 0.25)")]
    NotANumber(String),
    #[error("'{0}' has more than 6 decimal places (the smallest amount is 0.000001)")]
    TooPrecise(String),
    #[error("'{0}' is too large")]
    TooLarge(String),
}

impl Tokens {
    pub const ZERO: Tokens = Tokens(0);

    pub const fn from_micro(micro: i64) -> Self {
        Tokens(micro)
    }

    pub const fn whole(tokens: i64) -> Self {
        Tokens(tokens * MICRO)
    }

    /// Converts a config value such as `0.5`; rounds to the nearest micro-token.
    pub fn from_f64(value: f64) -> Option<Self> {
        let micro = (value * MICRO as f64).round();
        (micro.is_finite() && micro.abs() < i64::MAX as f64).then_some(Tokens(micro as i64))
    }

    pub const fn micro(self) -> i64 {
        self.0
    }

    pub fn as_f64(self) -> f64 {
        self.0 as f64 / MICRO as f64
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub fn checked_add(self, other: Tokens) -> Option<Tokens> {
        self.0.checked_add(other.0).map(Tokens)
    }
}

impl std::ops::Add for Tokens {
    type Output = Tokens;
    fn add(self, other: Tokens) -> Tokens {
        Tokens(self.0 + other.0)
    }
}

impl std::ops::Sub for Tokens {
    type Output = Tokens;
    fn sub(self, other: Tokens) -> Tokens {
        Tokens(self.0 - other.0)
    }
}

impl std::ops::Neg for Tokens {
    type Output = Tokens;
    fn neg(self) -> Tokens {
        Tokens(-self.0)
    }
}

impl std::iter::Sum for Tokens {
    fn sum<I: Iterator<Item = Tokens>>(iter: I) -> Tokens {
        Tokens(iter.map(|t| t.0).sum())
    }
}

/// Shortest exact decimal: `46`, `-10.4`, `0.000001`.
impl fmt::Display for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() && f.precision().is_none() {
            // Plain `{}` (every ledger reason) writes straight through, without allocating.
            return self.write_decimal(f);
        }
        let mut text = String::new();
        self.write_decimal(&mut text)?;
        f.pad(&text)
    }
}

impl Tokens {
    fn write_decimal(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let whole = abs / MICRO as u64;
        let (mut frac, mut digits) = (abs % MICRO as u64, 6);
        if frac == 0 {
            return write!(out, "{sign}{whole}");
        }
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        write!(out, "{sign}{whole}.{frac:0digits$}")
    }
}

impl FromStr for Tokens {
    type Err = TokensError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let s = text.trim();
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && frac.is_empty() || !all_digits(whole) || !all_digits(frac) {
            return Err(TokensError::NotANumber(text.to_string()));
        }
        if frac.len() > 6 {
            return Err(TokensError::TooPrecise(text.to_string()));
        }
        let too_large = || TokensError::TooLarge(text.to_string());
        let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
        let frac: i64 = format!("{frac:0<6}").parse().map_err(|_| too_large())?;
        let micro = whole.checked_mul(MICRO).and_then(|w| w.checked_add(frac)).ok_or_else(too_large)?;
        Ok(Tokens(if negative { -micro } else { micro }))
    }
}

/// Serialized as an exact decimal string (`"-10.4"`), never a float.
impl serde::Serialize for Tokens {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Tokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_shortest_exact_decimal() {
        assert_eq!(Tokens::whole(46).to_string(), "46");
        assert_eq!(Tokens::from_micro(-10_400_000).to_string(), "-10.4");
        assert_eq!(Tokens::from_micro(1).to_string(), "0.000001");
        assert_eq!(Tokens::from_micro(-1).to_string(), "-0.000001");
        assert_eq!(format!("{:>6}", Tokens::whole(5)), "     5");
    }

    #[test]
    fn parses_signed_decimals() {
        assert_eq!("12".parse::<Tokens>(), Ok(Tokens::whole(12)));
        assert_eq!("+2.5".parse::<Tokens>(), Ok(Tokens::from_micro(2_500_000)));
        assert_eq!("-0.25".parse::<Tokens>(), Ok(Tokens::from_micro(-250_000)));
        assert_eq!(".5".parse::<Tokens>(), Ok(Tokens::from_micro(500_000)));
        assert!(matches!("1.0000001".parse::<Tokens>(), Err(TokensError::TooPrecise(_))));
        assert!(matches!("abc".parse::<Tokens>(), Err(TokensError::NotANumber(_))));
        assert!(matches!("1e3".parse::<Tokens>(), Err(TokensError::NotANumber(_))));
        assert!(matches!("".parse::<Tokens>(), Err(TokensError::NotANumber(_))));
        assert!(matches!("99999999999999999".parse::<Tokens>(), Err(TokensError::TooLarge(_))));
    }

    #[test]
    fn round_trips_through_text() {
        for micro in [0, 1, -1, 999_999, 1_000_001, -46_000_000, 123_456_789] {
            let t = Tokens::from_micro(micro);
            assert_eq!(t.to_string().parse::<Tokens>(), Ok(t));
        }
    }
}
