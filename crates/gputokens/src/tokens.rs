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
    /// The largest amount the ledger can hold; arithmetic saturates here rather than wrap.
    pub const MAX: Tokens = Tokens(i64::MAX);
    pub const MIN: Tokens = Tokens(i64::MIN);
    /// The most one grant, adjustment, imported balance or configured amount may be, either way:
    /// far above any real budget, far below where sums of them could leave the representable range.
    pub const LIMIT: Tokens = Tokens::whole(1_000_000_000);
    /// The furthest a person's grants, adjustments and transfers may take a balance, either way:
    /// 1,000 times [`Tokens::LIMIT`], and an eighth of the representable range, so charges, refunds
    /// and replenishment (which are not bounded by it) always have room left to be applied.
    pub const BALANCE_LIMIT: Tokens = Tokens::whole(1_000_000_000_000);

    pub const fn from_micro(micro: i64) -> Self {
        Tokens(micro)
    }

    /// Saturates at [`Tokens::MAX`] / [`Tokens::MIN`].
    pub const fn whole(tokens: i64) -> Self {
        Tokens(tokens.saturating_mul(MICRO))
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

    pub fn checked_sub(self, other: Tokens) -> Option<Tokens> {
        self.0.checked_sub(other.0).map(Tokens)
    }

    /// Whether `|self|` is at most [`Tokens::LIMIT`].
    pub fn within_limit(self) -> bool {
        self.0.unsigned_abs() <= Tokens::LIMIT.0.unsigned_abs()
    }

    /// The refusal of an amount a person gave (`what`: "a grant", "alice's imported balance") when
    /// it is beyond [`Tokens::LIMIT`].
    pub fn beyond_limit(self, what: &str) -> Option<String> {
        (!self.within_limit())
            .then(|| format!("{what} of {self} tokens is beyond the limit of ±{} tokens", Tokens::LIMIT))
    }
}

// `+`, `-` and negation saturate: an amount never wraps around to one of the other sign, in release
// builds as in debug ones. Where a saturated sum would lose tokens (balances), the ledger uses
// `checked_add` and refuses instead.
impl std::ops::Add for Tokens {
    type Output = Tokens;
    fn add(self, other: Tokens) -> Tokens {
        Tokens(self.0.saturating_add(other.0))
    }
}

impl std::ops::Sub for Tokens {
    type Output = Tokens;
    fn sub(self, other: Tokens) -> Tokens {
        Tokens(self.0.saturating_sub(other.0))
    }
}

impl std::ops::Neg for Tokens {
    type Output = Tokens;
    fn neg(self) -> Tokens {
        Tokens(self.0.saturating_neg())
    }
}

impl std::iter::Sum for Tokens {
    fn sum<I: Iterator<Item = Tokens>>(iter: I) -> Tokens {
        iter.fold(Tokens::ZERO, |sum, t| sum + t)
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
        let whole: i128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
        let frac: i128 = format!("{frac:0<6}").parse().map_err(|_| too_large())?;
        // Signed before the range check: the most negative amount has no positive counterpart.
        let micro = whole.checked_mul(MICRO as i128).and_then(|w| w.checked_add(frac)).ok_or_else(too_large)?;
        let micro = i64::try_from(if negative { -micro } else { micro }).map_err(|_| too_large())?;
        Ok(Tokens(micro))
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
        for micro in [0, 1, -1, 999_999, 1_000_001, -46_000_000, 123_456_789, i64::MAX, i64::MIN] {
            let t = Tokens::from_micro(micro);
            assert_eq!(t.to_string().parse::<Tokens>(), Ok(t));
        }
    }

    /// Regression: the most negative amount could not be read back (its magnitude was parsed unsigned first).
    #[test]
    fn the_most_negative_amount_is_read_back() {
        assert_eq!("-9223372036854.775808".parse::<Tokens>(), Ok(Tokens::MIN));
        assert!(matches!("9223372036854.775808".parse::<Tokens>(), Err(TokensError::TooLarge(_))));
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Tokens::MAX + Tokens::from_micro(1), Tokens::MAX);
        assert_eq!(Tokens::MIN - Tokens::from_micro(1), Tokens::MIN);
        assert_eq!(-Tokens::MIN, Tokens::MAX);
        assert_eq!(
            [Tokens::MAX, Tokens::MAX, Tokens::whole(-1)].into_iter().sum::<Tokens>(),
            Tokens::MAX - Tokens::whole(1)
        );
        assert_eq!(Tokens::whole(i64::MAX), Tokens::MAX);
        assert_eq!(Tokens::MAX.checked_add(Tokens::from_micro(1)), None);
        assert_eq!(Tokens::MIN.checked_sub(Tokens::from_micro(1)), None);
        assert!(Tokens::LIMIT.within_limit() && (-Tokens::LIMIT).within_limit());
        assert!(!(Tokens::LIMIT + Tokens::from_micro(1)).within_limit());
        assert!(!Tokens::MIN.within_limit());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_amount_round_trips(micro in any::<i64>()) {
                let t = Tokens::from_micro(micro);
                prop_assert_eq!(t.to_string().parse::<Tokens>(), Ok(t));
            }

            #[test]
            fn any_text_parses_or_is_refused(text in "\\PC*") {
                let _ = text.parse::<Tokens>();
            }

            #[test]
            fn decimal_like_text_parses_or_is_refused(text in "[+-]?[0-9]{0,22}(\\.[0-9]{0,8})?") {
                if let Ok(t) = text.parse::<Tokens>() {
                    prop_assert_eq!(t.to_string().parse::<Tokens>(), Ok(t));
                }
            }

            #[test]
            fn sums_saturate_and_agree_with_exact_arithmetic(a in any::<i64>(), b in any::<i64>()) {
                let exact = |x: i128| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                let (ta, tb) = (Tokens::from_micro(a), Tokens::from_micro(b));
                prop_assert_eq!((ta + tb).micro(), exact(a as i128 + b as i128));
                prop_assert_eq!((ta - tb).micro(), exact(a as i128 - b as i128));
                prop_assert_eq!((-ta).micro(), exact(-(a as i128)));
                prop_assert_eq!(ta.checked_add(tb).map(Tokens::micro), a.checked_add(b));
            }
        }
    }
}
