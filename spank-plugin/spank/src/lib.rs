//! `spank_gputokens.so`: the gputokens SPANK plugin.
//!
//! Listed in plugstack.conf (`optional <PluginDir>/spank_gputokens.so [conf=PATH] [jobs_dir=PATH]`):
//! - in sbatch/salloc (allocator context) and srun outside a job (local context) it shows the user one
//!   line with their token balance and status, asked from accountd (at most ~1 s; on failure only a
//!   line shown with `-v`);
//! - in slurmstepd (remote context) it records which GPUs the job holds on the node in
//!   `<jobs_dir>/<jobid>` for the node agent.
//!
//! It never blocks or fails a job: enforcement lives in the job_submit plugin, and every entry point
//! returns 0, whatever happens. Layout: this file holds the symbols SPANK looks up, each inside a
//! panic boundary; `ffi` holds every unsafe operation; `args`, `balance` and `record` are safe code.

mod args;
mod balance;
mod bindings;
mod ffi;
mod record;

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use bindings::{spank_t, SLURM_VERSION_NUMBER};
use ffi::Context;

/// Runs `body`; a panic is logged and replaced by 0, so that none crosses into Slurm and no job fails.
macro_rules! boundary {
    ($entry:literal, $body:expr) => {
        match catch_unwind(AssertUnwindSafe(|| $body)) {
            Ok(()) => 0,
            Err(_) => {
                ffi::error(concat!($entry, " panicked; ignored"));
                0
            }
        }
    };
}

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_name: [u8; 10] = *b"gputokens\0";

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// SPANK compares major.minor only.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

/// Reports plugstack arguments it does not understand (they are ignored).
///
/// # Safety
/// Called by SPANK with its handle and the plugstack arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(_sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary!("slurm_spank_init", {
        // SAFETY: as promised by SPANK (above).
        let (_, problems) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        if ffi::context() == Context::Remote {
            problems.iter().for_each(|p| ffi::error(p));
        }
    })
}

/// Allocator/local: the balance line. Remote: the job's GPUs, if already visible.
///
/// # Safety
/// As for [`slurm_spank_init`].
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary!("slurm_spank_init_post_opt", {
        // SAFETY: as promised by SPANK (above).
        let (args, _) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        match ffi::context() {
            Context::Allocator => show_balance(&args),
            // srun inside a job (a step) says nothing: its output goes to the job's output.
            Context::Local if std::env::var_os("SLURM_JOB_ID").is_none() => show_balance(&args),
            Context::Remote => unsafe { record_gpus(sp, &args) },
            _ => {}
        }
    })
}

/// Remote, per task, still as root: the job's GPUs (the task environment has them by now).
///
/// # Safety
/// As for [`slurm_spank_init`].
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init_privileged(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary!("slurm_spank_task_init_privileged", {
        // SAFETY: as promised by SPANK (above).
        let (args, _) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        if ffi::context() == Context::Remote {
            unsafe { record_gpus(sp, &args) }
        }
    })
}

/// One line with the balance; nothing but a `-v` line when accountd cannot say (a missing line must
/// not worry anyone, and sbatch stays quiet where no accountd runs).
fn show_balance(args: &args::Args) {
    let row = balance::socket_path(&args.config_path()).and_then(|socket| balance::own_balance(&socket));
    match row {
        Ok(row) => ffi::info(&balance::message(&row)),
        Err(e) => ffi::verbose(&format!("balance unknown: {e}")),
    }
}

/// Set once this slurmstepd has written its record (several hooks and tasks may see the GPUs).
static RECORDED: AtomicBool = AtomicBool::new(false);

/// # Safety
/// `sp` is the handle SPANK passed to the current entry point (remote context).
unsafe fn record_gpus(sp: spank_t, args: &args::Args) {
    if RECORDED.load(Ordering::Relaxed) {
        return;
    }
    let Some(job) = ffi::job_id(sp) else { return };
    let values: Vec<Option<String>> =
        ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"].iter().map(|v| ffi::getenv(sp, v)).collect();
    let Some(gpus) = record::gpus(&values) else { return };
    match record::write(&args.jobs_dir, job, &gpus) {
        Ok(_) => RECORDED.store(true, Ordering::Relaxed),
        Err(e) => ffi::error(&format!("recording the GPUs of job {job} in {}: {e}", args.jobs_dir.display())),
    }
}
