//! The SPANK plugin in the real sbatch and slurmstepd of the test cluster.
//!
//! tests/run.sh starts the cluster with the plugin (SPANK_PLUGIN_SO, SPANK_PLUGIN_ARGS="jobs_dir=…")
//! and writes /etc/slurm/gputokens.toml, whose `[paths] socket` these tests link to the socket of an
//! accountd they start, and remove again (without an accountd, sbatch shows no balance line, so the
//! other cluster tests see the quiet sbatch they expect).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::{serial, wait_finished};
use crate::common::{run_as, Outcome, Site};

const PLUGIN_CONF: &str = "/etc/slurm/gputokens.toml";
const PLUGSTACK_LINE: &str = "/etc/slurm/plugstack.conf.d/gputokens.conf";

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
            "slurm_spank_task_init_privileged"
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

/// A plugstack argument of the cluster's gputokens line.
fn plugstack_arg(key: &str) -> Option<String> {
    let line = std::fs::read_to_string(PLUGSTACK_LINE)
        .unwrap_or_else(|e| panic!("{PLUGSTACK_LINE}: {e}: start the cluster with tests/run.sh (SPANK_PLUGIN_SO=…)"));
    line.split_whitespace().find_map(|a| a.strip_prefix(key)?.strip_prefix('=')).map(str::to_string)
}

/// The configured socket path linked to a site's accountd; removed on drop.
struct SocketLink(PathBuf);

impl SocketLink {
    fn to(site: &Site) -> SocketLink {
        let config = std::fs::read_to_string(PLUGIN_CONF)
            .unwrap_or_else(|e| panic!("{PLUGIN_CONF}: {e}: start the cluster with tests/run.sh"));
        let table: toml::Table = toml::from_str(&config).expect("plugin config");
        let socket: PathBuf =
            table["paths"].get("socket").and_then(|s| s.as_str()).expect("[paths] socket (tests/run.sh)").into();
        let tmp = socket.with_extension("link");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(site.path("run/accountd.sock"), &tmp).unwrap();
        std::fs::rename(&tmp, &socket).unwrap();
        SocketLink(socket)
    }
}

impl Drop for SocketLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sbatch(user: &str, args: &[&str]) -> Outcome {
    let mut all = vec!["--parsable", "--output=/dev/null"];
    all.extend_from_slice(args);
    let out = run_as(Some(user), Path::new("/usr/bin/sbatch"), &all);
    assert_eq!(out.code, 0, "sbatch {args:?}: {}", out.stderr);
    out
}

fn job_id(out: &Outcome) -> String {
    out.stdout.trim().split(';').next().unwrap_or_default().to_string()
}

fn scancel(job: &str) {
    run_as(None, Path::new("/usr/bin/scancel"), &["--quiet", job]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn sbatch_shows_the_users_balance() {
    let _cluster = serial();
    let site = Site::start("", "");
    site.accountd(None, &["admin", "adjust", "bob", "-54", "--reason", "test: spank"]).ok();
    let link = SocketLink::to(&site);

    let started = Instant::now();
    let out = sbatch("bob", &["--hold", "--wrap", "true"]);
    let took = started.elapsed();
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "sbatch: gputokens: balance 46 tokens (ok); run 'sbalance' for details.\n");
    println!("sbatch with the balance line took {took:?}");

    site.accountd(None, &["admin", "adjust", "bob", "-49", "--reason", "test: spank overdraft"]).ok();
    let out = sbatch("bob", &["--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert!(out.stderr.contains("sbatch: gputokens: balance -3 tokens (overdraft: "), "{}", out.stderr);

    // -Q hides it; without accountd sbatch says nothing at all.
    let out = sbatch("bob", &["-Q", "--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "");
    drop(link);
    let out = sbatch("bob", &["--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "", "no accountd: no line");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn slurmstepd_records_the_gpus_of_a_job() {
    let _cluster = serial();
    let jobs_dir = PathBuf::from(plugstack_arg("jobs_dir").unwrap_or_else(|| "/run/gputokens/jobs".into()));

    let started = Instant::now();
    let job = job_id(&sbatch("bob", &["--gres=gpu:a6000:2", "--wrap", "sleep 3"]));
    let record = jobs_dir.join(&job);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !record.exists() {
        assert!(Instant::now() < deadline, "no {} after 30 s", record.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("record written {:?} after sbatch", started.elapsed());
    let text = std::fs::read_to_string(&record).unwrap();
    let gpus: Vec<u32> = text
        .strip_prefix("gpus=")
        .and_then(|l| l.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{}: {text:?}", record.display()))
        .split(',')
        .map(|g| g.parse().unwrap_or_else(|_| panic!("{text:?}")))
        .collect();
    assert_eq!(gpus.len(), 2, "{text:?}");
    assert_ne!(gpus[0], gpus[1], "{text:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&jobs_dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(wait_finished(&job), "COMPLETED");

    // A CPU-only job holds no GPU: no record.
    let cpu = job_id(&sbatch("bob", &["--wrap", "true"]));
    assert_eq!(wait_finished(&cpu), "COMPLETED");
    assert!(!jobs_dir.join(&cpu).exists(), "a CPU job got a record");
    let _ = std::fs::remove_file(&record);
}
