//! A fake `libnvidia-ml.so` for tests on machines without a GPU. Built as `libnvidia_ml.so`; point
//! nvml-wrapper at it with `Nvml::builder().lib_path(..)`. It exports, with NVML's C ABI, only what the
//! gputokens agent calls (through nvml-wrapper 0.13):
//!
//! `nvmlInit_v2`, `nvmlInitWithFlags`, `nvmlShutdown`, `nvmlErrorString`, `nvmlSystemGetDriverVersion`,
//! `nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`, `nvmlDeviceGetIndex`, `nvmlDeviceGetUUID`,
//! `nvmlDeviceGetName`, `nvmlDeviceGetUtilizationRates`, `nvmlDeviceGetMemoryInfo` (and `_v2`),
//! `nvmlDeviceGetTemperature`, `nvmlDeviceGetPowerUsage`, `nvmlDeviceGetTotalEnergyConsumption`,
//! `nvmlDeviceGetTotalEccErrors`,
//! `nvmlDeviceGetComputeRunningProcesses_v3`, `nvmlDeviceGetProcessUtilization`,
//! `nvmlEventSetCreate`, `nvmlDeviceGetSupportedEventTypes`, `nvmlDeviceRegisterEvents`,
//! `nvmlEventSetWait_v2`, `nvmlEventSetFree`; for MIG `nvmlDeviceGetMigMode`,
//! `nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`,
//! `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`, `nvmlDeviceIsMigDeviceHandle`,
//! `nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId` (a MIG device's handle also
//! answers `GetUUID`, `GetName`, `GetMemoryInfo` and `GetComputeRunningProcesses_v3`; anything else
//! asked of it is NVML_ERROR_NOT_SUPPORTED, as utilization is on a real MIG device); for GPM
//! `nvmlGpmQueryDeviceSupport`, `nvmlGpmSampleAlloc`, `nvmlGpmSampleFree`, `nvmlGpmSampleGet`,
//! `nvmlGpmMigSampleGet`, `nvmlGpmMetricsGet` (SM utilization only: other metrics NOT_SUPPORTED).
//!
//! nvml-wrapper looks every symbol up when it loads the library but only fails when a missing one is
//! called (`FailedToLoadSymbol`), except `nvmlShutdown`, which its `Drop` calls unchecked.
//!
//! # State file
//!
//! TOML, named by `FAKE_NVML_STATE` and read again whenever it changed (checked on every call), so a
//! test can change values under a running agent (replace it atomically: write a temporary file, then
//! rename). With `FAKE_NVML_STATE_ONCE` set it is read once per process (benchmarks of the agent). Unset: the file beside
//! the loaded library, named after it plus `.toml` (`/x/libnvidia-ml.so.1.toml`), for processes whose
//! environment a test cannot set (slurmstepd); neither: `nvmlInit` fails with
//! NVML_ERROR_DRIVER_NOT_LOADED; unreadable or invalid: calls fail with NVML_ERROR_UNKNOWN and a line
//! on stderr. Unknown keys are errors.
//!
//! ```toml
//! driver_version = "550.54.15"   # optional
//! init_error = 9                 # optional: nvmlInit returns this nvmlReturn_t
//!
//! [[gpu]]                        # index 0, then 1, ... in file order
//! uuid = "GPU-8c6f..."
//! name = "NVIDIA RTX A6000"
//! util_gpu = 87                  # %       } any metric left out is
//! util_mem = 40                  # %       } NVML_ERROR_NOT_SUPPORTED
//! mem_used = 1073741824          # bytes   } (util_mem and mem_used
//! mem_total = 51539607552        # bytes   }  default to 0 when their
//! temp = 65                      # °C      }  partner is given)
//! slowdown_temp = 93             # °C: the slowdown threshold }
//! thermal_slowdown = false       # clocks slowed down for heat (the throttle reason) }
//! power_mw = 250000              # mW      }
//! energy_mj = 18500000           # mJ since the driver loaded (NVML's total energy counter) }
//! ecc_uncorrected = 2            # volatile and aggregate uncorrected count; corrected is always 0
//! lost = false                   # true: every call about this GPU is NVML_ERROR_GPU_IS_LOST
//! xids = [79]                    # XID log, append-only: event sets deliver entries added after they
//!                                # registered the GPU, once each
//! mig_mode = true                # left out: the GPU has no MIG (NOT_SUPPORTED); false: MIG is off
//! gpm = true                     # GPM samples of the GPU and its GPU instances (Hopper and later)
//! [[gpu.mig]]                    # MIG device 0 of this GPU, then 1, ... (up to 7)
//! uuid = "MIG-5c4f..."
//! profile = "3g.20gb"            # its name: the GPU's name, " MIG ", this
//! gpu_instance = 1
//! compute_instance = 0           # optional, 0
//! mem_used = 1073741824          # bytes } left out: NOT_SUPPORTED
//! mem_total = 21474836480        # bytes }
//! gpm_sm_util = 62.5             # GPM's SM utilization % of this GPU instance between two samples
//! [[process]]
//! pid = 1234
//! gpu = 0                        # index
//! mig = 0                        # optional: the MIG device of the GPU it runs on
//! used_memory = 1073741824       # bytes; left out: NVML_VALUE_NOT_AVAILABLE
//! sm_util = 50                   # %; left out: no utilization sample for this process
//! ```
//!
//! Several processes on one GPU each get their own utilization sample, as NVML gives them for a GPU
//! that jobs share (time-sliced, MPS): e.g. 53 and 47 for two busy ones.
//!
//! A bad device or event-set handle, an index past the count or a NULL out-pointer is
//! NVML_ERROR_INVALID_ARGUMENT; any call but init before init is NVML_ERROR_UNINITIALIZED. No panic
//! crosses the C boundary: each entry point runs inside `catch_unwind`, and a panic is NVML_ERROR_UNKNOWN.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
mod events;
mod ffi;
pub mod gpm;
pub mod ret;
pub mod state;
