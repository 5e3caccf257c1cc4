//! What users see differently from one Slurm release to the next, for the cluster tests: one place,
//! each difference found by running the suite on that release (`bash tests/run.sh --slurm 24.11`).

use std::path::Path;
use std::sync::OnceLock;

use super::common::run_as;

/// The release of the test cluster's Slurm commands, (major, minor): `scontrol --version` prints
/// `slurm-wlm 24.11.5` (Debian) or `slurm 24.11.5`.
pub fn release() -> (u32, u32) {
    static RELEASE: OnceLock<(u32, u32)> = OnceLock::new();
    *RELEASE.get_or_init(|| {
        let out = run_as(None, Path::new("/usr/bin/scontrol"), &["--version"]).ok().stdout;
        let version = out.split_whitespace().nth(1).unwrap_or_else(|| panic!("scontrol --version: {out}"));
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("version {version}")));
        (parts.next().unwrap(), parts.next().unwrap_or(0))
    })
}

/// Slurm 23.02 gave job_modify an `err_msg`: from then on a refused `scontrol update` shows the
/// user gputokens' message; 22.05 shows only "Job violates accounting/QOS policy".
pub fn updates_explain_refusals() -> bool {
    release() >= (23, 2)
}

/// A GRES request as `scontrol show job` writes it back (TresPerNode=...): `gres:gpu:1` up to 23.02,
/// `gres/gpu:1` from 23.11 (as crates/gputokens/src/gpu_request.rs reads both).
pub fn gres_request(spec: &str) -> String {
    let separator = if release() >= (23, 11) { '/' } else { ':' };
    format!("gres{separator}{spec}")
}

/// Slurm 24.11 lets a job ask for several QOS (`--qos=a,b`; it runs in the one of highest priority
/// that lets it); 22.05 takes one.
pub fn qos_lists() -> bool {
    release() >= (24, 11)
}
