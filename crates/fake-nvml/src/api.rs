//! The exported NVML entry points. Each is a few lines inside `ffi::boundary`; every pointer goes through
//! an `ffi` helper. Safety of each: the pointers are what nvml.h says they are (NULL is rejected).
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::events;
use crate::ffi::{self, boundary};
use crate::gpm;
use crate::ret::*;
use crate::state::*;
use nvml_wrapper_sys::bindings as sys;
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlEventSet_t, nvmlReturn_t};
use std::ffi::{c_char, c_uint, c_ulonglong};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// nvmlInit/nvmlShutdown nest, as in the real library.
static INITS: AtomicU32 = AtomicU32::new(0);

fn init() -> Result<(), Ret> {
    if let Some(code) = State::load()?.init_error {
        return Err(code);
    }
    INITS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The state as of this call (tests change it under a running agent).
fn session() -> Result<std::sync::Arc<State>, Ret> {
    if INITS.load(Ordering::SeqCst) == 0 {
        return Err(UNINITIALIZED);
    }
    State::load()
}

fn gpu(st: &State, device: nvmlDevice_t) -> Result<&Gpu, Ret> {
    st.gpu(ffi::device_index(device)?)
}

/// What a handle names that answers for both kinds: a whole GPU or one of its MIG devices.
enum Named<'s> {
    Gpu(&'s Gpu),
    Mig(&'s Gpu, &'s MigDevice),
}

fn named(st: &State, device: nvmlDevice_t) -> Result<Named<'_>, Ret> {
    match ffi::device(device)? {
        ffi::Device::Gpu(index) => Ok(Named::Gpu(st.gpu(index)?)),
        ffi::Device::Mig(index, slice) => st.mig(index, slice).map(|(g, m)| Named::Mig(g, m)),
    }
}

fn mig_memory(m: &MigDevice) -> Result<(u64, u64), Ret> {
    let total = supported(m.mem_total)?;
    Ok((total, m.mem_used.unwrap_or(0).min(total)))
}

fn any_memory(n: &Named) -> Result<(u64, u64), Ret> {
    match n {
        Named::Gpu(g) => memory(g),
        Named::Mig(_, m) => mig_memory(m),
    }
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    boundary(init)
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    boundary(init)
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    boundary(|| {
        INITS
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(drop)
            .map_err(|_| UNINITIALIZED)
    })
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    error_string(result).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    boundary(|| unsafe { ffi::write_str(version, length, &session()?.driver_version) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    boundary(|| unsafe { ffi::write(count, session()?.count()) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    boundary(|| {
        session()?.gpu(index)?;
        unsafe { ffi::write(device, ffi::device_handle(index)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    boundary(|| {
        gpu(&*session()?, device)?;
        unsafe { ffi::write(index, ffi::device_index(device)?) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let text = match named(&st, device)? {
            Named::Gpu(g) => &g.uuid,
            Named::Mig(_, m) => &m.uuid,
        };
        unsafe { ffi::write_str(uuid, length, text) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        // A MIG device's name is its GPU's and its profile, as NVML names it.
        let text = match named(&st, device)? {
            Named::Gpu(g) => g.name.clone(),
            Named::Mig(g, m) => format!("{} MIG {}", g.name, m.profile),
        };
        unsafe { ffi::write_str(name, length, &text) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut sys::nvmlUtilization_t,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let g = gpu(&st, device)?;
        let rates = sys::nvmlUtilization_t { gpu: supported(g.util_gpu)?, memory: g.util_mem.unwrap_or(0) };
        unsafe { ffi::write(utilization, rates) }
    })
}

fn memory(g: &Gpu) -> Result<(u64, u64), Ret> {
    let total = supported(g.mem_total)?;
    Ok((total, g.mem_used.unwrap_or(0).min(total)))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory_: *mut sys::nvmlMemory_t,
) -> nvmlReturn_t {
    boundary(|| {
        let (total, used) = any_memory(&named(&*session()?, device)?)?;
        unsafe { ffi::write(memory_, sys::nvmlMemory_t { total, free: total - used, used }) }
    })
}

/// What NVML_STRUCT_VERSION(Memory, 2) evaluates to.
const MEMORY_V2: c_uint = (std::mem::size_of::<sys::nvmlMemory_v2_t>() | (2 << 24)) as c_uint;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory_: *mut sys::nvmlMemory_v2_t,
) -> nvmlReturn_t {
    boundary(|| {
        let (total, used) = any_memory(&named(&*session()?, device)?)?;
        if unsafe { ffi::read(memory_)? }.version != MEMORY_V2 {
            return Err(VERSION_MISMATCH);
        }
        let info = sys::nvmlMemory_v2_t { version: MEMORY_V2, total, reserved: 0, free: total - used, used };
        unsafe { ffi::write(memory_, info) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: sys::nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let g = gpu(&st, device)?;
        if sensor != sys::nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        unsafe { ffi::write(temp, supported(g.temp)?) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    threshold: sys::nvmlTemperatureThresholds_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let g = gpu(&st, device)?;
        if threshold != sys::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SLOWDOWN {
            return Err(NOT_SUPPORTED);
        }
        unsafe { ffi::write(temp, supported(g.slowdown_temp)?) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut std::ffi::c_ulonglong,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let g = gpu(&st, device)?;
        let thermal = u64::from(sys::nvmlClocksThrottleReasonHwThermalSlowdown);
        let bits = if supported(g.thermal_slowdown)? { thermal } else { 0 };
        unsafe { ffi::write(reasons, bits) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) -> nvmlReturn_t {
    boundary(|| unsafe { ffi::write(power, supported(gpu(&*session()?, device)?.power_mw)?) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    boundary(|| unsafe { ffi::write(energy, supported(gpu(&*session()?, device)?.energy_mj)?) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: sys::nvmlMemoryErrorType_t,
    counter_type: sys::nvmlEccCounterType_t,
    ecc_counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let uncorrected = supported(gpu(&st, device)?.ecc_uncorrected)?;
        // The same count serves the volatile and the aggregate counter; corrected errors are always 0.
        let count = match (error_type, counter_type) {
            (sys::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0 | 1) => uncorrected,
            (sys::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED, 0 | 1) => 0,
            _ => return Err(INVALID_ARGUMENT),
        };
        unsafe { ffi::write(ecc_counts, count) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut sys::nvmlProcessInfo_t,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let info = |p: &Process, instances: Option<&MigDevice>| sys::nvmlProcessInfo_t {
            pid: p.pid,
            usedGpuMemory: p.used_memory.unwrap_or(c_ulonglong::MAX), // NVML_VALUE_NOT_AVAILABLE
            gpuInstanceId: instances.map_or(u32::MAX, |m| m.gpu_instance),
            computeInstanceId: instances.map_or(u32::MAX, |m| m.compute_instance),
        };
        let procs: Vec<_> = match ffi::device(device)? {
            ffi::Device::Gpu(index) => {
                st.gpu(index)?;
                st.processes_on(index).map(|p| info(p, None)).collect()
            }
            ffi::Device::Mig(index, slice) => {
                let (_, mig) = st.mig(index, slice)?;
                st.processes_on_mig(index, slice).map(|p| info(p, Some(mig))).collect()
            }
        };
        unsafe { ffi::fill(infos, info_count, &procs) }
    })
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut sys::nvmlProcessUtilizationSample_t,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        gpu(&st, device)?;
        let now = now_us();
        let samples: Vec<_> = st
            .processes_on(ffi::device_index(device)?)
            .filter(|_| now > last_seen_time_stamp)
            .filter_map(|p| {
                let sm = p.sm_util?;
                Some(sys::nvmlProcessUtilizationSample_t {
                    pid: p.pid,
                    timeStamp: now,
                    smUtil: sm,
                    memUtil: 0,
                    encUtil: 0,
                    decUtil: 0,
                })
            })
            .collect();
        // Like the real library: no process used the GPU in the window is NOT_FOUND, not an empty list.
        if samples.is_empty() {
            return Err(NOT_FOUND);
        }
        unsafe { ffi::fill(utilization, process_samples_count, &samples) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    boundary(|| {
        let on = c_uint::from(supported(gpu(&*session()?, device)?.mig_mode)?);
        unsafe {
            ffi::write(current, on)?;
            ffi::write(pending, on)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    boundary(|| {
        supported(gpu(&*session()?, device)?.mig_mode)?;
        unsafe { ffi::write(count, MAX_MIG_DEVICES) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    boundary(|| {
        let gpu_index = ffi::device_index(device)?;
        session()?.mig(gpu_index, index)?;
        unsafe { ffi::write(mig_device, ffi::mig_handle(gpu_index, index)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    boundary(|| match ffi::device(mig_device)? {
        ffi::Device::Mig(index, slice) => {
            session()?.mig(index, slice)?;
            unsafe { ffi::write(device, ffi::device_handle(index)) }
        }
        ffi::Device::Gpu(_) => Err(INVALID_ARGUMENT),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig: *mut c_uint) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let mig = matches!(named(&st, device)?, Named::Mig(..));
        unsafe { ffi::write(is_mig, c_uint::from(mig)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    boundary(|| match named(&*session()?, device)? {
        Named::Mig(_, m) => unsafe { ffi::write(id, m.gpu_instance) },
        Named::Gpu(_) => Err(NOT_SUPPORTED),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    boundary(|| match named(&*session()?, device)? {
        Named::Mig(_, m) => unsafe { ffi::write(id, m.compute_instance) },
        Named::Gpu(_) => Err(NOT_SUPPORTED),
    })
}

/// What NVML_STRUCT_VERSION-less GPM structs carry: their version number itself.
const GPM_VERSION: c_uint = sys::NVML_GPM_METRICS_GET_VERSION;

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    support: *mut sys::nvmlGpmSupport_t,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let supported = gpu(&st, device)?.gpm;
        if unsafe { ffi::read(support)? }.version != sys::NVML_GPM_SUPPORT_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let answer = sys::nvmlGpmSupport_t {
            version: sys::NVML_GPM_SUPPORT_VERSION,
            isSupportedDevice: c_uint::from(supported),
        };
        unsafe { ffi::write(support, answer) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut sys::nvmlGpmSample_t) -> nvmlReturn_t {
    boundary(|| {
        session()?;
        if sample.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let handle = ffi::gpm_handle(gpm::alloc())?;
        unsafe { ffi::write(sample, handle) }
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleFree(sample: sys::nvmlGpmSample_t) -> nvmlReturn_t {
    boundary(|| gpm::free(ffi::gpm_slot(sample)?))
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleGet(device: nvmlDevice_t, sample: sys::nvmlGpmSample_t) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let index = ffi::device_index(device)?;
        if !st.gpu(index)?.gpm {
            return Err(NOT_SUPPORTED);
        }
        gpm::fill(ffi::gpm_slot(sample)?, gpm::Taken { gpu: index, instance: None })
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance_id: c_uint,
    sample: sys::nvmlGpmSample_t,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let index = ffi::device_index(device)?;
        let g = st.gpu(index)?;
        if !g.gpm || g.mig_mode != Some(true) {
            return Err(NOT_SUPPORTED);
        }
        if !g.mig.iter().any(|m| m.gpu_instance == gpu_instance_id) {
            return Err(INVALID_ARGUMENT);
        }
        gpm::fill(ffi::gpm_slot(sample)?, gpm::Taken { gpu: index, instance: Some(gpu_instance_id) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut sys::nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let mut req = unsafe { ffi::read(request)? };
        if req.version != GPM_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let taken = gpm::pair(ffi::gpm_slot(req.sample1)?, ffi::gpm_slot(req.sample2)?)?;
        let g = st.gpu(taken.gpu)?;
        let sm_util = match taken.instance {
            Some(id) => g.mig.iter().find(|m| m.gpu_instance == id).and_then(|m| m.gpm_sm_util),
            None => None,
        };
        let count = (req.numMetrics as usize).min(req.metrics.len());
        for metric in &mut req.metrics[..count] {
            match (metric.metricId, sm_util) {
                (sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL, Some(value)) => {
                    metric.nvmlReturn = SUCCESS;
                    metric.value = value;
                }
                _ => metric.nvmlReturn = NOT_SUPPORTED,
            }
        }
        unsafe { ffi::write(request, req) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    boundary(|| {
        session()?;
        if set.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let handle = ffi::set_handle(events::create())?;
        unsafe { ffi::write(set, handle) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    boundary(|| events::free(ffi::set_id(set)?))
}

const XID: c_ulonglong = sys::nvmlEventTypeXidCriticalError as c_ulonglong;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    event_types: *mut c_ulonglong,
) -> nvmlReturn_t {
    boundary(|| {
        gpu(&*session()?, device)?;
        unsafe { ffi::write(event_types, XID) }
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    boundary(|| {
        let st = session()?;
        let logged = gpu(&st, device)?.xids.len();
        if event_types & !XID != 0 {
            return Err(NOT_SUPPORTED);
        }
        events::register(ffi::set_id(set)?, ffi::device_index(device)?, logged)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut sys::nvmlEventData_t,
    timeoutms: c_uint,
) -> nvmlReturn_t {
    boundary(|| {
        let id = ffi::set_id(set)?;
        if data.is_null() {
            return Err(INVALID_ARGUMENT); // before an event is taken, so none is lost
        }
        let deadline = Instant::now() + Duration::from_millis(timeoutms.into());
        loop {
            if let Some((index, xid)) = events::next(id, &*session()?)? {
                let event = sys::nvmlEventData_t {
                    device: ffi::device_handle(index),
                    eventType: XID,
                    eventData: xid,
                    gpuInstanceId: u32::MAX,
                    computeInstanceId: u32::MAX,
                };
                return unsafe { ffi::write(data, event) };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TIMEOUT);
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    /// The only test in this binary that reads `FAKE_NVML_STATE`, so setting it here races with nothing.
    #[test]
    fn c_api_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.toml");
        std::fs::write(&path, "[[gpu]]\nuuid = \"GPU-a\"\nname = \"A\"\ntemp = 50\n").unwrap();
        std::env::set_var(STATE_ENV, &path);
        let mut count: c_uint = 9;
        unsafe {
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), UNINITIALIZED);
            assert_eq!(nvmlShutdown(), UNINITIALIZED);
            assert_eq!(nvmlInit_v2(), SUCCESS);
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), SUCCESS);
            assert_eq!(count, 1);
            assert_eq!(nvmlDeviceGetCount_v2(null_mut()), INVALID_ARGUMENT);
            let mut dev: nvmlDevice_t = null_mut();
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(1, &mut dev), INVALID_ARGUMENT);
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(0, &mut dev), SUCCESS);
            let mut temp: c_uint = 0;
            assert_eq!(nvmlDeviceGetTemperature(dev, 0, &mut temp), SUCCESS);
            assert_eq!(temp, 50);
            assert_eq!(nvmlDeviceGetTemperature(null_mut(), 0, &mut temp), INVALID_ARGUMENT);
            assert_eq!(nvmlDeviceGetTemperature(0x1234 as nvmlDevice_t, 0, &mut temp), INVALID_ARGUMENT);
            let mut power: c_uint = 0;
            assert_eq!(nvmlDeviceGetPowerUsage(dev, &mut power), NOT_SUPPORTED);
            let mut name = [0 as c_char; 2];
            assert_eq!(nvmlDeviceGetName(dev, name.as_mut_ptr(), 2), SUCCESS);
            assert_eq!(nvmlDeviceGetUUID(dev, name.as_mut_ptr(), 2), INSUFFICIENT_SIZE);

            std::fs::write(&path, "[[gpu]]\nuuid = \"GPU-a\"\nname = \"A\"\nlost = true\n").unwrap();
            assert_eq!(nvmlDeviceGetTemperature(dev, 0, &mut temp), GPU_IS_LOST);
            std::fs::write(&path, "not toml [").unwrap();
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), UNKNOWN);

            assert_eq!(nvmlShutdown(), SUCCESS);
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), UNINITIALIZED);
        }
        assert_eq!(error_string(GPU_IS_LOST), c"GPU is lost");
    }
}
