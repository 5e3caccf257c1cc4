//! The SPANK plugin as a built library: it exports only its symbols (sbatch and slurmstepd load it
//! beside Slurm's own). The plugin in the real sbatch and slurmstepd is in tests/cluster/spank.rs.

use std::path::Path;

fn nm(args: &[&str], file: &Path) -> String {
    let out = std::process::Command::new("nm").args(args).arg(file).output().expect("nm (binutils)");
    assert!(out.status.success(), "nm {args:?} {}", file.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The plugin exports only what SPANK looks up, and needs only what libslurmfull (linked by sbatch,
/// srun and slurmstepd) exports: it is linked with BIND_NOW, so a missing symbol would fail the load.
#[test]
fn the_plugin_exports_only_its_symbols() {
    let so = crate::common::bin("libspank_gputokens.so");
    let mut exported: Vec<String> = nm(&["-D", "--defined-only"], &so)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    exported.sort();
    assert_eq!(
        exported,
        [
            "plugin_name",
            "plugin_type",
            "plugin_version",
            "slurm_spank_init",
            "slurm_spank_init_post_opt",
            "slurm_spank_job_epilog",
            "slurm_spank_job_prolog"
        ]
    );
    let from_slurm: Vec<String> = nm(&["-D", "--undefined-only"], &so)
        .lines()
        .filter(|l| l.trim_start().starts_with("U ") && !l.contains('@'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(from_slurm.iter().any(|s| s == "spank_get_item"), "{from_slurm:?}");
    let libslurm = Path::new("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so");
    let provided = if libslurm.exists() { nm(&["-D", "--defined-only"], libslurm) } else { String::new() };
    for symbol in &from_slurm {
        assert!(symbol.starts_with("slurm_") || symbol.starts_with("spank_"), "{symbol} is not a Slurm symbol");
        if libslurm.exists() {
            assert!(provided.lines().any(|l| l.ends_with(&format!(" T {symbol}"))), "libslurmfull lacks {symbol}");
        }
    }
}
