//! The charge cycle: finished jobs from slurmdbd (sacct) and running jobs from slurmctld (squeue),
//! charged for the GPU time not yet charged. Idempotent: re-reading the same records charges nothing.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use gputokens::config::ChargeBasis;
use gputokens::pricing::{measured_fraction, weight_permille};
use gputokens::refunds::may_be_lost;
use gputokens::slurm::rejected::Rejected;
use gputokens::slurm::sacct::RunEnded;
use gputokens::slurm::{sacct, squeue};
use ledger::{ChargeOutcome, EnergyCharged, UsageRecord};

use crate::cycles::CycleState;
use crate::cycles::{refunds, rejected_records};
use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm::{QueueOnce, Slurm, SlurmError};

/// Ledger meta key: sacct has been read up to this unix time.
pub const READ_UNTIL: &str = "sacct_read_until";
/// Where the very first read began (`first_lookback` before it): re-reads never reach before it, so
/// jobs that ended earlier (charged by the system gputokens replaced, or imported) are never charged.
pub const READ_FROM: &str = "sacct_read_from";
/// When this ledger's first charge cycle began (unix): runs sacct shows ending then or earlier are
/// never charged, whatever window sacct was read with. They ended before gputokens charged anything
/// and belong to whatever accounted for jobs until then (the README's promise), and a window's start
/// is not a reliable boundary: sacct selects by time in whole seconds, and `first_lookback` reaches
/// back on purpose.
pub const CHARGING_SINCE: &str = "charging_since";

/// The ledger meta key `key` of this host's cluster: each cluster of a shared ledger reads its own
/// sacct from where it stopped (`sacct_read_until:new`), so one cluster's accountd down never moves
/// another's window past the jobs it has not read. The first cluster's keys are the ledger's own.
pub fn cluster_meta(res: &Resources, key: &str) -> String {
    match res.config.clusters.lease_name() {
        "" => key.to_string(),
        cluster => format!("{key}:{cluster}"),
    }
}

#[derive(Debug, Default)]
pub struct ChargeSummary {
    /// The sacct window read: from, to (unix).
    pub window: (i64, i64),
    pub finished: usize,
    pub running: usize,
    pub outcome: ChargeOutcome,
    pub skipped: usize,
    /// Records left out because they cannot be charged (logged and counted in the metrics).
    pub rejected: usize,
    /// Runs lost to the system refunded now (`[refunds]`).
    pub refunded: usize,
    /// Runs that ended before this ledger began charging, left out (`charging_since`).
    pub before_charging: usize,
    /// GPU energy charged (`[prices] per_kwh`), or passed over while it is not priced.
    pub energy: EnergyCharged,
}

impl fmt::Display for ChargeSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sacct {} to {}: {} finished and {} running GPU jobs: {} charge entries, {} tokens; {} rows without GPU time skipped",
            gputokens::time::format_local(self.window.0),
            gputokens::time::format_local(self.window.1),
            self.finished, self.running, self.outcome.entries, self.outcome.charged, self.skipped
        )?;
        if self.rejected > 0 {
            write!(f, "; {} records that cannot be charged left out (see the log)", self.rejected)?;
        }
        if self.refunded > 0 {
            write!(f, "; {} runs lost to the system refunded", self.refunded)?;
        }
        if self.before_charging > 0 {
            write!(f, "; {} runs that ended before gputokens began charging left out", self.before_charging)?;
        }
        for (gpu_type, secs) in &self.outcome.unlisted_types {
            write!(f, "; {secs} GPU-seconds of unpriced type '{gpu_type}'")?;
        }
        if self.energy.entries > 0 {
            write!(f, "; {}", energy_summary(&self.energy))?;
        }
        Ok(())
    }
}

/// `GPU energy: 3 charge entries, 1.5 tokens for 3 kWh`, and the runs whose energy waits.
pub fn energy_summary(e: &EnergyCharged) -> String {
    let waiting = match e.waiting {
        0 => String::new(),
        n => format!(" ({n} runs' energy waits for their GPU time's first charge)"),
    };
    format!(
        "GPU energy: {} charge entries, {} tokens for {} kWh{waiting}",
        e.entries,
        e.tokens,
        gputokens::statement::kwh(e.joules)
    )
}

/// Charges the GPU energy node agents reported since the last cycle (`[prices] per_kwh`; unset:
/// passed over), after the GPU time of the runs it belongs to and before their refunds.
/// A failure is logged, never the cycle's: the GPU time is charged, and the next cycle tries again.
pub fn charge_energy(res: &mut Resources, now: i64) -> EnergyCharged {
    let charged = match res.ledger.charge_energy(res.config.prices.per_kwh(), now) {
        Ok(charged) => charged,
        Err(e) => {
            tracing::error!("GPU energy not charged this cycle (the next one tries again): {e}");
            return EnergyCharged::default();
        }
    };
    for (job, why) in &charged.failures {
        tracing::error!("GPU energy of job {job} not charged (the others' were; tried again next cycle): {why}");
    }
    res.metrics.record_energy_charge(&charged);
    charged
}

/// Charges what ended since the last cycle (sacct) and what runs (the queue: `accountd tick` reads
/// it once for its charge and its check). squeue is read, and its JSON parsed, on a thread of its
/// own while the finished runs are read and charged: on a large site each is seconds, spent waiting
/// on slurmctld, slurmdbd or the database, or on one CPU. The two are charged in a transaction each;
/// the window moves on only after both, so a cycle that fails half-way charges nothing twice when
/// it is read again.
pub fn charge(cycle: &mut CycleState, slurm: &Slurm, queue: &mut QueueOnce, now: i64) -> AccountdResult<ChargeSummary> {
    // What Slurm can have seen: `now` may be ahead of the clock (`tick --now`), never Slurm.
    let read_at = gputokens::time::now();
    let SacctWindowStart { since, read_until, read_from } = next_window_start(&cycle.res, now)?;

    let charging_since = charging_since(&mut cycle.res, read_until, read_at)?;
    let (finished, queue_read) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| queue.jobs().map(|_| ()));
        let finished = charge_finished(cycle, slurm, (since, now), charging_since);
        (finished, reader.join())
    });
    // A panic reading the queue is the cycle's, as it was when the queue was read on this thread.
    let queue_read = queue_read.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let mut finished = finished?;
    queue_read?;

    let sharing = cycle.res.config.sharing;
    let running: Vec<squeue::RunningJob> = queue.jobs()?.iter().filter(|j| squeue::holds_gpus(j)).cloned().collect();
    // Running jobs up to when squeue was read (their time so far as Slurm counts it, suspensions
    // left out), not up to `now`: time that has not passed is never charged.
    let squeue_at = queue.read_ms().map_or_else(gputokens::time::now, |ms| ms.div_euclid(1000));
    let nodes_of: HashMap<String, String> = running.iter().map(|j| (j.job_id.clone(), j.nodes.clone())).collect();
    let (mut running_records, rejected_running) =
        rejected_records::sift(running.iter().map(|j| j.gpu_time(squeue_at, sharing)).collect(), "squeue");
    // A borrowed run is charged when it has ended: nothing if it is reclaimed.
    crate::cycles::lending::defer_running(&mut cycle.res, slurm, &mut running_records, &running, now)?;
    finished.rejected.extend(rejected_running);
    let running_outcome = charge_records(&mut cycle.res, running_records, &nodes_of, slurm, now)?;
    let outcome = merged(finished.outcome, running_outcome);

    let energy = charge_energy(&mut cycle.res, now);
    // Slurm's times of the runs read: evidence of the real time for the check cycle.
    let ends = finished.ends.values().filter_map(|e| e.end);
    let starts = finished.starts.iter().copied().chain(running.iter().map(|j| j.start_time));
    crate::cycles::slurm_clock::saw(&mut cycle.res, ends.chain(starts))?;
    // After the charge, so a lost run's charge is complete when it is given back.
    let refunded = refunds::run(&mut cycle.res, &finished.refund_candidates, &finished.ends, now)?;
    // Read up to what Slurm had seen: a job that ends after the clock but before `now` is read again.
    cycle.res.ledger.set_meta(&cluster_meta(&cycle.res, READ_UNTIL), &now.min(read_at).to_string())?;
    if read_from.is_none() {
        // Ledgers from before this key: their first read is long past, nothing to protect.
        let from = if read_until.is_none() { since } else { i64::MIN };
        cycle.res.ledger.set_meta(&cluster_meta(&cycle.res, READ_FROM), &from.to_string())?;
    }
    let mut rejected = finished.rejected;
    rejected.extend(rejected_records::uncountable(&outcome));
    cycle.res.metrics.record_charge(&outcome, finished.skipped);
    cycle.rejected_records.note(&rejected, &cycle.res.metrics);
    for (gpu_type, secs) in &outcome.unlisted_types {
        tracing::warn!(
            "GPU type '{gpu_type}' is not in [prices]: {secs} GPU-seconds charged at the unlisted-type price"
        );
    }
    Ok(ChargeSummary {
        window: (since, now),
        finished: finished.read,
        running: running.len(),
        outcome,
        skipped: finished.skipped,
        rejected: rejected.len(),
        refunded,
        before_charging: finished.before_charging,
        energy,
    })
}

/// The finished runs of a window, charged, and what the cycle needs of them after.
struct FinishedCharged {
    /// Runs read.
    read: usize,
    /// Rows skipped as not runs (job steps and the like).
    skipped: usize,
    /// How each run ended.
    ends: HashMap<(String, i64), RunEnded>,
    /// When each run started.
    starts: Vec<i64>,
    /// The runs that ended as one lost for a cause the site refunds may
    /// ([`gputokens::refunds::may_be_lost`]): all that refunds read.
    refund_candidates: Vec<UsageRecord>,
    outcome: ChargeOutcome,
    rejected: Vec<Rejected>,
    before_charging: usize,
}

/// Reads sacct over `window` and charges the runs that ended in it (those that ended before this
/// ledger began charging left out).
fn charge_finished(
    cycle: &mut CycleState,
    slurm: &Slurm,
    (since, until): (i64, i64),
    charging_since: Option<i64>,
) -> AccountdResult<FinishedCharged> {
    let mut finished =
        sacct::parse(&slurm.sacct(since, until)?, cycle.res.config.sharing).map_err(SlurmError::Sacct)?;
    slurm.key_records(&mut finished);
    let before_charging = leave_out_runs_ended_by(&mut finished, charging_since);
    // The records are charged as they are, not copied (a large site's first cycle reads 100,000,
    // while squeue's output is read beside them): what is needed of them after is kept apart.
    let records = std::mem::take(&mut finished.records);
    let starts = records.iter().map(|r| r.segment_start).collect();
    let causes = &cycle.res.config.refunds.causes;
    let lost = |r: &&UsageRecord| {
        let ended = finished.ends.get(&(r.job_id.clone(), r.segment_start));
        ended.is_some_and(|e| may_be_lost(&e.state, causes))
    };
    let refund_candidates = match causes.is_empty() {
        true => Vec::new(),
        false => records.iter().filter(lost).cloned().collect(),
    };
    let read = records.len();
    let (mut records, rejected_finished) = rejected_records::sift(records, "sacct");
    crate::cycles::lending::price_finished(&mut cycle.res, &mut records, &finished.ends, until)?;
    let rejected = std::mem::take(&mut finished.rejected).into_iter().chain(rejected_finished).collect();
    let outcome = charge_records(&mut cycle.res, records, &finished.nodes, slurm, until)?;
    let sacct::Parsed { ends, skipped, .. } = finished;
    Ok(FinishedCharged { read, skipped, ends, starts, refund_candidates, outcome, rejected, before_charging })
}

/// Charges `records` (GPU types left untyped resolved by their nodes, weighed by their use where
/// the site charges by it) in one transaction.
fn charge_records(
    res: &mut Resources,
    mut records: Vec<UsageRecord>,
    nodes_of: &HashMap<String, String>,
    slurm: &Slurm,
    now: i64,
) -> AccountdResult<ChargeOutcome> {
    resolve_untyped(&mut records, nodes_of, slurm);
    if !res.config.prices.stranded().is_empty() {
        price_by_stranding(&mut records, nodes_of, slurm, &res.config.prices);
    }
    if res.config.utilization.charge_basis == ChargeBasis::Measured {
        weigh_by_utilization(res, &mut records)?;
    }
    Ok(res.ledger.charge(&records, &res.config.prices, now)?)
}

/// Two charge outcomes as one.
fn merged(mut first: ChargeOutcome, second: ChargeOutcome) -> ChargeOutcome {
    // Every field named: one added to ChargeOutcome must be merged here too.
    let ChargeOutcome { entries, charged, unchanged, unlisted_types, by_user_type, records, uncountable } = second;
    first.entries += entries;
    first.charged = first.charged + charged;
    first.unchanged += unchanged;
    for (gpu_type, secs) in unlisted_types {
        let total = first.unlisted_types.entry(gpu_type).or_default();
        *total = total.saturating_add(secs);
    }
    for (key, tokens) in by_user_type {
        let total = first.by_user_type.entry(key).or_insert(gputokens::Tokens::ZERO);
        *total = *total + tokens;
    }
    first.records += records;
    first.uncountable.extend(uncountable);
    first
}

/// When this ledger began charging (`charging_since`), set by its first charge cycle before it reads
/// anything, so a cycle that fails leaves the same boundary for the next. None for a ledger that
/// charged before the key existed: its first read is long past (`sacct_read_from` protects it).
fn charging_since(res: &mut Resources, read_until: Option<i64>, clock: i64) -> AccountdResult<Option<i64>> {
    let key = cluster_meta(res, CHARGING_SINCE);
    if let Some(since) = res.ledger.meta(&key)?.and_then(|v| v.parse().ok()) {
        return Ok(Some(since));
    }
    if read_until.is_some() {
        return Ok(None);
    }
    res.ledger.set_meta(&key, &clock.to_string())?;
    Ok(Some(clock))
}

/// Drops the final runs that ended at or before `since` (their End, else start + elapsed); returns
/// how many. A run ending within the second charging began counts as before it: its time is all but
/// wholly earlier, and one that started in that second too has no GPU time to charge.
fn leave_out_runs_ended_by(finished: &mut sacct::Parsed, since: Option<i64>) -> usize {
    let Some(since) = since else { return 0 };
    let before = finished.records.len();
    let ends = &finished.ends;
    finished.records.retain(|r| {
        let end = ends.get(&(r.job_id.clone(), r.segment_start)).and_then(|e| e.end);
        end.unwrap_or(r.segment_start.saturating_add_unsigned(r.elapsed)) > since
    });
    before - finished.records.len()
}

/// Where the next charge cycle's sacct window starts, and the ledger's values it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SacctWindowStart {
    pub since: i64,
    /// How far sacct was read (`sacct_read_until`); None before the first cycle.
    pub read_until: Option<i64>,
    /// Where the first read began (`sacct_read_from`).
    pub read_from: Option<i64>,
}

/// Where the next charge cycle's sacct window starts, from how far the ledger says sacct was read.
/// A ledger restored from a backup says how far the backup had
/// read: the next cycle reads sacct again from there, and job_charges keeps every job segment the
/// backup holds from being charged twice.
pub fn next_window_start(res: &Resources, now: i64) -> AccountdResult<SacctWindowStart> {
    let tools = &res.config.slurm;
    let meta = |key| -> AccountdResult<Option<i64>> {
        Ok(res.ledger.meta(&cluster_meta(res, key))?.and_then(|v| v.parse().ok()))
    };
    let (read_until, read_from) = (meta(READ_UNTIL)?, meta(READ_FROM)?);
    let since =
        window_start(read_until, read_from, tools.reread.as_secs() as i64, tools.first_lookback.as_secs() as i64, now);
    Ok(SacctWindowStart { since, read_until, read_from })
}

/// Where this cycle's sacct window starts: `reread` before where the last read ended, never before
/// the very first read, and never after `until`, however the clock moved since (set back, or a
/// `tick --now` ahead of it), so the window is never inverted.
fn window_start(read_until: Option<i64>, read_from: Option<i64>, reread: i64, first_lookback: i64, until: i64) -> i64 {
    let since = match read_until {
        Some(t) => t.saturating_sub(reread).max(read_from.unwrap_or(i64::MIN)),
        None => until.saturating_sub(first_lookback),
    };
    since.min(until)
}

/// How far apart a node's clock (its samples' runs) and slurmctld's (a run's start) may be.
const SAMPLE_CLOCK_SKEW: i64 = 60;

/// `charge_basis = "measured"`: a run pays for its GPUs in proportion to their measured
/// utilization, never less than `measured_min_fraction`; a run never measured pays the allocation.
/// Only the run's own samples count (a requeued job's earlier run's do not), and each of its nodes
/// is expected to send them (the audit's M3).
fn weigh_by_utilization(res: &Resources, records: &mut [UsageRecord]) -> AccountdResult {
    let floor = res.config.utilization.measured_min_fraction;
    let interval = sample_interval(&res.config);
    // Agents sample each node; Prometheus's query gives one figure per job.
    let per_node = res.config.utilization.source == gputokens::config::UtilizationSource::Agents;
    for record in records {
        let run_end = record.segment_start.saturating_add(i64::try_from(record.elapsed).unwrap_or(i64::MAX));
        let run =
            res.ledger.run_utilization_samples(&record.job_id, record.segment_start, run_end, SAMPLE_CLOCK_SKEW)?;
        if let Some((samples, util_sum)) = run {
            let nodes = if per_node { record.nodes } else { 1 };
            let fraction = measured_fraction(samples, util_sum, record.elapsed, interval, nodes, floor);
            record.weight_permille = weight_permille(fraction);
        }
    }
    Ok(())
}

/// How often a running job's utilization is sampled: every agent report, or every check cycle
/// when it comes from Prometheus.
fn sample_interval(config: &gputokens::Config) -> u64 {
    match config.utilization.source {
        gputokens::config::UtilizationSource::Agents => {
            humantime::parse_duration(&config.agent.interval).map_or(0, |d| d.as_secs())
        }
        gputokens::config::UtilizationSource::Prometheus => config.intervals.check.as_secs(),
    }
}

/// `[prices] stranded`: a record whose share of its nodes' CPUs or memory costs more than its own
/// GPUs is priced by that share. Where a node's shape is unknown (sinfo failed, a node gone) the
/// record pays for its own GPUs in this cycle; a running job's next cycle charges it what it missed.
fn price_by_stranding(
    records: &mut [UsageRecord],
    nodes_of: &HashMap<String, String>,
    slurm: &Slurm,
    prices: &gputokens::pricing::PriceTable,
) {
    let shapes = match slurm.node_shapes() {
        Ok(shapes) => shapes,
        Err(e) => return tracing::warn!("[prices] stranded: cannot read the nodes' CPUs and memory, so jobs are priced by their own GPUs in this cycle: {e}"),
    };
    let mut hosts_of: HashMap<&str, Option<Vec<String>>> = HashMap::new();
    for record in records.iter_mut() {
        let Some(hostlist) = nodes_of.get(&record.job_id) else { continue };
        let Some(hosts) = hosts_of.entry(hostlist).or_insert_with(|| slurm.hostnames(hostlist).ok()) else { continue };
        let nodes: Vec<&gputokens::stranding::NodeShape> = hosts.iter().filter_map(|h| shapes.get(h)).collect();
        if nodes.len() != hosts.len() {
            continue;
        }
        let names = match hosts.as_slice() {
            [one] => one.clone(),
            all => format!("its {} nodes", all.len()),
        };
        record.stranding = gputokens::stranded_price::stranding(
            &record.milli_gpus,
            record.held,
            &nodes,
            &names,
            prices,
            prices.stranded(),
        );
    }
}

/// An untyped allocation on nodes that have a single GPU type is charged as that type.
fn resolve_untyped(records: &mut [UsageRecord], nodes_of: &HashMap<String, String>, slurm: &Slurm) {
    if !records.iter().any(|r| r.milli_gpus.contains_key(sacct::UNTYPED)) {
        return;
    }
    let types_by_node = match slurm.node_gpu_types() {
        Ok(t) => t,
        Err(e) => return tracing::warn!("cannot learn node GPU types for untyped allocations: {e}"),
    };
    for record in records.iter_mut().filter(|r| r.milli_gpus.contains_key(sacct::UNTYPED)) {
        let Some(hostlist) = nodes_of.get(&record.job_id) else { continue };
        let Ok(hosts) = slurm.hostnames(hostlist) else { continue };
        let types: BTreeSet<&String> = hosts.iter().filter_map(|h| types_by_node.get(h)).flatten().collect();
        if let [only] = types.into_iter().collect::<Vec<_>>().as_slice() {
            let count = record.milli_gpus.remove(sacct::UNTYPED).unwrap_or(0);
            let typed = record.milli_gpus.entry((*only).clone()).or_default();
            *typed = typed.saturating_add(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{leave_out_runs_ended_by, window_start};
    use gputokens::slurm::sacct;

    /// Runs that ended at or before charging began are left out, by their End where sacct gives it
    /// (a suspended run's start + elapsed falls short of it), else by start + elapsed.
    #[test]
    fn runs_that_ended_before_charging_began_are_left_out() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|End|State\n\
            1|ann|gres/gpu:a6000=1|60|1000|1060|COMPLETED\n\
            2|ann|gres/gpu:a6000=1|60|1000|1100|COMPLETED\n\
            3|ann|gres/gpu:a6000=1|60|1041|1101|COMPLETED\n\
            4|ann|gres/gpu:a6000=1|30|1090|Unknown|RUNNING\n";
        let parse = || sacct::parse(text, Default::default()).unwrap();
        let jobs = |p: &sacct::Parsed| p.records.iter().map(|r| r.job_id.clone()).collect::<Vec<_>>();

        let mut parsed = parse();
        assert_eq!(leave_out_runs_ended_by(&mut parsed, Some(1100)), 2);
        assert_eq!(jobs(&parsed), ["3"], "job 2 ran until its End at 1100 (suspended 40 s), job 1 until 1060");
        assert_eq!(parsed.active.len(), 1, "a running job is not a final run: charged as running");

        let mut parsed = parse();
        assert_eq!(leave_out_runs_ended_by(&mut parsed, Some(1059)), 0);
        let mut parsed = parse();
        assert_eq!(leave_out_runs_ended_by(&mut parsed, None), 0, "a ledger from before the boundary");
        assert_eq!(jobs(&parsed), ["1", "2", "3"]);

        let without_end = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n1|ann|gres/gpu:a6000=1|60|1000|COMPLETED\n";
        let mut parsed = sacct::parse(without_end, Default::default()).unwrap();
        assert_eq!(leave_out_runs_ended_by(&mut parsed, Some(1060)), 1, "start + elapsed without an End column");
    }

    #[test]
    fn the_window_is_never_inverted() {
        let (reread, lookback) = (3600, 86400);
        assert_eq!(window_start(None, None, reread, lookback, 100_000), 100_000 - 86400, "first read");
        assert_eq!(window_start(Some(50_000), Some(0), reread, lookback, 100_000), 50_000 - 3600);
        assert_eq!(
            window_start(Some(50_000), Some(48_000), reread, lookback, 100_000),
            48_000,
            "never before the first"
        );
        // The clock was set back below the last read's end.
        assert_eq!(window_start(Some(200_000), Some(0), reread, lookback, 100_000), 100_000);
        assert_eq!(window_start(Some(i64::MIN), None, reread, lookback, 100_000), i64::MIN, "no overflow");
    }
}
