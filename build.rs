//! Records the Slurm release whose headers are installed, so `accountd --version` says what this
//! build was made against. (The plugins' own build scripts generate bindings from the same headers.)

use std::path::Path;

fn main() {
    let header = Path::new("/usr/include/slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let version = std::fs::read_to_string(header)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("#define SLURM_VERSION_STRING"))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "not installed".into());
    println!("cargo:rustc-env=GPUTOKENS_SLURM_HEADERS={version}");
}
