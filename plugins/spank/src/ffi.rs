//! Every unsafe operation of the plugin lives here: the plugstack arguments, the SPANK calls
//! (`spank_context`, `spank_get_item(S_JOB_ID, S_JOB_UID)`, `spank_option_register`,
//! `spank_job_control_setenv`) and logging through Slurm's log (`slurm_ffi::log_shims!`).
//!
//! rustc links cdylibs with BIND_NOW, so each undefined symbol must exist in every process that
//! loads the plugin (sbatch, salloc, srun, slurmstepd, slurmd): the `spank_*` functions and
//! `slurm_info`/`slurm_verbose`/`slurm_error` come from libslurmfull, which all of them link. Unit
//! tests call stand-ins instead, chosen by this crate's `cfg(test)`.

use slurm_ffi::log::c_string;
use std::ffi::{c_char, c_int, CStr};

use crate::bindings::{
    spank_context_t, spank_opt_cb_f, spank_option, spank_t, S_CTX_ALLOCATOR, S_CTX_JOB_SCRIPT, S_CTX_LOCAL,
    S_CTX_REMOTE, S_JOB_ID, S_JOB_UID,
};

#[cfg(not(test))]
mod slurm {
    use crate::bindings::{spank_context_t, spank_err_t, spank_item_t, spank_option, spank_t};
    use std::ffi::{c_char, c_int};
    extern "C" {
        pub fn spank_context() -> spank_context_t;
        pub fn spank_get_item(spank: spank_t, item: spank_item_t, ...) -> spank_err_t;
        pub fn spank_option_register(spank: spank_t, opt: *mut spank_option) -> spank_err_t;
        pub fn spank_job_control_setenv(
            spank: spank_t,
            name: *const c_char,
            value: *const c_char,
            overwrite: c_int,
        ) -> spank_err_t;
    }
}

/// Stand-ins for the SPANK symbols in unit tests (which have no Slurm process to resolve them).
#[cfg(test)]
mod slurm {
    use crate::bindings::{spank_context_t, spank_err_t, spank_item_t, spank_option, spank_t, S_CTX_ERROR};
    use std::ffi::{c_char, c_int};
    pub unsafe fn spank_context() -> spank_context_t {
        S_CTX_ERROR
    }
    pub unsafe fn spank_get_item(_: spank_t, _: spank_item_t, _: *mut u32) -> spank_err_t {
        1
    }
    pub unsafe fn spank_option_register(_: spank_t, _: *mut spank_option) -> spank_err_t {
        1
    }
    pub unsafe fn spank_job_control_setenv(_: spank_t, _: *const c_char, _: *const c_char, _: c_int) -> spank_err_t {
        1
    }
}

/// Where the plugin was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// sbatch, salloc.
    Allocator,
    /// srun.
    Local,
    /// slurmstepd.
    Remote,
    /// `slurmstepd spank prolog|epilog`, which slurmd runs as root around each job on the node.
    JobScript,
    /// slurmd, or unknown.
    Other,
}

pub fn context() -> Context {
    // SAFETY: no arguments; callable from every SPANK entry point.
    let ctx: spank_context_t = unsafe { slurm::spank_context() };
    match ctx {
        S_CTX_ALLOCATOR => Context::Allocator,
        S_CTX_LOCAL => Context::Local,
        S_CTX_REMOTE => Context::Remote,
        S_CTX_JOB_SCRIPT => Context::JobScript,
        _ => Context::Other,
    }
}

// `info`, `verbose` and `error(&str)` (and `log(Level, &str)`) through Slurm's log.
slurm_ffi::log_shims!();

/// The plugstack arguments.
///
/// # Safety
/// `av` is NULL or points to `ac` pointers, each NULL or a NUL-terminated string, as SPANK passes them.
pub unsafe fn args(ac: c_int, av: *const *const c_char) -> Vec<String> {
    if av.is_null() || ac <= 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise: `av` holds `ac` pointers, each NULL (skipped) or a NUL-terminated
    // string, copied here.
    unsafe { std::slice::from_raw_parts(av, ac as usize) }
        .iter()
        .filter(|p| !p.is_null())
        .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .collect()
}

/// The job ID (`S_JOB_ID`); None where SPANK has none.
///
/// # Safety
/// `sp` is the handle SPANK passed to the current entry point.
pub unsafe fn job_id(sp: spank_t) -> Option<u32> {
    let mut id: u32 = 0;
    // SAFETY: `sp` is the entry point's handle (the caller's promise); S_JOB_ID writes one uint32_t.
    let rc = unsafe { slurm::spank_get_item(sp, S_JOB_ID, &mut id as *mut u32) };
    (rc == 0 && id != 0).then_some(id)
}

/// The job owner's uid (`S_JOB_UID`); None where SPANK has none.
///
/// # Safety
/// `sp` is the handle SPANK passed to the current entry point.
pub unsafe fn job_uid(sp: spank_t) -> Option<u32> {
    let mut uid: u32 = u32::MAX;
    // SAFETY: `sp` is the entry point's handle (the caller's promise); S_JOB_UID writes one uid_t,
    // which is a u32 on Linux.
    let rc = unsafe { slurm::spank_get_item(sp, S_JOB_UID, &mut uid as *mut u32) };
    (rc == 0 && uid != u32::MAX).then_some(uid)
}

/// A command-line option of sbatch/salloc/srun that the plugin adds (no argument).
pub struct FlagOption {
    pub name: &'static CStr,
    pub usage: &'static CStr,
    /// Called by SPANK when the user gives the option: `(val, optarg, remote)`.
    pub callback: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int,
}

/// Registers `option` (only valid in `slurm_spank_init`); the SPANK error code on failure.
///
/// # Safety
/// `sp` is the handle SPANK passed to `slurm_spank_init`.
pub unsafe fn register_option(sp: spank_t, option: &FlagOption) -> Result<(), u32> {
    // SPANK may keep the pointer for the life of the process: give it one that lives as long, built
    // from 'static strings (a few bytes per process, once).
    let entry: &'static mut spank_option = Box::leak(Box::new(spank_option {
        name: option.name.as_ptr().cast_mut(),
        arginfo: std::ptr::null_mut(),
        usage: option.usage.as_ptr().cast_mut(),
        has_arg: 0,
        val: 0,
        cb: Some(option.callback) as spank_opt_cb_f,
    }));
    // SAFETY: `sp` is slurm_spank_init's handle (the caller's promise); `entry` lives forever.
    match unsafe { slurm::spank_option_register(sp, entry) } {
        0 => Ok(()),
        rc => Err(rc),
    }
}

/// Sets `SPANK_<name>=value` in the job control environment, which goes with the job to slurmctld
/// (the job_submit plugin sees it) and to the prolog/epilog; allocator and local context only.
///
/// # Safety
/// `sp` is the handle SPANK passed to the current entry point.
pub unsafe fn job_control_setenv(sp: spank_t, name: &str, value: &str) -> Result<(), u32> {
    let (name, value) = (c_string(name), c_string(value));
    // SAFETY: `sp` is the entry point's handle (the caller's promise); SPANK copies both strings.
    match unsafe { slurm::spank_job_control_setenv(sp, name.as_ptr(), value.as_ptr(), 1) } {
        0 => Ok(()),
        rc => Err(rc),
    }
}
