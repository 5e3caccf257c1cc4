//! From nvml-wrapper's answers to the sample types: pure functions, so they are tested without NVML.

use crate::source::{GpuHealth, ProcessSample};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample};
use std::collections::HashMap;

/// The value, or `None` with the error folded into the GPU's health. "Not supported" (or a symbol this
/// driver lacks) is a property of the GPU, not a fault; a lost GPU outranks any other error.
pub fn read<T>(health: &mut GpuHealth, result: Result<T, NvmlError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            worsen(health, &e);
            None
        }
    }
}

pub fn worsen(health: &mut GpuHealth, e: &NvmlError) {
    match e {
        NvmlError::NotSupported | NvmlError::NotFound | NvmlError::FailedToLoadSymbol(_) => {}
        NvmlError::GpuLost => *health = GpuHealth::Lost,
        other if *health == GpuHealth::Ok => *health = GpuHealth::Error { message: other.to_string() },
        _ => {}
    }
}

/// The MIG profile in NVML's name of a MIG device (`NVIDIA A100-SXM4-40GB MIG 3g.20gb`: `3g.20gb`).
pub fn mig_profile(name: &str) -> Option<String> {
    let profile = name.rsplit_once(" MIG ")?.1.trim();
    (!profile.is_empty() && !profile.contains(char::is_whitespace)).then(|| profile.to_string())
}

/// NVML reports milliwatts.
pub fn power_w(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}

/// The utilization samples NVML returned, as the latest SM % per pid.
pub fn latest_sm(samples: &[ProcessUtilizationSample]) -> HashMap<u32, u32> {
    let mut latest: HashMap<u32, (u64, u32)> = HashMap::new();
    for s in samples {
        let entry = latest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
        if s.timestamp >= entry.0 {
            *entry = (s.timestamp, s.sm_util);
        }
    }
    latest.into_iter().map(|(pid, (_, sm))| (pid, sm)).collect()
}

/// The compute processes of GPU `gpu_index`. `sm` is `None` when utilization is unknown for the GPU;
/// a process missing from known samples was idle for the whole window, so 0.
pub fn processes(gpu_index: u32, infos: Vec<ProcessInfo>, sm: Option<&HashMap<u32, u32>>) -> Vec<ProcessSample> {
    infos
        .into_iter()
        .map(|p| ProcessSample {
            pid: p.pid,
            gpu_index,
            used_memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
            sm_utilization_percent: sm.map(|sm| sm.get(&p.pid).copied().unwrap_or(0)),
            job_id: None,
            mig_uuid: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mig_devices_profile_is_the_end_of_its_name() {
        assert_eq!(mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb").as_deref(), Some("3g.20gb"));
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me").as_deref(), Some("1g.10gb+me"));
        assert_eq!(mig_profile("NVIDIA A100-SXM4-40GB"), None);
        assert_eq!(mig_profile("x MIG "), None);
    }

    fn info(pid: u32, used: UsedGpuMemory) -> ProcessInfo {
        ProcessInfo { pid, used_gpu_memory: used, gpu_instance_id: None, compute_instance_id: None }
    }

    fn util(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample { pid, timestamp, sm_util, mem_util: 0, enc_util: 0, dec_util: 0 }
    }

    #[test]
    fn health_keeps_the_worst() {
        let mut h = GpuHealth::Ok;
        assert_eq!(read(&mut h, Err::<u32, _>(NvmlError::NotSupported)), None);
        assert_eq!(h, GpuHealth::Ok);
        assert_eq!(read(&mut h, Ok(5)), Some(5));
        worsen(&mut h, &NvmlError::Unknown);
        let first = h.clone();
        assert!(matches!(first, GpuHealth::Error { .. }));
        worsen(&mut h, &NvmlError::InvalidArg);
        assert_eq!(h, first, "the first error is kept");
        worsen(&mut h, &NvmlError::GpuLost);
        assert_eq!(h, GpuHealth::Lost);
        worsen(&mut h, &NvmlError::Unknown);
        assert_eq!(h, GpuHealth::Lost);
    }

    #[test]
    fn power_in_watts() {
        assert_eq!(power_w(250_500), 250.5);
    }

    #[test]
    fn latest_sample_per_pid_wins() {
        let sm = latest_sm(&[util(1, 10, 90), util(1, 30, 20), util(1, 20, 50), util(2, 5, 7)]);
        assert_eq!(sm, HashMap::from([(1, 20), (2, 7)]));
    }

    #[test]
    fn processes_join_memory_and_utilization() {
        let infos = vec![info(1, UsedGpuMemory::Used(1 << 30)), info(2, UsedGpuMemory::Unavailable)];
        let sm = HashMap::from([(1, 60)]);
        let ps = processes(4, infos.clone(), Some(&sm));
        assert_eq!(ps.len(), 2);
        assert_eq!((ps[0].pid, ps[0].gpu_index, ps[0].used_memory_bytes), (1, 4, Some(1 << 30)));
        assert_eq!(ps[0].sm_utilization_percent, Some(60));
        assert_eq!((ps[1].used_memory_bytes, ps[1].sm_utilization_percent), (None, Some(0)));
        assert!(processes(4, infos, None).iter().all(|p| p.sm_utilization_percent.is_none()));
    }
}
