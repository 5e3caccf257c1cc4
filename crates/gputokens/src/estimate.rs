//! The most a job can cost (GPUs × time limit × price), and what a user's running and pending GPU
//! jobs may still cost: the numbers behind `[admission] mode = "estimate"`, `max_gpus_per_user` and
//! `sbatch --gpu-tokens-estimate`.
//!
//! Maximums, not predictions: an untyped request is priced at the highest price a GPU can have (the
//! job may land on any type), a share at its fraction of a GPU, rounded up.

use std::collections::BTreeMap;
use std::fmt;

use crate::gpu_request::{GpuRequest, Kind, Per};
use crate::job_shape::JobShape;
use crate::pricing::{cost_of, PriceTable};
use crate::slurm::squeue::QueueJob;
use crate::stranded_estimate::Strands;
use crate::stranding::NodeShape;
use crate::tokens::Tokens;
use crate::tres::{gpu_count, Sharing, MILLI};

/// Milli-GPUs by GPU type; None = any type.
pub type MilliByType = BTreeMap<Option<String>, u64>;

/// The GPUs a request amounts to, per type, over the whole job (every node, task and array task).
pub fn requested_milli(request: &GpuRequest, shape: &JobShape, sharing: Sharing) -> MilliByType {
    let mut out = MilliByType::new();
    for c in &request.counts {
        let units = match c.per {
            Per::Job => c.count,
            Per::Node => c.count.saturating_mul(shape.nodes.max(1)),
            Per::Task => c.count.saturating_mul(shape.tasks.max(1)),
            Per::Socket => c.count.saturating_mul(shape.sockets_per_node.max(1)).saturating_mul(shape.nodes.max(1)),
        };
        let per_gpu = match c.kind {
            Kind::Gpu => 1,
            Kind::Shard => sharing.shards_per_gpu.max(1),
            Kind::Mps => sharing.mps_per_gpu.max(1),
        };
        let milli = units.saturating_mul(MILLI).div_ceil(per_gpu).saturating_mul(shape.array_tasks.max(1));
        let slot = out.entry(c.gpu_type.clone()).or_default();
        *slot = slot.saturating_add(milli);
    }
    out
}

pub fn total_milli(milli: &MilliByType) -> u64 {
    milli.values().fold(0u64, |sum, m| sum.saturating_add(*m))
}

/// The most `milli` GPUs can cost in `seconds`; [`Tokens::MAX`] when that is more than can be
/// counted (a bound, never an amount wrapped or saturated below the true one).
pub fn max_cost(milli: &MilliByType, seconds: u64, prices: &PriceTable) -> Tokens {
    checked_max_cost(milli, seconds, prices).unwrap_or(Tokens::MAX)
}

/// The most `milli` GPUs can cost in `seconds`, exactly; None when it is not a representable amount.
pub fn checked_max_cost(milli: &MilliByType, seconds: u64, prices: &PriceTable) -> Option<Tokens> {
    milli.iter().try_fold(Tokens::ZERO, |sum, (gpu_type, m)| {
        let price = match gpu_type {
            Some(t) => prices.requested(t),
            None => prices.highest(),
        };
        sum.checked_add(cost_of(price, *m, seconds)?)
    })
}

/// `2 a6000 GPUs`, `1.5 GPUs of any type`, `2 a6000 GPUs and 1 rtx3090 GPU`.
pub struct GpusText<'a>(pub &'a MilliByType);

impl fmt::Display for GpusText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (gpu_type, milli)) in self.0.iter().enumerate() {
            let sep = match i {
                0 => "",
                i if i + 1 == self.0.len() => " and ",
                _ => ", ",
            };
            let n = gpu_count(*milli);
            let plural = if *milli == MILLI { "GPU" } else { "GPUs" };
            match gpu_type {
                Some(t) => write!(f, "{sep}{n} {t} {plural}")?,
                None => write!(f, "{sep}{n} {plural} of any type")?,
            }
        }
        Ok(())
    }
}

/// What a user's GPU jobs in the queue hold and may still cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Commitment {
    /// Milli-GPUs held by running jobs and asked for by pending ones.
    pub milli_gpus: u64,
    /// The most those jobs can still cost: the rest of each running job's time limit, a pending
    /// job's whole limit.
    pub max_cost: Tokens,
}

impl std::ops::AddAssign for Commitment {
    fn add_assign(&mut self, other: Commitment) {
        self.milli_gpus = self.milli_gpus.saturating_add(other.milli_gpus);
        self.max_cost = self.max_cost + other.max_cost;
    }
}

/// The most a queued job's GPUs (`milli`, of all its array tasks) can cost in `seconds`: their price,
/// and where the site prices what a job strands, the most its CPUs and memory (asked for, or held)
/// could add on any node `shapes` has ([`Strands::worst`]); [`Tokens::MAX`] beyond what can be counted.
fn job_max_cost(
    job: &QueueJob,
    milli: &MilliByType,
    seconds: u64,
    prices: &PriceTable,
    shapes: &[NodeShape],
) -> Tokens {
    let gpus = max_cost(milli, seconds, prices);
    if prices.stranded().is_empty() {
        return gpus;
    }
    let tasks = job.shape.array_tasks.max(1);
    let per_task: MilliByType = milli.iter().map(|(t, m)| (t.clone(), m.div_ceil(tasks))).collect();
    let strands = Strands::new(job.held, job.shape.nodes, shapes);
    match strands.and_then(|s| s.worst(&per_task, prices)) {
        Some(s) => {
            cost_of(s.surcharge, total_milli(milli), seconds).and_then(|c| gpus.checked_add(c)).unwrap_or(Tokens::MAX)
        }
        None => gpus,
    }
}

/// Sums the running and pending GPU jobs of `jobs` per user. A job without a time limit counts
/// `default_limit` seconds. A running job counts what is left of its limit after the seconds
/// `charged` says the ledger has already charged of it: the balance holds those, so balance minus
/// commitments is the worst case however long ago the last charge was.
pub fn commitments(
    jobs: &[QueueJob],
    default_limit: u64,
    prices: &Priced<'_>,
    sharing: Sharing,
    charged: impl Fn(&QueueJob) -> u64,
) -> BTreeMap<String, Commitment> {
    commitments_by(jobs, default_limit, prices, sharing, charged, |job| Some(job.user.clone()))
}

/// The prices a queue's jobs are weighed at, and the shapes of the nodes with GPUs where the site
/// prices what a job strands (none: its GPUs alone).
#[derive(Debug, Clone, Copy)]
pub struct Priced<'a> {
    pub prices: &'a PriceTable,
    pub shapes: &'a [NodeShape],
}

/// [`commitments`] summed per `payer` of each job (None: left out), e.g. the pool that pays.
pub fn commitments_by<K: Ord>(
    jobs: &[QueueJob],
    default_limit: u64,
    priced: &Priced<'_>,
    sharing: Sharing,
    charged: impl Fn(&QueueJob) -> u64,
    payer: impl Fn(&QueueJob) -> Option<K>,
) -> BTreeMap<K, Commitment> {
    let mut out: BTreeMap<K, Commitment> = BTreeMap::new();
    for job in jobs {
        let Some((milli, seconds)) = held_or_asked(job, default_limit, sharing, &charged) else { continue };
        let Some(payer) = payer(job) else { continue };
        let max_cost = job_max_cost(job, &milli, seconds, priced.prices, priced.shapes);
        *out.entry(payer).or_default() += Commitment { milli_gpus: total_milli(&milli), max_cost };
    }
    out
}

/// The GPUs a running job holds (and the seconds left of its limit) or a pending one asks for (and
/// its whole limit); None for a job with no GPUs or in another state.
fn held_or_asked(
    job: &QueueJob,
    default_limit: u64,
    sharing: Sharing,
    charged: impl Fn(&QueueJob) -> u64,
) -> Option<(MilliByType, u64)> {
    let limit = job.time_limit.unwrap_or(default_limit);
    let (milli, seconds) = match job.state.as_str() {
        "RUNNING" | "SUSPENDED" | "CONFIGURING" | "COMPLETING" if !job.alloc.is_empty() => {
            let milli = job.alloc.milli_by_type(UNTYPED, sharing);
            let milli: MilliByType = milli.into_iter().map(|(t, m)| ((t != UNTYPED).then_some(t), m)).collect();
            (milli, limit.saturating_sub(charged(job)))
        }
        "PENDING" | "REQUEUED" => (requested_milli(&job.request, &job.shape, sharing), limit),
        _ => return None,
    };
    (!milli.is_empty()).then_some((milli, seconds))
}

/// How long before a queue read began the plugin's admissions may still be missing from it
/// (slurmctld creates a job a moment after the plugin admits it): the snapshot lists the jobs
/// submitted from then on, and the plugin matches those admissions against them.
pub const RECENT_SLACK_SECS: i64 = 5;

/// A GPU job in the queue that slurmctld created near the time squeue was read: the job_submit
/// plugin matches the jobs it admitted while squeue ran against these, so a job is counted once,
/// by the queue or by the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentJob {
    pub uid: u32,
    /// Its `submit_time`, unix seconds.
    pub submitted: i64,
    /// The milli-GPUs it holds or asks for (as the plugin counted it when it admitted the job).
    pub milli_gpus: u64,
}

/// The GPU jobs of `jobs` submitted at or after `since` (unix seconds) that the plugin counted when
/// it admitted them (`tallied`: not exempt; a requeued job was not admitted again), oldest first:
/// a line of a job it did not count could stand for one it did.
pub fn recent_jobs(
    jobs: &[QueueJob],
    since: i64,
    sharing: Sharing,
    tallied: impl Fn(&QueueJob) -> bool,
) -> Vec<RecentJob> {
    let mut out: Vec<RecentJob> = jobs
        .iter()
        .filter(|j| j.submit_time >= since && j.restarts == 0 && tallied(j))
        .filter_map(|job| {
            let (milli, _) = held_or_asked(job, 0, sharing, |_| 0)?;
            Some(RecentJob { uid: job.user_id?, submitted: job.submit_time, milli_gpus: total_milli(&milli) })
        })
        .collect();
    out.sort_by_key(|r| (r.submitted, r.uid, r.milli_gpus));
    out
}

/// A pending job as squeue showed it, for judging an update of it (`scontrol update`) against the
/// limits: its shape, the seconds counted for it, and, for a GPU job, what it asks for and can cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingJob {
    pub nodes: u64,
    pub tasks: u64,
    pub array_tasks: u64,
    /// Its time limit, else `default_limit`.
    pub seconds: u64,
    /// None for a CPU-only job.
    pub gpus: Option<Commitment>,
    /// The CPUs and memory it asks for, where the site prices what a job strands (else nothing):
    /// an update of its GPUs is weighed with them.
    pub held: crate::stranding::Held,
}

/// The pending jobs of `jobs` by numeric job ID (a pending array is one record, under its array job ID).
pub fn pending_jobs(
    jobs: &[QueueJob],
    default_limit: u64,
    priced: &Priced<'_>,
    sharing: Sharing,
) -> BTreeMap<u32, PendingJob> {
    let mut out = BTreeMap::new();
    for job in jobs.iter().filter(|j| matches!(j.state.as_str(), "PENDING" | "REQUEUED")) {
        let Some(id) = crate::slurm::job_number(&job.job_id) else { continue };
        let seconds = job.time_limit.unwrap_or(default_limit);
        let milli = requested_milli(&job.request, &job.shape, sharing);
        let gpus = (!milli.is_empty()).then(|| Commitment {
            milli_gpus: total_milli(&milli),
            max_cost: job_max_cost(job, &milli, seconds, priced.prices, priced.shapes),
        });
        let shape = &job.shape;
        let held = if priced.prices.stranded().is_empty() { Default::default() } else { job.held };
        let (nodes, tasks, array_tasks) = (shape.nodes, shape.tasks, shape.array_tasks);
        out.insert(id, PendingJob { nodes, tasks, array_tasks, seconds, gpus, held });
    }
    out
}

/// Stands for "no type" in allocation maps (a name no GPU type has).
const UNTYPED: &str = " any";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_request::TresPer;

    fn prices() -> PriceTable {
        let t = |s: &str, p: i64| (s.to_string(), Tokens::from_micro(p));
        PriceTable::new([t("rtx2080", 500_000), t("rtx3090", 1_000_000), t("a6000", 4_000_000)].into(), None)
    }

    fn request(node: Option<&str>, job: Option<&str>, task: Option<&str>, socket: Option<&str>) -> GpuRequest {
        GpuRequest::parse(&TresPer { job, node, task, socket }).unwrap()
    }

    #[test]
    fn every_per_field_scales_by_its_unit() {
        let shape = JobShape { nodes: 2, tasks: 8, sockets_per_node: 2, array_tasks: 1 };
        let s = Sharing::default();
        let a6000 = |m: u64| MilliByType::from([(Some("a6000".to_string()), m)]);
        assert_eq!(requested_milli(&request(Some("gres:gpu:a6000:2"), None, None, None), &shape, s), a6000(4000));
        assert_eq!(requested_milli(&request(None, Some("gres/gpu:a6000:3"), None, None), &shape, s), a6000(3000));
        assert_eq!(requested_milli(&request(None, None, Some("gres:gpu:a6000:1"), None), &shape, s), a6000(8000));
        assert_eq!(requested_milli(&request(None, None, None, Some("gres:gpu:a6000:1")), &shape, s), a6000(4000));
        let array = JobShape { array_tasks: 10, ..JobShape::default() };
        let untyped = requested_milli(&request(Some("gres:gpu:1"), None, None, None), &array, s);
        assert_eq!(untyped, MilliByType::from([(None, 10_000)]));
        let shards = Sharing { shards_per_gpu: 4, mps_per_gpu: 100 };
        let shard =
            requested_milli(&request(Some("gres:shard:a6000:1"), None, None, None), &JobShape::default(), shards);
        assert_eq!(shard, a6000(250));
    }

    #[test]
    fn the_most_a_job_can_cost() {
        let two = MilliByType::from([(Some("a6000".to_string()), 2000)]);
        assert_eq!(max_cost(&two, 4 * 3600, &prices()), Tokens::whole(32));
        let any = MilliByType::from([(None, 1000)]);
        assert_eq!(max_cost(&any, 3600, &prices()), Tokens::whole(4), "untyped: the highest price");
        let mixed = MilliByType::from([(Some("rtx2080".to_string()), 4000), (None, 500)]);
        assert_eq!(max_cost(&mixed, 3600, &prices()), Tokens::whole(4));
        assert_eq!(GpusText(&two).to_string(), "2 a6000 GPUs");
        assert_eq!(GpusText(&mixed).to_string(), "0.5 GPUs of any type and 4 rtx2080 GPUs");
        assert_eq!(GpusText(&MilliByType::from([(Some("x".into()), 1000)])).to_string(), "1 x GPU");
    }

    #[test]
    fn a_mig_slice_is_estimated_at_its_share_of_its_gpu() {
        let prices = PriceTable::new([("a100".to_string(), Tokens::whole(7))].into(), None);
        let req = request(Some("gres:gpu:a100_3g.20gb:2"), None, None, None);
        let milli = requested_milli(&req, &JobShape::default(), Sharing::default());
        // 2 slices of 3/7 of a 7-token GPU, for 2 hours.
        assert_eq!(checked_max_cost(&milli, 2 * 3600, &prices), Some(Tokens::whole(12)));
        let whole = requested_milli(
            &request(Some("gres:gpu:a100:2"), None, None, None),
            &JobShape::default(),
            Sharing::default(),
        );
        assert_eq!(checked_max_cost(&whole, 2 * 3600, &prices), Some(Tokens::whole(28)));
    }

    fn job(user: &str, state: &str, start: i64, limit: Option<u64>) -> QueueJob {
        let json = format!(
            r#"{{"jobs":[{{"job_id":1,"user_name":"{user}","job_state":"{state}","start_time":{start},
                "gres_detail":{detail},"tres_per_node":"gres:gpu:a6000:2","node_count":1,"tasks":1}}]}}"#,
            detail = if state == "RUNNING" { r#"["gpu:a6000:2(IDX:6-7)"]"# } else { "[]" }
        );
        let mut j = crate::slurm::squeue::queue(&json).unwrap().remove(0);
        j.time_limit = limit;
        j
    }

    #[test]
    fn recent_jobs_are_the_gpu_jobs_submitted_since_a_time_with_their_owners_uid() {
        let submitted = |mut j: QueueJob, uid: Option<u32>, at: i64| {
            j.user_id = uid;
            j.submit_time = at;
            j
        };
        let jobs = [
            submitted(job("alice", "RUNNING", 1000, Some(7200)), Some(1001), 101),
            submitted(job("alice", "PENDING", 0, Some(3600)), Some(1001), 100),
            submitted(job("alice", "PENDING", 0, Some(3600)), Some(1001), 99),
            submitted(job("bob", "COMPLETED", 0, Some(3600)), Some(1002), 101),
            submitted(job("bob", "PENDING", 0, None), None, 101),
        ];
        let recent = recent_jobs(&jobs, 100, Sharing::default(), |_| true);
        assert_eq!(recent_jobs(&jobs, 100, Sharing::default(), |j| j.submit_time != 100).len(), 1);
        let mut requeued = jobs[0].clone();
        requeued.restarts = 1;
        assert!(recent_jobs(&[requeued], 100, Sharing::default(), |_| true).is_empty(), "not admitted again");
        let want = [
            RecentJob { uid: 1001, submitted: 100, milli_gpus: 2000 },
            RecentJob { uid: 1001, submitted: 101, milli_gpus: 2000 },
        ];
        assert_eq!(recent, want, "oldest first; not the earlier, the ended or the one without a uid");
    }

    #[test]
    fn running_jobs_count_the_rest_of_their_limit_pending_ones_all_of_it() {
        let jobs = [
            job("alice", "RUNNING", 1000, Some(7200)),
            job("alice", "PENDING", 0, Some(3600)),
            job("alice", "COMPLETED", 0, Some(3600)),
            job("bob", "PENDING", 0, None),
        ];
        let c = commitments(&jobs, 1800, &Priced { prices: &prices(), shapes: &[] }, Sharing::default(), |_| 3600);
        // running: 2 a6000 × (2 h - 1 h charged) × 4 = 8; pending: 2 × 1 h × 4 = 8
        assert_eq!(c["alice"], Commitment { milli_gpus: 4000, max_cost: Tokens::whole(16) });
        assert_eq!(c["bob"], Commitment { milli_gpus: 2000, max_cost: Tokens::whole(4) }, "no limit: the default");
        let uncharged =
            commitments(&jobs[..1], 1800, &Priced { prices: &prices(), shapes: &[] }, Sharing::default(), |_| 0);
        assert_eq!(uncharged["alice"].max_cost, Tokens::whole(16), "nothing charged yet: the whole limit");
        let late =
            commitments(&jobs[..1], 1800, &Priced { prices: &prices(), shapes: &[] }, Sharing::default(), |_| 9000);
        assert_eq!(late["alice"].max_cost, Tokens::ZERO, "charged past its limit: nothing more");
    }

    /// Where the site prices what a job strands, a queued job holding or asking for more than its
    /// GPUs' share of a node counts the worst that could cost; one within its share counts as before.
    #[test]
    fn queued_jobs_count_what_their_cpus_could_strand() {
        use crate::stranding::{Held, Part};
        let prices = prices().with_stranded(vec![Part::Cpus]);
        // 16 CPUs, 4 a6000 (4 an hour each).
        let gpus = BTreeMap::from([("a6000".to_string(), 4000)]);
        let shapes = [NodeShape { cpus: 16, mem_mb: 64_000, milli_gpus: gpus }];
        let priced = Priced { prices: &prices, shapes: &shapes };
        let mut greedy = job("alice", "PENDING", 0, Some(3600));
        greedy.held = Held { cpus: Some(16), mem_mb: None };
        let mut fair = job("bob", "PENDING", 0, Some(3600));
        fair.held = Held { cpus: Some(8), mem_mb: None };
        let c = commitments(&[greedy.clone(), fair], 1800, &priced, Sharing::default(), |_| 0);
        // alice's 2 a6000 with all 16 CPUs stand for the 4: 2 idle, 8 an hour on her 2 GPU-hours.
        assert_eq!(c["alice"].max_cost, Tokens::whole(16));
        assert_eq!(c["bob"].max_cost, Tokens::whole(8), "8 CPUs: the share of its 2 GPUs");
        greedy.job_id = "7".into();
        assert_eq!(
            pending_jobs(&[greedy], 1800, &priced, Sharing::default())[&7].gpus.unwrap().max_cost,
            Tokens::whole(16)
        );
    }

    #[test]
    fn pending_jobs_by_id() {
        let mut cpu = job("bob", "PENDING", 0, Some(600));
        cpu.job_id = "12".into();
        cpu.request = GpuRequest::default();
        let jobs = [job("alice", "RUNNING", 1000, Some(7200)), job("alice", "PENDING", 0, Some(3600)), cpu];
        let p = pending_jobs(&jobs, 1800, &Priced { prices: &prices(), shapes: &[] }, Sharing::default());
        assert_eq!(p.len(), 2, "running jobs are not listed");
        let gpus = Commitment { milli_gpus: 2000, max_cost: Tokens::whole(8) };
        assert_eq!(
            p[&1],
            PendingJob {
                nodes: 1,
                tasks: 1,
                array_tasks: 1,
                seconds: 3600,
                gpus: Some(gpus),
                held: Default::default()
            }
        );
        assert_eq!(p[&12].gpus, None);
        assert_eq!(p[&12].seconds, 600);
    }

    #[test]
    fn more_than_can_be_counted_costs_the_most() {
        let huge = MilliByType::from([(None, u64::MAX)]);
        assert_eq!(max_cost(&huge, 365 * 86_400, &prices()), Tokens::MAX);
        assert_eq!(checked_max_cost(&huge, 365 * 86_400, &prices()), None);
        let two = MilliByType::from([(Some("a6000".to_string()), u64::MAX / 2), (None, u64::MAX / 2)]);
        assert_eq!(checked_max_cost(&two, 1, &prices()), None, "each fits, their sum does not");
        let shape = JobShape { nodes: u64::MAX, tasks: u64::MAX, sockets_per_node: u64::MAX, array_tasks: u64::MAX };
        let request = request(Some("gres:gpu:a6000:4294967295"), Some("gres:gpu:99999999999999999999"), None, None);
        let milli = requested_milli(&request, &shape, Sharing { shards_per_gpu: 0, mps_per_gpu: 0 });
        assert_eq!(total_milli(&milli), u64::MAX, "saturated, not wrapped");
        assert_eq!(
            GpusText(&milli).to_string(),
            "9223372036854.775807 GPUs of any type and 9223372036854.775807 a6000 GPUs"
        );
    }

    mod properties {
        use super::*;
        use crate::gpu_request::{Per, TresPer};
        use proptest::prelude::*;

        fn count() -> impl Strategy<Value = u64> {
            prop_oneof![0..64u64, any::<u64>()]
        }

        fn shape() -> impl Strategy<Value = JobShape> {
            (count(), count(), count(), count()).prop_map(|(nodes, tasks, sockets_per_node, array_tasks)| JobShape {
                nodes,
                tasks,
                sockets_per_node,
                array_tasks,
            })
        }

        fn per() -> impl Strategy<Value = Per> {
            prop_oneof![Just(Per::Job), Just(Per::Node), Just(Per::Task), Just(Per::Socket)]
        }

        fn gpu_type() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("rtx2080".to_string())),
                Just(Some("a6000".to_string())),
                Just(Some("h100".to_string()))
            ]
        }

        fn one(per: Per, gpu_type: Option<String>, count: u64) -> GpuRequest {
            GpuRequest { counts: vec![crate::gpu_request::GpuCount { per, kind: Kind::Gpu, gpu_type, count }] }
        }

        proptest! {
            /// More GPUs per unit, more nodes, tasks, sockets or array tasks never ask for fewer GPUs,
            /// nor cost less; more time never costs less.
            #[test]
            fn requests_and_costs_are_monotone(
                per in per(), t in gpu_type(), n in count(), more in count(), a in shape(), b in shape(),
                secs in count(), longer in count(),
            ) {
                let s = Sharing::default();
                let bigger = JobShape {
                    nodes: a.nodes.max(b.nodes),
                    tasks: a.tasks.max(b.tasks),
                    sockets_per_node: a.sockets_per_node.max(b.sockets_per_node),
                    array_tasks: a.array_tasks.max(b.array_tasks),
                };
                let small = requested_milli(&one(per, t.clone(), n), &a, s);
                let large = requested_milli(&one(per, t.clone(), n.saturating_add(more)), &bigger, s);
                prop_assert!(total_milli(&small) <= total_milli(&large));
                let p = prices();
                let cost = max_cost(&small, secs, &p);
                prop_assert!(cost >= Tokens::ZERO);
                prop_assert!(cost <= max_cost(&large, secs, &p));
                prop_assert!(cost <= max_cost(&small, secs.saturating_add(longer), &p));
            }

            /// A pricier type never costs less, and any type costs at most what an untyped GPU does.
            #[test]
            fn pricier_types_never_cost_less(milli in count(), secs in count()) {
                let p = prices();
                let of = |t: Option<&str>| max_cost(&MilliByType::from([(t.map(str::to_string), milli)]), secs, &p);
                prop_assert!(of(Some("rtx2080")) <= of(Some("rtx3090")));
                prop_assert!(of(Some("rtx3090")) <= of(Some("a6000")));
                prop_assert!(of(Some("a6000")) <= of(None));
                prop_assert!(of(Some("h100")) <= of(None), "unlisted: priced, never above the highest");
            }

            #[test]
            fn any_request_text_and_shape_never_panics(text in "\\PC{0,40}", shape in shape(), secs in count()) {
                if let Ok(request) = GpuRequest::parse(&TresPer { node: Some(&text), ..TresPer::default() }) {
                    let milli = requested_milli(&request, &shape, Sharing { shards_per_gpu: 0, mps_per_gpu: 0 });
                    let _ = (max_cost(&milli, secs, &prices()), GpusText(&milli).to_string());
                }
            }
        }
    }
}
