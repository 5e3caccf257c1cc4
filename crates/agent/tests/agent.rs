//! `gputokens-agent` as a process: NVML is fake-nvml's library scripted by a state file, accountd is a
//! small HTTP server recording what it is sent, and the job is a real process carrying SLURM_JOB_ID.

use gputokens_agent::jobs;
use gputokens_agent::GpuHealth;
use gputokens_node_report::{AgentReport, REPORT_PATH};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
const WAIT: Duration = Duration::from_secs(8);
const OK: &str = "200 OK";

/// fake-nvml's library, built as this test's dev-dependency (or by `cargo build --workspace`).
fn fake_lib() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_owned();
    let candidates = [deps.join("libnvidia_ml.so"), deps.parent().unwrap().join("libnvidia_ml.so")];
    let found = candidates.iter().find(|lib| lib.exists());
    found.cloned().unwrap_or_else(|| panic!("no {:?}: run `cargo build --workspace` (it builds fake-nvml)", candidates))
}

/// Polls `f` until it gives something or `WAIT` has passed.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Stands in for accountd: records each request and answers `status`, one connection at a time.
#[derive(Clone)]
struct ReportServer {
    requests: Arc<Mutex<Vec<Request>>>,
}

impl ReportServer {
    fn start(listener: TcpListener, status: &'static str) -> ReportServer {
        let server = ReportServer { requests: Arc::default() };
        let requests = server.requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Some(request) = answer(stream, status) {
                    requests.lock().unwrap().push(request);
                }
            }
        });
        server
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn wait_for_requests(&self, n: usize) -> Vec<Request> {
        wait_for(&format!("{n} reports"), || Some(self.requests()).filter(|r| r.len() >= n))
    }
}

fn answer(stream: TcpStream, status: &str) -> Option<Request> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let Some((name, value)) = line.trim_end().split_once(':') else { break };
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let len = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    let reply = if status.starts_with("200") { r#"{"ok":true}"# } else { r#"{"error":"bad token"}"# };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
    Some(Request { method, path, headers, body })
}

/// Children killed and reaped on drop, even when an assertion fails.
struct Sleeper(Child);

impl Sleeper {
    fn spawn(job: Option<&str>) -> Sleeper {
        Sleeper::spawn_as(None, job)
    }

    /// As `uid` (the test's own when None; another needs root).
    fn spawn_as(uid: Option<u32>, job: Option<&str>) -> Sleeper {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("sleep");
        cmd.arg("30").env_remove("SLURM_JOB_ID");
        if let Some(job) = job {
            cmd.env("SLURM_JOB_ID", job);
        }
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        Sleeper(cmd.spawn().unwrap_or_else(|e| panic!("sleep as uid {uid:?} (this test needs root): {e}")))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Children inherit this test's cgroup; were it a Slurm job's, that job would rightly win over the environment.
fn expected_job(from_env: Option<&str>) -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    // (a SLUID's job the agent finds only in spank_gputokens.so's records, which this test has none of)
    match jobs::job_from_cgroup(&own) {
        Some(cgroup) => cgroup.job_id().map(str::to_owned),
        None => from_env.map(str::to_owned),
    }
}

/// A temp dir with the config, the fake's state file and maybe a token file.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    /// `listen` and `extra` go into `[agent]` as they are.
    fn new(report_to: &str, listen: &str, extra: &str) -> Site {
        let site = Site { dir: tempfile::tempdir().unwrap() };
        // A jobs_dir of its own: it holds the agent's one-per-node lock, and tests run side by side.
        let config = format!(
            "[agent]\nreport_to = \"{report_to}\"\ninterval = \"200ms\"\nnvml_library = \"{}\"\nlisten = \"{listen}\"\njobs_dir = \"{}\"\n{extra}",
            fake_lib().display(),
            site.path("jobs").display()
        );
        std::fs::write(site.config(), config).unwrap();
        site.write_state("");
        site
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> PathBuf {
        self.path("gputokens.toml")
    }

    /// Atomically, since the fake re-reads the file on every call.
    fn write_state(&self, text: &str) {
        let tmp = self.path("state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.path("state.toml")).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_under(&[], args)
    }

    /// The agent run by `wrapper` (a command that execs the rest of its arguments, e.g. prlimit).
    fn command_under(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let agent = env!("CARGO_BIN_EXE_gputokens-agent");
        let mut cmd = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut cmd = Command::new(program);
                cmd.args(wrapper_args).arg(agent);
                cmd
            }
            None => Command::new(agent),
        };
        cmd.arg("--config").arg(self.config()).args(args);
        cmd.env("FAKE_NVML_STATE", self.path("state.toml")).env("GPUTOKENS_LOG", "info").env_remove("GPUTOKENS_CONF");
        cmd
    }

    fn start(&self, args: &[&str]) -> Agent {
        self.start_under(&[], args)
    }

    fn start_under(&self, wrapper: &[&str], args: &[&str]) -> Agent {
        let mut child = self.command_under(wrapper, args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (pipe, sink) = (child.stderr.take().unwrap(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Agent { child, log }
    }
}

/// `[agent]` asking for the per-job series on the agent's /metrics (off by default).
const PER_JOB: &str = "per_job_metrics = true\n";

/// Two GPUs: an A6000 with ECC and an RTX 2080 Ti without; `procs` are (pid, gpu, bytes, sm %).
fn two_gpus(procs: &[(u32, u32, u64, Option<u32>)]) -> String {
    let mut s = format!(
        "[[gpu]]\nuuid = \"GPU-a6000-0\"\nname = \"NVIDIA RTX A6000\"\nutil_gpu = 87\nutil_mem = 40\n\
         mem_used = {}\nmem_total = {}\ntemp = 65\nslowdown_temp = 93\nthermal_slowdown = true\npower_mw = 250500\n\
         ecc_uncorrected = 0\n\
         [[gpu]]\nuuid = \"GPU-2080-1\"\nname = \"NVIDIA GeForce RTX 2080 Ti\"\nutil_gpu = 13\nutil_mem = 5\n\
         mem_used = {GIB}\nmem_total = {}\ntemp = 50\npower_mw = 120000\n",
        3 * GIB,
        48 * GIB,
        11 * GIB
    );
    for (pid, gpu, mem, sm) in procs {
        s += &format!("[[process]]\npid = {pid}\ngpu = {gpu}\nused_memory = {mem}\n");
        if let Some(sm) = sm {
            s += &format!("sm_util = {sm}\n");
        }
    }
    s
}

struct Agent {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Agent {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn wait_log(&self, needle: &str, times: usize) {
        wait_for(&format!("{times} × '{needle}' in the agent's log"), || {
            Some(()).filter(|()| self.log().matches(needle).count() >= times)
        });
    }

    fn metrics_url(&self) -> String {
        const LINE: &str = "agent metrics on http://";
        self.wait_log(LINE, 1);
        let log = self.log();
        let addr = log.split(LINE).nth(1).unwrap().split_whitespace().next().unwrap().to_string();
        format!("http://{addr}/metrics")
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then the exit code and how long it took to stop.
    fn terminate(mut self) -> (Option<i32>, Duration) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let started = Instant::now();
        let status = wait_for("the agent to exit", || self.child.try_wait().unwrap());
        (status.code(), started.elapsed())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `series{labels}` → value, from the text exposition.
fn scrape(url: &str) -> HashMap<String, f64> {
    let text = reqwest::blocking::get(url).unwrap().error_for_status().unwrap().text().unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(series, v)| (series.to_string(), v.parse().unwrap())))
        .collect()
}

fn report(request: &Request) -> AgentReport {
    serde_json::from_slice(&request.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&request.body)))
}

fn server(status: &'static str) -> (ReportServer, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (ReportServer::start(listener, status), url)
}

/// `[agent] auth = "token"` with a token file: for the tests of delivery itself, which need no munged.
fn use_token_auth(site: &Site) {
    std::fs::write(site.path("token"), "s3cret\n").unwrap();
    std::fs::set_permissions(site.path("token"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let text = std::fs::read_to_string(site.config()).unwrap();
    let auth = format!("auth = \"token\"\ntoken_file = \"{}\"\n", site.path("token").display());
    std::fs::write(site.config(), format!("{text}{auth}")).unwrap();
}

/// Whether `request` is a report signed with use_token_auth's token ("s3cret"), for its body, at
/// about now; the token itself never travels.
fn signed_with_the_token(request: &Request) -> bool {
    use gputokens_node_report::auth::{signature_matches, Presented};
    let header = request.headers.get("authorization").map(String::as_bytes);
    let Presented::Signed { node, at, sig } = Presented::parse(header) else { return false };
    let recent = (gputokens::time::now() - at).abs() < 60;
    recent
        && signature_matches("s3cret", node, at, &request.body, sig)
        && !header.is_some_and(|h| h.windows(6).any(|w| w == b"s3cret"))
}

#[test]
fn posts_reports_with_the_token_and_serves_metrics() {
    let (server, url) = server(OK);
    let site = Site::new(&url, "127.0.0.1:0", PER_JOB);
    use_token_auth(&site);
    let job = Sleeper::spawn(Some("777"));
    let outside = Sleeper::spawn(None);
    // Job 777's prolog record (root's, as the test's processes are): their SLURM_JOB_ID is taken.
    std::fs::create_dir_all(site.path("jobs")).unwrap();
    std::fs::write(site.path("jobs/777"), "gpus=0\nuid=0\n").unwrap();
    site.write_state(&two_gpus(&[
        (job.pid(), 0, 2 * GIB, Some(60)),
        (job.pid(), 1, GIB, Some(10)),
        (outside.pid(), 1, GIB / 2, None),
    ]));
    let agent = site.start(&["--node", "gpu-n01"]);

    let first = server.wait_for_requests(1).remove(0);
    assert_eq!((first.method.as_str(), first.path.as_str()), ("POST", REPORT_PATH));
    assert!(signed_with_the_token(&first), "{:?}", first.headers.get("authorization"));
    assert_eq!(first.headers.get("content-type").map(String::as_str), Some("application/json"));
    let r = report(&first);
    assert_eq!(r.node, "gpu-n01");
    assert_eq!(r.interval_secs, Some(1), "its interval (200ms) in whole seconds, at least one");
    assert_eq!(r.sample.gpus.len(), 2);
    let (a, b) = (&r.sample.gpus[0], &r.sample.gpus[1]);
    assert_eq!((a.uuid.as_deref(), a.name.as_deref()), (Some("GPU-a6000-0"), Some("NVIDIA RTX A6000")));
    assert_eq!((a.utilization_percent, a.memory_used_bytes, a.temperature_c), (Some(87), Some(3 * GIB), Some(65)));
    assert_eq!((a.power_w, a.ecc_uncorrected, &a.health), (Some(250.5), Some(0), &GpuHealth::Ok));
    assert_eq!((b.utilization_percent, b.ecc_uncorrected, b.power_w), (Some(13), None, Some(120.0)));
    // What NVML says of heat: the A6000 its slowdown threshold and that it slows down for heat; the
    // 2080 Ti nothing (NOT_SUPPORTED), which leaves it healthy.
    assert_eq!((a.slowdown_temperature_c, a.thermal_slowdown), (Some(93), Some(true)));
    assert_eq!((b.slowdown_temperature_c, b.thermal_slowdown, &b.health), (None, None, &GpuHealth::Ok));
    let job_id = expected_job(Some("777"));
    let mut procs: Vec<_> = r.sample.processes.iter().map(|p| (p.pid, p.gpu_index, p.job_id.clone())).collect();
    procs.sort();
    let mut want =
        vec![(job.pid(), 0, job_id.clone()), (job.pid(), 1, job_id.clone()), (outside.pid(), 1, expected_job(None))];
    want.sort();
    assert_eq!(procs, want);

    // The agent's own /metrics.
    let url = agent.metrics_url();
    let m = scrape(&url);
    let gpu = |name: &str, i: u32, uuid: &str| {
        m.get(&format!("gputokens_agent_{name}{{node=\"gpu-n01\",gpu=\"{i}\",uuid=\"{uuid}\"}}")).copied()
    };
    assert_eq!(gpu("gpu_utilization_percent", 0, "GPU-a6000-0"), Some(87.0), "{m:#?}");
    assert_eq!(gpu("gpu_memory_used_bytes", 0, "GPU-a6000-0"), Some((3 * GIB) as f64));
    assert_eq!(gpu("gpu_temperature_celsius", 0, "GPU-a6000-0"), Some(65.0));
    assert_eq!(gpu("gpu_power_watts", 0, "GPU-a6000-0"), Some(250.5));
    assert_eq!(gpu("gpu_healthy", 0, "GPU-a6000-0"), Some(1.0));
    assert_eq!(gpu("gpu_ecc_uncorrected_errors", 0, "GPU-a6000-0"), Some(0.0));
    assert_eq!(gpu("gpu_ecc_uncorrected_errors", 1, "GPU-2080-1"), None, "no ECC, no series");
    assert_eq!(gpu("gpu_utilization_percent", 1, "GPU-2080-1"), Some(13.0));
    let job_series = |name: &str| {
        m.get(&format!("gputokens_agent_{name}{{job=\"{}\",node=\"gpu-n01\"}}", job_id.as_deref().unwrap())).copied()
    };
    // GPU 0 the job holds alone: the GPU's 87 %. On GPU 1 the process of no job uses no SM (NVML
    // gives it 0 %): the GPU's 13 % is all the job's (a busy one there would leave it unmeasured).
    assert_eq!(job_series("job_gpu_utilization_percent"), Some((87.0 + 13.0) / 2.0), "GPU 1 its");
    assert_eq!(job_series("job_gpu_memory_bytes"), Some((3 * GIB) as f64));
    assert_eq!(job_series("job_gpus"), Some(2.0));
    assert_eq!(m.get("gputokens_agent_report_failures_total"), Some(&0.0));

    // The job ends (its epilog removes its record) and GPU 1 falls off the bus: their series go,
    // GPU 1 is unhealthy.
    std::fs::remove_file(site.path("jobs/777")).unwrap();
    site.write_state(&two_gpus(&[]).replace("power_mw = 120000\n", "power_mw = 120000\nlost = true\n"));
    let m = wait_for("the job's series to go", || {
        Some(scrape(&url)).filter(|m| {
            !m.keys().any(|k| k.contains("job=") || k.contains("gpu_utilization_percent{node=\"gpu-n01\",gpu=\"1\""))
        })
    });
    assert_eq!(gpu_of(&m, "gpu_healthy", 1), Some(0.0), "{m:#?}");
    assert_eq!(gpu_of(&m, "gpu_utilization_percent", 0), Some(87.0));
    assert!(server.requests().iter().all(signed_with_the_token));

    let (code, took) = agent.terminate();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(3), "stopping took {took:?}");
}

/// Issue 37's shared GPU through the real agent: alice's busy job 4242 and bob's idle job 4243 side by
/// side on one GPU (as gres/shard or MPS give it), a process of bob's claiming alice's job, and job
/// 4244 on the same GPU with none of its processes in sight. Each job is its own processes' use; the
/// claimant moves neither; 4244 is unmeasured. And the GPU's energy counter, reported and exported.
#[test]
fn jobs_sharing_a_gpu_are_each_their_own_processes_use() {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    assert!(
        jobs::job_from_cgroup(&own).is_none(),
        "run outside a Slurm job: its cgroup would name every process's job"
    );
    let alice = nix::unistd::getuid().as_raw();
    let (server, url) = server(OK);
    let site = Site::new(&url, "127.0.0.1:0", PER_JOB);
    use_token_auth(&site);
    let busy = Sleeper::spawn_as(None, Some("4242"));
    let idle = Sleeper::spawn_as(Some(BOB), Some("4243"));
    let claimant = Sleeper::spawn_as(Some(BOB), Some("4242"));
    std::fs::create_dir_all(site.path("jobs")).unwrap();
    // As spank_gputokens.so's prolog records them: three jobs on GPU 0 (its UUID), their owners.
    for (job, uid) in [("4242", alice), ("4243", BOB), ("4244", BOB)] {
        std::fs::write(site.path(&format!("jobs/{job}")), format!("gpus=0\nuids=GPU-a6000-0\nuid={uid}\n")).unwrap();
    }
    // NVML as the H100 read it: the GPU at 100 %, the busy process 99 %, the idle ones 0 %.
    let state = two_gpus(&[
        (busy.pid(), 0, GIB, Some(99)),
        (idle.pid(), 0, 4 * GIB, Some(0)),
        (claimant.pid(), 0, 2 * GIB, Some(0)),
    ])
    .replacen("util_gpu = 87", "util_gpu = 100", 1)
    .replacen("power_mw = 250500\n", "power_mw = 250500\nenergy_mj = 18500000\n", 1);
    site.write_state(&state);
    let agent = site.start(&["--node", "gpu-n01"]);

    let r = report(&server.wait_for_requests(1)[0]);
    let job_of = |pid: u32| r.sample.processes.iter().find(|p| p.pid == pid).and_then(|p| p.job_id.clone());
    assert_eq!(job_of(busy.pid()).as_deref(), Some("4242"));
    assert_eq!(job_of(idle.pid()).as_deref(), Some("4243"));
    assert_eq!(job_of(claimant.pid()), None, "bob's claim on alice's job is refused, and the GPU has no sole holder");
    assert_eq!(r.sample.gpus[0].jobs, ["4242", "4243", "4244"]);
    assert_eq!((r.sample.gpus[0].energy_mj, r.sample.gpus[1].energy_mj), (Some(18_500_000), None));

    let m = scrape(&agent.metrics_url());
    let job =
        |name: &str, job: &str| m.get(&format!("gputokens_agent_{name}{{job=\"{job}\",node=\"gpu-n01\"}}")).copied();
    assert_eq!(job("job_gpu_utilization_percent", "4242"), Some(99.0), "{m:#?}");
    assert_eq!(job("job_gpu_utilization_percent", "4243"), Some(0.0), "idle beside a busy job, not the GPU's 100");
    assert_eq!(job("job_gpu_utilization_percent", "4244"), None, "unmeasured: no figure");
    assert_eq!((job("job_gpu_measured", "4242"), job("job_gpu_measured", "4244")), (Some(1.0), Some(0.0)));
    assert_eq!(job("job_gpu_memory_bytes", "4242"), Some(GIB as f64), "alice's own, not the claimant's 2 GiB");
    assert_eq!(job("job_gpu_memory_bytes", "4243"), Some((4 * GIB) as f64));
    assert_eq!(gpu_of(&m, "gpu_energy_joules", 0), Some(18_500.0));
    assert_eq!(gpu_of(&m, "gpu_energy_joules", 1), None, "no counter, no series");
    let (code, _) = agent.terminate();
    assert_eq!(code, Some(0));
}

/// The audit's N2: bob's process outside Slurm (ssh without pam_slurm_adopt, cron) busy on the GPU
/// alice's job holds alone. It has a /proc entry here and no claim: nobody's, not the sole holder's.
/// Her job is unmeasured on that GPU (neither billed bob's use nor idle) and bob's part of the GPU's
/// energy is nobody's to pay.
#[test]
fn another_users_process_outside_slurm_on_a_jobs_gpu_is_nobodys() {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    assert!(
        jobs::job_from_cgroup(&own).is_none(),
        "run outside a Slurm job: its cgroup would name every process's job"
    );
    let (server, url) = server(OK);
    let site = Site::new(&url, "127.0.0.1:0", PER_JOB);
    use_token_auth(&site);
    let hers = Sleeper::spawn_as(Some(ALICE), Some("4300"));
    let his = Sleeper::spawn_as(Some(BOB), None);
    std::fs::create_dir_all(site.path("jobs")).unwrap();
    std::fs::write(site.path("jobs/4300"), format!("gpus=0\nuids=GPU-a6000-0\nuid={ALICE}\n")).unwrap();
    // Her process idles at 5 %, his burns 90 % of the GPU's 95 %.
    let state = two_gpus(&[(hers.pid(), 0, GIB, Some(5)), (his.pid(), 0, 2 * GIB, Some(90))])
        .replacen("util_gpu = 87", "util_gpu = 95", 1)
        .replacen("power_mw = 250500\n", "power_mw = 250500\nenergy_mj = 18500000\n", 1);
    site.write_state(&state);
    let agent = site.start(&["--node", "gpu-n01"]);

    let r = report(&server.wait_for_requests(1)[0]);
    let job_of = |pid: u32| r.sample.processes.iter().find(|p| p.pid == pid).and_then(|p| p.job_id.clone());
    assert_eq!(job_of(hers.pid()).as_deref(), Some("4300"));
    assert_eq!(job_of(his.pid()), None, "bob's process outside Slurm is nobody's, not the GPU's sole holder's");
    assert_eq!(r.sample.gpus[0].jobs, ["4300"]);
    // As accountd reads the report: her job unmeasured, and bob's 90 of the 95 in sight nobody's energy.
    let used = gputokens_node_report::job_use::job_use(&r.sample);
    assert_eq!(used["4300"].percent, None, "{used:?}");
    assert_eq!(used["4300"].memory_bytes, GIB, "her own memory, not bob's 2 GiB");
    let shares = gputokens_node_report::job_use::energy_shares(&r.sample);
    let parts: Vec<(&str, f64)> = shares[&0].iter().map(|(job, part)| (job.as_str(), *part)).collect();
    assert_eq!(parts.len(), 1, "{shares:?}");
    assert_eq!(parts[0].0, "4300");
    assert!((parts[0].1 - 5.0 / 95.0).abs() < 1e-9, "her part is her 5 of the 95 in sight: {shares:?}");

    let m = scrape(&agent.metrics_url());
    let job = |name: &str| m.get(&format!("gputokens_agent_{name}{{job=\"4300\",node=\"gpu-n01\"}}")).copied();
    assert_eq!(job("job_gpu_utilization_percent"), None, "not bob's 90 %, nor the GPU's 95 %: {m:#?}");
    assert_eq!(job("job_gpu_measured"), Some(0.0));
    assert_eq!(job("job_gpu_memory_bytes"), Some(GIB as f64));
    let (code, _) = agent.terminate();
    assert_eq!(code, Some(0));
}

/// The audit's N8: the agent's /metrics, which every user on the node can read, shows no job's use
/// unless the site sets `[agent] per_job_metrics = true`; its per-GPU series are there either way.
#[test]
fn job_series_only_where_the_site_asks_for_them() {
    let (server, url) = server(OK);
    let hers = Sleeper::spawn_as(Some(ALICE), Some("4300"));
    for (extra, shown) in [("", false), (PER_JOB, true)] {
        let site = Site::new(&url, "127.0.0.1:0", extra);
        use_token_auth(&site);
        std::fs::create_dir_all(site.path("jobs")).unwrap();
        std::fs::write(site.path("jobs/4300"), format!("gpus=0\nuids=GPU-a6000-0\nuid={ALICE}\n")).unwrap();
        site.write_state(&two_gpus(&[(hers.pid(), 0, GIB, Some(60))]));
        let agent = site.start(&["--node", "gpu-n01"]);
        let reports = server.requests().len();
        server.wait_for_requests(reports + 1);
        // As bob, another user on the node.
        let text = scrape_as(BOB, &agent.metrics_url());
        assert!(
            text.contains(r#"gputokens_agent_gpu_utilization_percent{node="gpu-n01",gpu="0",uuid="GPU-a6000-0"} 87"#),
            "{text}"
        );
        let her_job = r#"gputokens_agent_job_gpu_utilization_percent{job="4300",node="gpu-n01"} 87"#;
        assert_eq!(text.contains(her_job), shown, "per_job_metrics {shown}: {text}");
        assert_eq!(text.contains("job="), shown, "per_job_metrics {shown}: {text}");
        let (code, _) = agent.terminate();
        assert_eq!(code, Some(0));
    }
}

/// The text of `url`, fetched by a process of `uid` (python3's urllib).
fn scrape_as(uid: u32, url: &str) -> String {
    use std::os::unix::process::CommandExt;
    const FETCH: &str =
        "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
    let out = Command::new("/usr/bin/python3")
        .args(["-c", FETCH, url])
        .uid(uid)
        .gid(uid)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("python3 as uid {uid} (this test needs root): {e}"));
    assert!(out.status.success(), "scrape as uid {uid}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn gpu_of(m: &HashMap<String, f64>, name: &str, i: u32) -> Option<f64> {
    let prefix = format!("gputokens_agent_{name}{{node=\"gpu-n01\",gpu=\"{i}\",");
    m.iter().find(|(k, _)| k.starts_with(&prefix)).map(|(_, v)| *v)
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn once_posts_one_report_signed_with_munge_named_after_the_host() {
    let (server, url) = server(OK);
    let site = Site::new(&url, "127.0.0.1:0", "");
    site.write_state(&two_gpus(&[]));
    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("agent metrics on"), "--once serves no metrics: {stderr}");
    let requests = server.wait_for_requests(1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.requests().len(), 1);
    // The default: a MUNGE credential of the agent's uid (root here) naming this very body.
    let header = requests[0].headers.get("authorization").expect("an Authorization header");
    let cred = slurm_ffi::munge::decode(header.strip_prefix("MUNGE ").expect("MUNGE scheme"), None).unwrap();
    assert_eq!(cred.uid, nix::unistd::getuid().as_raw());
    assert_eq!(cred.payload, gputokens_node_report::auth::report_payload(&requests[0].body));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let r = report(&requests[0]);
    assert_eq!(r.node, host.trim().split('.').next().unwrap());
    assert_eq!(r.sample.gpus.len(), 2);
}

#[test]
fn refuses_to_start_without_nvml_or_token() {
    let site = Site::new("http://127.0.0.1:1", "127.0.0.1:0", "");
    let text = std::fs::read_to_string(site.config()).unwrap();
    let lib = fake_lib().display().to_string();
    std::fs::write(site.config(), text.replace(&lib, "/nonexistent/libnvidia-ml.so.1")).unwrap();
    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no NVML library found at /nonexistent/libnvidia-ml.so.1"), "{stderr}");

    let missing = site.path("no-such-token");
    let token = format!("auth = \"token\"\ntoken_file = \"{}\"\n", missing.display());
    let site = Site::new("http://127.0.0.1:1", "127.0.0.1:0", &token);
    let out = site.command(&[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

#[test]
fn keeps_sampling_while_accountd_is_down() {
    // A port nobody listens on, until the server below takes it.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let site = Site::new(&url, "off", "");
    use_token_auth(&site);
    site.write_state(&two_gpus(&[]));

    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{url}{REPORT_PATH}")), "{stderr}");

    let mut agent = site.start(&["--node", "n2"]);
    agent.wait_log("report not delivered", 3);
    assert!(agent.running(), "{}", agent.log());
    assert!(!agent.log().contains("agent metrics on"), "listen = \"off\"");

    let server = ReportServer::start(TcpListener::bind(("127.0.0.1", port)).unwrap(), OK);
    let requests = server.wait_for_requests(2);
    assert!(requests.iter().all(|r| report(r).node == "n2"));
    agent.wait_log("(working again)", 1);
    let (code, _) = agent.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn an_http_error_is_a_failed_report() {
    let (server, url) = server("401 Unauthorized");
    let site = Site::new(&url, "off", "");
    use_token_auth(&site);
    site.write_state(&two_gpus(&[]));
    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 401 Unauthorized") && stderr.contains("bad token"), "{stderr}");
    assert_eq!(server.wait_for_requests(1).len(), 1);
}

/// The real non-root users these tests act as (they exist on the test machines; the tests run as root).
const ALICE: u32 = 1001;
const BOB: u32 = 1002;

/// Holds `count` connections to 127.0.0.1:`port` as `uid`, sending `GET /metrics` on each every 2 s
/// and reading what comes back (the audit's N3 flood); says "holding N" after each round.
const FLOOD: &str = r#"
import resource, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
socks = []
for _ in range(count):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    socks.append(s)
end = time.time() + seconds
while time.time() < end:
    alive = []
    for s in socks:
        try:
            while s.recv(65536):
                pass
            s.close()
            continue
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        try:
            s.send(request)
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        alive.append(s)
    socks = alive
    print("holding", len(socks), flush=True)
    time.sleep(2)
"#;

/// A flood of connections held by a process of another user; killed on drop.
struct Flood {
    child: Child,
    rounds: Arc<Mutex<Vec<usize>>>,
}

impl Flood {
    fn start(uid: u32, port: u16, count: usize) -> Flood {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", FLOOD, &port.to_string(), &count.to_string(), "120"])
            // The attacker keeps the real clock: the dated runs' libfaketime is for the agent.
            .env_remove("LD_PRELOAD")
            .env_remove("FAKETIME")
            .uid(uid)
            .gid(uid)
            .current_dir("/")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 as uid {uid} (this test needs root): {e}"));
        let rounds = Arc::new(Mutex::new(Vec::new()));
        let (pipe, sink) = (child.stdout.take().unwrap(), rounds.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("holding ").and_then(|n| n.parse().ok()) {
                    sink.lock().unwrap().push(n);
                }
            }
        });
        Flood { child, rounds }
    }

    /// How many connections it held after each round so far.
    fn rounds(&self) -> Vec<usize> {
        self.rounds.lock().unwrap().clone()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The audit's N3: alice holds 1,100 connections to the agent's /metrics (each sending a request now
/// and then), with the agent at systemd's default limit of 1024 open files. Its reports must go on,
/// and a fresh client must still be answered: the listener sheds or refuses her connections.
#[test]
fn a_users_connection_flood_on_metrics_never_stops_the_reports() {
    let (server, url) = server(OK);
    let site = Site::new(&url, "127.0.0.1:0", "");
    use_token_auth(&site);
    site.write_state(&two_gpus(&[]));
    // prlimit execs the agent: its pid is the agent's. A hard limit of 1024 too, so that the agent
    // cannot raise its way out of the test.
    let mut agent = site.start_under(&["prlimit", "--nofile=1024:1024", "--"], &["--node", "gpu-n01"]);
    let metrics = agent.metrics_url();
    let port: u16 = metrics.rsplit(':').next().unwrap().trim_end_matches("/metrics").parse().unwrap();
    server.wait_for_requests(1);

    let flood = Flood::start(ALICE, port, 1100);
    // Two rounds: every connection has been opened and has sent a request at least once.
    wait_for("the flood's second round", || Some(()).filter(|()| flood.rounds().len() >= 2));
    let during = server.requests().len();
    reports_go_on(&server, during + 5, &agent);
    let fresh = reqwest::blocking::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    wait_for("a fresh client's scrape during the flood", || {
        let answer = fresh.get(&metrics).header("connection", "close").send().ok()?;
        answer.status().is_success().then_some(())
    });
    assert!(agent.running(), "{}", agent.log());
    // The agent holds a few dozen of her connections, not a thousand.
    let fds = std::fs::read_dir(format!("/proc/{}/fd", agent.child.id())).unwrap().count();
    assert!(fds < 200, "the agent holds {fds} descriptors; the flood held {:?}", flood.rounds());

    drop(flood);
    let after = server.requests().len();
    reports_go_on(&server, after + 3, &agent);
    let m = scrape(&metrics);
    assert_eq!(gpu_of(&m, "gpu_utilization_percent", 0), Some(87.0), "{m:#?}");
    assert!(!agent.log().contains("Too many open files"), "{}", agent.log());
    let (code, _) = agent.terminate();
    assert_eq!(code, Some(0));
}

/// Waits for `n` reports in all, or fails with the agent's log (why it stopped posting).
fn reports_go_on(server: &ReportServer, n: usize, agent: &Agent) {
    let deadline = Instant::now() + WAIT;
    while server.requests().len() < n {
        let log = agent.log();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        assert!(Instant::now() < deadline, "no {n} reports in time; the agent's last log lines:\n{tail:#?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A site whose agents report to a pair (`report_to` names both accountd hosts), with the token
/// and two idle GPUs.
fn pair_site(first: &str, second: &str) -> Site {
    let site = Site::new(first, "off", "");
    use_token_auth(&site);
    let text = std::fs::read_to_string(site.config()).unwrap();
    let text = text.replace(&format!("report_to = \"{first}\""), &format!("report_to = [\"{first}\", \"{second}\"]"));
    std::fs::write(site.config(), text).unwrap();
    site.write_state(&two_gpus(&[]));
    site
}

/// A pair's first accountd cannot be connected to (its host lost): the report goes to the other.
#[test]
fn a_report_goes_to_the_next_report_to_when_one_cannot_be_connected_to() {
    let (server, url) = server(OK);
    let closed = format!("http://{}", TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let site = pair_site(&closed, &url);
    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("to {url}{REPORT_PATH}")), "{stderr}");
    assert!(signed_with_the_token(&server.wait_for_requests(1)[0]));
}

/// One that took the report and answered an error may have filed it: the report is never sent on
/// (its energy would count twice).
#[test]
fn a_report_an_accountd_answered_is_not_sent_to_the_other() {
    let (refusing, refusing_url) = server("401 Unauthorized");
    let (other, other_url) = server(OK);
    let site = pair_site(&refusing_url, &other_url);
    let out = site.command(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 401 Unauthorized"), "{stderr}");
    assert_eq!(refusing.wait_for_requests(1).len(), 1);
    assert!(other.requests().is_empty(), "sent on after an answer");
}

/// A host that took a report and failed it is tried after the other with the next report: an
/// accountd that answers only errors does not hold its nodes' reports.
#[test]
fn after_a_failed_report_the_next_goes_to_the_other_host_first() {
    let (failing, failing_url) = server("500 Internal Server Error");
    let (other, other_url) = server(OK);
    let site = pair_site(&failing_url, &other_url);
    let mut agent = site.start(&[]);
    let reached = other.wait_for_requests(2);
    assert!(reached.iter().all(signed_with_the_token));
    assert!(agent.running());
    let failed = failing.requests().len();
    assert!(failed >= 1, "the first report went to the first host");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(failing.requests().len(), failed, "the other took every report since");
}
