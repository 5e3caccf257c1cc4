//! The one NVML call nvml-wrapper 0.13 does not wrap, `nvmlDeviceGetGpuInstanceId`: which GPU
//! instance a MIG device is, by which GPM samples it. The agent's only unsafe code.
#![allow(unsafe_code)]

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};

/// The GPU instance ID of the MIG device `mig`.
pub fn gpu_instance_id(nvml: &Nvml, mig: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id: std::ffi::c_uint = 0;
    // SAFETY: `mig` is a live handle of this `nvml` (its lifetime ties it there), and `id` is a
    // c_uint NVML writes once; the symbol has nvml.h's signature (nvml-wrapper-sys loaded it).
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}
