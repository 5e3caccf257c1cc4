//! NVML's return codes (`nvmlReturn_t`) that this fake gives, and NVML's wording of them
//! (`nvmlErrorString`). Below both the state file's queries and the C boundary, which share them.

use nvml_wrapper_sys::bindings as sys;
use std::ffi::CStr;

/// An `nvmlReturn_t`.
pub type Ret = sys::nvmlReturn_t;

pub const SUCCESS: Ret = sys::nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: Ret = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const DRIVER_NOT_LOADED: Ret = sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
pub const TIMEOUT: Ret = sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub const GPU_IS_LOST: Ret = sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const VERSION_MISMATCH: Ret = sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// `nvmlErrorString`: NVML's wording for the codes this fake returns.
pub fn error_string(code: Ret) -> &'static CStr {
    match code {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        NOT_FOUND => c"Not Found",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        DRIVER_NOT_LOADED => c"Driver Not Loaded",
        TIMEOUT => c"Timeout",
        GPU_IS_LOST => c"GPU is lost",
        VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_nvml_wording() {
        assert_eq!(error_string(SUCCESS), c"Success");
        assert_eq!(error_string(GPU_IS_LOST), c"GPU is lost");
        assert_eq!(
            error_string(sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION),
            c"Unknown Error",
            "one this fake never gives"
        );
    }
}
