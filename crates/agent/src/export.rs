//! The agent's own `/metrics` (prometheus-client): the latest sample per GPU and, where the site asks
//! for them (`[agent] per_job_metrics`), per job, so a node can be watched without accountd. Series
//! of a GPU or job missing from a sample are removed. Per-job series are off by default: every local
//! user can read the listener, and a job's utilization, memory and GPUs are its owner's business
//! (the audit's N8); per-GPU series carry no job.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use gputokens_node_report::job_use::job_use;
use gputokens_node_report::{GpuHealth, NodeSample};

/// The labels of a GPU's series, as accountd's own /metrics labels them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    pub node: String,
    pub gpu: String,
    pub uuid: String,
}

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

pub struct Exporter {
    gpu_utilization: Series<GpuLabels>,
    gpu_memory_used: Series<GpuLabels>,
    gpu_temperature: Series<GpuLabels>,
    gpu_power: Series<GpuLabels>,
    gpu_healthy: Series<GpuLabels>,
    gpu_ecc: Series<GpuLabels>,
    gpu_energy: Series<GpuLabels>,
    /// None unless `per_job_metrics`: then not even registered (no HELP lines either).
    jobs: Option<JobSeries>,
    sample_failures: Counter,
    report_failures: Counter,
}

/// The per-job series.
struct JobSeries {
    utilization: Series<JobLabels>,
    measured: Series<JobLabels>,
    memory: Series<JobLabels>,
    gpus: Series<JobLabels>,
}

impl JobSeries {
    fn new(r: &mut Registry) -> JobSeries {
        JobSeries {
            utilization: Series::new(
                r,
                "job_gpu_utilization_percent",
                "A job's own use of its GPUs: a GPU's utilization where it runs alone, its processes' SM \
                 utilization where it shares the GPU; no series while unmeasured",
            ),
            measured: Series::new(
                r,
                "job_gpu_measured",
                "0 while a job's use cannot be told: it shares a GPU where the agent sees none of its \
                 processes (or NVML cannot say), or a process of no job uses its GPU",
            ),
            memory: Series::new(r, "job_gpu_memory_bytes", "GPU memory used by a job"),
            gpus: Series::new(r, "job_gpus", "GPUs a job holds or its processes run on"),
        }
    }

    fn update(&mut self, node: &str, sample: &NodeSample) {
        let jobs = job_use(sample);
        let job = |id: &String| JobLabels { job: id.clone(), node: node.to_string() };
        self.utilization.update(jobs.iter().filter_map(|(id, u)| Some((job(id), u.percent?))));
        self.measured.update(jobs.iter().map(|(id, u)| (job(id), f64::from(u8::from(u.percent.is_some())))));
        self.memory.update(jobs.iter().map(|(id, u)| (job(id), u.memory_bytes as f64)));
        self.gpus.update(jobs.iter().map(|(id, u)| (job(id), u.gpus as f64)));
    }
}

impl Exporter {
    /// The exporter, for the sampling loop, and its registry, for the `/metrics` handler; per-job
    /// series only with `per_job`.
    pub fn new(per_job: bool) -> (Exporter, Arc<Registry>) {
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
            gpu_energy: Series::new(
                &mut r,
                "gpu_energy_joules",
                "Energy the GPU used since the driver loaded (NVML's counter)",
            ),
            jobs: per_job.then(|| JobSeries::new(&mut r)),
            sample_failures: Counter::default(),
            report_failures: Counter::default(),
        };
        r.register("sample_failures", "NVML samples that failed", exporter.sample_failures.clone());
        r.register("report_failures", "Reports that did not reach accountd", exporter.report_failures.clone());
        (exporter, Arc::new(r))
    }

    pub fn update(&mut self, node: &str, sample: &NodeSample) {
        let gpu = |g: &gputokens_node_report::GpuSample| GpuLabels {
            node: node.to_string(),
            gpu: g.index.to_string(),
            uuid: g.uuid.clone().unwrap_or_default(),
        };
        let each = |value: &dyn Fn(&gputokens_node_report::GpuSample) -> Option<f64>| {
            sample.gpus.iter().filter_map(|g| Some((gpu(g), value(g)?))).collect::<Vec<_>>()
        };
        self.gpu_utilization.update(each(&|g| g.utilization_percent.map(f64::from)));
        self.gpu_memory_used.update(each(&|g| g.memory_used_bytes.map(|b| b as f64)));
        self.gpu_temperature.update(each(&|g| g.temperature_c.map(f64::from)));
        self.gpu_power.update(each(&|g| g.power_w));
        self.gpu_energy.update(each(&|g| g.energy_mj.map(|mj| mj as f64 / 1000.0)));
        self.gpu_ecc.update(each(&|g| g.ecc_uncorrected.map(|n| n as f64)));
        self.gpu_healthy.update(each(&|g| {
            Some(f64::from(u8::from(g.health == GpuHealth::Ok && g.ecc_uncorrected.unwrap_or(0) == 0)))
        }));
        if let Some(jobs) = &mut self.jobs {
            jobs.update(node, sample);
        }
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
    use gputokens_node_report::{GpuSample, ProcessSample};

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
                    mig_uuid: None,
                })
                .collect(),
        }
    }

    #[test]
    fn gone_series_are_removed() {
        let (mut exporter, registry) = Exporter::new(true);
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

    #[test]
    fn per_job_series_only_when_asked_for() {
        let (mut exporter, registry) = Exporter::new(false);
        exporter.update("n1", &sample(&[(0, Some(80))], &[(1, 0, "7")]));
        let text = encode(&registry);
        assert!(text.contains(r#"gputokens_agent_gpu_utilization_percent{node="n1",gpu="0",uuid="GPU-0"} 80.0"#));
        assert!(!text.contains("job"), "no job series, not even their HELP: {text}");
    }
}
