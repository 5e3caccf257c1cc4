//! Which running GPU jobs of users in debt to preempt. Pure: the caller gathers the jobs (squeue) and
//! balances (ledger) and carries out the decision through Slurm.
//!
//! A GPU type is *contended* when GPU jobs of users with a balance ≥ 0 wait for it while jobs of users
//! with a balance < 0 hold it. Victims are taken per contended type, most negative balance first, then
//! the youngest job (least work lost), only until the waiting jobs' GPUs are covered; never a job of a
//! user with balance ≥ 0, never one younger than `min_runtime`, never an exempt one, and at most
//! `max_per_cycle` in all.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::tokens::Tokens;

/// A running job holding GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub job_id: String,
    pub user: String,
    pub balance: Tokens,
    pub start_time: i64,
    /// Whole GPUs held per lower-case type.
    pub gpus: BTreeMap<String, u64>,
    /// User, account or QOS is exempt.
    pub exempt: bool,
    /// A borrowed run (`[lending]`): idle GPUs lent to a user in debt.
    pub borrowed: bool,
    /// The nodes it runs on (empty: not known).
    pub nodes: Vec<String>,
}

/// A pending job waiting for GPUs of known types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub job_id: String,
    pub user: String,
    pub balance: Tokens,
    pub wants: BTreeMap<String, u64>,
    /// The nodes it may run on (its partitions', shared by the jobs of the same partitions); None:
    /// not known, any.
    pub reach: Option<Arc<BTreeSet<String>>>,
}

impl Holder {
    /// Whether what it holds could serve a job that may run on `reach`: one of its nodes is there
    /// (where either is not known, it could).
    fn within(&self, reach: &Reach) -> bool {
        match reach {
            Some(reach) if !self.nodes.is_empty() => self.nodes.iter().any(|n| reach.contains(n)),
            _ => true,
        }
    }
}

/// The busy test: the GPU-weighted mean utilization (percent) of the jobs holding each type, from
/// each job's sampled utilization. Jobs never sampled are left out; a type none of whose holders was
/// sampled is absent (unknown, so not busy).
pub fn utilization_by_type(holders: &[Holder], utilization: &HashMap<String, f64>) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for holder in holders {
        let Some(percent) = utilization.get(&holder.job_id) else { continue };
        for (gpu_type, n) in &holder.gpus {
            let slot = sums.entry(gpu_type.clone()).or_default();
            slot.0 += percent * *n as f64;
            slot.1 = slot.1.saturating_add(*n);
        }
    }
    sums.into_iter().filter(|(_, (_, n))| *n > 0).map(|(t, (sum, n))| (t, sum / n as f64)).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub min_runtime_secs: i64,
    pub max_per_cycle: usize,
    /// `[lending]`: only borrowed runs are taken, however young, and they are reclaimed.
    pub lending: bool,
}

/// Why a job is preempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Users with a balance ≥ 0 wait for this GPU type.
    Contended { gpu_type: String, waiting: Vec<String> },
    /// The user's balance is at or below the floor (`at_floor = "requeue" | "cancel"`).
    AtFloor,
    /// A borrowed run (`[lending]`) reclaimed for users in credit waiting for this GPU type.
    Reclaimed { gpu_type: String, waiting: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    pub job_id: String,
    pub user: String,
    pub balance: Tokens,
    pub cause: Cause,
}

impl Victim {
    /// The text put in the job's comment and the audit log.
    pub fn reason(&self) -> String {
        match &self.cause {
            Cause::Contended { gpu_type, .. } => {
                format!("gputokens: preempted, balance {}, {gpu_type} contended", self.balance)
            }
            Cause::AtFloor => format!("gputokens: preempted, balance {} is at the floor", self.balance),
            Cause::Reclaimed { gpu_type, waiting } => format!(
                "gputokens: borrowed run reclaimed for job {} waiting for {gpu_type}: requeued, not charged",
                waiting.join(",")
            ),
        }
    }
}

/// What the waiting jobs may run on, as [`demand`] groups them.
type Reach = Option<Arc<BTreeSet<String>>>;

/// GPUs of each type that users with a balance ≥ 0 are waiting for, and who waits, by the nodes
/// they may run on (their partitions': GPUs elsewhere serve none of them).
pub fn demand(waiters: &[Waiter]) -> BTreeMap<(String, Reach), (u64, Vec<String>)> {
    // Grouped by reach first, told apart by allocation (the jobs of the same partitions share one)
    // and by content only once per allocation: a reach is a whole partition's node names, which a
    // map keyed by it would compare at every job of a large queue.
    let mut reaches: Vec<Reach> = Vec::new();
    let mut index_of: HashMap<*const BTreeSet<String>, usize> = HashMap::new();
    let mut grouped: BTreeMap<(&str, usize), (u64, Vec<String>)> = BTreeMap::new();
    for w in waiters.iter().filter(|w| !w.balance.is_negative()) {
        let at = w.reach.as_ref().map_or(std::ptr::null(), Arc::as_ptr);
        let reach = *index_of.entry(at).or_insert_with(|| {
            reaches.iter().position(|r| *r == w.reach).unwrap_or_else(|| {
                reaches.push(w.reach.clone());
                reaches.len() - 1
            })
        });
        for (gpu_type, n) in &w.wants {
            let entry = grouped.entry((gpu_type.as_str(), reach)).or_default();
            entry.0 = entry.0.saturating_add(*n);
            entry.1.push(w.job_id.clone());
        }
    }
    grouped
        .into_iter()
        .map(|((gpu_type, reach), wanted)| ((gpu_type.to_string(), reaches[reach].clone()), wanted))
        .collect()
}

/// The jobs to preempt because of contention.
pub fn contention_victims(holders: &[Holder], waiters: &[Waiter], now: i64, limits: Limits) -> Vec<Victim> {
    let mut chosen: Vec<Victim> = Vec::new();
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for ((gpu_type, reach), (needed, waiting)) in demand(waiters) {
        let mut candidates: Vec<&Holder> = holders
            .iter()
            .filter(|h| !h.exempt && h.gpus.contains_key(&gpu_type) && h.within(&reach))
            .filter(|h| match limits.lending {
                true => h.borrowed,
                false => h.balance.is_negative() && now - h.start_time >= limits.min_runtime_secs,
            })
            .collect();
        candidates.sort_by(|a, b| a.balance.cmp(&b.balance).then(b.start_time.cmp(&a.start_time)));
        let mut freed = 0;
        for h in candidates {
            if freed >= needed || chosen.len() >= limits.max_per_cycle {
                break;
            }
            freed = h.gpus[&gpu_type].saturating_add(freed);
            if taken.insert(&h.job_id) {
                let (gpu_type, waiting) = (gpu_type.clone(), waiting.clone());
                let cause = match limits.lending {
                    true => Cause::Reclaimed { gpu_type, waiting },
                    false => Cause::Contended { gpu_type, waiting },
                };
                chosen.push(Victim { job_id: h.job_id.clone(), user: h.user.clone(), balance: h.balance, cause });
            }
        }
    }
    chosen
}

/// GPUs an earlier cycle's preemption freed for a waiting job. Remembered (in the ledger) until
/// `expires`, the time the job had to start: until then the same wait causes no other preemption,
/// so consecutive cycles (or `accountd tick` after `serve`) never displace more than it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreedFor {
    pub waiter: String,
    pub gpu_type: String,
    pub gpus: u64,
    pub expires: i64,
}

/// The waiters as they still want GPUs: what earlier preemptions freed for them is taken off, and
/// a waiter that wants nothing more drops out. `freed` holds only what has not expired.
pub fn still_wanted(waiters: &[Waiter], freed: &[FreedFor]) -> Vec<Waiter> {
    waiters
        .iter()
        .filter_map(|waiter| {
            let mut waiter = waiter.clone();
            for f in freed.iter().filter(|f| f.waiter == waiter.job_id) {
                if let Some(wanted) = waiter.wants.get_mut(&f.gpu_type) {
                    *wanted = wanted.saturating_sub(f.gpus);
                }
            }
            waiter.wants.retain(|_, wanted| *wanted > 0);
            (!waiter.wants.is_empty()).then_some(waiter)
        })
        .collect()
}

/// Whom the victims' GPUs are for: per type, the GPUs all victims free go to the waiters that
/// make demand (balance ≥ 0), in queue order, each up to what it wants; remembered until `expires`.
pub fn freed_for(victims: &[Victim], holders: &[Holder], waiters: &[Waiter], expires: i64) -> Vec<FreedFor> {
    // What each victim frees, per type; a waiter takes from those on nodes it may run on.
    let mut freed: Vec<(&Holder, &str, u64)> = Vec::new();
    for victim in victims {
        let Some(holder) = holders.iter().find(|h| h.job_id == victim.job_id) else { continue };
        freed.extend(holder.gpus.iter().map(|(gpu_type, n)| (holder, gpu_type.as_str(), *n)));
    }
    let mut given = Vec::new();
    for waiter in waiters.iter().filter(|w| !w.balance.is_negative()) {
        for (gpu_type, wanted) in &waiter.wants {
            let mut gpus = 0;
            for entry in freed.iter_mut().filter(|e| e.1 == gpu_type && e.0.within(&waiter.reach)) {
                let taken = (*wanted - gpus).min(entry.2);
                (gpus, entry.2) = (gpus + taken, entry.2 - taken);
            }
            if gpus > 0 {
                given.push(FreedFor { waiter: waiter.job_id.clone(), gpu_type: gpu_type.clone(), gpus, expires });
            }
        }
    }
    given
}

/// Running GPU jobs of users at or below the floor (for `at_floor = "requeue" | "cancel"`).
pub fn at_floor_victims(holders: &[Holder], floor: Tokens, limit: usize) -> Vec<Victim> {
    holders
        .iter()
        .filter(|h| h.balance <= floor && !h.exempt)
        .take(limit)
        .map(|h| Victim { job_id: h.job_id.clone(), user: h.user.clone(), balance: h.balance, cause: Cause::AtFloor })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(job: &str, user: &str, balance: i64, start: i64, gpu_type: &str, n: u64) -> Holder {
        Holder {
            job_id: job.into(),
            user: user.into(),
            balance: Tokens::whole(balance),
            start_time: start,
            gpus: BTreeMap::from([(gpu_type.to_string(), n)]),
            exempt: false,
            borrowed: false,
            nodes: Vec::new(),
        }
    }

    fn waiter(job: &str, balance: i64, gpu_type: &str, n: u64) -> Waiter {
        Waiter {
            job_id: job.into(),
            user: "bob".into(),
            balance: Tokens::whole(balance),
            wants: BTreeMap::from([(gpu_type.to_string(), n)]),
            reach: None,
        }
    }

    const LIMITS: Limits = Limits { min_runtime_secs: 60, max_per_cycle: 10, lending: false };

    #[test]
    fn youngest_job_of_the_deepest_debtor_goes_first_and_only_as_many_as_needed() {
        let holders = [
            holder("1", "alice", -5, 1000, "a6000", 1),
            holder("2", "alice", -5, 2000, "a6000", 1),
            holder("3", "carol", -1, 3000, "a6000", 1),
        ];
        let victims = contention_victims(&holders, &[waiter("9", 50, "a6000", 1)], 10_000, LIMITS);
        assert_eq!(victims.len(), 1);
        assert_eq!(victims[0].job_id, "2");
        assert_eq!(victims[0].reason(), "gputokens: preempted, balance -5, a6000 contended");
        let two = contention_victims(&holders, &[waiter("9", 50, "a6000", 2)], 10_000, LIMITS);
        assert_eq!(two.iter().map(|v| v.job_id.as_str()).collect::<Vec<_>>(), ["2", "1"]);
    }

    /// Counts from Slurm can be anything (a request parsed as u64::MAX): sums saturate, never wrap.
    #[test]
    fn absurd_counts_saturate() {
        let holders = [holder("1", "alice", -5, 1000, "a6000", u64::MAX), holder("2", "alice", -5, 2000, "a6000", 7)];
        let waiters = [waiter("8", 50, "a6000", u64::MAX), waiter("9", 50, "a6000", u64::MAX)];
        assert_eq!(demand(&waiters)[&("a6000".to_string(), None)].0, u64::MAX);
        let victims = contention_victims(&holders, &waiters, 10_000, LIMITS);
        assert_eq!(victims.iter().map(|v| v.job_id.as_str()).collect::<Vec<_>>(), ["2", "1"]);
        let freed = freed_for(&victims, &holders, &waiters, 20_000);
        // Each run's GPUs are given out apart: u64::MAX to the first, the 7 left to the second.
        assert_eq!(freed.iter().map(|f| f.gpus).collect::<Vec<_>>(), [u64::MAX, 7]);
        let busy = utilization_by_type(&holders, &HashMap::from([("1".to_string(), 50.0), ("2".to_string(), 50.0)]));
        assert_eq!(busy["a6000"], 50.0);
    }

    #[test]
    fn nothing_without_contention_or_debt() {
        let debtor = [holder("1", "alice", -5, 1000, "a6000", 1)];
        assert!(contention_victims(&debtor, &[], 10_000, LIMITS).is_empty());
        assert!(contention_victims(&debtor, &[waiter("9", 50, "rtx2080", 1)], 10_000, LIMITS).is_empty(), "other type");
        assert!(
            contention_victims(&debtor, &[waiter("9", -1, "a6000", 1)], 10_000, LIMITS).is_empty(),
            "waiter in debt"
        );
        let solvent = [holder("1", "alice", 5, 1000, "a6000", 1)];
        assert!(contention_victims(&solvent, &[waiter("9", 50, "a6000", 1)], 10_000, LIMITS).is_empty());
    }

    #[test]
    fn young_exempt_and_capped_jobs_are_spared() {
        let mut exempt = holder("1", "alice", -5, 1000, "a6000", 1);
        exempt.exempt = true;
        let young = holder("2", "alice", -5, 9_990, "a6000", 1);
        assert!(contention_victims(&[exempt, young], &[waiter("9", 0, "a6000", 2)], 10_000, LIMITS).is_empty());
        let many: Vec<Holder> = (0..5).map(|i| holder(&i.to_string(), "alice", -5, 1000 + i, "a6000", 1)).collect();
        let capped = Limits { max_per_cycle: 2, ..LIMITS };
        assert_eq!(contention_victims(&many, &[waiter("9", 0, "a6000", 5)], 10_000, capped).len(), 2);
    }

    #[test]
    fn a_waiter_gpus_were_freed_for_causes_no_second_preemption() {
        let holders = [holder("1", "alice", -5, 1000, "a6000", 1), holder("2", "alice", -5, 2000, "a6000", 1)];
        let waiters = [waiter("9", 50, "a6000", 1)];
        let first = contention_victims(&holders, &waiters, 10_000, LIMITS);
        assert_eq!(first.len(), 1);
        let freed = freed_for(&first, &holders, &waiters, 10_600);
        assert_eq!(freed, [FreedFor { waiter: "9".into(), gpu_type: "a6000".into(), gpus: 1, expires: 10_600 }]);

        // The next cycle: job 2 was requeued, job 9 still waits for the GPU it freed.
        let left = [holders[0].clone()];
        assert!(still_wanted(&waiters, &freed).is_empty());
        assert!(contention_victims(&left, &still_wanted(&waiters, &freed), 10_060, LIMITS).is_empty());
        // Once the memory has expired (the caller keeps only what has not), it may cause another.
        assert_eq!(contention_victims(&left, &still_wanted(&waiters, &[]), 10_700, LIMITS).len(), 1);
    }

    #[test]
    fn freed_gpus_go_to_waiters_in_queue_order_and_only_what_each_wants() {
        let holders = [holder("1", "alice", -5, 1000, "a6000", 2), holder("2", "carol", -1, 1000, "rtx2080", 1)];
        let waiters = [waiter("8", 1, "a6000", 1), waiter("9", 1, "a6000", 3), waiter("10", -1, "a6000", 1)];
        let victims = contention_victims(&holders, &waiters, 10_000, LIMITS);
        assert_eq!(victims.len(), 1, "{victims:?}");
        let freed = freed_for(&victims, &holders, &waiters, 99);
        let given: Vec<(&str, u64)> = freed.iter().map(|f| (f.waiter.as_str(), f.gpus)).collect();
        assert_eq!(given, [("8", 1), ("9", 1)], "the debtor's waiting job makes no demand");
        let rest = still_wanted(&waiters, &freed);
        let wants: Vec<(&str, u64)> = rest.iter().map(|w| (w.job_id.as_str(), w.wants["a6000"])).collect();
        assert_eq!(wants, [("9", 2), ("10", 1)]);
    }

    /// `[lending]`: only borrowed runs are reclaimed (however young, whatever their owner's balance
    /// is now), only as many as the waiting jobs need; a debtor's own run is left alone.
    #[test]
    fn with_lending_only_borrowed_runs_are_reclaimed_and_only_as_many_as_needed() {
        let mut young = holder("1", "alice", 5, 9_990, "a6000", 1);
        young.borrowed = true;
        let mut other = holder("2", "alice", 5, 9_000, "a6000", 1);
        other.borrowed = true;
        let debtor = holder("3", "carol", -5, 1000, "a6000", 1);
        let lending = Limits { lending: true, ..LIMITS };
        let holders = [young, other, debtor];
        let victims = contention_victims(&holders, &[waiter("9", 0, "a6000", 1)], 10_000, lending);
        assert_eq!(victims.iter().map(|v| v.job_id.as_str()).collect::<Vec<_>>(), ["1"], "the youngest borrowed run");
        assert_eq!(
            victims[0].reason(),
            "gputokens: borrowed run reclaimed for job 9 waiting for a6000: requeued, not charged"
        );
        assert!(matches!(victims[0].cause, Cause::Reclaimed { .. }));
        let all = contention_victims(&holders, &[waiter("9", 0, "a6000", 3)], 10_000, lending);
        assert_eq!(all.len(), 2, "never the debtor's own run: {all:?}");
        assert!(
            contention_victims(&holders, &[waiter("9", -1, "a6000", 1)], 10_000, lending).is_empty(),
            "a waiter in debt"
        );
    }

    /// A borrowed run on a node the waiting job's partitions do not hold frees nothing for it:
    /// only runs within its reach are taken, and what they free is given to it alone.
    #[test]
    fn only_runs_on_nodes_a_waiting_job_may_run_on_are_reclaimed_for_it() {
        let on = |job: &str, node: &str| Holder {
            borrowed: true,
            nodes: vec![node.into()],
            ..holder(job, "alice", 5, 9_000, "a6000", 1)
        };
        let holders = [on("1", "g1"), on("2", "g2")];
        let reach = |nodes: &[&str]| Some(Arc::new(nodes.iter().map(|n| n.to_string()).collect()));
        let lending = Limits { lending: true, ..LIMITS };
        let in_g2 = Waiter { reach: reach(&["g2", "g3"]), ..waiter("9", 0, "a6000", 1) };
        let victims = contention_victims(&holders, std::slice::from_ref(&in_g2), 10_000, lending);
        assert_eq!(victims.iter().map(|v| v.job_id.as_str()).collect::<Vec<_>>(), ["2"], "the run on g2, not g1's");
        let freed = freed_for(&victims, &holders, std::slice::from_ref(&in_g2), 99);
        assert_eq!(freed.iter().map(|f| (f.waiter.as_str(), f.gpus)).collect::<Vec<_>>(), [("9", 1)]);
        let elsewhere = Waiter { reach: reach(&["c1"]), ..waiter("8", 0, "a6000", 1) };
        assert!(contention_victims(&holders, std::slice::from_ref(&elsewhere), 10_000, lending).is_empty());
        let freed = freed_for(&victims, &holders, &[elsewhere], 99);
        assert!(freed.is_empty(), "g2's GPU serves no job that cannot run there: {freed:?}");
        // Nodes not known: as before, any run serves any waiting job.
        let unknown = [holder("3", "alice", 5, 9_000, "a6000", 1)].map(|h| Holder { borrowed: true, ..h });
        assert_eq!(contention_victims(&unknown, &[in_g2], 10_000, lending).len(), 1);
    }

    /// Jobs whose partitions hold the same nodes wait together, in the queue's order, whether or
    /// not their reaches are one allocation; other nodes, and nodes not known, are groups of their own.
    #[test]
    fn demand_groups_waiting_jobs_by_the_nodes_they_may_run_on() {
        let reach = |nodes: &[&str]| Some(Arc::new(nodes.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>()));
        let shared = reach(&["g1", "g2"]);
        let waiters = [
            Waiter { reach: shared.clone(), ..waiter("1", 0, "a6000", 1) },
            Waiter { reach: reach(&["g3"]), ..waiter("2", 0, "a6000", 2) },
            Waiter { reach: reach(&["g1", "g2"]), ..waiter("3", 0, "a6000", 4) },
            waiter("4", 0, "a6000", 8),
            Waiter { reach: shared.clone(), ..waiter("5", 0, "rtx3090", 16) },
            Waiter { reach: shared.clone(), ..waiter("6", -1, "a6000", 32) },
            Waiter { reach: shared.clone(), ..waiter("7", 0, "a6000", 64) },
        ];
        let groups: Vec<_> = demand(&waiters)
            .into_iter()
            .map(|((gpu_type, reach), (n, jobs))| {
                let nodes = reach.map(|r| r.iter().cloned().collect::<Vec<_>>().join(","));
                (gpu_type, nodes, n, jobs.join(" "))
            })
            .collect();
        let group = |t: &str, nodes: Option<&str>, n: u64, jobs: &str| {
            (t.to_string(), nodes.map(str::to_string), n, jobs.to_string())
        };
        assert_eq!(
            groups,
            [
                group("a6000", None, 8, "4"),
                group("a6000", Some("g1,g2"), 69, "1 3 7"),
                group("a6000", Some("g3"), 2, "2"),
                group("rtx3090", Some("g1,g2"), 16, "5"),
            ]
        );
    }

    #[test]
    fn at_floor_takes_every_job_at_or_below_the_floor() {
        let holders = [holder("1", "alice", -10, 1000, "a6000", 1), holder("2", "bob", -9, 1000, "a6000", 1)];
        let victims = at_floor_victims(&holders, Tokens::whole(-10), 10);
        assert_eq!(victims.len(), 1);
        assert_eq!(victims[0].cause, Cause::AtFloor);
    }

    #[test]
    fn the_busy_test_weighs_jobs_by_their_gpus() {
        let holder = |id: &str, gpus: &[(&str, u64)]| Holder {
            job_id: id.into(),
            user: "alice".into(),
            balance: Tokens::whole(-5),
            start_time: 0,
            gpus: gpus.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            exempt: false,
            borrowed: false,
            nodes: Vec::new(),
        };
        let holders = [
            holder("1", &[("a6000", 1)]),
            holder("2", &[("a6000", 3)]),
            holder("3", &[("rtx2080", 2)]),
            holder("4", &[("h100", 1)]),
        ];
        let util = HashMap::from([("1".to_string(), 100.0), ("2".to_string(), 20.0), ("3".to_string(), 0.0)]);
        let by_type = utilization_by_type(&holders, &util);
        assert_eq!(by_type.get("a6000"), Some(&40.0), "(100 + 3 × 20) / 4");
        assert_eq!(by_type.get("rtx2080"), Some(&0.0));
        assert_eq!(by_type.get("h100"), None, "never sampled: unknown");
    }
}
