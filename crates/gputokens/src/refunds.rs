//! Which ended GPU runs are refunded automatically (`[refunds]`): runs lost to causes their user
//! cannot produce, never runs that ended by themselves. A run counts as lost when gputokens took it
//! off a GPU it drained for a hardware fault (fell off the bus, uncorrectable ECC, a hardware XID:
//! heat never requeues, a user's own code makes it), or when its node failed under it (sacct's
//! NODE_FAIL) and the failure hit another user's run on that node too: a job can make its own node
//! miss slurmd's heartbeat (exhausted PIDs, memory outside its cgroup, a hung driver), so a failure
//! that took only one user's runs is left to an admin's `accountd admin refund`. A run a user
//! requeued or cancelled, that exited non-zero, ran out of memory or hit its time limit is charged
//! in full.

/// Why a run is refunded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefundCause {
    /// gputokens drained the GPU the run held for a hardware fault and requeued (or cancelled) it.
    GpuFault,
    /// The run's node failed (Slurm ended it NODE_FAIL, and requeued it where it could).
    NodeFail,
}

impl RefundCause {
    pub const ALL: [RefundCause; 2] = [RefundCause::GpuFault, RefundCause::NodeFail];

    /// The name in `[refunds] causes` and in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RefundCause::GpuFault => "gpu_fault",
            RefundCause::NodeFail => "node_fail",
        }
    }

    pub fn parse(text: &str) -> Option<RefundCause> {
        RefundCause::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// How a run ended, as far as refunds care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd<'a> {
    /// sacct's State, first word ("CANCELLED by 0" is CANCELLED).
    pub state: &'a str,
    /// gputokens' own fault requeue or cancel of this job while this run held its GPUs.
    pub fault_action: bool,
    /// For NODE_FAIL: another user's run on one of its nodes ended NODE_FAIL with it
    /// ([`node_failure_shared`]).
    pub node_failure_shared: bool,
}

/// How near two NODE_FAIL ends must be to be one node failure: slurmctld ends every job of a node
/// that stopped answering in the same pass.
pub const NODE_FAILURE_WINDOW: i64 = 120;

/// A run that ended NODE_FAIL: whose, on which nodes (expanded), when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRun {
    pub user: String,
    pub nodes: Vec<String>,
    pub end: i64,
}

/// Whether `run`'s node failure took another user's run too: one on a node of `run`'s, ended
/// NODE_FAIL within [`NODE_FAILURE_WINDOW`].
pub fn node_failure_shared(run: &FailedRun, failed: &[FailedRun]) -> bool {
    failed.iter().any(|other| {
        other.user != run.user
            && (other.end - run.end).abs() <= NODE_FAILURE_WINDOW
            && other.nodes.iter().any(|n| run.nodes.contains(n))
    })
}

/// Whether a run that ended in `state` may be refunded for one of `causes`: a node failure, or
/// gputokens' own requeue or cancel of a job on a failing GPU (a user's own ends the same way).
pub fn may_be_lost(state: &str, causes: &[RefundCause]) -> bool {
    match state {
        "NODE_FAIL" => causes.contains(&RefundCause::NodeFail),
        "REQUEUED" | "CANCELLED" => causes.contains(&RefundCause::GpuFault),
        _ => false,
    }
}

/// Why `run` is refunded, if it is; `causes` are the site's (`[refunds] causes`).
pub fn cause(run: &RunEnd, causes: &[RefundCause]) -> Option<RefundCause> {
    if !may_be_lost(run.state, causes) {
        return None;
    }
    let found = match run.state {
        "NODE_FAIL" if run.node_failure_shared => RefundCause::NodeFail,
        // gputokens' `scontrol requeue` ends the run REQUEUED, its fallback `scancel` CANCELLED;
        // the same states from a user's own requeue or scancel have no fault action behind them.
        "REQUEUED" | "CANCELLED" if run.fault_action => RefundCause::GpuFault,
        _ => return None,
    };
    causes.contains(&found).then_some(found)
}

/// The share of a run's charge that is refunded, as (numerator, denominator): all of it, or
/// `max_gpu_seconds` of its `gpu_seconds` when a cap is set and the run held more.
pub fn refunded_share(gpu_seconds: u64, max_gpu_seconds: Option<u64>) -> (u64, u64) {
    match max_gpu_seconds {
        Some(max) if gpu_seconds > max => (max, gpu_seconds),
        _ => (1, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(state: &str, fault_action: bool) -> RunEnd<'_> {
        RunEnd { state, fault_action, node_failure_shared: state == "NODE_FAIL" }
    }

    #[test]
    fn a_node_failure_is_refunded_only_when_it_took_another_users_run_too() {
        let alone = RunEnd { state: "NODE_FAIL", fault_action: false, node_failure_shared: false };
        assert_eq!(cause(&alone, &RefundCause::ALL), None);
        let run = |user: &str, nodes: &[&str], end| FailedRun {
            user: user.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            end,
        };
        let alices = run("alice", &["gpu1", "gpu2"], 1000);
        assert!(node_failure_shared(&alices, &[run("bob", &["gpu2"], 1030)]));
        assert!(!node_failure_shared(&alices, &[run("alice", &["gpu2"], 1000)]), "her own other job");
        assert!(!node_failure_shared(&alices, &[run("bob", &["gpu3"], 1000)]), "another node");
        assert!(!node_failure_shared(&alices, &[run("bob", &["gpu1"], 1000 + NODE_FAILURE_WINDOW + 1)]), "later");
    }

    /// What the charge cycle keeps of its finished runs for refunds: every run a cause the site
    /// refunds could apply to, whatever `cause` then decides.
    #[test]
    fn the_runs_that_may_be_lost_are_those_of_the_sites_causes() {
        for state in ["NODE_FAIL", "REQUEUED", "CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"] {
            for causes in [&RefundCause::ALL[..], &[RefundCause::NodeFail], &[RefundCause::GpuFault], &[]] {
                let refunded = [true, false].iter().any(|&fault_action| {
                    cause(&RunEnd { state, fault_action, node_failure_shared: true }, causes).is_some()
                });
                assert_eq!(may_be_lost(state, causes), refunded, "{state} with {causes:?}");
            }
        }
    }

    #[test]
    fn only_runs_lost_to_the_system_are_refunded() {
        let all = RefundCause::ALL;
        assert_eq!(cause(&end("NODE_FAIL", false), &all), Some(RefundCause::NodeFail));
        assert_eq!(cause(&end("REQUEUED", true), &all), Some(RefundCause::GpuFault));
        assert_eq!(cause(&end("CANCELLED", true), &all), Some(RefundCause::GpuFault), "the scancel fallback");
        for state in ["COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE", "BOOT_FAIL"] {
            assert_eq!(cause(&end(state, false), &all), None, "{state}");
            assert_eq!(cause(&end(state, true), &all), None, "{state}: it ended by itself before the requeue");
        }
        // A user's own requeue or scancel: no fault action behind it.
        assert_eq!(cause(&end("REQUEUED", false), &all), None);
        assert_eq!(cause(&end("CANCELLED", false), &all), None);
    }

    #[test]
    fn only_the_sites_causes_are_refunded() {
        assert_eq!(cause(&end("NODE_FAIL", false), &[RefundCause::GpuFault]), None);
        assert_eq!(cause(&end("REQUEUED", true), &[RefundCause::NodeFail]), None);
        assert_eq!(cause(&end("NODE_FAIL", false), &[]), None);
    }

    #[test]
    fn a_cap_refunds_its_share_of_a_longer_run() {
        assert_eq!(refunded_share(3600, None), (1, 1));
        assert_eq!(refunded_share(3600, Some(7200)), (1, 1));
        assert_eq!(refunded_share(4 * 3600, Some(3600)), (3600, 4 * 3600));
        for cause in RefundCause::ALL {
            assert_eq!(RefundCause::parse(cause.as_str()), Some(cause));
        }
        assert_eq!(RefundCause::parse("user_cancel"), None);
    }
}
