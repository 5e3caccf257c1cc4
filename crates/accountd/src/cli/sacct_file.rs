//! `accountd charge --sacct-file`: charges the job records of a file saved from sacct (or stdin).

use std::io::Read;
use std::path::Path;

use gputokens::slurm::sacct;

use crate::cycles::CycleState;
use crate::error::{AccountdError, AccountdResult};

pub fn charge(cycle: &mut CycleState, file: &Path, now: i64) -> AccountdResult<String> {
    let mut text = String::new();
    let read = if file == Path::new("-") {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_string(&mut text))
    };
    let bad = |problem: String| AccountdError::BadInput { path: file.to_path_buf(), problem };
    read.map_err(|e| bad(e.to_string()))?;
    let mut parsed = sacct::parse(&text, cycle.res.config.sharing).map_err(|e| bad(e.to_string()))?;
    crate::slurm::Slurm::of(&cycle.res.config).key_records(&mut parsed);
    let all = parsed.records.iter().chain(&parsed.active).cloned().collect();
    let (records, rejected) = crate::cycles::rejected_records::sift(all, &file.display().to_string());
    let mut rejected: Vec<_> = parsed.rejected.iter().cloned().chain(rejected).collect();
    let outcome = cycle.res.ledger.charge(&records, &cycle.res.config.prices, now)?;
    let energy = crate::cycles::charge::charge_energy(&mut cycle.res, now);
    let refunded = crate::cycles::refunds::run(&mut cycle.res, &parsed.records, &parsed.ends, now)?;
    rejected.extend(crate::cycles::rejected_records::uncountable(&outcome));
    cycle.rejected_records.note(&rejected, &cycle.res.metrics);
    crate::snapshot::publish(&cycle.res, &cycle.slurm_view, now)?;
    crate::cycles::notify::run(&mut cycle.res, now);
    for (gpu_type, gpu_seconds) in &outcome.unlisted_types {
        tracing::warn!(
            "GPU type '{gpu_type}' has no price: {gpu_seconds} GPU-seconds charged at the unlisted-type price"
        );
    }
    Ok(format!(
        "{} records: {} charge entries, {} tokens charged, {} already charged, {} rows without GPU time skipped, \
         {} that cannot be charged left out, {} runs lost to the system refunded{}",
        records.len(),
        outcome.entries,
        outcome.charged,
        outcome.unchanged,
        parsed.skipped,
        rejected.len(),
        refunded,
        match energy.entries {
            0 => String::new(),
            _ => format!("; {}", crate::cycles::charge::energy_summary(&energy)),
        }
    ))
}
