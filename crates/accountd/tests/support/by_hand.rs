//! What a charge should come to, worked out here in plain integer arithmetic rather than with the
//! product's own price functions, so that a test of a charge does not share its code's mistakes.
//! The rules, as docs/configuration.md states them: a GPU-hour at its type's price, a kWh at
//! `per_kwh`, each charge rounded up to the micro-token (10⁻⁶).

use gputokens::Tokens;

/// `gpu_seconds` at `per_gpu_hour` tokens: price × seconds ÷ 3600, rounded up.
pub fn gpu_cost(per_gpu_hour: Tokens, gpu_seconds: u64) -> Tokens {
    Tokens::from_micro(ceil_div(per_gpu_hour.micro() as i128 * gpu_seconds as i128, 3600))
}

/// `joules` at `per_kwh` tokens: price × joules ÷ 3.6 MJ, rounded up.
pub fn energy_cost(per_kwh: Tokens, joules: u64) -> Tokens {
    Tokens::from_micro(ceil_div(per_kwh.micro() as i128 * joules as i128, 3_600_000))
}

fn ceil_div(n: i128, d: i128) -> i64 {
    let q = n / d + i128::from(n % d > 0);
    i64::try_from(q).expect("a cost that fits a balance")
}

#[test]
fn worked_examples() {
    let t = |s: &str| s.parse::<Tokens>().unwrap();
    // The README's: 2 a6000 (4 tokens per GPU-hour) for 2 hours.
    assert_eq!(gpu_cost(t("4"), 2 * 7200).to_string(), "16");
    // An rtx2080 (0.5) for 90 s: 0.0125.
    assert_eq!(gpu_cost(t("0.5"), 90).to_string(), "0.0125");
    // One rtx3090-second (1 per hour) is 0.000277… and rounds up.
    assert_eq!(gpu_cost(t("1"), 1).to_string(), "0.000278");
    // 300 W for 60 s (18 kJ) at 100 per kWh: 0.5.
    assert_eq!(energy_cost(t("100"), 18_000).to_string(), "0.5");
    // 1 J at 2.5 per kWh: 0.000000694… rounds up to one micro-token.
    assert_eq!(energy_cost(t("2.5"), 1).to_string(), "0.000001");
}
