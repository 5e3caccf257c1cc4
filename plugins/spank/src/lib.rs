//! `spank_gputokens.so`: the gputokens SPANK plugin.
//!
//! Listed in plugstack.conf (`optional <PluginDir>/spank_gputokens.so [conf=PATH] [jobs_dir=PATH]
//! [nvml_library=PATH]`):
//! - in sbatch/salloc (allocator context) and srun outside a job (local context) it shows the user one
//!   line with their token balance and status, asked from accountd (at most ~1 s; on failure only a
//!   line shown with `-v`), and adds `--gpu-tokens-estimate`, passed on to the job_submit plugin;
//! - in the job's prolog on each node (job script context: `slurmstepd spank prolog`, run by slurmd
//!   as root before the job's first step there) it records which GPUs the job holds on the node in
//!   `<jobs_dir>/<jobid>` for the node agent, with their UUIDs when NVML can name them; the job's
//!   epilog removes the record.
//!
//! slurmd decides when it starts whether any SPANK plugin has prolog/epilog hooks: restart slurmd
//! after installing the plugin (or a version that first has them).
//!
//! It never blocks or fails a job: enforcement lives in the job_submit plugin, and every entry point
//! returns 0, whatever happens. Layout: this file holds the symbols SPANK looks up, each inside a
//! panic boundary; `ffi` holds every unsafe operation; `args`, `balance`, `estimate`, `nvml` and
//! `record` are safe code. The panic boundary and the log shims are slurm-ffi's, shared with the
//! job_submit plugin.
#![deny(unsafe_op_in_unsafe_fn)]

mod args;
mod balance;
mod bindings;
mod estimate;
mod ffi;
mod nvml;
mod record;

use std::ffi::{c_char, c_int};

use bindings::{spank_t, SLURM_VERSION_NUMBER};
use ffi::Context;

/// Runs `body` inside `slurm_ffi::boundary`: a panic is logged and replaced by 0, so that none
/// crosses into Slurm and no job fails.
fn boundary(entry: &str, body: impl FnOnce()) -> c_int {
    let log_panic = |entry: &str| ffi::error(&format!("{entry} panicked; ignored"));
    slurm_ffi::boundary(entry, 0, log_panic, || {
        body();
        0
    })
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

/// Registers `--gpu-tokens-estimate`.
///
/// # Safety
/// Called by SPANK with its handle and the plugstack arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    boundary("slurm_spank_init", || {
        // slurmstepd too: it is handed the options the job was submitted with.
        if matches!(ffi::context(), Context::Allocator | Context::Local | Context::Remote) {
            let option = ffi::FlagOption {
                name: estimate::OPTION_NAME,
                usage: estimate::OPTION_USAGE,
                callback: estimate_option,
            };
            // SAFETY: `sp` is slurm_spank_init's handle.
            if let Err(rc) = unsafe { ffi::register_option(sp, &option) } {
                ffi::verbose(&format!("cannot add --{}: SPANK error {rc}", estimate::OPTION_NAME.to_string_lossy()));
            }
        }
    })
}

/// SPANK calls this when the user gives `--gpu-tokens-estimate`. Always 0: a nonzero return would make
/// sbatch fail.
extern "C" fn estimate_option(_val: c_int, _optarg: *const c_char, remote: c_int) -> c_int {
    boundary("the --gpu-tokens-estimate callback", || estimate::on_option(remote != 0))
}

/// sbatch/salloc, and srun outside a job: the estimate request and the balance line.
///
/// # Safety
/// As for [`slurm_spank_init`].
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary("slurm_spank_init_post_opt", || {
        // SAFETY: as promised by SPANK (above).
        let (args, _) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        match ffi::context() {
            Context::Allocator => {
                unsafe { request_estimate(sp) };
                show_balance(&args)
            }
            // srun inside a job (a step) submits nothing and says nothing: its output goes to the
            // job's output.
            Context::Local if std::env::var_os("SLURM_JOB_ID").is_none() => {
                unsafe { request_estimate(sp) };
                show_balance(&args)
            }
            _ => {}
        }
    })
}

/// The job's prolog on this node: records the job's GPUs here. Plugstack arguments it does not
/// understand are reported in slurmd's log.
///
/// # Safety
/// As for [`slurm_spank_init`].
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_job_prolog(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary("slurm_spank_job_prolog", || {
        // SAFETY: as promised by SPANK (above).
        let (args, problems) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        problems.iter().for_each(|p| ffi::error(p));
        if ffi::context() == Context::JobScript {
            // SAFETY: the handle of this entry point.
            if let Some(job) = unsafe { job_id(sp) } {
                // SAFETY: the handle of this entry point.
                let uid = unsafe { ffi::job_uid(sp) }.or_else(|| std::env::var("SLURM_JOB_UID").ok()?.parse().ok());
                record_gpus(&args, job, uid)
            }
        }
    })
}

/// The job's epilog on this node (once the job has ended here): its GPU record goes.
///
/// # Safety
/// As for [`slurm_spank_init`].
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_job_epilog(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    boundary("slurm_spank_job_epilog", || {
        // SAFETY: as promised by SPANK (above).
        let (args, _) = args::parse(&unsafe { ffi::args(ac, av.cast_const().cast()) });
        if ffi::context() == Context::JobScript {
            // SAFETY: the handle of this entry point.
            if let Some(job) = unsafe { job_id(sp) } {
                forget_gpus(&args, job)
            }
        }
    })
}

/// Asks the job_submit plugin for the job's maximum cost when the user gave `--gpu-tokens-estimate`,
/// and for a quote when the command only tests the job (`--test-only`).
///
/// # Safety
/// `sp` is the handle SPANK passed to the current entry point (allocator or local context).
unsafe fn request_estimate(sp: spank_t) {
    let is_script = |arg: &str| std::path::Path::new(arg).is_file();
    let asked = [estimate::control_env(), estimate::quote_env(&estimate::own_arguments(), is_script)];
    for (name, value) in asked.into_iter().flatten() {
        // SAFETY: the caller's promise: `sp` is the current entry point's handle.
        if let Err(rc) = unsafe { ffi::job_control_setenv(sp, name, value) } {
            ffi::error(&format!("cannot pass {name} on (SPANK error {rc}); the job is submitted without it"));
        }
    }
}

/// One line with the balance; nothing but a `-v` line when accountd cannot say (a missing line must
/// not worry anyone, and sbatch stays quiet where no accountd runs).
fn show_balance(args: &args::Args) {
    let config = args.config_path();
    let row = balance::accountd(&config).and_then(|accountd| balance::own_balance(&accountd));
    match row {
        Ok(row) if balance::enforced(&config) => ffi::info(&balance::message(&row)),
        Ok(row) => ffi::info(&format!("{}{}", balance::message(&row), balance::SHADOW_NOTE)),
        Err(e) => ffi::verbose(&format!("balance unknown: {e}")),
    }
}

/// The job of a prolog or epilog: from the handle, else from its environment (`SLURM_JOB_ID`).
///
/// # Safety
/// `sp` is the handle SPANK passed to the current entry point.
unsafe fn job_id(sp: spank_t) -> Option<u32> {
    // SAFETY: the caller's promise: `sp` is the current entry point's handle.
    unsafe { ffi::job_id(sp) }.or_else(|| std::env::var("SLURM_JOB_ID").ok()?.parse().ok())
}

/// Job script context: slurmd gives the prolog the job's GPUs on this node in its environment.
fn record_gpus(args: &args::Args, job: u32, uid: Option<u32>) {
    let values: Vec<Option<String>> = record::GPU_VARS.iter().map(|v| std::env::var(v).ok()).collect();
    let Some(gpus) = record::gpus(&values) else { return };
    // Named by Slurm where it set CUDA_VISIBLE_DEVICES to UUIDs (MIG devices), else by NVML.
    let named = record::uuids_named(&gpus, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref());
    let uuids = named.or_else(|| {
        nvml::uuids(&args.nvml_library, &gpus, nvml::TIMEOUT)
            .map_err(|e| ffi::verbose(&format!("job {job}: GPUs recorded without UUIDs: {e}")))
            .ok()
    });
    let sluid = record::sluid(std::env::var("SLURM_JOB_SLUID").ok());
    let text = gputokens::gpu_record::text(&gpus, uuids.as_deref(), uid, sluid.as_deref());
    if let Err(e) = record::write(&args.jobs_dir, job, &text) {
        ffi::error(&format!("recording the GPUs of job {job} in {}: {e}", args.jobs_dir.display()));
    }
}

fn forget_gpus(args: &args::Args, job: u32) {
    if let Err(e) = record::remove(&args.jobs_dir, job) {
        ffi::error(&format!("removing the GPU record of job {job} in {}: {e}", args.jobs_dir.display()));
    }
}
