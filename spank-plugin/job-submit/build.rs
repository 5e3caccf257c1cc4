//! Generates Rust bindings from the installed Slurm headers (only what the plugin touches) and
//! derives cfgs from their `SLURM_VERSION_NUMBER`:
//!
//! - `slurm_job_modify_err_msg`: Slurm ≥ 23.02 passes `job_modify` a 4th argument, `char **err_msg`
//!   (22.05 passes 3; reading a 4th there would read garbage).
//!
//! `SLURM_INCLUDE_DIR` (default /usr/include) points at another tree holding `slurm/slurm.h`.

use std::env;
use std::path::{Path, PathBuf};

/// Slurm 23.02.0: `job_modify` gains `char **err_msg`.
const JOB_MODIFY_ERR_MSG_SINCE: u32 = 0x17_02_00;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo::rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    let include = PathBuf::from(env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into()));
    let headers = include.join("slurm");
    for h in ["slurm.h", "slurm_errno.h", "slurm_version.h"] {
        println!("cargo:rerun-if-changed={}", headers.join(h).display());
    }
    if !headers.join("slurm.h").exists() {
        panic!(
            "{}/slurm.h not found: install the Slurm development headers (Debian: libslurm-dev) or set \
             SLURM_INCLUDE_DIR to the directory that holds slurm/slurm.h",
            headers.display()
        );
    }

    let version = version_number(&headers.join("slurm_version.h"));
    if version >= JOB_MODIFY_ERR_MSG_SINCE {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    println!(
        "cargo:rustc-env=GPUTOKENS_PLUGIN_SLURM={}.{:02}.{}",
        version >> 16,
        (version >> 8) & 0xff,
        version & 0xff
    );

    let bindings = bindgen::Builder::default()
        .header_contents("gputokens_slurm.h", "#include <slurm/slurm.h>\n#include <slurm/slurm_errno.h>\n")
        .clang_arg(format!("-I{}", include.display()))
        // The job description slurmctld hands to job_submit/job_modify (and what it points to).
        .allowlist_type("job_desc_msg_t")
        // The version the plugin must announce, the "unset" markers, return codes.
        .allowlist_var("SLURM_VERSION_NUMBER|NO_VAL|NO_VAL16|INFINITE|NICE_OFFSET|SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_type("slurm_err_t")
        .prepend_enum_name(false)
        .derive_default(true)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on slurm/slurm.h");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("slurm_bindings.rs");
    bindings.write_to_file(&out).expect("writing the bindings");
}

/// `#define SLURM_VERSION_NUMBER 0x160508` → 0x160508.
fn version_number(header: &Path) -> u32 {
    let text = std::fs::read_to_string(header).unwrap_or_else(|e| panic!("{}: {e}", header.display()));
    text.lines()
        .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER"))
        .and_then(|v| u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("{}: no SLURM_VERSION_NUMBER", header.display()))
}
