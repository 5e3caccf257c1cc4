//! The scripted state file and the safe queries over it (format: see the crate docs).

use crate::ret::{Ret, DRIVER_NOT_LOADED, GPU_IS_LOST, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, UNKNOWN};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Environment variable naming the state file.
pub const STATE_ENV: &str = "FAKE_NVML_STATE";
/// When set, the state file is read once per process: a benchmark then measures its caller, not the
/// fake's checks for a changed file.
pub const ONCE_ENV: &str = "FAKE_NVML_STATE_ONCE";

/// The last state read, and which version of which file it came from.
struct Cached {
    path: PathBuf,
    stamp: Option<Stamp>,
    state: Arc<State>,
}

static CACHE: Mutex<Option<Cached>> = Mutex::new(None);

/// What tells one version of a file from the next: tests replace it by rename (a new inode), and a
/// rewrite in place changes its mtime or length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    mtime_ns: i128,
    len: u64,
}

impl Stamp {
    fn of(path: &std::path::Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            inode: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            len: m.len(),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// When set, `nvmlInit*` fails with this `nvmlReturn_t` (e.g. 9, driver not loaded).
    pub init_error: Option<Ret>,
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<Gpu>,
    #[serde(default, rename = "process")]
    pub processes: Vec<Process>,
}

fn default_driver_version() -> String {
    "550.54.15".into()
}

/// One GPU; its index is its position in the file. A metric left out is NVML_ERROR_NOT_SUPPORTED.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub uuid: String,
    pub name: String,
    pub util_gpu: Option<u32>,
    pub util_mem: Option<u32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub temp: Option<u32>,
    /// NVML's slowdown temperature threshold (°C).
    pub slowdown_temp: Option<u32>,
    /// The clocks are slowed down for heat (the hardware thermal-slowdown throttle reason).
    pub thermal_slowdown: Option<bool>,
    pub power_mw: Option<u32>,
    /// NVML's total energy counter (mJ since the driver loaded).
    pub energy_mj: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// Fallen off the bus: every call about this GPU returns NVML_ERROR_GPU_IS_LOST.
    #[serde(default)]
    pub lost: bool,
    /// XID log, append-only: an event set delivers the entries added after it registered the GPU.
    #[serde(default)]
    pub xids: Vec<u64>,
    /// MIG mode, current and pending alike; left out: the GPU has no MIG (NVML_ERROR_NOT_SUPPORTED).
    pub mig_mode: Option<bool>,
    /// Its MIG devices while MIG mode is on, by index (NVML's MIG device index).
    #[serde(default)]
    pub mig: Vec<MigDevice>,
    /// GPM (Hopper and later): samples of it and of its GPU instances give metrics.
    #[serde(default)]
    pub gpm: bool,
}

/// How many MIG devices NVML says a GPU may have (the A100's and H100's 7).
pub const MAX_MIG_DEVICES: u32 = 7;

/// One MIG device (a GPU instance with its compute instance) of a GPU.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    pub uuid: String,
    /// NVML's profile name, e.g. `3g.20gb`; the device's name is the GPU's, " MIG ", and this.
    pub profile: String,
    pub gpu_instance: u32,
    #[serde(default)]
    pub compute_instance: u32,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    /// GPM's SM utilization % of this GPU instance between two samples; left out: NOT_SUPPORTED.
    pub gpm_sm_util: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    pub gpu: u32,
    /// Left out: NVML_VALUE_NOT_AVAILABLE.
    pub used_memory: Option<u64>,
    /// Left out: no utilization sample for this process.
    pub sm_util: Option<u32>,
    /// The index of the MIG device of `gpu` it runs on; left out: the whole GPU.
    pub mig: Option<u32>,
}

impl State {
    /// Reads the file named by `FAKE_NVML_STATE`, else the one beside the library (`state_beside`);
    /// none is "no driver", unreadable is UNKNOWN.
    /// Parsed once per version of the file (a replaced file has another inode or mtime), or once per
    /// process with `FAKE_NVML_STATE_ONCE` set.
    pub fn load() -> Result<Arc<State>, Ret> {
        let path = match std::env::var_os(STATE_ENV) {
            Some(path) => PathBuf::from(path),
            None => state_beside().filter(|p| p.exists()).ok_or(DRIVER_NOT_LOADED)?,
        };
        Self::load_from(&CACHE, path, std::env::var_os(ONCE_ENV).is_some())
    }

    fn load_from(cache: &Mutex<Option<Cached>>, path: PathBuf, once: bool) -> Result<Arc<State>, Ret> {
        let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
        // Stamped before reading: a file replaced while it is read is read again next call.
        let stamp = if once { None } else { Stamp::of(&path) };
        if let Some(cached) = cache.as_ref().filter(|c| c.path == path && c.stamp == stamp) {
            return Ok(Arc::clone(&cached.state));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| {
            eprintln!("fake-nvml: cannot read {}: {e}", path.to_string_lossy());
            UNKNOWN
        })?;
        let state = Arc::new(Self::parse(&text).map_err(|e| {
            eprintln!("fake-nvml: bad state file {}: {e}", path.to_string_lossy());
            UNKNOWN
        })?);
        *cache = Some(Cached { path, stamp, state: Arc::clone(&state) });
        Ok(state)
    }

    pub fn parse(text: &str) -> Result<State, toml::de::Error> {
        toml::from_str(text)
    }

    pub fn count(&self) -> u32 {
        u32::try_from(self.gpus.len()).unwrap_or(u32::MAX)
    }

    /// The GPU at `index`, or the error NVML gives for a bad index or a lost GPU.
    pub fn gpu(&self, index: u32) -> Result<&Gpu, Ret> {
        let gpu = self.gpus.get(index as usize).ok_or(INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(GPU_IS_LOST);
        }
        Ok(gpu)
    }

    /// The processes on GPU `index` itself (not on one of its MIG devices).
    pub fn processes_on(&self, index: u32) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(move |p| p.gpu == index && p.mig.is_none())
    }

    /// MIG device `slice` of GPU `index`: NOT_SUPPORTED on a GPU without MIG or with MIG mode off,
    /// INVALID_ARGUMENT past [`MAX_MIG_DEVICES`], NOT_FOUND for an index no device has.
    pub fn mig(&self, index: u32, slice: u32) -> Result<(&Gpu, &MigDevice), Ret> {
        let gpu = self.gpu(index)?;
        if gpu.mig_mode != Some(true) {
            return Err(NOT_SUPPORTED);
        }
        if slice >= MAX_MIG_DEVICES {
            return Err(INVALID_ARGUMENT);
        }
        Ok((gpu, gpu.mig.get(slice as usize).ok_or(NOT_FOUND)?))
    }

    /// The processes on MIG device `slice` of GPU `index`.
    pub fn processes_on_mig(&self, index: u32, slice: u32) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(move |p| p.gpu == index && p.mig == Some(slice))
    }
}

/// `<this library's file>.toml` (e.g. `libnvidia-ml.so.1.toml`): the state of a process whose
/// environment a test cannot set, such as slurmstepd loading the fake through a SPANK plugin.
pub fn state_beside() -> Option<PathBuf> {
    static BESIDE: OnceLock<Option<PathBuf>> = OnceLock::new();
    BESIDE
        .get_or_init(|| {
            let mut name = crate::ffi::own_file()?.into_os_string();
            name.push(".toml");
            Some(name.into())
        })
        .clone()
}

/// A metric the state leaves out is not supported by that GPU.
pub fn supported<T: Copy>(value: Option<T>) -> Result<T, Ret> {
    value.ok_or(NOT_SUPPORTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
        [[gpu]]
        uuid = "GPU-0"
        name = "NVIDIA RTX A6000"
        util_gpu = 87
        mem_total = 100
        energy_mj = 18500000
        [[gpu]]
        uuid = "GPU-1"
        name = "lost one"
        lost = true
        [[process]]
        pid = 10
        gpu = 0
        used_memory = 5
    "#;

    #[test]
    fn parses_and_answers() {
        let st = State::parse(TEXT).unwrap();
        assert_eq!(st.count(), 2);
        assert_eq!(st.driver_version, "550.54.15");
        let gpu = st.gpu(0).unwrap();
        assert_eq!(supported(gpu.util_gpu), Ok(87));
        assert_eq!(supported(gpu.temp), Err(NOT_SUPPORTED));
        assert_eq!(supported(gpu.energy_mj), Ok(18_500_000));
        assert_eq!(st.gpu(1).unwrap_err(), GPU_IS_LOST);
        assert_eq!(st.gpu(2).unwrap_err(), INVALID_ARGUMENT);
        assert_eq!(st.processes_on(0).count(), 1);
        assert_eq!(st.processes_on(1).count(), 0);
    }

    #[test]
    fn the_state_beside_is_named_after_the_loaded_file() {
        // In a unit test the code is part of the test binary.
        let beside = state_beside().unwrap();
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            beside.file_name().unwrap().to_str().unwrap(),
            format!("{}.toml", exe.file_name().unwrap().to_str().unwrap())
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        assert!(State::parse("[[gpu]]\nuuid = \"a\"\nname = \"b\"\ntemperature = 3\n").is_err());
    }

    #[test]
    fn a_file_is_parsed_once_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.toml");
        let write = |version: &str| {
            let tmp = dir.path().join("state.tmp");
            std::fs::write(&tmp, format!("driver_version = \"{version}\"\n")).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        };
        let cache = Mutex::new(None);
        write("1");
        let first = State::load_from(&cache, path.clone(), false).unwrap();
        assert!(Arc::ptr_eq(&first, &State::load_from(&cache, path.clone(), false).unwrap()));
        write("2");
        assert_eq!(State::load_from(&cache, path.clone(), false).unwrap().driver_version, "2");
        // Read once: a later version is not looked for.
        let once = Mutex::new(None);
        assert_eq!(State::load_from(&once, path.clone(), true).unwrap().driver_version, "2");
        write("3");
        assert_eq!(State::load_from(&once, path.clone(), true).unwrap().driver_version, "2");
        assert_eq!(State::load_from(&cache, path, false).unwrap().driver_version, "3");
    }
}
