//! UUIDs of the job's GPUs from NVML (nvml-wrapper), for the record: an index says which GPU only
//! as long as the numbering stays the same, a UUID always. Slurm's GPU indices are taken as NVML's, as
//! they are when gres.conf lists the devices in order (`File=/dev/nvidia[0-7]`) or AutoDetect=nvml
//! numbers them: each GPU in NVML's order, and in place of a GPU with MIG mode on its MIG devices
//! (each its own GPU to Slurm), so index 1 on a node whose first GPU has two MIG devices is that
//! GPU's second MIG device.
//!
//! The query runs on a thread of its own and is given up after a timeout, so a wedged driver delays
//! the job's start by that much at most.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use nvml_wrapper::Nvml;

/// The driver's NVML, found by the dynamic linker (nvml-wrapper's own default, `libnvidia-ml.so`,
/// comes only with the development package).
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// How long slurmstepd waits for NVML (init included).
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The UUIDs of the GPUs with Slurm indices `gpus`, in order; why not, when NVML cannot say.
pub fn uuids(library: &Path, gpus: &[String], timeout: Duration) -> Result<Vec<String>, String> {
    let indices = gpus
        .iter()
        .map(|g| g.parse::<u32>().map_err(|_| format!("GPU index {g:?} is not a number")))
        .collect::<Result<Vec<u32>, String>>()?;
    let library = library.to_owned();
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("gputokens-nvml".into())
        .spawn(move || {
            let _ = tx.send(query(&library, &indices));
        })
        .map_err(|e| format!("cannot start a thread for NVML: {e}"))?;
    rx.recv_timeout(timeout).map_err(|_| format!("NVML did not answer within {timeout:?}"))?
}

fn query(library: &Path, indices: &[u32]) -> Result<Vec<String>, String> {
    let nvml = Nvml::builder()
        .lib_path(library.as_os_str())
        .init()
        .map_err(|e| format!("NVML at {}: {e}", library.display()))?;
    let numbered = as_slurm_numbers(&nvml)?;
    indices
        .iter()
        .map(|&i| numbered.get(i as usize).cloned().ok_or_else(|| format!("NVML, GPU {i}: no such GPU")))
        .collect()
}

/// Every GPU's UUID in Slurm's numbering: NVML's order, a GPU with MIG mode on replaced by its MIG
/// devices' UUIDs (`MIG-…`).
fn as_slurm_numbers(nvml: &Nvml) -> Result<Vec<String>, String> {
    let count = nvml.device_count().map_err(|e| format!("NVML: {e}"))?;
    let mut numbered = Vec::new();
    for i in 0..count {
        let gpu = nvml.device_by_index(i).map_err(|e| format!("NVML, GPU {i}: {e}"))?;
        // A GPU without MIG answers NotSupported, an older driver has no such call: a whole GPU.
        match gpu.mig_mode() {
            Ok(mode) if mode.current == 1 => {
                let slots = gpu.mig_device_count().map_err(|e| format!("NVML, GPU {i}'s MIG devices: {e}"))?;
                for slot in 0..slots {
                    match gpu.mig_device_by_index(slot) {
                        Ok(mig) => numbered.push(mig.uuid().map_err(|e| format!("NVML, GPU {i} MIG {slot}: {e}"))?),
                        Err(nvml_wrapper::error::NvmlError::NotFound) => {}
                        Err(e) => return Err(format!("NVML, GPU {i} MIG {slot}: {e}")),
                    }
                }
            }
            _ => numbered.push(gpu.uuid().map_err(|e| format!("NVML, GPU {i}: {e}"))?),
        }
    }
    Ok(numbered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A private copy of fake-nvml's library with its state beside it (`<lib>.toml`), so tests do not
    /// share the process-wide FAKE_NVML_STATE.
    fn fake(state: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        let deps = std::env::current_exe().unwrap().parent().unwrap().to_owned();
        let built = [deps.join("libnvidia_ml.so"), deps.parent().unwrap().join("libnvidia_ml.so")]
            .into_iter()
            .find(|p| p.exists())
            .expect("fake-nvml's libnvidia_ml.so (a dev-dependency): run cargo build --workspace");
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(built, &lib).unwrap();
        if let Some(state) = state {
            std::fs::write(dir.path().join("libnvidia-ml.so.1.toml"), state).unwrap();
        }
        (dir, lib)
    }

    const THREE_GPUS: &str = r#"
        [[gpu]]
        uuid = "GPU-aaaa"
        name = "NVIDIA RTX A6000"
        [[gpu]]
        uuid = "GPU-bbbb"
        name = "NVIDIA RTX A6000"
        [[gpu]]
        uuid = "GPU-cccc"
        name = "NVIDIA RTX A6000"
    "#;

    #[test]
    fn names_the_gpus_in_the_order_asked() {
        let (_dir, lib) = fake(Some(THREE_GPUS));
        let got = uuids(&lib, &["2".into(), "0".into()], TIMEOUT).unwrap();
        assert_eq!(got, ["GPU-cccc", "GPU-aaaa"]);
    }

    /// Slurm numbers a MIG device as a GPU of its own, in NVML's order: GPU 0's two MIG devices are
    /// 0 and 1, the whole GPU after them 2.
    #[test]
    fn mig_devices_are_numbered_as_slurm_numbers_them() {
        let state = r#"
            [[gpu]]
            uuid = "GPU-a100"
            name = "NVIDIA A100-SXM4-40GB"
            mig_mode = true
            [[gpu.mig]]
            uuid = "MIG-one"
            profile = "3g.20gb"
            gpu_instance = 1
            [[gpu.mig]]
            uuid = "MIG-two"
            profile = "4g.20gb"
            gpu_instance = 2
            [[gpu]]
            uuid = "GPU-whole"
            name = "NVIDIA A100-SXM4-40GB"
            mig_mode = false
        "#;
        let (_dir, lib) = fake(Some(state));
        let got = uuids(&lib, &["1".into(), "2".into(), "0".into()], TIMEOUT).unwrap();
        assert_eq!(got, ["MIG-two", "GPU-whole", "MIG-one"]);
        assert!(uuids(&lib, &["3".into()], TIMEOUT).unwrap_err().contains("GPU 3"));
    }

    #[test]
    fn no_answer_without_a_driver_or_a_gpu() {
        let (dir, lib) = fake(None);
        let err = uuids(&lib, &["0".into()], TIMEOUT).unwrap_err();
        assert!(err.contains("Driver Not Loaded") || err.contains("driver"), "{err}");
        let err = uuids(&dir.path().join("missing.so"), &["0".into()], TIMEOUT).unwrap_err();
        assert!(err.contains("missing.so"), "{err}");
        let (_dir, lib) = fake(Some(THREE_GPUS));
        let err = uuids(&lib, &["3".into()], TIMEOUT).unwrap_err();
        assert!(err.contains("GPU 3"), "{err}");
        assert!(uuids(&lib, &["x".into()], TIMEOUT).unwrap_err().contains("not a number"));
    }
}
