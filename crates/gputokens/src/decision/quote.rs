//! The quote `sbatch --test-only` gets (the SPANK plugin asks for one): what the job can cost at
//! most, the balance after it and what the owner's other GPU jobs can still cost, and the cheaper
//! GPU types with enough GPUs free now. slurmctld adds when the job would start (`Job N to start
//! at ...`), and sbatch prints both.

use std::collections::BTreeMap;

use super::rules::{whose, JobEstimate};
use crate::pricing::PriceTable;
use crate::tokens::Tokens;
use crate::tres::MILLI;

/// `gputokens quote: this job can cost up to 4 tokens (1 a6000 GPU for 1:00:00); your GPU token
/// balance is 50, at least 30 after it and what your running and pending GPU jobs can still cost
/// (16). Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (4 free).`
pub fn message(
    balance: Tokens,
    committed: Tokens,
    job: &JobEstimate,
    pool: Option<&str>,
    prices: &PriceTable,
    free: Option<&BTreeMap<String, u64>>,
) -> String {
    let (balance_of, jobs_of) = whose(pool);
    let after = balance - committed - job.cost;
    let others = match committed > Tokens::ZERO {
        true => format!(" and what {jobs_of} can still cost ({committed})"),
        false => String::new(),
    };
    let head = format!(
        "gputokens quote: this job can cost {}; {balance_of} is {balance}, at least {after} after it{others}.",
        job.describe()
    );
    format!("{head}{}", cheaper(job, prices, free))
}

/// ` Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (4 free).`, and where the type asked for
/// has too few free now, the dearer types that would start sooner: ` rtx3090 has 1 free now; free now
/// at a higher price: a6000 up to 8 tokens (2 free).`; nothing for a request of several types or of
/// any type (where Slurm picks).
fn cheaper(job: &JobEstimate, prices: &PriceTable, free: Option<&BTreeMap<String, u64>>) -> String {
    let ([(Some(asked), &milli)], Some(free)) = (job.gpus.iter().collect::<Vec<_>>().as_slice(), free) else {
        return match free {
            None => " Which GPUs are free now is not known.".to_string(),
            Some(_) => String::new(),
        };
    };
    let needed = milli.div_ceil(MILLI);
    let free_of = |t: &str| free.iter().find(|(k, _)| k.eq_ignore_ascii_case(t)).map_or(0, |(_, &n)| n);
    // Every other priced type with enough GPUs free now, by what the job would cost on it.
    let mut offers: Vec<(Tokens, &str, u64)> = prices
        .listed_types()
        .filter(|t| !t.eq_ignore_ascii_case(asked))
        .filter_map(|t| {
            let available = free_of(t);
            (available >= needed).then_some((job.cost_on(t, prices)?, t, available))
        })
        .collect();
    offers.sort();
    let listed = |offers: &[(Tokens, &str, u64)]| {
        offers.iter().map(|(cost, t, n)| format!("{t} up to {cost} tokens ({n} free)")).collect::<Vec<_>>().join("; ")
    };
    let (cheaper, dearer): (Vec<_>, Vec<_>) = offers.into_iter().partition(|(cost, ..)| *cost < job.cost);
    let mut out = match cheaper.is_empty() {
        true => format!(" No cheaper GPU type has {} free now.", if needed == 1 { "1 GPU" } else { "that many GPUs" }),
        false => format!(" Cheaper, with GPUs free now: {}.", listed(&cheaper)),
    };
    let own = free_of(asked);
    if own < needed && !dearer.is_empty() {
        out.push_str(&format!(" {asked} has {own} free now; free now at a higher price: {}.", listed(&dearer)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::MilliByType;

    fn prices() -> PriceTable {
        let p = [("rtx2080", 500_000), ("rtx3090", 1_000_000), ("a6000", 4_000_000)];
        PriceTable::new(p.iter().map(|(t, m)| (t.to_string(), Tokens::from_micro(*m))).collect(), None)
    }

    fn job(gpus: &[(Option<&str>, u64)], seconds: u64) -> JobEstimate {
        let gpus: MilliByType = gpus.iter().map(|(t, n)| (t.map(str::to_string), n * MILLI)).collect();
        JobEstimate::of(gpus, seconds, &prices()).unwrap()
    }

    #[test]
    fn a_quote_gives_the_cost_the_balance_after_and_cheaper_types_free_now() {
        let free = BTreeMap::from([("rtx2080".to_string(), 4), ("rtx3090".to_string(), 1), ("a6000".to_string(), 2)]);
        let one = job(&[(Some("a6000"), 1)], 3600);
        assert_eq!(
            message(Tokens::whole(50), Tokens::whole(16), &one, None, &prices(), Some(&free)),
            "gputokens quote: this job can cost up to 4 tokens (1 a6000 GPU for 1:00:00); your GPU token balance is \
             50, at least 30 after it and what your running and pending GPU jobs can still cost (16). Cheaper, with \
             GPUs free now: rtx2080 up to 0.5 tokens (4 free); rtx3090 up to 1 tokens (1 free)."
        );
        // Two GPUs: rtx3090 has one free.
        let two = job(&[(Some("a6000"), 2)], 1800);
        let text = message(Tokens::whole(5), Tokens::ZERO, &two, Some("lab"), &prices(), Some(&free));
        assert!(text.contains("account lab's GPU token balance is 5, at least 1 after it."), "{text}");
        assert!(text.ends_with("Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (4 free)."), "{text}");
        // The cheapest type already, or nothing free: said so; free GPUs unknown: said so.
        let cheap = job(&[(Some("rtx2080"), 1)], 3600);
        let text = message(Tokens::whole(5), Tokens::ZERO, &cheap, None, &prices(), Some(&free));
        assert!(text.ends_with(" No cheaper GPU type has 1 GPU free now."), "{text}");
        let text = message(Tokens::whole(5), Tokens::ZERO, &one, None, &prices(), None);
        assert!(text.ends_with(" Which GPUs are free now is not known."), "{text}");
        // 2 rtx3090 with 1 free: the cheaper type, and the dearer one free now.
        let short = job(&[(Some("rtx3090"), 2)], 3600);
        let text = message(Tokens::whole(50), Tokens::ZERO, &short, None, &prices(), Some(&free));
        assert!(
            text.ends_with(
                " Cheaper, with GPUs free now: rtx2080 up to 1 tokens (4 free). rtx3090 has 1 free now; free now at a \
                 higher price: a6000 up to 8 tokens (2 free)."
            ),
            "{text}"
        );
        // Any type: Slurm picks; nothing to offer.
        let any = job(&[(None, 1)], 3600);
        let text = message(Tokens::whole(5), Tokens::ZERO, &any, None, &prices(), Some(&free));
        assert!(text.ends_with("at least 1 after it."), "{text}");
    }
}
