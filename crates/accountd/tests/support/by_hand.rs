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
