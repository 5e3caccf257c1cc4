//! Prices per GPU type and the cost of GPU time, rounded up to the next micro-token; with
//! `charge_basis = "measured"`, the share of its price a job pays for the utilization measured.
//! A MIG slice without a price of its own costs its share of its GPU type's price (`mig`).
//! Everything that prices a GPU-hour is here: the ledger and accountd only call it.

use std::collections::BTreeMap;

use crate::mig::{self, Share};
use crate::tokens::Tokens;

const SECONDS_PER_HOUR: i128 = 3600;

/// Tokens per GPU-hour by lower-cased GPU type, and per kWh of GPU energy where priced.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    prices: BTreeMap<String, Tokens>,
    default_price: Option<Tokens>,
    per_kwh: Option<Tokens>,
    /// What a job's share of its nodes is counted by where its GPUs strand others (`stranded`).
    stranded: Vec<crate::stranding::Part>,
}

/// The price used for a GPU type, and whether it came from `[prices]` (the type's own line, or
/// its GPU type's for a MIG slice: then `slice` is the slice's share of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedPrice {
    pub per_gpu_hour: Tokens,
    pub listed: bool,
    pub slice: Option<Share>,
}

impl PriceTable {
    /// `prices` keys must already be lower-case.
    pub fn new(prices: BTreeMap<String, Tokens>, default_price: Option<Tokens>) -> Self {
        PriceTable { prices, default_price, per_kwh: None, stranded: Vec::new() }
    }

    /// The table pricing a job by the larger of its GPUs and its share of its nodes' GPUs, its
    /// share counted by `parts` (`[prices] stranded`; none: off).
    pub fn with_stranded(self, parts: Vec<crate::stranding::Part>) -> Self {
        PriceTable { stranded: parts, ..self }
    }

    /// What a job's share of its nodes is counted by (`[prices] stranded`); empty: off.
    pub fn stranded(&self) -> &[crate::stranding::Part] {
        &self.stranded
    }

    /// The table with GPU energy priced at `per_kwh` tokens per kWh (`[prices] per_kwh`).
    pub fn with_per_kwh(self, per_kwh: Option<Tokens>) -> Self {
        PriceTable { per_kwh, ..self }
    }

    /// Tokens per kWh of a job's GPU energy; None (the default): energy is measured, never charged.
    pub fn per_kwh(&self) -> Option<Tokens> {
        self.per_kwh
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

    /// The price to charge: the listed one; for a MIG slice not listed itself, its share of its GPU
    /// type's listed price; else `default_price`, else the highest listed price, so unknown
    /// hardware is never free.
    pub fn applied(&self, gpu_type: &str) -> AppliedPrice {
        if let Some(per_gpu_hour) = self.price(gpu_type) {
            return AppliedPrice { per_gpu_hour, listed: true, slice: None };
        }
        match self.slice_price(gpu_type) {
            Some((share, per_gpu_hour)) => AppliedPrice { per_gpu_hour, listed: true, slice: Some(share) },
            None => AppliedPrice { per_gpu_hour: self.unlisted_price(), listed: false, slice: None },
        }
    }

    /// A MIG slice's share of its GPU type's listed price, rounded up to the micro-token (a slice
    /// is never cheaper than its share); None when `gpu_type` is no slice or its GPU type has no price.
    fn slice_price(&self, gpu_type: &str) -> Option<(Share, Tokens)> {
        let slice = mig::parse(gpu_type)?;
        let whole = i128::from(self.price(self.slice_parent_line(gpu_type)?)?.micro());
        let Share { slices, of } = slice.share;
        let scaled = whole * i128::from(slices);
        let micro = scaled.div_euclid(i128::from(of)) + i128::from(scaled.rem_euclid(i128::from(of)) != 0);
        // At most the whole price (slices <= of): fits.
        Some((slice.share, Tokens::from_micro(micro as i64)))
    }

    /// The `[prices]` line a MIG slice type without one of its own is priced from: its GPU type's
    /// (`a100` for `a100_3g.20gb`), else the one listed type that is a word of it (`a100` for
    /// Slurm's `nvidia_a100_3g.20gb`); None when neither is listed (or several words are).
    pub fn slice_parent_line<'a>(&'a self, gpu_type: &'a str) -> Option<&'a str> {
        let parent = mig::parse(gpu_type)?.parent;
        if self.price(parent).is_some() {
            return Some(parent);
        }
        let lower = parent.to_ascii_lowercase();
        let mut listed = lower.split(|c: char| !c.is_ascii_alphanumeric()).filter_map(|w| self.prices.get_key_value(w));
        match (listed.next(), listed.next()) {
            (Some((line, _)), None) => Some(line.as_str()),
            _ => None,
        }
    }

    /// The most a request for `gpu_type` may cost per GPU-hour once Slurm matches it to a node's
    /// type: Slurm compares types by a weak additive hash ([`slurm_type_id`]), so `01001` is
    /// given an `a100`, and a made-up slice name can be given its whole GPU. The price applied to
    /// the name, or the highest of the listed types Slurm would take it for.
    pub fn requested(&self, gpu_type: &str) -> Tokens {
        let id = slurm_type_id(gpu_type);
        let alike = self.prices.iter().filter(|(listed, _)| slurm_type_id(listed) == id).map(|(_, price)| *price);
        alike.chain([self.applied(gpu_type).per_gpu_hour]).max().unwrap_or(Tokens::ZERO)
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
/// The number Slurm compares GRES types by (`gres_build_id` in its gres.c): each byte, as C's
/// signed char, shifted left by 0, 8, 16, 24, 0, … bits, summed with wrap-around. Types are
/// matched case-insensitively by gputokens' price table and by this number in Slurm, so the
/// lower-case name is what both sides of a match are taken as.
pub fn slurm_type_id(gpu_type: &str) -> u32 {
    gpu_type.to_ascii_lowercase().bytes().enumerate().fold(0u32, |id, (i, b)| {
        let shift = (i % 4) as u32 * 8;
        id.wrapping_add((b as i8 as i32 as u32).wrapping_shl(shift))
    })
}

pub fn cost(per_gpu_hour: Tokens, gpu_seconds: u64) -> Tokens {
    cost_milli(per_gpu_hour, gpu_seconds.saturating_mul(crate::tres::MILLI))
}

/// Cost of `milli_gpu_seconds` (milli-GPUs × seconds, so shards are fractions), rounded up;
/// saturates at [`Tokens::MAX`] (use [`cost_of`] where an amount too large must be refused).
pub fn cost_milli(per_gpu_hour: Tokens, milli_gpu_seconds: u64) -> Tokens {
    // i64 × u64 always fits in i128.
    let exact = per_gpu_hour.micro() as i128 * milli_gpu_seconds as i128;
    micro_tokens(exact).unwrap_or(if exact < 0 { Tokens::MIN } else { Tokens::MAX })
}

/// Exact cost of `milli` milli-GPUs held for `seconds` at `per_gpu_hour`, rounded up; None when it
/// is not a representable amount (so it is refused, never saturated or wrapped into a cheap one).
pub fn cost_of(per_gpu_hour: Tokens, milli: u64, seconds: u64) -> Option<Tokens> {
    let milli_gpu_seconds = (milli as i128).checked_mul(seconds as i128)?;
    let exact = (per_gpu_hour.micro() as i128).checked_mul(milli_gpu_seconds)?;
    micro_tokens(exact)
}

/// `price_micro × milli-GPU-seconds` as micro-tokens (÷ 3600 s ÷ 1000 milli), rounded up.
fn micro_tokens(exact: i128) -> Option<Tokens> {
    let divisor = SECONDS_PER_HOUR * crate::tres::MILLI as i128;
    // Rounded up without adding first, so no intermediate can leave i128.
    let micro = exact.div_euclid(divisor) + i128::from(exact.rem_euclid(divisor) != 0);
    i64::try_from(micro).ok().map(Tokens::from_micro)
}

const JOULES_PER_KWH: i128 = 3_600_000;

/// The cost of `joules` of GPU energy at `per_kwh`, rounded up to the micro-token; None when not
/// representable. Charged as the cost of a run's joules so far less the cost of those charged
/// before, so the roundings of successive charges add up to the rounding of the whole.
pub fn energy_cost(per_kwh: Tokens, joules: u64) -> Option<Tokens> {
    let exact = i128::from(per_kwh.micro()).checked_mul(i128::from(joules))?;
    let micro = exact.div_euclid(JOULES_PER_KWH) + i128::from(exact.rem_euclid(JOULES_PER_KWH) != 0);
    i64::try_from(micro).ok().map(Tokens::from_micro)
}

/// The weight of a record that pays its whole price (`UsageRecord::weight_permille`).
pub const FULL_WEIGHT_PERMILLE: u32 = 1000;

/// `per_gpu_hour` weighted by `weight_permille` (a measured job's share of its price), rounded
/// toward zero to the micro-token. A weight above [`FULL_WEIGHT_PERMILLE`] counts as full: a weight
/// never raises a price.
pub fn weighted_price(per_gpu_hour: Tokens, weight_permille: u32) -> Tokens {
    let weight = i128::from(weight_permille.min(FULL_WEIGHT_PERMILLE));
    // At most the price itself: fits.
    Tokens::from_micro((per_gpu_hour.micro() as i128 * weight / i128::from(FULL_WEIGHT_PERMILLE)) as i64)
}

/// The fraction of its price a measured run pays: its sampled utilization, where every sample
/// that should have come in `elapsed` seconds (one per `interval` from each of its `nodes`, with a
/// quarter's slack for late reports) and did not counts as fully used, since a silenced agent or a
/// job hidden from NVML must not make GPU time cheap; never below `floor` (`measured_min_fraction`).
/// `interval` 0 (unknown): the samples alone count; no samples and none expected: the whole price.
pub fn measured_fraction(samples: u64, util_sum: f64, elapsed: u64, interval: u64, nodes: u32, floor: f64) -> f64 {
    let per_node = elapsed.saturating_mul(4).checked_div(interval.saturating_mul(5)).unwrap_or(0);
    let expected = per_node.saturating_mul(u64::from(nodes.max(1)));
    let missing = expected.saturating_sub(samples);
    let counted = samples + missing;
    if counted == 0 {
        return 1.0;
    }
    let percent = (util_sum + 100.0 * missing as f64) / counted as f64;
    (percent / 100.0).clamp(floor, 1.0)
}

/// The weight (`UsageRecord::weight_permille`) of a record that pays `fraction` of its price, to
/// the nearest permille.
pub fn weight_permille(fraction: f64) -> u32 {
    (fraction * f64::from(FULL_WEIGHT_PERMILLE)).round() as u32
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

    /// The audit's N10: a request type Slurm takes for a listed one is priced as that one.
    #[test]
    fn a_request_type_is_priced_as_the_listed_types_slurm_takes_it_for() {
        let t = seed();
        assert_eq!(slurm_type_id("01001"), slurm_type_id("a100"), "the collision the audit found");
        assert_eq!(slurm_type_id("a"), 97);
        assert_eq!(slurm_type_id("ab"), 97 + (98 << 8));
        let mut with_a100 = t.clone();
        with_a100.prices.insert("a100".into(), Tokens::whole(7));
        with_a100.default_price = Some(Tokens::from_micro(500_000));
        assert_eq!(with_a100.applied("01001").per_gpu_hour, Tokens::from_micro(500_000), "unknown: default_price");
        assert_eq!(with_a100.requested("01001"), Tokens::whole(7), "Slurm takes it for an a100");
        assert_eq!(with_a100.requested("A6000"), with_a100.applied("a6000").per_gpu_hour);
        assert_eq!(with_a100.requested("h100"), Tokens::from_micro(500_000), "no listed type alike: as applied");
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
    fn energy_costs_its_kwh_rounded_up_and_successive_charges_add_up_to_the_whole() {
        let per_kwh = Tokens::from_micro(500_000);
        assert_eq!(energy_cost(per_kwh, 3_600_000), Some(Tokens::from_micro(500_000)));
        // 1 J at 0.5/kWh is 0.1388… micro-tokens: 1.
        assert_eq!(energy_cost(per_kwh, 1), Some(Tokens::from_micro(1)));
        assert_eq!(energy_cost(per_kwh, 0), Some(Tokens::ZERO));
        let steps = [0u64, 1, 7, 1000, 3_599_999, 3_600_000, 10_000_001];
        let charged: i64 = steps
            .windows(2)
            .map(|w| (energy_cost(per_kwh, w[1]).unwrap() - energy_cost(per_kwh, w[0]).unwrap()).micro())
            .sum();
        assert_eq!(Tokens::from_micro(charged), energy_cost(per_kwh, 10_000_001).unwrap());
        assert_eq!(energy_cost(Tokens::MAX, u64::MAX), None);
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
        assert_eq!(t.applied("h100"), AppliedPrice { per_gpu_hour: Tokens::whole(4), listed: false, slice: None });
        let with_default = PriceTable::new(BTreeMap::new(), Some(Tokens::whole(2)));
        assert_eq!(with_default.applied("h100").per_gpu_hour, Tokens::whole(2));
        assert_eq!(PriceTable::default().applied("x").per_gpu_hour, Tokens::whole(1));
    }

    fn with_a100() -> PriceTable {
        let mut p = BTreeMap::new();
        p.insert("a100".into(), Tokens::whole(4));
        p.insert("a30".into(), Tokens::whole(2));
        p.insert("a100_1g.5gb".into(), Tokens::from_micro(250_000));
        PriceTable::new(p, Some(Tokens::whole(9)))
    }

    #[test]
    fn a_mig_slice_costs_its_share_of_its_gpu() {
        let t = with_a100();
        let three = t.applied("a100_3g.20gb");
        assert_eq!(three.slice, Some(Share { slices: 3, of: 7 }));
        assert!(three.listed, "priced from [prices], not the unlisted-type fallback");
        // 4 × 3/7 = 1.7142857…, rounded up to the micro-token.
        assert_eq!(three.per_gpu_hour, Tokens::from_micro(1_714_286));
        assert_eq!(cost_of(three.per_gpu_hour, 1000, 3600), Some(Tokens::from_micro(1_714_286)));
        assert_eq!(t.applied("A100_7G.80GB").per_gpu_hour, Tokens::whole(4), "all 7 slices: the whole GPU");
        assert_eq!(t.applied("a100_1g.10gb+me").per_gpu_hour, Tokens::from_micro(571_429));
        assert_eq!(t.applied("a100_1c.3g.20gb").per_gpu_hour, Tokens::from_micro(571_429), "its compute slice");
        // An A30 has 4 slices: 2 × 2/4.
        assert_eq!(t.applied("a30_2g.12gb").per_gpu_hour, Tokens::whole(1));
    }

    #[test]
    fn a_slices_own_price_wins_and_an_unpriced_gpu_falls_back() {
        let t = with_a100();
        assert_eq!(
            t.applied("a100_1g.5gb"),
            AppliedPrice { per_gpu_hour: Tokens::from_micro(250_000), listed: true, slice: None }
        );
        let unpriced = AppliedPrice { per_gpu_hour: Tokens::whole(9), listed: false, slice: None };
        assert_eq!(t.applied("h100_3g.40gb"), unpriced, "its GPU type has no price: default_price");
        assert_eq!(t.applied("3g.20gb"), unpriced, "no GPU type named");
        assert_eq!(t.applied("a100_9g.80gb"), unpriced, "no slice of an a100");
        assert_eq!(seed().applied("h100_3g.40gb").per_gpu_hour, Tokens::whole(4), "the highest listed");
        assert_eq!(t.price("a100_3g.20gb"), None, "listed prices are the lines themselves");
    }

    /// Slurm's AutoDetect names a slice after NVML's name of its GPU (`nvidia_a100_3g.20gb`): the
    /// one listed type among that name's words prices it; two such words price it at neither.
    #[test]
    fn a_slice_of_a_gpu_named_by_its_full_name_is_priced_by_the_listed_word() {
        let mut prices = BTreeMap::new();
        prices.insert("a100".to_string(), Tokens::whole(7));
        let t = PriceTable::new(prices.clone(), None);
        assert_eq!(t.slice_parent_line("nvidia_a100_3g.20gb"), Some("a100"));
        assert_eq!(t.slice_parent_line("a100_3g.20gb"), Some("a100"));
        let applied = t.applied("nvidia_a100_3g.20gb");
        assert_eq!((applied.per_gpu_hour, applied.listed), (Tokens::whole(3), true));
        assert_eq!(t.slice_parent_line("nvidia_h100_3g.40gb"), None, "no h100 line");
        prices.insert("nvidia".to_string(), Tokens::whole(1));
        let two = PriceTable::new(prices, None);
        assert_eq!(two.slice_parent_line("nvidia_a100_3g.20gb"), None, "two words listed: neither");
        assert!(!two.applied("nvidia_a100_3g.20gb").listed);
    }

    #[test]
    fn extreme_amounts_saturate_or_are_refused() {
        assert_eq!(cost_milli(Tokens::MAX, u64::MAX), Tokens::MAX);
        assert_eq!(cost_milli(Tokens::MIN, u64::MAX), Tokens::MIN, "a negative product never wraps positive");
        assert_eq!(cost_of(Tokens::MAX, u64::MAX, u64::MAX), None);
        let (million, year) = (1000 * 1_000_000, 365 * 86_400);
        assert_eq!(cost_of(Tokens::whole(4), million, year), Some(Tokens::whole(35_040_000_000)), "exact");
        assert_eq!(cost_of(Tokens::whole(1000), million, 10_000 * year), None, "not representable");
        assert_eq!(cost_of(Tokens::whole(4), 2000, 3600), Some(Tokens::whole(8)));
        assert_eq!(cost_of(Tokens::ZERO, u64::MAX, 1), Some(Tokens::ZERO));
        assert_eq!(cost_of(Tokens::ZERO, u64::MAX, u64::MAX), None, "free, but GPU-seconds beyond counting");
        // (2^63 - 1) × 3600 × 1000 micro-token-milli-seconds is exactly i64::MAX micro-tokens.
        assert_eq!(cost_milli(Tokens::MAX, 3_600_000), Tokens::MAX);
        assert_eq!(cost_of(Tokens::MAX, 1000, 3600), Some(Tokens::MAX));
        assert_eq!(cost_of(Tokens::MAX, 1000, 3601), None);
    }

    #[test]
    fn a_weight_scales_the_price_down_and_never_up() {
        assert_eq!(weighted_price(Tokens::whole(4), FULL_WEIGHT_PERMILLE), Tokens::whole(4));
        assert_eq!(weighted_price(Tokens::whole(4), 500), Tokens::whole(2));
        assert_eq!(weighted_price(Tokens::whole(4), 0), Tokens::ZERO);
        assert_eq!(weighted_price(Tokens::whole(4), 5000), Tokens::whole(4), "capped at the price");
        // 0.000001 × 0.999 is less than a micro-token: rounded toward zero.
        assert_eq!(weighted_price(Tokens::from_micro(1), 999), Tokens::ZERO);
        assert_eq!(weighted_price(Tokens::MAX, FULL_WEIGHT_PERMILLE), Tokens::MAX, "no overflow");
        assert_eq!(weighted_price(Tokens::MAX, u32::MAX), Tokens::MAX);
    }

    #[test]
    fn missing_samples_count_as_fully_used() {
        // An hour at one report a minute, all 60 in at 20 %: pays 20 %.
        assert!((measured_fraction(60, 60.0 * 20.0, 3600, 60, 1, 0.25) - 0.25).abs() < 1e-9, "the floor");
        assert!((measured_fraction(60, 60.0 * 40.0, 3600, 60, 1, 0.25) - 0.40).abs() < 1e-9);
        // Reports a little late (50 of 60): none missing yet.
        assert!((measured_fraction(50, 50.0 * 40.0, 3600, 60, 1, 0.25) - 0.40).abs() < 1e-9);
        // One report at 0 % and then silence for the hour: 47 missing at 100 %.
        let silenced = measured_fraction(1, 0.0, 3600, 60, 1, 0.25);
        assert!((silenced - 47.0 / 48.0).abs() < 1e-9, "{silenced}");
        // Never an interval: the samples alone; no samples and none expected: the allocation.
        assert!((measured_fraction(3, 150.0, 3600, 0, 1, 0.25) - 0.5).abs() < 1e-9);
        assert_eq!(measured_fraction(0, 0.0, 10, 60, 1, 0.25), 1.0);
        // The audit's M3: a job on 4 nodes, one of whose agents reports (60 samples at 0 %): the
        // three silent nodes' samples (132 missing of 192) count as fully used, not its 60 as all.
        let three_silent = measured_fraction(60, 0.0, 3600, 60, 4, 0.25);
        assert!((three_silent - 132.0 / 192.0).abs() < 1e-9, "{three_silent}");
        // All four report at 40 %: 40 %, not four times the samples expected.
        assert!((measured_fraction(240, 240.0 * 40.0, 3600, 60, 4, 0.25) - 0.40).abs() < 1e-9);
    }

    #[test]
    fn a_measured_job_pays_its_share_of_the_price() {
        assert_eq!(weight_permille(1.0), FULL_WEIGHT_PERMILLE);
        assert_eq!(weight_permille(0.25), 250);
        assert_eq!(weight_permille(47.0 / 48.0), 979, "to the nearest permille");
        assert_eq!(weight_permille(0.0), 0);
        // An a6000 (4 tokens/h) held an hour at 40 % measured: 1.6 tokens.
        let weight = weight_permille(measured_fraction(60, 60.0 * 40.0, 3600, 60, 1, 0.25));
        assert_eq!(cost_of(weighted_price(Tokens::whole(4), weight), 1000, 3600), Some(Tokens::from_micro(1_600_000)));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn price() -> impl Strategy<Value = Tokens> {
            prop_oneof![0..=Tokens::LIMIT.micro(), 0..=i64::MAX].prop_map(Tokens::from_micro)
        }

        fn amount() -> impl Strategy<Value = u64> {
            prop_oneof![0..=10_000_000u64, any::<u64>()]
        }

        proptest! {
            /// More GPUs or more time never costs less; a pricier type never costs less.
            #[test]
            fn cost_is_monotone(p in price(), q in price(), m in amount(), n in amount(), s in amount(), t in amount()) {
                let (p, q) = (p.min(q), p.max(q));
                let (m, n) = (m.min(n), m.max(n));
                let (s, t) = (s.min(t), s.max(t));
                let saturated = |c: Option<Tokens>| c.unwrap_or(Tokens::MAX);
                let low = saturated(cost_of(p, m, s));
                prop_assert!(low <= saturated(cost_of(p, n, s)));
                prop_assert!(low <= saturated(cost_of(p, m, t)));
                prop_assert!(low <= saturated(cost_of(q, m, s)));
                prop_assert!(low >= Tokens::ZERO);
                prop_assert!(cost_milli(p, m.saturating_mul(s)) <= cost_milli(q, n.saturating_mul(t)));
            }

            /// Exact where representable: never below the true cost, less than one micro-token above it.
            #[test]
            fn cost_is_the_exact_amount_rounded_up(p in price(), m in amount(), s in amount()) {
                let exact = (m as i128).checked_mul(s as i128).and_then(|ms| ms.checked_mul(p.micro() as i128));
                match (cost_of(p, m, s), exact) {
                    (Some(c), Some(exact)) => {
                        let units = c.micro() as i128 * 3_600_000;
                        prop_assert!(units >= exact && units - exact < 3_600_000);
                    }
                    (None, Some(exact)) => prop_assert!(exact > i64::MAX as i128 * 3_600_000),
                    (None, None) => {}
                    (Some(c), None) => prop_assert!(false, "{c} for an amount beyond i128"),
                }
            }

            /// Charging a job in steps never costs less than its parts, nor more than each part rounded up.
            #[test]
            fn a_run_costs_what_its_parts_do(p in price(), m in 0..1_000_000u64, a in 0..10_000_000u64, b in 0..10_000_000u64) {
                let (Some(whole), Some(first), Some(second)) = (cost_of(p, m, a + b), cost_of(p, m, a), cost_of(p, m, b)) else {
                    return Ok(());
                };
                prop_assert!(whole >= first && whole >= second);
                prop_assert!(whole <= first + second);
            }
        }
    }
}
