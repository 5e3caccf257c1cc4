//! Rust bindings for libmunge (`munge.h`, Debian: libmunge-dev): agent reports and API callers are
//! authenticated with MUNGE, as Slurm authenticates its own daemons. `MUNGE_INCLUDE_DIR` (default
//! /usr/include) points at another directory holding `munge.h`.
//!
//! Also records the Slurm release whose headers are installed, so `accountd --version` says what
//! this build was made against.

use std::path::PathBuf;

fn main() {
    let release = slurm_ffi::Headers::locate().version_number().map(slurm_ffi::release);
    println!("cargo:rustc-env=GPUTOKENS_SLURM_HEADERS={}", release.as_deref().unwrap_or("not installed"));
    println!("cargo:rerun-if-env-changed=MUNGE_INCLUDE_DIR");
    let include = std::env::var_os("MUNGE_INCLUDE_DIR").map_or_else(|| PathBuf::from("/usr/include"), PathBuf::from);
    let header = include.join("munge.h");
    println!("cargo:rerun-if-changed={}", header.display());
    if !header.exists() {
        panic!("{} not found: install libmunge-dev or set MUNGE_INCLUDE_DIR", header.display());
    }
    let bindings = bindgen::Builder::default()
        .header(header.display().to_string())
        .allowlist_function("munge_(encode|decode|strerror|ctx_create|ctx_destroy|ctx_get|ctx_set|ctx_strerror)")
        .allowlist_type("munge_err|munge_opt")
        .prepend_enum_name(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("munge_bindings.rs");
    bindings.write_to_file(&out).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    println!("cargo:rustc-link-lib=munge");
}
