//! Each job's GPU use in one sample, as the agent exports it and accountd records it (idle detection,
//! `charge_basis = "measured"`, idle tokens): per GPU, the job's own share of it.
//!
//! - A GPU the job has to itself (no other job recorded on it or running processes there, and no
//!   process of nobody's job using it): the GPU's utilization. Its processes may be out of sight (a
//!   container, another PID namespace); the GPU's figure is still all its.
//! - A GPU of one job where a process of nobody's job (outside Slurm, or a claim the mapping refused;
//!   the agent gives the GPU's sole holder only processes it cannot see at all) uses the SMs, or may
//!   (NVML gives no figure for it): unmeasured. Whose work it is cannot be told, so it neither
//!   lowers the job's bill nor makes it look busy or idle.
//! - A GPU it shares (Slurm's `gres/shard`, MPS: several jobs recorded on one GPU): the SM utilization
//!   of its own processes there, summed (at most 100), and their memory. NVML splits a time-sliced
//!   GPU between its processes (on an H100, two busy ones read 53 % and 47 %), so a job idling beside
//!   a busy one reads 0 %, not the neighbour's 100 %.
//! - A shared GPU where the agent sees none of the job's processes, or whose processes' utilization
//!   NVML cannot give: unmeasured. Nothing there is the job's to borrow, and nothing says it idles.
//!
//! - A MIG device (a slice of a GPU in MIG mode, a GPU of its own to Slurm): the slice's SM
//!   utilization where GPM gives it (Hopper and later), else unmeasured (NVML gives a MIG device
//!   no utilization, and the GPU's own figure is every slice's); its memory is the job's.
//!
//! A job is unmeasured when any of its GPUs is: accountd then charges its allocation and never counts
//! it idle for that sample.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::sample::{GpuSample, MigSample, NodeSample, ProcessSample};

/// A job's GPU use on this node in one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUse {
    /// Mean over the job's GPUs of its own use of each (see the module); `None`: unmeasured.
    pub percent: Option<f64>,
    pub memory_bytes: u64,
    /// The GPUs it holds (spank_gputokens.so's records) or its processes run on.
    pub gpus: usize,
}

/// Who is on one GPU in a sample.
#[derive(Default)]
struct Occupants<'s> {
    jobs: BTreeSet<&'s str>,
    processes: Vec<&'s ProcessSample>,
    /// A process mapped to no job (outside Slurm, or a claim the mapping refused) uses the GPU's
    /// SMs there too, or may (NVML gave no figure for it).
    nobodys_busy: bool,
}

impl Occupants<'_> {
    /// The job is the only one on the GPU.
    fn only(&self, job: &str) -> bool {
        self.jobs.len() == 1 && self.jobs.contains(job)
    }

    fn of<'p>(&'p self, job: &'p str) -> impl Iterator<Item = &'p ProcessSample> + 'p {
        self.processes.iter().copied().filter(move |p| p.job_id.as_deref() == Some(job))
    }
}

/// A GPU, or a MIG device of one (by its UUID): what a job is recorded on and its processes run on.
type Place<'s> = (u32, Option<&'s str>);

/// Per job, from the GPUs recorded as its own (`GpuSample::jobs`, `MigSample::jobs`) and those its
/// processes run on.
pub fn job_use(sample: &NodeSample) -> BTreeMap<String, JobUse> {
    let on = occupants(sample);
    let gpus: HashMap<u32, &GpuSample> = sample.gpus.iter().map(|g| (g.index, g)).collect();
    let slice = |(index, uuid): Place| gpus.get(&index)?.mig.iter().find(|m| Some(m.uuid.as_str()) == uuid);
    let mut jobs: BTreeMap<&str, Vec<(Option<f64>, u64)>> = BTreeMap::new();
    for (&place, here) in &on {
        for &job in &here.jobs {
            let used = match place.1 {
                Some(_) => use_of_slice(job, here, slice(place)),
                None => use_of_gpu(job, here, gpus.get(&place.0).copied()),
            };
            jobs.entry(job).or_default().push(used);
        }
    }
    jobs.into_iter()
        .map(|(job, per_gpu)| {
            let percents: Option<Vec<f64>> = per_gpu.iter().map(|(p, _)| *p).collect();
            let percent = percents.map(|p| p.iter().sum::<f64>() / p.len() as f64);
            let memory_bytes = per_gpu.iter().map(|(_, m)| m).sum();
            (job.to_string(), JobUse { percent, memory_bytes, gpus: per_gpu.len() })
        })
        .collect()
}

/// Per GPU (by index), which part of its energy each job on it used in this sample, the parts of
/// one GPU adding up to at most 1. By SM utilization, the one figure NVML gives per process:
///
/// - a job whose processes are in sight with a figure: its processes' SM utilization;
/// - a job with none in sight (or a process NVML gives no figure for): what the GPU's utilization
///   leaves over beyond every process in sight, in equal parts among such jobs;
/// - the processes of nobody's job, together, count like a job, and their part is nobody's to pay;
/// - each part over the sum of them all. Where that sum is 0 (every process idle) or cannot be
///   told (an unseen job on a GPU with no utilization figure), equal parts among the jobs: the GPU
///   drew that power for them all.
///
/// So a GPU one job holds alone is all that job's unless nobody's processes use it too (another
/// user's work outside Slurm), and on a shared one a job idling beside a busy one gets little. A
/// GPU with no job on it is left out: its energy is no job's. So is a GPU in MIG mode: NVML counts
/// energy per GPU, and nothing tells its slices' parts apart.
pub fn energy_shares(sample: &NodeSample) -> BTreeMap<u32, Vec<(String, f64)>> {
    let utilization: HashMap<u32, Option<u32>> = sample.gpus.iter().map(|g| (g.index, g.utilization_percent)).collect();
    let mut shares = BTreeMap::new();
    for ((index, slice), here) in occupants(sample) {
        if here.jobs.is_empty() || slice.is_some() {
            continue;
        }
        let sm = |p: &ProcessSample| p.sm_utilization_percent.map(f64::from);
        // Each job's own figure, None for one unseen; then nobody's (None as the job), counted like a job.
        let nobodys = || here.processes.iter().copied().filter(|p| p.job_id.is_none());
        let own: Vec<(Option<&str>, Option<f64>)> = here
            .jobs
            .iter()
            .map(|&job| (Some(job), here.of(job).next().and_then(|_| here.of(job).map(sm).sum::<Option<f64>>())))
            .chain(nobodys().next().map(|_| (None, nobodys().map(sm).sum::<Option<f64>>())))
            .collect();
        let in_sight: f64 = own.iter().filter_map(|(_, f)| *f).sum();
        let unseen = own.iter().filter(|(_, f)| f.is_none()).count();
        let left_over = match (unseen, utilization.get(&index).copied().flatten()) {
            (0, _) => Some(0.0),
            (_, Some(gpu)) => Some((f64::from(gpu) - in_sight).max(0.0)),
            (_, None) => None,
        };
        let equal = 1.0 / here.jobs.len() as f64;
        let parts: Vec<(String, f64)> = match left_over {
            Some(left_over) if in_sight + left_over > 0.0 => {
                let total = in_sight + left_over;
                own.iter()
                    .filter_map(|&(job, f)| {
                        Some((job?.to_string(), f.unwrap_or(left_over / unseen.max(1) as f64) / total))
                    })
                    .collect()
            }
            _ => here.jobs.iter().map(|&job| (job.to_string(), equal)).collect(),
        };
        shares.insert(index, parts);
    }
    shares
}

/// Who is on each GPU, or on each MIG device of a GPU in MIG mode (the GPU itself then holds none
/// of its own): the jobs recorded on it and those (and nobody's) whose processes run there.
fn occupants(sample: &NodeSample) -> BTreeMap<Place<'_>, Occupants<'_>> {
    let mut on: BTreeMap<Place, Occupants> = BTreeMap::new();
    for gpu in &sample.gpus {
        match gpu.mig.is_empty() {
            true => on.entry((gpu.index, None)).or_default().jobs.extend(gpu.jobs.iter().map(String::as_str)),
            false => {
                for slice in &gpu.mig {
                    let here = on.entry((gpu.index, Some(slice.uuid.as_str()))).or_default();
                    here.jobs.extend(slice.jobs.iter().map(String::as_str));
                }
            }
        }
    }
    for p in &sample.processes {
        let here = on.entry((p.gpu_index, p.mig_uuid.as_deref())).or_default();
        here.processes.push(p);
        match &p.job_id {
            Some(job) => {
                here.jobs.insert(job);
            }
            None => here.nobodys_busy |= p.sm_utilization_percent != Some(0),
        }
    }
    on
}

/// The job's use of one MIG device: its GPM figure where the job has it alone (nothing else tells a
/// slice's use), and its processes' memory, or the slice's with its processes out of sight.
fn use_of_slice(job: &str, here: &Occupants, slice: Option<&MigSample>) -> (Option<f64>, u64) {
    let own: Vec<&ProcessSample> = here.of(job).collect();
    let percent = match here.only(job) && !here.nobodys_busy {
        true => slice.and_then(|s| s.sm_utilization_percent).map(|p| f64::from(p.min(100))),
        false => None,
    };
    let memory = match own.is_empty() {
        true if here.only(job) => slice.and_then(|s| s.memory_used_bytes).unwrap_or(0),
        _ => own.iter().map(|p| p.used_memory_bytes.unwrap_or(0)).sum(),
    };
    (percent, memory)
}

/// The job's use of one GPU: percent (`None`: unmeasured) and memory in bytes.
fn use_of_gpu(job: &str, here: &Occupants, gpu: Option<&GpuSample>) -> (Option<f64>, u64) {
    let own: Vec<&ProcessSample> = here.of(job).collect();
    let process_memory = || own.iter().map(|p| p.used_memory_bytes.unwrap_or(0)).sum::<u64>();
    if here.only(job) {
        // Someone else's work on its GPU: not the job's, and not to be told from the job's.
        let percent = match here.nobodys_busy {
            true => None,
            false => gpu.and_then(|g| g.utilization_percent).map(f64::from),
        };
        // Its processes out of sight: all memory in use on its GPU is its.
        let memory = match own.is_empty() {
            true => gpu.and_then(|g| g.memory_used_bytes).unwrap_or(0),
            false => process_memory(),
        };
        return (percent, memory);
    }
    let sm: Option<u32> = match own.is_empty() {
        true => None,
        false => own.iter().map(|p| p.sm_utilization_percent).sum(),
    };
    (sm.map(|s| f64::from(s.min(100))), process_memory())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, util: Option<u32>, jobs: &[&str]) -> GpuSample {
        GpuSample {
            uuid: Some(format!("GPU-{index}")),
            utilization_percent: util,
            memory_used_bytes: Some(1000 + u64::from(index)),
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
            ..GpuSample::empty(index)
        }
    }

    /// (pid, gpu, job ("" for none), SM %).
    fn procs(list: &[(u32, u32, &str, Option<u32>)]) -> Vec<ProcessSample> {
        list.iter()
            .map(|&(pid, gpu_index, job, sm)| ProcessSample {
                pid,
                gpu_index,
                used_memory_bytes: Some(100 * u64::from(pid)),
                sm_utilization_percent: sm,
                job_id: (!job.is_empty()).then(|| job.to_string()),
                mig_uuid: None,
            })
            .collect()
    }

    fn sample(gpus: Vec<GpuSample>, processes: Vec<ProcessSample>) -> NodeSample {
        NodeSample { time: chrono::Utc::now(), gpus, processes }
    }

    fn used(percent: Option<f64>, memory_bytes: u64, gpus: usize) -> JobUse {
        JobUse { percent, memory_bytes, gpus }
    }

    #[test]
    fn a_gpu_held_alone_is_the_jobs_whole() {
        let s = sample(
            vec![gpu(0, Some(80), &["7"]), gpu(1, Some(20), &["7"]), gpu(2, Some(60), &["8"]), gpu(3, None, &["9"])],
            procs(&[(1, 0, "7", Some(50)), (2, 0, "7", Some(5))]),
        );
        let jobs = job_use(&s);
        // GPU 0's own figure (not its processes' 55), and GPU 1 with none of its processes in sight.
        assert_eq!(jobs["7"], used(Some(50.0), 100 + 200 + 1001, 2));
        assert_eq!(jobs["8"], used(Some(60.0), 1002, 1), "processes out of sight");
        assert_eq!(jobs["9"], used(None, 1003, 1), "a GPU that cannot say is no idle GPU");
        assert_eq!(jobs.len(), 3);
    }

    /// As on the H100: alice's busy job and bob's idle one on one GPU, a process of bob's claiming
    /// alice's job (the mapping gave it no job), and a job whose processes are out of sight.
    #[test]
    fn on_a_shared_gpu_each_job_is_its_own_processes() {
        let shared = vec![gpu(0, Some(100), &["4242", "4243", "4244"])];
        let s = sample(
            shared,
            procs(&[(1, 0, "4242", Some(99)), (2, 0, "4243", Some(0)), (3, 0, "4243", Some(0)), (4, 0, "", Some(0))]),
        );
        let jobs = job_use(&s);
        assert_eq!(jobs["4242"], used(Some(99.0), 100, 1), "alice: her process, not bob's claimant");
        assert_eq!(jobs["4243"], used(Some(0.0), 500, 1), "bob idles beside a busy job");
        assert_eq!(jobs["4244"], used(None, 0, 1), "none of its processes in sight: unmeasured, not idle");
        // Time-sliced, two busy processes of one job add up (to at most 100).
        let s = sample(
            vec![gpu(0, Some(100), &["5", "6"])],
            procs(&[(1, 0, "5", Some(53)), (2, 0, "5", Some(47)), (3, 0, "5", Some(10)), (4, 0, "6", None)]),
        );
        let jobs = job_use(&s);
        assert_eq!(jobs["5"].percent, Some(100.0));
        assert_eq!(jobs["6"].percent, None, "NVML gave no utilization for its process");
    }

    #[test]
    fn processes_of_other_jobs_make_a_gpu_shared() {
        // No records: job 7's processes share GPU 0 with job 8's; on GPU 1 a process outside Slurm idles.
        let s = sample(
            vec![gpu(0, Some(90), &[]), gpu(1, Some(40), &[]), gpu(2, Some(30), &[])],
            procs(&[(1, 0, "7", Some(70)), (2, 0, "8", Some(20)), (3, 1, "7", Some(10)), (4, 1, "", Some(0))]),
        );
        let jobs = job_use(&s);
        assert_eq!(jobs["7"], used(Some(55.0), 100 + 300, 2), "mean of 70 and GPU 1's 40, all its");
        assert_eq!(jobs["8"], used(Some(20.0), 200, 1));
        assert_eq!(jobs.len(), 2, "processes outside jobs are not a job");
    }

    /// A process of nobody's job busy on a job's GPU (ssh without pam_slurm_adopt, a refused claim):
    /// whose work the GPU's figure is cannot be told, so the job is unmeasured: neither cheaper nor idle.
    #[test]
    fn nobodys_busy_process_on_a_jobs_gpu_leaves_it_unmeasured() {
        for nobodys in [Some(30), None] {
            let s = sample(vec![gpu(0, Some(40), &["7"])], procs(&[(1, 0, "7", Some(0)), (2, 0, "", nobodys)]));
            assert_eq!(job_use(&s)["7"].percent, None, "nobody's process at {nobodys:?}");
        }
    }

    #[test]
    fn one_unmeasured_gpu_leaves_the_job_unmeasured() {
        let s = sample(
            vec![gpu(0, Some(0), &["7"]), gpu(1, Some(100), &["7", "8"])],
            procs(&[(1, 1, "8", Some(100)), (2, 0, "7", Some(0))]),
        );
        let jobs = job_use(&s);
        assert_eq!(jobs["7"], used(None, 200, 2), "idle on GPU 0, unknown on GPU 1: not idle");
        assert_eq!(jobs["8"].percent, Some(100.0));
    }

    fn parts(shares: &BTreeMap<u32, Vec<(String, f64)>>, gpu: u32) -> Vec<(&str, f64)> {
        shares[&gpu].iter().map(|(j, p)| (j.as_str(), (p * 1000.0).round() / 1000.0)).collect()
    }

    #[test]
    fn a_gpu_held_alone_gives_the_job_all_its_energy() {
        // GPU 0: job 7's process in sight; GPU 1: job 7's, none in sight; GPU 2: nobody's.
        let s = sample(
            vec![gpu(0, Some(80), &["7"]), gpu(1, Some(20), &["7"]), gpu(2, Some(60), &[])],
            procs(&[(1, 0, "7", Some(50))]),
        );
        let shares = energy_shares(&s);
        assert_eq!(parts(&shares, 0), [("7", 1.0)]);
        assert_eq!(parts(&shares, 1), [("7", 1.0)], "its processes out of sight: still all its");
        assert!(!shares.contains_key(&2), "a GPU without a job: its energy is no job's");
    }

    /// The H100's shared GPU: alice's busy job, bob's idle one, and bob's claimant (nobody's job).
    #[test]
    fn a_shared_gpu_splits_its_energy_by_the_jobs_own_processes() {
        let s = sample(
            vec![gpu(0, Some(100), &["4242", "4243"])],
            procs(&[(1, 0, "4242", Some(75)), (2, 0, "4243", Some(0)), (3, 0, "4243", Some(5)), (4, 0, "", Some(20))]),
        );
        // 75, 5 and the claimant's 20 of 100: the claimant's fifth is nobody's to pay.
        assert_eq!(parts(&energy_shares(&s), 0), [("4242", 0.75), ("4243", 0.05)]);
        // Time-sliced 53 % and 47 %, as NVML read two busy processes on the H100.
        let s = sample(vec![gpu(0, Some(100), &["5", "6"])], procs(&[(1, 0, "5", Some(53)), (2, 0, "6", Some(47))]));
        assert_eq!(parts(&energy_shares(&s), 0), [("5", 0.53), ("6", 0.47)]);
    }

    /// The audit's N2: bob's process outside Slurm burns the GPU alice's job holds alone. His part of
    /// its energy is nobody's, also when NVML gives his process no figure (then it counts like an
    /// unseen job: a part of what the GPU's utilization leaves over); and her job is unmeasured.
    #[test]
    fn nobodys_process_on_a_gpu_held_alone_takes_its_part_of_the_energy() {
        let s = sample(vec![gpu(0, Some(95), &["7"])], procs(&[(1, 0, "7", Some(5)), (2, 0, "", Some(90))]));
        assert_eq!(parts(&energy_shares(&s), 0), [("7", 0.053)], "her 5 of the 95 in sight");
        assert_eq!(job_use(&s)["7"].percent, None);
        let s = sample(vec![gpu(0, Some(95), &["7"])], procs(&[(1, 0, "7", Some(5)), (2, 0, "", None)]));
        assert_eq!(parts(&energy_shares(&s), 0), [("7", 0.053)], "the 90 left over is his, unseen");
        // Neither with a figure: half each of the GPU's 95.
        let s = sample(vec![gpu(0, Some(95), &["7"])], procs(&[(1, 0, "7", None), (2, 0, "", None)]));
        assert_eq!(parts(&energy_shares(&s), 0), [("7", 0.5)]);
    }

    #[test]
    fn an_unseen_job_gets_what_the_gpus_utilization_leaves_over() {
        // Job 4244's processes out of sight beside 4242's 90 % on a GPU at 100 %: a tenth is its.
        let s = sample(vec![gpu(0, Some(100), &["4242", "4244", "4245"])], procs(&[(1, 0, "4242", Some(90))]));
        assert_eq!(parts(&energy_shares(&s), 0), [("4242", 0.9), ("4244", 0.05), ("4245", 0.05)]);
        // NVML gave no SM figure for job 2's process: it is unseen, and job 1 reads all the GPU does.
        let s = sample(vec![gpu(0, Some(50), &["1", "2"])], procs(&[(1, 0, "1", Some(60)), (2, 0, "2", None)]));
        assert_eq!(parts(&energy_shares(&s), 0), [("1", 1.0), ("2", 0.0)]);
    }

    #[test]
    fn a_shared_gpu_nothing_tells_apart_is_split_equally_among_its_jobs() {
        // Every process at 0 %: the GPU idled for them all; the claimant still gets nothing.
        let s = sample(
            vec![gpu(0, Some(0), &["1", "2"])],
            procs(&[(1, 0, "1", Some(0)), (2, 0, "2", Some(0)), (3, 0, "", Some(0))]),
        );
        assert_eq!(parts(&energy_shares(&s), 0), [("1", 0.5), ("2", 0.5)]);
        // An unseen job on a GPU that gives no utilization figure.
        let s = sample(vec![gpu(0, None, &["1", "2"])], procs(&[(1, 0, "1", Some(60))]));
        assert_eq!(parts(&energy_shares(&s), 0), [("1", 0.5), ("2", 0.5)]);
    }

    fn slice(uuid: &str, gpm: Option<u32>, jobs: &[&str]) -> MigSample {
        MigSample {
            uuid: uuid.into(),
            profile: Some("3g.20gb".into()),
            memory_used_bytes: Some(7_000),
            memory_total_bytes: Some(20_000),
            sm_utilization_percent: gpm,
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
        }
    }

    /// A GPU in MIG mode: each job is measured on its own slice, by GPM where the slice has a
    /// figure, else unmeasured; never by the GPU's figure, which is every slice's.
    #[test]
    fn a_mig_slice_is_its_jobs_by_gpm_or_unmeasured() {
        let mut a100 = gpu(0, Some(95), &["7", "8"]);
        a100.mig = vec![slice("MIG-a", Some(80), &["7"]), slice("MIG-b", None, &["8"])];
        let mut on_b = procs(&[(5, 0, "8", None)]);
        on_b[0].mig_uuid = Some("MIG-b".into());
        let s = sample(vec![a100, gpu(1, Some(30), &["9"])], on_b);
        let got = job_use(&s);
        assert_eq!(
            got["7"],
            used(Some(80.0), 7_000, 1),
            "GPM's figure; its processes out of sight: the slice's memory"
        );
        assert_eq!(got["8"], used(None, 500, 1), "no GPM: unmeasured; its process's memory");
        assert_eq!(got["9"], used(Some(30.0), 1001, 1));
        // No energy of the MIG GPU is any job's: NVML counts it for the whole GPU.
        let shares = energy_shares(&s);
        assert!(!shares.contains_key(&0), "{shares:?}");
        assert_eq!(parts(&shares, 1), [("9", 1.0)]);
    }
}
