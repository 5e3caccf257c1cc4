//! What the plugin's benchmarks share: Slurm's functions for the plugin's library (the stand-ins
//! slurmctld's would be), a balance snapshot to write, and the plugin started on it.
// Each benchmark uses its part.
#![allow(dead_code)]

use std::path::PathBuf;

use slurm_ffi::stand_ins;

slurm_ffi::stand_in_symbols!();

/// A snapshot as accountd writes it, with `users` (name, balance in micro-tokens) and the default
/// rules, generated now.
pub fn snapshot(users: &[(&str, i64)]) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut text = format!(
        "gputokens-snapshot 1\ngenerated {now}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n"
    );
    for (user, balance) in users {
        text.push_str(&format!("user {user} {balance}\n"));
    }
    text
}

/// A private site: a config naming the snapshot, in a directory removed when this is dropped.
pub struct Site {
    _dir: tempfile::TempDir,
    pub snapshot: PathBuf,
}

impl Site {
    /// Writes `snapshot` (the text) and starts the plugin on it, as `init` does.
    pub fn start(snapshot: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("balances.snapshot");
        let conf = dir.path().join("gputokens.toml");
        std::fs::write(&conf, format!("[paths]\nsnapshot = \"{}\"\n", path.display())).unwrap();
        gputokens::snapshot::write_atomically(&path, snapshot).unwrap();
        job_submit_gputokens::bench::start(&conf);
        Site { _dir: dir, snapshot: path }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        job_submit_gputokens::bench::stop();
    }
}

/// How many snapshots the plugin has loaded so far (its log's "loaded" lines).
pub fn snapshot_loads() -> usize {
    let log = stand_ins::LOG.lock().unwrap_or_else(|p| p.into_inner());
    log.iter().filter(|line| line.contains("gputokens: loaded ")).count()
}

/// The durations' `q`th percentile (sorted in place).
pub fn percentile(times: &mut [std::time::Duration], q: usize) -> std::time::Duration {
    times.sort_unstable();
    times[(times.len() - 1) * q / 100]
}
