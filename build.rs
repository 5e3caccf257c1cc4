//! Records the Slurm release whose headers are installed (from `SLURM_VERSION_NUMBER`), so
//! `accountd --version` says what this build was made against.

use std::path::Path;

fn main() {
    let header = Path::new("/usr/include/slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let version = std::fs::read_to_string(header)
        .ok()
        .and_then(|text| {
            let hex = text.lines().find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER"))?;
            let n = u32::from_str_radix(hex.trim().trim_start_matches("0x"), 16).ok()?;
            Some(format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff))
        })
        .unwrap_or_else(|| "not installed".into());
    println!("cargo:rustc-env=GPUTOKENS_SLURM_HEADERS={version}");
}
