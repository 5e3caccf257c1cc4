//! Records the Slurm release whose headers are installed (from `SLURM_VERSION_NUMBER`), so
//! `accountd --version` says what this build was made against.

fn main() {
    let release = slurm_headers::Headers::locate().version_number().map(slurm_headers::release);
    println!("cargo:rustc-env=GPUTOKENS_SLURM_HEADERS={}", release.as_deref().unwrap_or("not installed"));
}
