//! Prices per GPU type and the cost of GPU time, rounded up to the next micro-token.

use std::collections::BTreeMap;

use crate::tokens::Tokens;

const SECONDS_PER_HOUR: i128 = 3600;

/// Tokens per GPU-hour by lower-cased GPU type.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    prices: BTreeMap<String, Tokens>,
    default_price: Option<Tokens>,
}

/// The price used for a GPU type, and whether the type was listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedPrice {
    pub per_gpu_hour: Tokens,
    pub listed: bool,
}

impl PriceTable {
    /// `prices` keys must already be lower-case.
    pub fn new(prices: BTreeMap<String, Tokens>, default_price: Option<Tokens>) -> Self {
        PriceTable { prices, default_price }
    }

    /// The listed GPU types (lower-case).
    pub fn listed_types(&self) -> impl Iterator<Item = &str> {
        self.prices.keys().map(String::as_str)
    }

    /// The listed price of a type, matched case-insensitively.
    pub fn price(&self, gpu_type: &str) -> Option<Tokens> {
        match self.prices.get(gpu_type) {
            Some(price) => Some(*price),
            None if gpu_type.bytes().any(|b| b.is_ascii_uppercase()) => {
                self.prices.get(&gpu_type.to_lowercase()).copied()
            }
            None => None,
        }
    }

    /// The price to charge: the listed one, else `default_price`, else the highest listed price, so
    /// unknown hardware is never free.
    pub fn applied(&self, gpu_type: &str) -> AppliedPrice {
        match self.price(gpu_type) {
            Some(per_gpu_hour) => AppliedPrice { per_gpu_hour, listed: true },
            None => AppliedPrice { per_gpu_hour: self.unlisted_price(), listed: false },
        }
    }

    fn unlisted_price(&self) -> Tokens {
        self.default_price.or_else(|| self.prices.values().copied().max()).unwrap_or(Tokens::whole(1))
    }

    /// The most a GPU of any type can cost: what an untyped request may be charged.
    pub fn highest(&self) -> Tokens {
        self.prices.values().copied().chain(self.default_price).max().unwrap_or(Tokens::whole(1))
    }

    pub fn default_price(&self) -> Option<Tokens> {
        self.default_price
    }

    pub fn types(&self) -> impl Iterator<Item = (&str, Tokens)> {
        self.prices.iter().map(|(t, p)| (t.as_str(), *p))
    }
}

/// Cost of `gpu_seconds` (GPUs × seconds held) at `per_gpu_hour`, rounded up to a whole micro-token.
/// Rounding up is applied to a job's cumulative cost, so incremental charges add up to the same total.
pub fn cost(per_gpu_hour: Tokens, gpu_seconds: u64) -> Tokens {
    cost_milli(per_gpu_hour, gpu_seconds.saturating_mul(crate::tres::MILLI))
}

/// Cost of `milli_gpu_seconds` (milli-GPUs × seconds, so shards are fractions), rounded up.
pub fn cost_milli(per_gpu_hour: Tokens, milli_gpu_seconds: u64) -> Tokens {
    let divisor = SECONDS_PER_HOUR * crate::tres::MILLI as i128;
    let exact = per_gpu_hour.micro() as i128 * milli_gpu_seconds as i128;
    let micro = (exact + divisor - 1).div_euclid(divisor);
    Tokens::from_micro(micro.min(i64::MAX as i128) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> PriceTable {
        let mut p = BTreeMap::new();
        p.insert("rtx2080".into(), Tokens::from_micro(500_000));
        p.insert("rtx3090".into(), Tokens::whole(1));
        p.insert("a6000".into(), Tokens::whole(4));
        PriceTable::new(p, None)
    }

    #[test]
    fn seed_worked_example_costs_84() {
        let t = seed();
        let h = 3600;
        let total = cost(t.applied("rtx2080").per_gpu_hour, 8 * 5 * h)
            + cost(t.applied("RTX3090").per_gpu_hour, 4 * 10 * h)
            + cost(t.applied("A6000").per_gpu_hour, 2 * 3 * h);
        assert_eq!(total, Tokens::whole(84));
        assert_eq!(Tokens::whole(100) + Tokens::whole(30) - total, Tokens::whole(46));
    }

    #[test]
    fn rounds_up_to_the_micro_token() {
        // 1 token/h for 1 s = 277.77… micro-tokens → 278
        assert_eq!(cost(Tokens::whole(1), 1), Tokens::from_micro(278));
        assert_eq!(cost(Tokens::whole(1), 0), Tokens::ZERO);
        assert_eq!(cost(Tokens::whole(36), 100), Tokens::whole(1));
    }

    #[test]
    fn unlisted_type_is_never_free() {
        let t = seed();
        assert_eq!(t.applied("h100"), AppliedPrice { per_gpu_hour: Tokens::whole(4), listed: false });
        let with_default = PriceTable::new(BTreeMap::new(), Some(Tokens::whole(2)));
        assert_eq!(with_default.applied("h100").per_gpu_hour, Tokens::whole(2));
        assert_eq!(PriceTable::default().applied("x").per_gpu_hour, Tokens::whole(1));
    }
}
