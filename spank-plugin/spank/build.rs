//! Generates Rust bindings from the installed `slurm/spank.h` (only what the plugin touches).
//!
//! `SLURM_INCLUDE_DIR` (default /usr/include) points at another tree holding `slurm/spank.h`.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let include = PathBuf::from(env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into()));
    let headers = include.join("slurm");
    for h in ["spank.h", "slurm_version.h", "slurm_errno.h"] {
        println!("cargo:rerun-if-changed={}", headers.join(h).display());
    }
    if !headers.join("spank.h").exists() {
        panic!(
            "{}/spank.h not found: install the Slurm development headers (Debian: libslurm-dev) or set \
             SLURM_INCLUDE_DIR to the directory that holds slurm/spank.h",
            headers.display()
        );
    }
    let bindings = bindgen::Builder::default()
        .header_contents("gputokens_spank.h", "#include <slurm/spank.h>\n#include <slurm/slurm_version.h>\n")
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("spank_t|spank_context_t|spank_item_t|spank_err_t|spank_option|spank_opt_cb_f")
        .allowlist_var("SPANK_OPTION_MAXLEN")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .prepend_enum_name(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on slurm/spank.h");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("spank_bindings.rs");
    bindings.write_to_file(&out).expect("writing the bindings");
}
