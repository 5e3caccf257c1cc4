//! The multi-node test cluster (tests/multinode/): each test starts its own with `Cluster::up`, which
//! runs up.sh (a fresh ledger and accounting database every time) and stops it when dropped.
//! Every command runs inside one of the cluster's hosts through mn.sh, as root or a real test user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use accountd::balance_json::EntryJson as Entry;
use gputokens::controller_status::{ControllerStatus, ViewStatus};
use gputokens::entry::EntryKind;
use gputokens::Tokens;

#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(self) -> Outcome {
        assert_eq!(self.code, 0, "failed: stdout {}\nstderr {}", self.stdout, self.stderr);
        self
    }
}

pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/multinode")
}

/// Where up.sh keeps the cluster (the `GPUTOKENS_MN` of its lib.sh).
pub fn mn_dir() -> PathBuf {
    PathBuf::from(std::env::var("GPUTOKENS_MN").unwrap_or_else(|_| "/tmp/gputokens-mn".into()))
}

/// Settings a test gives up.sh.
#[derive(Default)]
pub struct Settings<'a> {
    /// More gputokens.toml tables, after up.sh's.
    pub config: &'a str,
    /// slurm.conf's SlurmdTimeout (up.sh's default: 10 s, so a lost node is seen quickly).
    pub slurmd_timeout: Option<u32>,
    pub max_snapshot_age: Option<&'a str>,
    /// More `[http]` keys (TLS).
    pub http: &'a str,
    /// More `[accountd]` keys (its CA).
    pub accountd: &'a str,
    /// Where the other hosts and the agents reach accountd (up.sh's default: http://10.78.0.2:9817).
    pub accountd_url: Option<&'a str>,
    /// The ledger on MariaDB and a second accountd serve on ctl2 (up.sh's GPUTOKENS_MN_PAIR).
    pub pair: bool,
    /// A second Slurm cluster on the slurmdbd and the ledger, with its own accountd (up.sh's
    /// GPUTOKENS_MN_CLUSTERS=2: ctlb and node4).
    pub second_cluster: bool,
    /// More slurm.conf `PartitionName=` lines, beside the default partition `gpu` of every node.
    pub partitions: &'a str,
    /// The host of the primary slurmctld and slurmdbd, the backup on the other controller (up.sh's
    /// GPUTOKENS_MN_SLURM_HOST; its default: ctl1).
    pub slurm_host: Option<&'a str>,
}

/// GPU memory of each process `nvml_processes` puts on a GPU.
pub const PROCESS_MEMORY: u64 = 7 << 20;

pub struct Cluster {
    /// The host whose accountd the test's admin commands and charge-cycle counts go to.
    admin_host: Mutex<&'static str>,
    _serial: MutexGuard<'static, ()>,
}

impl Cluster {
    pub fn up(settings: Settings) -> Cluster {
        static SERIAL: Mutex<()> = Mutex::new(());
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let mut up = Command::new("bash");
        // The fake NVML library tests/run.sh built (a run by hand: target/debug's).
        let fake_nvml = std::env::var_os("GPUTOKENS_MN_FAKE_NVML")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/libnvidia_ml.so"));
        up.arg(scripts().join("up.sh"))
            .env("GPUTOKENS_MN_CONFIG", settings.config)
            .env("GPUTOKENS_MN_FAKE_NVML", fake_nvml);
        if let Some(timeout) = settings.slurmd_timeout {
            up.env("GPUTOKENS_MN_SLURMD_TIMEOUT", timeout.to_string());
        }
        if let Some(age) = settings.max_snapshot_age {
            up.env("GPUTOKENS_MN_MAX_SNAPSHOT_AGE", age);
        }
        if let Some(url) = settings.accountd_url {
            up.env("GPUTOKENS_MN_ACCOUNTD_URL", url);
        }
        if settings.pair {
            up.env("GPUTOKENS_MN_PAIR", "1");
        }
        if settings.second_cluster {
            up.env("GPUTOKENS_MN_CLUSTERS", "2");
        }
        if let Some(host) = settings.slurm_host {
            up.env("GPUTOKENS_MN_SLURM_HOST", host);
        }
        up.env("GPUTOKENS_MN_PARTITIONS", settings.partitions);
        up.env("GPUTOKENS_MN_HTTP", settings.http).env("GPUTOKENS_MN_ACCOUNTD_KEYS", settings.accountd);
        let out = up.output().expect("bash tests/multinode/up.sh");
        if !out.status.success() {
            keep_logs_of_a_failure();
        }
        assert!(
            out.status.success(),
            "tests/multinode/up.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Cluster { admin_host: Mutex::new("ctl1"), _serial: serial }
    }

    fn admin(&self) -> &'static str {
        *self.admin_host.lock().unwrap()
    }

    /// From now on admin commands go to (and charge cycles are counted of) accountd on `host`.
    pub fn admin_on(&self, host: &'static str) {
        *self.admin_host.lock().unwrap() = host;
    }

    /// `mn.sh ARGS...`.
    pub fn mn(&self, args: &[&str]) -> Outcome {
        let out = Command::new("bash").arg(scripts().join("mn.sh")).args(args).output().expect("mn.sh");
        Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `argv` on `host`, as root (`user` None) or as a test user.
    pub fn on(&self, host: &str, user: Option<&str>, argv: &[&str]) -> Outcome {
        let mut args = vec!["in", host];
        if let Some(user) = user {
            args.extend(["runuser", "-u", user, "--"]);
        }
        args.extend_from_slice(argv);
        self.mn(&args)
    }

    /// Submits a batch job as `user` from ctl1 (the login host); returns its ID.
    pub fn sbatch(&self, user: &str, args: &[&str]) -> String {
        let out_file = format!("--output={}/jobs/%j.out", mn_dir().display());
        let mut argv = vec!["sbatch", "--parsable", out_file.as_str()];
        argv.extend_from_slice(args);
        let out = self.on("ctl1", Some(user), &argv).ok();
        out.stdout.trim().split(';').next().unwrap().to_string()
    }

    /// squeue's state of `job` ("" once it left the queue).
    pub fn job_state(&self, job: &str) -> String {
        self.on("ctl1", None, &["squeue", "-h", "-j", job, "-o", "%T"]).stdout.trim().to_string()
    }

    /// The nodes `job` runs on (squeue's %N, expanded by scontrol).
    pub fn job_nodes(&self, job: &str) -> Vec<String> {
        let list = self.on("ctl1", None, &["squeue", "-h", "-j", job, "-o", "%N"]).stdout.trim().to_string();
        if list.is_empty() {
            return Vec::new();
        }
        self.on("ctl1", None, &["scontrol", "show", "hostnames", &list]).stdout.lines().map(str::to_string).collect()
    }

    pub fn wait_running(&self, job: &str) -> Vec<String> {
        wait_until(120, &format!("job {job} running"), || {
            (self.job_state(job) == "RUNNING").then(|| self.job_nodes(job))
        })
    }

    /// squeue's answer for `job`'s state, asked on ctl1.
    fn squeue_state(&self, job: &str) -> Outcome {
        self.on("ctl1", None, &["squeue", "-h", "-j", job, "-o", "%T"])
    }

    /// Whether slurmctld is done with a job, by squeue's answer: it answered, and shows the job in
    /// no state that runs again (a job requeued after a lost controller is PENDING between its runs).
    fn done_in(squeue: &Outcome) -> bool {
        let open = ["PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD"];
        match squeue.code {
            0 => !open.contains(&squeue.stdout.trim()),
            _ => squeue.stderr.contains("Invalid job id"),
        }
    }

    /// Waits until slurmctld is done with `job` and slurmdbd shows every segment of it in a final
    /// state; returns sacct's rows of them (`-D`: each requeued run is a row).
    pub fn wait_recorded(&self, job: &str) -> Vec<Segment> {
        wait_seen(120, &format!("job {job} recorded as finished"), || {
            let squeue = self.squeue_state(job);
            if !Self::done_in(&squeue) {
                return Err(format!("squeue (exit {}): {}{}", squeue.code, squeue.stdout.trim(), squeue.stderr.trim()));
            }
            let rows = self.segments(job);
            let open = ["PENDING", "RUNNING", "COMPLETING", "REQUEUED"];
            // Without an End a row is not final (slurmdbd catching up after an outage).
            let ended = rows.iter().all(|r| !["Unknown", "None", ""].contains(&r.end.as_str()));
            match !rows.is_empty() && ended && !open.contains(&rows.last().unwrap().state.as_str()) {
                true => Ok(rows),
                false => Err(format!("done in squeue; sacct's rows: {rows:?}")),
            }
        })
    }

    pub fn segments(&self, job: &str) -> Vec<Segment> {
        let out = self.on(
            "ctl1",
            None,
            &["sacct", "-X", "-D", "-n", "-P", "-j", job, "-o", "JobIDRaw,State,ElapsedRaw,AllocTRES,NodeList,End"],
        );
        out.stdout
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split('|').collect();
                let [_, state, elapsed, tres, nodes, end] = f.as_slice() else { return None };
                Some(Segment {
                    state: state.split_whitespace().next().unwrap_or("").to_string(),
                    elapsed: elapsed.parse().ok()?,
                    tres: tres.to_string(),
                    nodes: nodes.to_string(),
                    end: end.to_string(),
                })
            })
            .collect()
    }

    /// `accountd ARGS` on ctl1, where accountd serve runs (or the host `admin_on` named).
    pub fn accountd(&self, user: Option<&str>, args: &[&str]) -> Outcome {
        let mut argv = vec!["accountd"];
        argv.extend_from_slice(args);
        self.on(self.admin(), user, &argv)
    }

    /// The ledger's entries of `user`, as `admin history --json` gives them.
    pub fn history(&self, user: &str) -> Vec<Entry> {
        let out = self.accountd(None, &["admin", "history", user, "--json"]);
        if out.code != 0 && out.stderr.contains("has no entries") {
            return Vec::new();
        }
        let out = out.ok();
        #[derive(serde::Deserialize)]
        struct History {
            entries: Vec<Entry>,
        }
        let history: History =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("history of {user}: {e}: {}", out.stdout));
        history.entries
    }

    /// `user`'s balance: after the ledger's newest entry of theirs.
    pub fn balance(&self, user: &str) -> Tokens {
        self.history(user).iter().max_by_key(|e| e.id).map(|e| e.balance_after).expect("an entry")
    }

    /// What the ledger charged for `job`, summed, and in how many entries.
    pub fn charged(&self, user: &str, job: &str) -> (Tokens, usize) {
        let charges: Vec<Entry> = self
            .history(user)
            .into_iter()
            .filter(|e| e.kind == EntryKind::Charge && e.job_id.as_deref() == Some(job))
            .collect();
        (charges.iter().map(|e| -e.amount).sum(), charges.len())
    }

    /// GET `path` of accountd's HTTP listener, from ctl1.
    pub fn http_get(&self, path: &str) -> String {
        let url = format!("http://10.78.0.2:9817{path}");
        self.on("ctl1", None, &["curl", "-sS", "--max-time", "10", &url]).ok().stdout
    }

    /// Rewrites `node`'s fake NVML state: its GPUs as up.sh made them, with these processes
    /// (PID in the node's own PID namespace, GPU index), each using [`PROCESS_MEMORY`] (a GPU's own
    /// memory use is 1 MiB: a job's memory shows whether its processes were mapped).
    pub fn nvml_processes(&self, node: &str, processes: &[(u32, u32)]) {
        let path = mn_dir().join(format!("hosts/{node}/nvml/libnvidia-ml.so.1.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let gpus = text.split("[[process]]").next().unwrap().to_string();
        let mut state = gpus;
        for (pid, gpu) in processes {
            state += &format!("[[process]]\npid = {pid}\ngpu = {gpu}\nused_memory = {PROCESS_MEMORY}\nsm_util = 50\n");
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, state).unwrap();
        std::fs::rename(tmp, path).unwrap();
    }

    /// The batch script's PID of `job` on `node`, in that node's PID namespace.
    pub fn job_pid(&self, node: &str, job: &str) -> u32 {
        wait_until(60, &format!("a process of job {job} on {node}"), || {
            let out = self.on(node, None, &["scontrol", "listpids", job]);
            out.stdout.lines().skip(1).find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                match f.as_slice() {
                    [pid, _job, _step, local, ..] if *local != "-" => pid.parse().ok(),
                    _ => None,
                }
            })
        })
    }

    pub fn log(&self, host: &str, name: &str) -> String {
        std::fs::read_to_string(mn_dir().join(format!("hosts/{host}/log/{name}"))).unwrap_or_default()
    }

    /// The time `job` has run as slurmctld counts it (squeue's `%M`), in seconds; None once it left
    /// the queue or while it has not started.
    pub fn time_used(&self, job: &str) -> Option<u64> {
        let out = self.on("ctl1", None, &["squeue", "-h", "-j", job, "-t", "RUNNING", "-o", "%M"]).stdout;
        crate::support::cluster::time_used_secs(out.trim())
    }

    /// Waits until `job` runs and slurmctld counts at least `secs` seconds of it.
    pub fn wait_ran(&self, job: &str, secs: u64) -> u64 {
        wait_seen(60 + secs, &format!("job {job} to have run {secs} s"), || match self.time_used(job) {
            Some(used) if used >= secs => Ok(used),
            used => Err(format!("state {:?}, time used {used:?} s", self.job_state(job))),
        })
    }

    /// How many charge cycles accountd serve on ctl1 has ended (its log's "charge cycle (" lines,
    /// kept across its restarts).
    pub fn charge_cycles(&self) -> usize {
        self.log(self.admin(), "accountd.out").matches("charge cycle (").count()
    }

    /// Waits until accountd serve has run `cycles` whole charge cycles after `ended` had ended (one
    /// more: the cycle under way when `ended` was counted may have begun before).
    pub fn wait_charge_cycles(&self, ended: usize, cycles: usize) {
        let want = ended + cycles + 1;
        wait_seen(120, &format!("{cycles} more whole charge cycles of accountd serve"), || {
            let now = self.charge_cycles();
            if now >= want {
                return Ok(());
            }
            let log = self.log(self.admin(), "accountd.out");
            let tail: Vec<&str> = log.lines().rev().take(3).collect();
            Err(format!("{now} ended of the {want} wanted; the log's end: {tail:?}"))
        });
    }

    /// The shared balance snapshot the controllers' plugins read.
    pub fn snapshot(&self) -> String {
        std::fs::read_to_string(mn_dir().join("shared/snapshot/balances.snapshot")).unwrap_or_default()
    }

    /// What `host`'s job_submit plugin says in its controller status file: the `generated` time of
    /// the snapshot it decides from, or what it says instead.
    pub fn controller_view(&self, host: &str) -> Result<i64, String> {
        let path = mn_dir().join(format!("shared/controllers/{host}.json"));
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let status = ControllerStatus::parse(&text)?;
        match status.view {
            ViewStatus::Ready { generated, .. } => Ok(generated),
            ViewStatus::Unavailable { problem } => Err(format!("{host}: {problem}")),
        }
    }

    /// Waits until every controller's plugin decides from a snapshot written after the one whose
    /// text `written` accepts (accountd rewrites it on every change and check cycle): a snapshot
    /// generated in a later second was written after that one, with everything it holds.
    pub fn wait_controllers_past(&self, what: &str, written: impl Fn(&str) -> bool) {
        let text = wait_seen(30, &format!("the snapshot with {what}"), || {
            let text = self.snapshot();
            if written(&text) {
                return Ok(text);
            }
            Err(text)
        });
        let snapshot = gputokens::snapshot::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let after = snapshot.generated;
        wait_seen(60, &format!("ctl1's and ctl2's plugins deciding from a snapshot after {what} ({after})"), || {
            let views: Vec<Result<i64, String>> = ["ctl1", "ctl2"].iter().map(|h| self.controller_view(h)).collect();
            match views.iter().all(|v| matches!(v, Ok(generated) if *generated > after)) {
                true => Ok(()),
                false => Err(format!("{views:?}")),
            }
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            keep_logs_of_a_failure();
        }
        let _ = Command::new("bash").arg(scripts().join("down.sh")).output();
    }
}

/// A failed test's daemon logs, kept before down.sh and the next test's up.sh wipe them: every
/// host's logs and munged's, and the controllers' status files, under
/// target/test-logs/multinode-failures/SLURM_VERSION/TEST/ (the releases' suites run side by side
/// into one target/), and the controllers' last lines printed.
fn keep_logs_of_a_failure() {
    let test = std::thread::current().name().unwrap_or("a-test").replace("::", "-");
    let version = Command::new("slurmd").arg("-V").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let version = version.ok().and_then(|v| v.split_whitespace().nth(1).map(str::to_string));
    let kept = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-logs/multinode-failures")
        .join(version.as_deref().unwrap_or("slurm"))
        .join(&test);
    let _ = std::fs::remove_dir_all(&kept);
    let copy_files = |from: &Path, into: &Path| {
        let Ok(files) = std::fs::read_dir(from) else { return };
        let _ = std::fs::create_dir_all(into);
        for file in files.flatten().filter(|f| f.path().is_file()) {
            let _ = std::fs::copy(file.path(), into.join(file.file_name()));
        }
    };
    if let Ok(hosts) = std::fs::read_dir(mn_dir().join("hosts")) {
        for host in hosts.flatten() {
            copy_files(&host.path().join("log"), &kept.join(host.file_name()));
            copy_files(&host.path().join("munge"), &kept.join(host.file_name()).join("munge"));
        }
    }
    copy_files(&mn_dir().join("shared/controllers"), &kept.join("controllers"));
    eprintln!("the hosts' logs of this failure: {}", kept.display());
    for (host, log) in
        [("ctl1", "slurmctld.log"), ("ctl2", "slurmctld.log"), ("ctl1", "slurmdbd.log"), ("ctl2", "slurmdbd.log")]
    {
        let Ok(text) = std::fs::read_to_string(kept.join(host).join(log)) else { continue };
        let tail: Vec<&str> = text.lines().rev().take(25).collect();
        eprintln!("--- {host}'s {log}, its last lines:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
}

/// One run of a job, as sacct -D shows it.
#[derive(Debug, Clone)]
pub struct Segment {
    pub state: String,
    pub elapsed: u64,
    pub tres: String,
    pub nodes: String,
    pub end: String,
}

impl Segment {
    /// GPUs of each type this run held (AllocTRES `gres/gpu:TYPE=N`).
    pub fn gpus(&self) -> Vec<(String, u64)> {
        self.tres
            .split(',')
            .filter_map(|t| t.strip_prefix("gres/gpu:"))
            .filter_map(|t| t.split_once('='))
            .map(|(ty, n)| (ty.to_string(), n.parse().unwrap()))
            .collect()
    }

    /// What the run costs at up.sh's prices, from what sacct says it held and for how long.
    pub fn cost(&self) -> Tokens {
        let price = |ty: &str| {
            match ty {
                "rtx2080" => "0.5",
                "rtx3090" => "1",
                "a6000" => "4",
                other => panic!("no price for {other}"),
            }
            .parse::<Tokens>()
            .unwrap()
        };
        self.gpus().iter().map(|(ty, n)| crate::by_hand::gpu_cost(price(ty), n * self.elapsed)).sum()
    }
}

/// Polls `check` every 0.5 s until it gives a value; panics naming `what` after `secs`.
pub fn wait_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    wait_seen(secs, what, || check().ok_or_else(|| "not yet".to_string()))
}

/// Polls `check` every 0.5 s until it gives `Ok`; after `secs`, panics naming `what` and what the
/// check saw the last time (its `Err`).
pub fn wait_seen<T>(secs: u64, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match check() {
            Ok(value) => return value,
            Err(seen) => assert!(Instant::now() < deadline, "waited {secs} s for {what}; last saw: {seen}"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
