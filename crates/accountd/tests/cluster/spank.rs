//! The SPANK plugin in the real sbatch and slurmstepd of the test cluster.
//!
//! tests/run.sh starts the cluster with the packaged plugin (GPUTOKENS_PLUGINS=installed,
//! SPANK_PLUGIN_ARGS="jobs_dir=… nvml_library=<the fake libnvidia-ml>") and writes
//! /etc/slurm/gputokens.toml, whose `[paths] socket` these tests link to the socket of an accountd
//! they start, and remove again (without an accountd, sbatch shows no balance line, so the other
//! cluster tests see the quiet sbatch they expect).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::{serial, wait_finished};
use crate::common::{run_as, Outcome, Site};

const PLUGIN_CONF: &str = "/etc/slurm/gputokens.toml";
const PLUGSTACK_LINE: &str = "/etc/slurm/plugstack.conf.d/gputokens.conf";
/// The test cluster's directory any user may write (tests/cluster/up.sh).
fn lab_jobs() -> PathBuf {
    PathBuf::from(std::env::var("GPUTOKENS_LAB").unwrap_or_else(|_| "/tmp/gputokens-cluster".into())).join("jobs")
}

/// A plugstack argument of the cluster's gputokens line: the file's one `optional|required` line,
/// after the comments the packaged file has (tests/run.sh writes the arguments into it).
fn plugstack_arg(key: &str) -> Option<String> {
    let text = std::fs::read_to_string(PLUGSTACK_LINE)
        .unwrap_or_else(|e| panic!("{PLUGSTACK_LINE}: {e}: start the cluster with tests/run.sh"));
    let line = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .find(|l| l.starts_with("optional ") || l.starts_with("required "))
        .unwrap_or_else(|| panic!("{PLUGSTACK_LINE} loads no plugin:\n{text}"));
    line.split_whitespace().skip(2).find_map(|a| a.strip_prefix(key)?.strip_prefix('=')).map(str::to_string)
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
    let cluster = serial();
    let bob = cluster.bob;
    let site = Site::start("", "");
    site.accountd(None, &["admin", "adjust", bob, "-54", "--reason", "test: spank"]).ok();
    let link = SocketLink::to(&site);

    let started = Instant::now();
    let out = sbatch(bob, &["--hold", "--wrap", "true"]);
    let took = started.elapsed();
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "sbatch: gputokens: balance 46 tokens (ok); run 'sbalance' for details.\n");
    println!("sbatch with the balance line took {took:?}");

    site.accountd(None, &["admin", "adjust", bob, "-49", "--reason", "test: spank overdraft"]).ok();
    let out = sbatch(bob, &["--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert!(out.stderr.contains("sbatch: gputokens: balance -3 tokens (overdraft: "), "{}", out.stderr);

    // A grant ending soon: what of it would expire (never more than the balance: 3 of it paid the
    // debt back) and when, as sbalance says it.
    site.accountd(None, &["admin", "grant", bob, "10", "--reason", "test: course", "--expires", "2h"]).ok();
    let json: serde_json::Value = serde_json::from_str(&site.sbalance(Some(bob), &["--json"]).ok().stdout).unwrap();
    // sbatch's line shows local time; the JSON the same instant with its offset, and in unix seconds.
    let ends = json["users"][0]["expiring"]["at_unix"].as_i64().unwrap_or_else(|| panic!("{json}"));
    let at = gputokens::time::format_local(ends);
    let out = sbatch(bob, &["--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert_eq!(
        out.stderr,
        format!("sbatch: gputokens: balance 7 tokens (ok); 7 tokens of a grant expire at {at}; run 'sbalance' for details.\n")
    );

    // -Q hides it; without accountd sbatch says nothing at all.
    let out = sbatch(bob, &["-Q", "--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "");
    drop(link);
    let out = sbatch(bob, &["--hold", "--wrap", "true"]);
    scancel(&job_id(&out));
    assert_eq!(out.stderr, "", "no accountd: no line");
}

/// The plugstack `jobs_dir`: where the prologs record the jobs' GPUs.
pub fn jobs_dir() -> PathBuf {
    PathBuf::from(plugstack_arg("jobs_dir").unwrap_or_else(|| "/run/gputokens/jobs".into()))
}

/// Removes the records of jobs Slurm no longer runs: plugin versions before the epilog hook (and a
/// slurmd started before it had one) left them behind, and an agent reading them would take those
/// long-gone jobs to share the GPUs.
pub fn remove_stale_records() {
    let queue = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-o", "%A"]).ok().stdout;
    let running: Vec<&str> = queue.lines().map(str::trim).collect();
    let Ok(entries) = std::fs::read_dir(jobs_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.bytes().all(|b| b.is_ascii_digit()) && !running.contains(&name.as_str()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    started.elapsed()
}

/// The record's `key=` line, split at commas.
fn record_list(text: &str, key: &str) -> Option<Vec<String>> {
    let line = text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))?;
    Some(line.split(',').map(str::to_string).collect())
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_prolog_records_a_jobs_gpus_and_the_epilog_removes_them() {
    let cluster = serial();
    let bob = cluster.bob;
    let jobs_dir = jobs_dir();

    let job = job_id(&sbatch(bob, &["--gres=gpu:a6000:2", "--wrap", "sleep 3"]));
    let record = jobs_dir.join(&job);
    let took = wait_for(&format!("record {}", record.display()), Duration::from_secs(30), || record.exists());
    println!("record written {took:?} after sbatch");
    let text = std::fs::read_to_string(&record).unwrap();
    let gpus: Vec<u32> = record_list(&text, "gpus")
        .unwrap_or_else(|| panic!("{}: {text:?}", record.display()))
        .iter()
        .map(|g| g.parse().unwrap_or_else(|_| panic!("{text:?}")))
        .collect();
    assert_eq!(gpus.len(), 2, "{text:?}");
    assert!(gpus.iter().all(|g| [6, 7].contains(g)) && gpus[0] != gpus[1], "a6000 are GPUs 6 and 7: {text:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&jobs_dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(wait_finished(&job), "COMPLETED");
    // slurmd runs the epilog once the job has ended on the node; sacct may say so before it is done.
    let took = wait_for(
        &format!(
            "{} removed (a slurmd started before the plugin had its epilog hook never runs it: restart slurmd)",
            record.display()
        ),
        Duration::from_secs(30),
        || !record.exists(),
    );
    println!("record removed {took:?} after sacct showed the job COMPLETED");

    // A CPU-only job holds no GPU: no record. The prolog has run before the job's script does, so the
    // script looks for its own record (a GPU job's script would find one) and fails if it sees one.
    let look = format!("test ! -e {}/$SLURM_JOB_ID", jobs_dir.display());
    let cpu = job_id(&sbatch(bob, &["--wrap", &look]));
    assert_eq!(wait_finished(&cpu), "COMPLETED", "a CPU job got a record while it ran");
    assert!(!jobs_dir.join(&cpu).exists(), "a CPU job left a record");
}

/// The fake libnvidia-ml of the plugstack `nvml_library` reads its state from the file beside it
/// (`<library>.toml`: the prolog's environment cannot be set); removed on drop, so that other tests'
/// records carry no UUIDs.
struct FakeNvmlState(PathBuf);

impl FakeNvmlState {
    fn write(text: &str) -> FakeNvmlState {
        let library = plugstack_arg("nvml_library")
            .unwrap_or_else(|| panic!("{PLUGSTACK_LINE} has no nvml_library=: start the cluster with tests/run.sh"));
        let state = PathBuf::from(format!("{library}.toml"));
        let tmp = state.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &state).unwrap();
        FakeNvmlState(state)
    }
}

impl Drop for FakeNvmlState {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_record_names_the_gpus_by_uuid_when_nvml_can() {
    let cluster = serial();
    let alice = cluster.alice;
    let jobs_dir = jobs_dir();
    let record_of = |job: &str| {
        let record = jobs_dir.join(job);
        wait_for(&format!("record {}", record.display()), Duration::from_secs(30), || record.exists());
        std::fs::read_to_string(&record).unwrap()
    };

    // Without NVML (the fake answers "driver not loaded" without its state): GPUs only.
    let job = job_id(&sbatch(alice, &["--gres=gpu:rtx3090:2", "--wrap", "sleep 2"]));
    let text = record_of(&job);
    assert!(record_list(&text, "gpus").is_some() && !text.contains("uuids="), "{text:?}");
    wait_finished(&job);

    let state: String = (0..8).map(|i| format!("[[gpu]]\nuuid = \"GPU-{i:08}-fake\"\nname = \"fake {i}\"\n")).collect();
    let _nvml = FakeNvmlState::write(&state);
    let job = job_id(&sbatch(alice, &["--gres=gpu:rtx3090:2", "--wrap", "sleep 2"]));
    let text = record_of(&job);
    let gpus = record_list(&text, "gpus").unwrap_or_else(|| panic!("{text:?}"));
    let uuids = record_list(&text, "uuids").unwrap_or_else(|| panic!("no uuids: {text:?}"));
    let expected: Vec<String> = gpus.iter().map(|g| format!("GPU-{:08}-fake", g.parse::<u32>().unwrap())).collect();
    assert_eq!(uuids, expected, "{text:?}");
    assert!(gpus.iter().all(|g| g == "4" || g == "5"), "rtx3090 are GPUs 4 and 5: {text:?}");
    wait_finished(&job);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn gpu_tokens_estimate_goes_with_the_job() {
    let cluster = serial();
    let alice = cluster.alice;
    let lab_jobs = lab_jobs();
    let run = |extra: &[&str]| -> String {
        let out_file = lab_jobs.join(format!("estimate-{}-{}.out", std::process::id(), extra.len()));
        let out_arg = format!("--output={}", out_file.display());
        let mut args = vec![out_arg.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--gres=gpu:rtx2080:1", "--wrap", "env"]);
        let out = run_as(Some(alice), Path::new("/usr/bin/sbatch"), &[&["--parsable"], &args[..]].concat());
        assert_eq!(out.code, 0, "sbatch {args:?}: {}", out.stderr);
        assert_eq!(wait_finished(&job_id(&out)), "COMPLETED");
        let env = std::fs::read_to_string(&out_file).unwrap_or_else(|e| panic!("{}: {e}", out_file.display()));
        let _ = std::fs::remove_file(&out_file);
        env
    };
    // The job control environment goes with the job description through slurmctld (where the
    // job_submit plugin sees GPUTOKENS_ESTIMATE=1) to the job, as SLURM_SPANK_GPUTOKENS_ESTIMATE.
    let env = run(&["--gpu-tokens-estimate"]);
    assert!(env.lines().any(|l| l == "SLURM_SPANK_GPUTOKENS_ESTIMATE=1"), "{env}");
    let env = run(&[]);
    assert!(!env.contains("GPUTOKENS_ESTIMATE"), "{env}");

    let help = run_as(Some(alice), Path::new("/usr/bin/sbatch"), &["--help"]).stdout;
    assert!(
        help.lines()
            .any(|l| l.contains("--gpu-tokens-estimate") && l.contains("Show the most GPU tokens this job can cost")),
        "{help}"
    );
}

/// slurmd's log, where a SPANK function's non-zero return would show (25.05+ treats any as an error).
fn slurmd_log() -> String {
    let lab = std::env::var("GPUTOKENS_LAB").unwrap_or_else(|_| "/tmp/gputokens-cluster".into());
    std::fs::read_to_string(Path::new(&lab).join("log/slurmd.log")).unwrap_or_default()
}

/// Every SPANK context the plugin is loaded in, with and without its option and with accountd
/// answering or not: sbatch and salloc (allocator), srun outside a job (local), srun inside one
/// (local, in a step), every step's slurmstepd (remote) and the GPU jobs' prolog and epilog (job
/// script). No job, step or command fails because of the plugin, and Slurm logs no SPANK error.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn no_job_or_step_fails_because_of_the_plugin_in_any_context() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = Site::start("", "");
    let log_before = slurmd_log().len();
    let mut jobs = Vec::new();
    for with_accountd in [true, false] {
        let link = with_accountd.then(|| SocketLink::to(&site));
        for option in [&[][..], &["--gpu-tokens-estimate"][..]] {
            let args = |more: &[&'static str]| -> Vec<&'static str> { [option, more].concat() };
            let out = sbatch(
                alice,
                &args(&["--gres=gpu:rtx2080:1", "--wrap", "srun true && srun --gres=gpu:rtx2080:1 true"]),
            );
            jobs.push(job_id(&out));
            for (program, more) in [
                ("/usr/bin/srun", &["--gres=gpu:rtx2080:1", "true"][..]),
                ("/usr/bin/srun", &["true"][..]),
                ("/usr/bin/salloc", &["--gres=gpu:rtx2080:1", "srun", "true"][..]),
            ] {
                let out = run_as(Some(alice), Path::new(program), &args(more));
                assert_eq!(out.code, 0, "{program} {:?} failed: {}{}", args(more), out.stdout, out.stderr);
                assert!(!out.stderr.contains("error"), "{program} {:?}: {}", args(more), out.stderr);
            }
        }
        drop(link);
    }
    for job in &jobs {
        assert_eq!(wait_finished(job), "COMPLETED", "job {job}");
    }
    // Every step of every job (batch, srun steps, salloc's) since the first: none failed.
    let first = jobs[0].parse::<u64>().unwrap();
    let steps = crate::cluster::sacct(&["-a", "-n", "-P", "-S", "now-10minutes", "-o", "JobID,User,State,ExitCode"]);
    let ours: Vec<&str> = steps
        .lines()
        .filter(|l| l.split('|').nth(1).is_none_or(|u| u.is_empty() || u == alice))
        .filter(|l| l.split(['|', '.', '_']).next().and_then(|id| id.parse::<u64>().ok()).is_some_and(|id| id >= first))
        .collect();
    assert!(ours.len() >= 20, "{steps}");
    for step in &ours {
        let fields: Vec<&str> = step.split('|').collect();
        assert!(fields[2] == "COMPLETED" && fields[3] == "0:0", "step {step} of:\n{steps}");
    }
    let log = slurmd_log();
    let new = &log[log_before.min(log.len())..];
    let spank_errors: Vec<&str> = new.lines().filter(|l| l.contains("spank") && l.contains("error")).collect();
    assert!(spank_errors.is_empty(), "{spank_errors:#?}");
}
