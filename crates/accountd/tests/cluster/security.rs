//! A hostile user on the test cluster: alice, who runs code on the GPU node, tries to drain it,
//! requeue bob's job and read balances through accountd's HTTP port. Every attack is made as the
//! real non-root user (curl and munge run through runuser) against a real `accountd serve`, the real
//! munged and the real Slurm.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{sbatch, serial};
use crate::common::{run_as, Site};

/// A POST or GET with curl as `user` (None = root); returns (HTTP status, body).
fn curl(user: Option<&str>, url: &str, authorization: Option<&str>, body: Option<&str>) -> (u16, String) {
    let mut args = vec!["-s".to_string(), "-o".into(), "-".into(), "-w".into(), "\n%{http_code}".into()];
    if let Some(a) = authorization {
        args.extend(["-H".into(), format!("Authorization: {a}")]);
    }
    if let Some(b) = body {
        args.extend(["-H".into(), "Content-Type: application/json".into(), "--data-binary".into(), b.into()]);
    }
    args.push(url.into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_as(user, Path::new("/usr/bin/curl"), &args);
    let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A MUNGE credential made as `user` (None = root) with `payload`, from munged at `socket` (None =
/// the node's own).
fn munge_as(user: Option<&str>, payload: &[u8], socket: Option<&str>) -> String {
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", "munge"]);
            c
        }
        None => Command::new("munge"),
    };
    if let Some(s) = socket {
        cmd.args(["-S", s]);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("munge");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), payload).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "munge failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// What the agent signs for a body: its SHA-256, which anyone can compute (here with sha256sum).
fn payload(body: &str) -> Vec<u8> {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    let hex = out.split_whitespace().next().unwrap();
    format!("gputokens agent report v1 sha256={hex}").into_bytes()
}

/// A report for node `vm` that claims every GPU fault there is and names `jobs` as holding GPU 0.
fn forged_report(node: &str, jobs: &[&str]) -> String {
    let jobs: Vec<String> = jobs.iter().map(|j| format!("\"{j}\"")).collect();
    format!(
        r#"{{"node":"{node}","sample":{{"time":"{}","gpus":[{{"index":0,"uuid":"GPU-00000000","name":null,
        "utilization_percent":0,"memory_utilization_percent":null,"memory_used_bytes":null,"memory_total_bytes":null,
        "temperature_c":120,"power_w":null,"ecc_uncorrected":7,"xids":[79,48],"health":{{"state":"lost"}},
        "jobs":[{}]}}],"processes":[]}}}}"#,
        chrono::Utc::now().to_rfc3339(),
        jobs.join(",")
    )
}

/// A second munged with the cluster's key that says it runs on 127.0.0.2: another node's.
struct OtherNodeMunged {
    dir: tempfile::TempDir,
}

impl OtherNodeMunged {
    fn start() -> OtherNodeMunged {
        let dir = tempfile::Builder::new().prefix("gputokens-munge-").tempdir().unwrap();
        let d = dir.path().display().to_string();
        Command::new("chown").args(["munge:munge", &d]).status().unwrap();
        let status = Command::new("runuser")
            .args(["-u", "munge", "--", "/usr/sbin/munged", "--origin=127.0.0.2"])
            .arg(format!("--socket={d}/munge.socket"))
            .arg(format!("--pid-file={d}/munged.pid"))
            .arg(format!("--log-file={d}/munged.log"))
            .arg(format!("--seed-file={d}/munged.seed"))
            .status()
            .unwrap();
        assert!(status.success(), "second munged did not start");
        let other = OtherNodeMunged { dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !Path::new(&other.socket()).exists() {
            assert!(Instant::now() < deadline, "second munged made no socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        other
    }

    fn socket(&self) -> String {
        format!("{}/munge.socket", self.dir.path().display())
    }
}

impl Drop for OtherNodeMunged {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("munged.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

fn node_state() -> String {
    run_as(None, Path::new("/usr/bin/sinfo"), &["-h", "-n", "vm", "-o", "%t %E"]).ok().stdout.trim().to_string()
}

fn job_state(job: &str) -> String {
    run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", job, "-o", "%T"]).stdout.trim().to_string()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn forged_agent_reports_drain_nothing_and_touch_no_job() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n\
         [http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
    );
    let report_url = format!("{}/v1/agent/report", site.http_url());
    let bobs = sbatch(bob, &["--gres=gpu:rtx2080:1", "--wrap", "sleep 120"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_state(&bobs) != "RUNNING" {
        assert!(Instant::now() < deadline, "bob's job does not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    let option = format!("--user={bob}");
    let forged = forged_report("vm", &[&option]);
    let against_bob = forged_report("vm", &[&bobs]);

    // No credential at all.
    let (status, body) = curl(Some(alice), &report_url, None, Some(&against_bob));
    assert_eq!(status, 401, "{body}");
    // A MUNGE credential of her own uid, naming the forged body.
    let own = munge_as(Some(alice), &payload(&against_bob), None);
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {own}")), Some(&against_bob));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("only root and the SlurmUser"), "{body}");
    // A root credential she captured from a real report, replayed (first with its own body, which
    // the agent delivered, then with hers).
    let real = forged_report("vm", &[]).replace("\"temperature_c\":120", "\"temperature_c\":40");
    let real = real.replace("\"ecc_uncorrected\":7", "\"ecc_uncorrected\":0").replace("[79,48]", "[]");
    let real = real.replace(r#"{"state":"lost"}"#, r#"{"state":"ok"}"#);
    let captured = munge_as(None, &payload(&real), None);
    let (status, body) = curl(None, &report_url, Some(&format!("MUNGE {captured}")), Some(&real));
    assert_eq!(status, 200, "the agent's own delivery: {body}");
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {captured}")), Some(&real));
    assert_eq!(status, 401, "{body}");
    assert!(body.to_lowercase().contains("replayed"), "{body}");
    let unused = munge_as(None, &payload(&real), None);
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {unused}")), Some(&against_bob));
    assert_eq!(status, 401, "a credential for another body: {body}");
    // A valid root credential made on another node (its munged says 127.0.0.2; vm is 127.0.0.1).
    let other = OtherNodeMunged::start();
    let elsewhere = munge_as(None, &payload(&against_bob), Some(&other.socket()));
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {elsewhere}")), Some(&against_bob));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("127.0.0.2") && body.contains("not from node 'vm'"), "{body}");
    // Even a root credential from the node itself may not name an option as a job, a job that is not
    // on the node, or a node Slurm does not know (nor a hostlist).
    let cred = munge_as(None, &payload(&forged), None);
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {cred}")), Some(&forged));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains(&format!("'{option}' is not a plain Slurm job ID")), "{body}");
    let elsewhere_job = forged_report("vm", &["999999"]);
    let cred = munge_as(None, &payload(&elsewhere_job), None);
    let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {cred}")), Some(&elsewhere_job));
    assert_eq!(status, 403, "{body}");
    for node in ["gpu99", "vm,vm", "--all"] {
        let report = forged_report(node, &[]);
        let cred = munge_as(None, &payload(&report), None);
        let (status, body) = curl(Some(alice), &report_url, Some(&format!("MUNGE {cred}")), Some(&report));
        assert!(status == 400 || status == 403, "{node}: {status} {body}");
    }

    // Nothing happened: the node is up, bob's job runs, nothing was audited, and it was all counted.
    assert!(!node_state().starts_with("drain"), "{}", node_state());
    assert_eq!(job_state(&bobs), "RUNNING");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(!actions.contains("drain") && !actions.contains("requeue"), "{actions}");
    let (_, metrics) = crate::common::http_get(&format!("{}/metrics", site.http_url()));
    for reason in ["unauthenticated", "uid", "replayed", "bad_credential", "address", "job", "node"] {
        assert!(
            metrics.contains(&format!("gputokens_agent_reports_refused_total{{reason=\"{reason}\"}}")),
            "{reason}: {metrics}"
        );
    }
    // Logged once per node and reason, not per report.
    let log = site.log();
    assert_eq!(log.matches("agent report from vm refused (job)").count(), 1, "{log}");

    // The real agent (root, the node's munged) is heard.
    let gpu = "[[gpu]]\nuuid = \"GPU-00000000\"\nname = \"NVIDIA rtx2080\"\nutil_gpu = 55\nutil_mem = 10\n\
               mem_used = 1048576\nmem_total = 25769803776\ntemp = 50\npower_mw = 100000\n";
    let state = site.file("nvml.toml", gpu);
    let config = crate::agent::agent_config(&site);
    crate::agent::report_once(&config, &state);
    let (_, metrics) = crate::common::http_get(&format!("{}/metrics", site.http_url()));
    assert!(
        metrics.contains(r#"gputokens_gpu_utilization_percent{node="vm",gpu="0",uuid="GPU-00000000"} 55.0"#),
        "{metrics}"
    );
    run_as(None, Path::new("/usr/bin/scancel"), &[&bobs]).ok();
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn balances_over_http_follow_sbalance_rules() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "alice", "5", "--reason", "t"]).ok();
    site.accountd(None, &["admin", "grant", "bob", "7", "--reason", "t"]).ok();
    let base = site.http_url();

    let (status, _) = curl(Some("alice"), &format!("{base}/v1/balances"), None, None);
    assert_eq!(status, 401);
    let (status, _) = curl(Some("alice"), &format!("{base}/v1/balances"), Some("MUNGE garbage"), None);
    assert_eq!(status, 401);
    let api = b"gputokens api v1";
    let cred = munge_as(Some("alice"), api, None);
    let (status, body) = curl(Some("alice"), &format!("{base}/v1/balances"), Some(&format!("MUNGE {cred}")), None);
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let users: Vec<&str> = json["users"].as_array().unwrap().iter().map(|u| u["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["alice"], "{body}");
    assert_eq!(json["users"][0]["balance"], "105");
    let cred = munge_as(Some("alice"), api, None);
    let (status, body) = curl(Some("alice"), &format!("{base}/v1/balances/bob"), Some(&format!("MUNGE {cred}")), None);
    assert_eq!(status, 403, "{body}");
    // A credential is good once.
    let (status, _) = curl(Some("alice"), &format!("{base}/v1/balances"), Some(&format!("MUNGE {cred}")), None);
    assert_eq!(status, 401);

    let root = munge_as(None, api, None);
    let (status, body) = curl(None, &format!("{base}/v1/balances"), Some(&format!("MUNGE {root}")), None);
    assert_eq!(status, 200);
    assert!(body.contains("\"alice\"") && body.contains("\"bob\""), "{body}");

    // A credential made for something else is no key to the API: not alice's own `munge -n`, and not
    // one the SlurmUser encoded for another purpose (a job step's, which alice can capture from her
    // own srun), which would otherwise make her the SlurmUser, an admin, here.
    for (maker, payload) in [(Some("alice"), &b""[..]), (Some("slurm"), &b"slurm step credential"[..])] {
        let cred = munge_as(maker, payload, None);
        let (status, body) = curl(Some("alice"), &format!("{base}/v1/balances"), Some(&format!("MUNGE {cred}")), None);
        assert_eq!(status, 401, "{maker:?}: {body}");
        assert!(body.contains("made for the gputokens API"), "{body}");
    }

    // /metrics, readable by anyone who reaches the port, has no per-user balance.
    let (_, metrics) = curl(Some("alice"), &format!("{base}/metrics"), None, None);
    assert!(metrics.contains("gputokens_cycle_duration_seconds"), "{metrics}");
    assert!(!metrics.contains("gputokens_balance_tokens{"), "{metrics}");
}

/// While Slurm is slow to say where a node is (sinfo takes 6 s here), an agent's report waits for
/// it; a header-less, malformed POST arriving meanwhile is refused at once, and sbalance and
/// /metrics are answered within a second: no request waits on another's Slurm command.
#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn a_slow_slurm_stalls_no_other_request() {
    let bin = tempfile::Builder::new().prefix("gputokens-slow-slurm-").tempdir().unwrap();
    let sinfo = bin.path().join("sinfo");
    // The report gate's question (where the node is) leaves a mark as it starts its 6 s.
    let gate_asked = bin.path().join("gate-asked");
    let stub = format!(
        "#!/bin/sh\ncase \"$*\" in *'%N|%o|%n'*) touch {};; esac\nsleep 6\necho 'vm|127.0.0.1|vm|gpu:a6000:2(S:0)'\n",
        gate_asked.display()
    );
    std::fs::write(&sinfo, stub).unwrap();
    std::fs::set_permissions(&sinfo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let site = Site::start(
        "",
        &format!(
            "[intervals]\ncharge = \"1h\"\ncheck = \"1h\"\n[slurm]\nbin_dir = \"{}\"\n[preemption]\nenabled = false\n",
            bin.path().display()
        ),
    );
    let base = site.http_url();
    let report_url = format!("{base}/v1/agent/report");
    let report = forged_report("vm", &[]).replace("\"temperature_c\":120", "\"temperature_c\":40");
    let report = report.replace("\"ecc_uncorrected\":7", "\"ecc_uncorrected\":0").replace("[79,48]", "[]");
    let report = report.replace(r#"{"state":"lost"}"#, r#"{"state":"ok"}"#);
    let cred = munge_as(None, &payload(&report), None);
    let slow = {
        let (url, report) = (report_url.clone(), report.clone());
        std::thread::spawn(move || curl(None, &url, Some(&format!("MUNGE {cred}")), Some(&report)))
    };
    // The requests below are sent while the report waits on sinfo, not before it does.
    crate::cluster::wait_until(10, "the report's sinfo to start", || match gate_asked.exists() {
        true => Ok(()),
        false => Err("no mark yet".into()),
    });
    let asked = Instant::now();
    let (refused, body) = curl(Some("alice"), &report_url, None, Some("{not json"));
    let (scraped, _) = curl(Some("alice"), &format!("{base}/metrics"), None, None);
    let out = site.sbalance(Some("bob"), &["-n", "-P", "-o", "Balance"]);
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(2), "answered in {took:?} while sinfo was slow");
    assert_eq!(refused, 401, "{body}");
    assert_eq!(scraped, 200);
    assert_eq!(out.stdout.trim(), "100", "{}", out.stderr);
    let (status, body) = slow.join().unwrap();
    assert_eq!(status, 200, "the slow report itself is accepted once sinfo answers: {body}");
}

/// A report of node `vm` as its agent would send it: `gpus` GPUs at indices 0.., each named by
/// `uuid(i)`, at 40 °C, holding `jobs`, with energy counter `energy_mj`; it claims an hour's interval.
fn node_report(gpus: u32, uuid: impl Fn(u32) -> String, jobs: &[&str], energy_mj: Option<u64>) -> String {
    use gputokens_node_report::{AgentReport, GpuSample, NodeSample};
    let gpus = (0..gpus)
        .map(|i| GpuSample {
            uuid: Some(uuid(i)),
            temperature_c: Some(40),
            utilization_percent: Some(90),
            energy_mj,
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
            ..GpuSample::empty(i)
        })
        .collect();
    let sample = NodeSample { time: chrono::Utc::now(), gpus, processes: vec![] };
    serde_json::to_string(&AgentReport { node: "vm".into(), sample, interval_secs: Some(3600) }).unwrap()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The audit's N1 and N4 as the node's root (the test runs as root on vm, with vm's munged): it
/// names alice's one-GPU job as the holder of 100 made-up GPUs, then posts 300 reports whose ten
/// GPUs carry fresh UUIDs (3,000 in all), then ten GPUs whose energy counters each rise at 4 kW,
/// all holding her job. Slurm shows 10 GPUs on vm and one on her job: the made-up GPUs are refused,
/// accountd keeps one set of series and a flat memory, and her energy is at most what her one GPU
/// can draw (5 kW) in the time that passed and one interval. The node's real agent is heard after.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_nodes_root_cannot_make_up_gpus_fill_accountd_or_charge_a_job_beyond_its_own_gpus() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n\
         [http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
    );
    let url = format!("{}/v1/agent/report", site.http_url());
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_state(&job) != "RUNNING" {
        assert!(Instant::now() < deadline, "alice's job does not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    let post = |body: &str| {
        let cred = munge_as(None, &payload(body), None);
        curl(None, &url, Some(&format!("MUNGE {cred}")), Some(body))
    };
    let metrics = || crate::common::http_get(&format!("{}/metrics", site.http_url())).1;
    let gpu_series = || metrics().lines().filter(|l| l.starts_with("gputokens_gpu_")).count();

    let (status, body) = post(&node_report(100, |i| format!("GPU-made-up-{i}"), &[&job], None));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("names 100 GPUs: Slurm shows 10 GPUs on node 'vm'"), "{body}");

    for round in 0..10 {
        let (status, body) = post(&node_report(10, |i| format!("GPU-fresh-{round}-{i}"), &[&job], None));
        assert_eq!(status, 200, "{body}");
    }
    let (series, rss) = (gpu_series(), rss_kib(site.pid()));
    for round in 10..300 {
        let (status, body) = post(&node_report(10, |i| format!("GPU-fresh-{round}-{i}"), &[&job], None));
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(gpu_series(), series, "one set of series for vm's ten GPUs, not one per UUID");
    let grown = rss_kib(site.pid()).saturating_sub(rss);
    assert!(grown < 16 << 10, "accountd grew by {grown} KiB over 2,900 fresh GPUs");

    // Ten GPUs, each rising at 4 kW since the last post (a post a second or so), all holding
    // alice's one-GPU job: 40 kW in all, each GPU's rise believable on its own.
    let started = Instant::now();
    let (mut counter, mut last) = (1_000_000_000u64, Instant::now());
    while started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1100));
        counter += (4000.0 * last.elapsed().as_secs_f64() * 1000.0) as u64;
        last = Instant::now();
        let (status, body) = post(&node_report(10, |i| format!("GPU-steady-{i}"), &[&job], Some(counter)));
        assert_eq!(status, 200, "{body}");
    }
    let seconds = started.elapsed().as_secs_f64();
    let series = format!("gputokens_job_gpu_energy_joules_total{{job=\"{job}\",user=\"{alice}\",node=\"vm\"}} ");
    let text = metrics();
    let joules: f64 = text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0.0, |v| v.parse().unwrap());
    // Unbounded, ten GPUs at 4 kW: 40 kW × the seconds. Her one GPU: at most 5 kW × the seconds
    // (and two for accountd's whole-second clock); at least half of that: the cap, not a refusal,
    // is what binds.
    assert!(joules <= 5000.0 * (seconds + 2.0), "{joules} J for alice in {seconds:.1} s");
    assert!(joules >= 2500.0 * seconds, "{joules} J for alice in {seconds:.1} s: her GPU's part was refused");

    // The node's real agent is heard after all that.
    let state = site.file(
        "nvml.toml",
        "[[gpu]]\nuuid = \"GPU-00000000\"\nname = \"NVIDIA rtx2080\"\nutil_gpu = 55\nutil_mem = 10\n\
         mem_used = 1048576\nmem_total = 25769803776\ntemp = 50\npower_mw = 100000\n",
    );
    crate::agent::report_once(&crate::agent::agent_config(&site), &state);
    assert!(metrics().contains(r#"gputokens_gpu_temperature_celsius{node="vm",gpu="0",uuid="GPU-00000000"} 50.0"#));
    run_as(None, Path::new("/usr/bin/scancel"), &[&job]).ok();
}
