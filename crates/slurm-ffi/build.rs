//! With feature `munge` only: Rust bindings for libmunge (`munge.h`, Debian: libmunge-dev), and the
//! link to it. `MUNGE_INCLUDE_DIR` (default /usr/include) points at another directory holding
//! `munge.h`. Without the feature there is nothing to do, so the plugins (which use this crate for
//! the panic boundary and Slurm's log) neither need munge.h nor link libmunge.

fn main() {
    #[cfg(feature = "munge")]
    munge::generate();
}

#[cfg(feature = "munge")]
mod munge {
    use std::path::PathBuf;

    pub fn generate() {
        println!("cargo:rerun-if-env-changed=MUNGE_INCLUDE_DIR");
        let include =
            std::env::var_os("MUNGE_INCLUDE_DIR").map_or_else(|| PathBuf::from("/usr/include"), PathBuf::from);
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
}
