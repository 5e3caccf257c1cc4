//! Records the Slurm release whose headers are installed, so `accountd --version` says what this
//! build was made against. (The libmunge bindings are `slurm_ffi::munge`, built by slurm-ffi.)

fn main() {
    let release = slurm_ffi::Headers::locate().version_number().map(slurm_ffi::release);
    println!("cargo:rustc-env=GPUTOKENS_SLURM_HEADERS={}", release.as_deref().unwrap_or("not installed"));
}
