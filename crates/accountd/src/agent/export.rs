//! The agent's own `/metrics` (prometheus-client): the latest sample per GPU and per job, so a node can
//! be watched without accountd. Series of a GPU or job missing from a sample are removed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::source::{GpuHealth, NodeSample};
pub use crate::metrics::GpuLabels;

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: String,
    pub node: String,
}

/// One gauge family and the label sets the last update set, to remove those that have gone.
struct Series<L> {
    family: Family<L, FloatGauge>,
    present: HashSet<L>,
}

impl<L: Clone + Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static> Series<L> {
    fn new(registry: &mut Registry, name: &str, help: &str) -> Self {
        let family = Family::default();
        registry.register(name, help, family.clone());
        Series { family, present: HashSet::new() }
    }

    /// Values first, removals after: a scrape in between sees old series, never a gap.
    fn update(&mut self, values: impl IntoIterator<Item = (L, f64)>) {
        let mut now = HashSet::new();
        for (labels, value) in values {
            self.family.get_or_create(&labels).set(value);
            now.insert(labels);
        }
        for gone in self.present.difference(&now) {
            self.family.remove(gone);
        }
        self.present = now;
    }
}

/// A job's GPU use on this node in one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUse {
    /// Mean GPU utilization of the GPUs the job holds or its processes are on.
    pub percent: f64,
    pub memory_bytes: u64,
    pub gpus: usize,
}

/// Per job, from the GPUs recorded as its own (`GpuSample::jobs`) and those its processes run on. GPU
/// utilization rather than per-process SM utilization, as accountd computes it (`http::reports`):
/// every GPU reports it, Slurm gives each GPU to one job, and processes of a job sharing a GPU do not
/// add up past 100. Memory is, per GPU, the sum over the job's processes there; on a GPU the job holds
/// alone where the agent sees none of its processes (another PID namespace), the GPU's memory in use.
pub fn job_use(sample: &NodeSample) -> BTreeMap<String, JobUse> {
    let util: HashMap<u32, u32> = sample.gpus.iter().filter_map(|g| Some((g.index, g.utilization_percent?))).collect();
    let mut jobs: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut process_memory: HashMap<(&str, u32), u64> = HashMap::new();
    for p in &sample.processes {
        let Some(job) = &p.job_id else { continue };
        jobs.entry(job.clone()).or_default().insert(p.gpu_index);
        *process_memory.entry((job.as_str(), p.gpu_index)).or_default() += p.used_memory_bytes.unwrap_or(0);
    }
    for gpu in &sample.gpus {
        for job in &gpu.jobs {
            jobs.entry(job.clone()).or_default().insert(gpu.index);
        }
    }
    let gpu_memory = |job: &str, index: u32| -> u64 {
        if let Some(bytes) = process_memory.get(&(job, index)) {
            return *bytes;
        }
        match sample.gpus.iter().find(|g| g.index == index) {
            Some(g) if g.jobs.len() == 1 && g.jobs[0] == job => g.memory_used_bytes.unwrap_or(0),
            _ => 0,
        }
    };
    jobs.into_iter()
        .map(|(job, gpus)| {
            let known: Vec<f64> = gpus.iter().filter_map(|i| util.get(i)).map(|u| f64::from(*u)).collect();
            let percent = if known.is_empty() { 0.0 } else { known.iter().sum::<f64>() / known.len() as f64 };
            let memory_bytes = gpus.iter().map(|&i| gpu_memory(&job, i)).sum();
            (job, JobUse { percent, memory_bytes, gpus: gpus.len() })
        })
        .collect()
}

pub struct Exporter {
    gpu_utilization: Series<GpuLabels>,
    gpu_memory_used: Series<GpuLabels>,
    gpu_temperature: Series<GpuLabels>,
    gpu_power: Series<GpuLabels>,
    gpu_healthy: Series<GpuLabels>,
    gpu_ecc: Series<GpuLabels>,
    job_utilization: Series<JobLabels>,
    job_memory: Series<JobLabels>,
    job_gpus: Series<JobLabels>,
    sample_failures: Counter,
    report_failures: Counter,
}

impl Exporter {
    /// The exporter, for the sampling loop, and its registry, for the `/metrics` handler.
    pub fn new() -> (Exporter, Arc<Registry>) {
        let mut r = Registry::with_prefix("gputokens_agent");
        let exporter = Exporter {
            gpu_utilization: Series::new(&mut r, "gpu_utilization_percent", "GPU utilization"),
            gpu_memory_used: Series::new(&mut r, "gpu_memory_used_bytes", "GPU memory in use"),
            gpu_temperature: Series::new(&mut r, "gpu_temperature_celsius", "GPU temperature"),
            gpu_power: Series::new(&mut r, "gpu_power_watts", "GPU power draw"),
            gpu_healthy: Series::new(
                &mut r,
                "gpu_healthy",
                "1 when NVML reads the GPU without error and it has no uncorrectable ECC errors",
            ),
            gpu_ecc: Series::new(
                &mut r,
                "gpu_ecc_uncorrected_errors",
                "Volatile uncorrectable ECC errors since the driver loaded",
            ),
            job_utilization: Series::new(
                &mut r,
                "job_gpu_utilization_percent",
                "Mean utilization of the GPUs a job holds or its processes run on",
            ),
            job_memory: Series::new(&mut r, "job_gpu_memory_bytes", "GPU memory used by a job"),
            job_gpus: Series::new(&mut r, "job_gpus", "GPUs a job holds or its processes run on"),
            sample_failures: Counter::default(),
            report_failures: Counter::default(),
        };
        r.register("sample_failures", "NVML samples that failed", exporter.sample_failures.clone());
        r.register("report_failures", "Reports that did not reach accountd", exporter.report_failures.clone());
        (exporter, Arc::new(r))
    }

    pub fn update(&mut self, node: &str, sample: &NodeSample) {
        let gpu = |g: &super::GpuSample| GpuLabels {
            node: node.to_string(),
            gpu: g.index.to_string(),
            uuid: g.uuid.clone().unwrap_or_default(),
        };
        let each = |value: &dyn Fn(&super::GpuSample) -> Option<f64>| {
            sample.gpus.iter().filter_map(|g| Some((gpu(g), value(g)?))).collect::<Vec<_>>()
        };
        self.gpu_utilization.update(each(&|g| g.utilization_percent.map(f64::from)));
        self.gpu_memory_used.update(each(&|g| g.memory_used_bytes.map(|b| b as f64)));
        self.gpu_temperature.update(each(&|g| g.temperature_c.map(f64::from)));
        self.gpu_power.update(each(&|g| g.power_w));
        self.gpu_ecc.update(each(&|g| g.ecc_uncorrected.map(|n| n as f64)));
        self.gpu_healthy.update(each(&|g| {
            Some(f64::from(u8::from(g.health == GpuHealth::Ok && g.ecc_uncorrected.unwrap_or(0) == 0)))
        }));

        let jobs = job_use(sample);
        let job = |id: &String| JobLabels { job: id.clone(), node: node.to_string() };
        self.job_utilization.update(jobs.iter().map(|(id, u)| (job(id), u.percent)));
        self.job_memory.update(jobs.iter().map(|(id, u)| (job(id), u.memory_bytes as f64)));
        self.job_gpus.update(jobs.iter().map(|(id, u)| (job(id), u.gpus as f64)));
    }

    /// Drops every GPU and job series: after a failed sample, a gap is truer than frozen values.
    pub fn sample_failed(&mut self) {
        self.sample_failures.inc();
        self.update("", &NodeSample { time: chrono::Utc::now(), gpus: Vec::new(), processes: Vec::new() });
    }

    pub fn report_failed(&self) {
        self.report_failures.inc();
    }
}

/// The text exposition (OpenMetrics).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{GpuSample, ProcessSample};

    fn sample(gpus: &[(u32, Option<u32>)], procs: &[(u32, u32, &str)]) -> NodeSample {
        NodeSample {
            time: chrono::Utc::now(),
            gpus: gpus
                .iter()
                .map(|&(index, util)| GpuSample {
                    uuid: Some(format!("GPU-{index}")),
                    utilization_percent: util,
                    ..GpuSample::empty(index)
                })
                .collect(),
            processes: procs
                .iter()
                .map(|&(pid, gpu_index, job)| ProcessSample {
                    pid,
                    gpu_index,
                    used_memory_bytes: Some(100),
                    sm_utilization_percent: None,
                    job_id: (!job.is_empty()).then(|| job.to_string()),
                })
                .collect(),
        }
    }

    #[test]
    fn jobs_average_their_gpus() {
        let s = sample(
            &[(0, Some(80)), (1, Some(20)), (2, None)],
            &[(1, 0, "7"), (2, 0, "7"), (1, 1, "7"), (3, 2, "8"), (4, 2, "")],
        );
        let jobs = job_use(&s);
        assert_eq!(jobs["7"], JobUse { percent: 50.0, memory_bytes: 300, gpus: 2 });
        assert_eq!(jobs["8"], JobUse { percent: 0.0, memory_bytes: 100, gpus: 1 }, "unknown utilization");
        assert_eq!(jobs.len(), 2, "processes outside jobs are not a job");
    }

    #[test]
    fn recorded_gpus_count_without_processes() {
        let mut s = sample(&[(0, Some(80)), (1, Some(20)), (2, Some(60)), (3, Some(40))], &[(1, 0, "7"), (9, 3, "")]);
        for g in &mut s.gpus {
            g.memory_used_bytes = Some(1000 + u64::from(g.index));
        }
        s.gpus[0].jobs = vec!["7".into()];
        s.gpus[1].jobs = vec!["7".into()];
        // Job 8's processes are out of sight (a container): its GPU alone says what it does.
        s.gpus[2].jobs = vec!["8".into()];
        // GPU 3 is shared by two jobs: neither is given the GPU's memory.
        s.gpus[3].jobs = vec!["10".into(), "11".into()];
        let jobs = job_use(&s);
        assert_eq!(jobs["7"], JobUse { percent: 50.0, memory_bytes: 100 + 1001, gpus: 2 }, "held GPU 1 counts too");
        assert_eq!(jobs["8"], JobUse { percent: 60.0, memory_bytes: 1002, gpus: 1 });
        assert_eq!(jobs["10"], JobUse { percent: 40.0, memory_bytes: 0, gpus: 1 });
        assert_eq!(jobs.len(), 4);
    }

    #[test]
    fn gone_series_are_removed() {
        let (mut exporter, registry) = Exporter::new();
        exporter.update("n1", &sample(&[(0, Some(80)), (1, Some(20))], &[(1, 1, "7")]));
        let text = encode(&registry);
        assert!(
            text.contains(r#"gputokens_agent_gpu_utilization_percent{node="n1",gpu="1",uuid="GPU-1"} 20.0"#),
            "{text}"
        );
        assert!(text.contains(r#"gputokens_agent_job_gpu_utilization_percent{job="7",node="n1"} 20.0"#), "{text}");
        exporter.update("n1", &sample(&[(0, Some(80)), (1, None)], &[]));
        let text = encode(&registry);
        assert!(!text.contains(r#"gpu_utilization_percent{node="n1",gpu="1""#), "{text}");
        assert!(text.contains(r#"gputokens_agent_gpu_healthy{node="n1",gpu="1",uuid="GPU-1"} 1.0"#), "{text}");
        assert!(!text.contains(r#"job="7""#), "{text}");
        exporter.sample_failed();
        let text = encode(&registry);
        assert!(!text.contains("node=") && text.contains("gputokens_agent_sample_failures_total 1"), "{text}");
    }
}
