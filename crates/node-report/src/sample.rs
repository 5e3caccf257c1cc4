//! What the node agent samples, as plain data sent to accountd as JSON.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One sample of every GPU of a node and the processes on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    pub time: DateTime<Utc>,
    pub gpus: Vec<GpuSample>,
    pub processes: Vec<ProcessSample>,
}

/// One GPU. A metric is `None` when the GPU does not support it or the read failed (see `health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    /// The last one seen, when the GPU can no longer say.
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub utilization_percent: Option<u32>,
    pub memory_utilization_percent: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_c: Option<u32>,
    /// NVML's slowdown threshold: the temperature at which the GPU slows itself down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_temperature_c: Option<u32>,
    /// Whether its clocks are slowed down for heat now (NVML's thermal throttle reasons); None when
    /// the GPU (or an older agent) cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thermal_slowdown: Option<bool>,
    pub power_w: Option<f64>,
    /// NVML's energy counter: millijoules the GPU used since the driver loaded (Volta and later); None
    /// when the GPU (or an older agent) cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_mj: Option<u64>,
    /// Volatile uncorrectable ECC errors (since the driver loaded).
    pub ecc_uncorrected: Option<u64>,
    /// XIDs seen since the previous sample; `None` when XID events could not be registered for this GPU.
    pub xids: Option<Vec<u64>>,
    pub health: GpuHealth,
    /// The Slurm jobs holding the GPU by spank_gputokens.so's records on the node (see `gputokens::gpu_record`):
    /// one, or several sharing it (shards, MPS); empty without a record. On a GPU split by MIG,
    /// every job on one of its MIG devices (the GPU's faults are theirs too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    /// Its MIG devices while MIG mode is on (none without MIG, or from an older agent); each is a
    /// GPU of its own to Slurm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigSample>,
}

/// One MIG device (a GPU instance and its compute instance) of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigSample {
    pub uuid: String,
    /// Its MIG profile (`3g.20gb`), from NVML's name of it; None when NVML did not say.
    pub profile: Option<String>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// SM utilization % of the slice from GPM where the GPU has it (Hopper and later); None: NVML
    /// gives none per MIG device, and its jobs are unmeasured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization_percent: Option<u32>,
    /// The Slurm jobs holding it by spank_gputokens.so's records (one: Slurm gives a MIG device whole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuHealth {
    Ok,
    /// Fallen off the bus (NVML_ERROR_GPU_IS_LOST).
    Lost,
    /// A read failed for another reason; the first such error.
    Error {
        message: String,
    },
}

/// A compute process on a GPU. A process on two GPUs appears once per GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: u32,
    pub gpu_index: u32,
    pub used_memory_bytes: Option<u64>,
    /// SM utilization % in the latest sample NVML kept; `None` when the GPU cannot tell.
    pub sm_utilization_percent: Option<u32>,
    /// The Slurm job the process belongs to, if any (see the agent's `jobs`).
    pub job_id: Option<String>,
    /// The UUID of the MIG device of `gpu_index` it runs on; None: the whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_uuid: Option<String>,
}

impl GpuSample {
    /// A GPU with nothing read yet.
    pub fn empty(index: u32) -> Self {
        GpuSample {
            index,
            uuid: None,
            name: None,
            utilization_percent: None,
            memory_utilization_percent: None,
            memory_used_bytes: None,
            memory_total_bytes: None,
            temperature_c: None,
            slowdown_temperature_c: None,
            thermal_slowdown: None,
            power_w: None,
            energy_mj: None,
            ecc_uncorrected: None,
            xids: None,
            health: GpuHealth::Ok,
            jobs: Vec::new(),
            mig: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let mut gpu = GpuSample::empty(3);
        gpu.health = GpuHealth::Error { message: "Unknown Error".into() };
        let v = serde_json::to_value(&gpu).unwrap();
        assert_eq!(v["index"], 3);
        assert_eq!(v["health"], serde_json::json!({"state": "error", "message": "Unknown Error"}));
        assert_eq!(serde_json::to_value(GpuHealth::Lost).unwrap(), serde_json::json!({"state": "lost"}));
        assert!(v.get("jobs").is_none(), "no records, no key");
        let back: GpuSample = serde_json::from_value(v).unwrap();
        assert_eq!(back, gpu);
        gpu.jobs = vec!["42".into()];
        let v = serde_json::to_value(&gpu).unwrap();
        assert_eq!(v["jobs"], serde_json::json!(["42"]));
        assert_eq!(serde_json::from_value::<GpuSample>(v).unwrap(), gpu);
        assert!(v_has(&gpu, "energy_mj").is_none(), "no counter, no key");
        gpu.energy_mj = Some(18_500_000);
        assert_eq!(v_has(&gpu, "energy_mj"), Some(serde_json::json!(18_500_000)));
    }

    fn v_has(gpu: &GpuSample, key: &str) -> Option<serde_json::Value> {
        serde_json::to_value(gpu).unwrap().get(key).cloned()
    }

    /// What an agent wrote before the energy counter (and the heat fields): still read.
    #[test]
    fn an_older_agents_gpu_is_read() {
        let old = r#"{"index":0,"uuid":"GPU-a","name":"NVIDIA A100","utilization_percent":5,
            "memory_utilization_percent":1,"memory_used_bytes":1,"memory_total_bytes":2,"temperature_c":40,
            "power_w":60.5,"ecc_uncorrected":0,"xids":[],"health":{"state":"ok"}}"#;
        let gpu: GpuSample = serde_json::from_str(old).unwrap();
        assert_eq!((gpu.energy_mj, gpu.power_w, gpu.utilization_percent), (None, Some(60.5), Some(5)));
    }
}
