//! What the job_submit plugin needs from Slurm beside the balances, read every check cycle and
//! published in the snapshot: partitions' time limits (for jobs without `--time`), users' default
//! accounts (for exempt accounts), what each user's running and pending GPU jobs hold and can
//! still cost (for `mode = "estimate"` and `max_gpus_per_user`), and every pending job (always: the
//! plugin's `job_modify` tells GPU jobs from CPU-only ones by it).
//!
//! A command that fails keeps the last partitions and accounts (they rarely change) but drops the
//! queue: commitments from an old squeue would be wrong. Failures are logged when they change. What
//! it read is kept in a [`SlurmView`], the cycles' own, handed to what answers requests. The check
//! cycle reads it (`cycles::check`); the answering state, the snapshot and the socket read their
//! copy, so it lives below them all, in no folder of theirs.

use std::collections::{BTreeMap, HashMap};

use gputokens::config::JobIdentity;
use gputokens::estimate::{commitments, commitments_by, pending_jobs, recent_jobs, RECENT_SLACK_SECS};
use gputokens::pools::PoolMode;
use gputokens::slurm::associations::AccountTree;
use gputokens::slurm::{partitions, squeue};
use gputokens::snapshot::QueueSummary;
use gputokens::stranding::NodeShape;

use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm::{QueueOnce, Slurm, SlurmError};

/// What the job_submit plugin needs from Slurm beside the balances, as [`refresh`] last read it.
#[derive(Debug, Default, Clone)]
pub struct SlurmView {
    pub partitions: Vec<partitions::Partition>,
    /// Each partition's nodes: where a waiting job may run, so preemption takes only what serves it.
    pub partition_nodes: HashMap<String, Vec<String>>,
    pub default_accounts: HashMap<String, String>,
    /// Slurm's accounts, their members and coordinators (read only when pools are on).
    pub accounts: AccountTree,
    pub queue: Option<QueueSummary>,
    /// Each shape of the nodes with GPUs once, where the site prices what a job strands: what the
    /// plugin's estimate weighs a job against (the last read, while sinfo fails).
    pub node_shapes: Vec<NodeShape>,
    /// What failed at the last read, so a failure is logged when it changes, not every cycle.
    pub last_problems: Vec<String>,
}

/// Reads what the plugin's settings need into `view`; `now` stamps the queue.
pub fn refresh(res: &Resources, view: &mut SlurmView, slurm: &Slurm, queue: &mut QueueOnce, now: i64) {
    let pools_on = res.config.accounts.mode != PoolMode::User;
    let wants_accounts = !res.config.exempt.accounts.is_empty() || pools_on;
    let mut problems = Vec::new();

    let shown = slurm.run("scontrol", &["-o", "--all", "show", "partition"]);
    match shown.and_then(|text| Ok((partitions::parse(&text).map_err(SlurmError::from)?, partitions::nodes(&text)))) {
        Ok((found, nodes)) => (view.partitions, view.partition_nodes) = (found, nodes),
        Err(e) => problems.push(format!("partitions not read: {e}")),
    }
    if wants_accounts {
        match slurm.run("sacctmgr", &["-n", "-P", "show", "user", "format=User,DefaultAccount"]) {
            Ok(text) => view.default_accounts = default_accounts(&text),
            Err(e) => problems.push(format!("default accounts not read: {e}")),
        }
    }
    if pools_on {
        match slurm.account_tree() {
            Ok(tree) => view.accounts = tree,
            Err(e) => problems.push(format!("accounts and coordinators not read: {e}")),
        }
    }
    if !res.config.prices.stranded().is_empty() {
        match slurm.node_shapes() {
            Ok(nodes) => view.node_shapes = distinct_shapes(nodes.into_values()),
            Err(e) => problems.push(format!("node shapes not read, the estimate weighs the last ones read: {e}")),
        }
    }
    view.queue = None;
    match commitments_of(res, queue, &view.node_shapes, now) {
        Ok(mut summary) => {
            // What a quote offers: a failed read offers nothing, and the quote says so.
            let free = |jobs: &[squeue::QueueJob]| {
                let nodes = slurm.run("sinfo", &gputokens::slurm::sinfo::NODE_STATES_ARGS).ok()?;
                Some(gputokens::slurm::sinfo::free_gpus(&nodes, jobs, &view.partition_nodes))
            };
            if let Some(free) = queue.jobs().ok().and_then(free) {
                (summary.free_gpus, summary.free_gpus_in) = (Some(free.total), free.by_partition);
            }
            view.queue = Some(summary);
        }
        Err(e) => problems.push(format!(
            "queue not read, the plugin counts no running or pending jobs and treats every updated job as a GPU job: {e}"
        )),
    }
    if problems != view.last_problems {
        for problem in &problems {
            tracing::warn!("{problem}");
        }
        if problems.is_empty() {
            tracing::info!("partitions, accounts and queue read again for the job_submit plugin");
        }
        view.last_problems = problems;
    }
}

/// The shapes of nodes with GPUs, each once, in order.
fn distinct_shapes(nodes: impl Iterator<Item = NodeShape>) -> Vec<NodeShape> {
    let mut shapes: Vec<NodeShape> = nodes.filter(|n| n.gpus() > 0).collect();
    shapes.sort_by(|a, b| (a.cpus, a.mem_mb, &a.milli_gpus).cmp(&(b.cpus, b.mem_mb, &b.milli_gpus)));
    shapes.dedup();
    shapes
}

/// What the queue's GPU jobs hold and can cost, each job weighed against `shapes` where the site
/// prices what a job strands.
fn commitments_of(
    res: &Resources,
    queue: &mut QueueOnce,
    shapes: &[NodeShape],
    now: i64,
) -> AccountdResult<QueueSummary> {
    queue.jobs()?;
    // When squeue began to run (the wall clock's, not the cycle's `now`, which `tick --now` may set
    // ahead): a job the plugin admits from then on is counted by the plugin itself.
    let read_ms = queue.read_ms().unwrap_or(now.saturating_mul(1000));
    let as_of = read_ms.div_euclid(1000);
    let read_end_ms = queue.read_end_ms();
    let jobs = queue.jobs()?;
    let default_limit = res.config.admission.default_time_limit.as_secs();
    // How far each running job was charged, every job's at once (a job the ledger cannot say of
    // counts as charged nothing: its whole limit is committed).
    let runs: Vec<(&str, i64)> =
        jobs.iter().filter(|j| j.state != "PENDING").map(|j| (j.job_id.as_str(), j.start_time)).collect();
    let charged_so_far = res.ledger.charged_seconds_of(&runs).unwrap_or_default();
    let charged =
        |job: &squeue::QueueJob| charged_so_far.get(&(job.job_id.clone(), job.start_time)).copied().unwrap_or(0);
    let sharing = res.config.sharing;
    let prices = &gputokens::estimate::Priced { prices: &res.config.prices, shapes };
    let committed = commitments(jobs, default_limit, prices, sharing, charged);
    // Every member's jobs a pool pays for draw on its one balance (the audit's L5).
    let all_pools = match res.config.accounts.mode {
        PoolMode::User => Vec::new(),
        _ => res.ledger.pools()?,
    };
    let pools: std::collections::HashSet<String> = all_pools.iter().map(|p| p.account.clone()).collect();
    let parent_of = |a: &str| all_pools.iter().find(|p| p.account == a)?.parent.as_deref();
    let mode = res.config.accounts.mode;
    let paying_pool = |j: &squeue::QueueJob| {
        gputokens::pools::payers(mode, Some(j.account.as_str()), |a| pools.contains(a)).pool.map(str::to_string)
    };
    let mut pool_committed = commitments_by(jobs, default_limit, prices, sharing, charged, paying_pool);
    // And per member, for a pool's per-user limit (the audit's L5: what runs and waits counts).
    let member = |j: &squeue::QueueJob| paying_pool(j).map(|pool| (pool, j.user.clone()));
    let mut pool_user_committed = commitments_by(jobs, default_limit, prices, sharing, charged, member);
    // A pool's jobs draw on the pools above it too: counted there as well.
    for (pool, c) in pool_committed.clone() {
        for above in gputokens::pools::ancestors(&pool, parent_of) {
            *pool_committed.entry(above.to_string()).or_default() += c;
        }
    }
    for ((pool, user), c) in pool_user_committed.clone() {
        for above in gputokens::pools::ancestors(&pool, parent_of) {
            *pool_user_committed.entry((above.to_string(), user.clone())).or_default() += c;
        }
    }
    // Every pool listed, those with nothing committed too: the plugin tells "none" from "not said".
    for pool in &pools {
        pool_committed.entry(pool.clone()).or_default();
    }
    let pending = pending_jobs(jobs, default_limit, prices, sharing);
    // The plugin matches what it admitted near the read against these (RECENT_SLACK_SECS before it
    // began; slurmctld stamps a job's submit time after the plugin admitted it). Exempt jobs were
    // not counted by it: their lines could stand for jobs it did count.
    let exempt = &res.config.exempt;
    let tallied = |j: &squeue::QueueJob| {
        fn known(s: &str) -> Option<&str> {
            (!s.is_empty()).then_some(s)
        }
        let job =
            JobIdentity { user: known(&j.user), account: known(&j.account), default_account: None, qos: known(&j.qos) };
        !exempt.covers(&job)
    };
    let recent = recent_jobs(jobs, as_of - RECENT_SLACK_SECS - 1, sharing, tallied);
    // With pools, an update of a GPU job is judged by the pool of the account it is in.
    let job_accounts = if res.config.accounts.mode == PoolMode::User {
        Default::default()
    } else {
        jobs.iter()
            .filter(|j| !j.account.is_empty() && (j.request.has_gpus() || !j.alloc.is_empty()))
            .filter_map(|j| Some((gputokens::slurm::job_number(&j.job_id)?, j.account.clone())))
            .collect()
    };
    Ok(QueueSummary {
        as_of,
        read_ms: Some(read_ms),
        read_end_ms,
        recent,
        committed: committed.into_iter().collect(),
        pool_committed: pool_committed.into_iter().collect(),
        pool_user_committed,
        pending,
        job_accounts,
        free_gpus: None,
        free_gpus_in: BTreeMap::new(),
    })
}

/// `alice|physics` lines.
fn default_accounts(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(u, a)| !u.is_empty() && !a.is_empty())
        .map(|(u, a)| (u.trim().to_string(), a.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_accounts_from_sacctmgr() {
        let found = super::default_accounts("alice|physics\nbob|gputokens\nroot|root\nnoacct|\n");
        assert_eq!(found.len(), 3);
        assert_eq!(found["alice"], "physics");
    }
}
