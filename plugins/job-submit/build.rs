//! Generates Rust bindings from the installed Slurm headers (only what the plugin touches) and
//! derives cfgs from their `SLURM_VERSION_NUMBER`:
//!
//! - `slurm_job_modify_err_msg`: Slurm ≥ 23.02 passes `job_modify` a 4th argument, `char **err_msg`
//!   (22.05 passes 3; reading a 4th there would read garbage).
//! - `slurm_job_desc_step_id`: the job description names its job in `step_id.job_id` (a
//!   `slurm_step_id_t`, as in 26.05) rather than in `job_id` (22.05, 24.11). Read from the generated
//!   struct itself, not from the version number.
//!
//! `SLURM_INCLUDE_DIR` (default /usr/include) points at another tree holding `slurm/slurm.h`.

/// Slurm 23.02.0: `job_modify` gains `char **err_msg`.
const JOB_MODIFY_ERR_MSG_SINCE: u32 = 0x17_02_00;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    println!("cargo::rustc-check-cfg=cfg(slurm_job_desc_step_id)");
    let headers = slurm_ffi::Headers::require(&["slurm.h", "slurm_errno.h"]);
    let version = headers.version_number().expect("slurm_version.h has no SLURM_VERSION_NUMBER");
    if version >= JOB_MODIFY_ERR_MSG_SINCE {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    println!("cargo:rustc-env=GPUTOKENS_PLUGIN_SLURM={}", slurm_ffi::release(version));

    let builder = headers
        .bindgen(&["slurm.h", "slurm_errno.h"])
        // The job description slurmctld hands to job_submit/job_modify (and what it points to).
        .allowlist_type("job_desc_msg_t")
        // The version the plugin must announce, the "unset" markers, return codes.
        .allowlist_var("SLURM_VERSION_NUMBER|NO_VAL|NO_VAL16|INFINITE|NICE_OFFSET|SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_type("slurm_err_t")
        .derive_default(true);
    let bindings = slurm_ffi::write(builder, "slurm_bindings.rs");
    if slurm_ffi::struct_has_field(&bindings, "job_descriptor", "step_id") {
        println!("cargo:rustc-cfg=slurm_job_desc_step_id");
    }
}
