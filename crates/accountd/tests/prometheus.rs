//! `usage_source = "prometheus"` against a real Prometheus (Debian package `prometheus`) on loopback,
//! scraping a tiny exporter that serves dcgm-exporter-style `DCGM_FI_DEV_GPU_UTIL` series.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use accountd::utilization::prometheus::{job_utilization, PrometheusError};
// The test's own `Prometheus` is the server it runs: the settings keep the name they had here.
use gputokens::config::Prometheus as PrometheusSource;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const DEADLINE: Duration = Duration::from_secs(30);

/// Job 101 runs on two GPUs (80 % and 90 %, so 85 on average), job 102 on one at 5 %; GPU 3 is idle
/// and has no job, which the default query must leave out.
const METRICS: &str = "\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-00000000-0000-0000-0000-000000000000\",Hostname=\"vm\",hpc_job=\"101\"} 80
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-00000000-0000-0000-0000-000000000001\",Hostname=\"vm\",hpc_job=\"101\"} 90
DCGM_FI_DEV_GPU_UTIL{gpu=\"2\",UUID=\"GPU-00000000-0000-0000-0000-000000000002\",Hostname=\"vm\",hpc_job=\"102\"} 5
DCGM_FI_DEV_GPU_UTIL{gpu=\"3\",UUID=\"GPU-00000000-0000-0000-0000-000000000003\",Hostname=\"vm\",hpc_job=\"\"} 0
";

/// Serves `METRICS` on every request, one connection at a time; the thread dies with the test process.
fn start_exporter() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // Read the request head; the path does not matter.
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                METRICS.len()
            );
            let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(METRICS.as_bytes()));
        }
    });
    addr
}

/// A port nothing listens on right now (the listener is dropped; a race with other processes is unlikely).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Prometheus child; killed on drop so a failing test leaves no server behind.
struct Prometheus {
    child: Child,
    log: PathBuf,
    url: String,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: install the Debian package with \
             `DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus`"
        );
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {PROMETHEUS}: {e}"));
        Prometheus { child, log, url: format!("http://{addr}") }
    }

    /// Panics with the server's log if it has exited.
    fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("prometheus exited ({status}):\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }

    fn wait_ready(&mut self) {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
        let start = Instant::now();
        loop {
            self.check_alive();
            let ready = client.get(format!("{}/-/ready", self.url)).send();
            if ready.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(start.elapsed() < DEADLINE, "prometheus at {} not ready after {DEADLINE:?}", self.url);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn source(url: &str) -> PrometheusSource {
    PrometheusSource::at(url)
}

#[test]
fn job_utilization_from_a_real_prometheus() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let exporter = start_exporter();
    let mut prometheus = Prometheus::start(dir.path(), exporter);
    prometheus.wait_ready();

    let src = source(&prometheus.url);
    let window = Duration::from_secs(60);
    // Poll until a scrape has landed for both jobs (the first comes within about a scrape interval).
    let jobs = loop {
        prometheus.check_alive();
        let jobs = job_utilization(&src, window, now()).unwrap();
        if jobs.len() >= 2 {
            break jobs;
        }
        assert!(started.elapsed() < DEADLINE, "no scrape of both jobs after {DEADLINE:?}: {jobs:?}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(jobs.keys().collect::<Vec<_>>(), ["101", "102"], "{jobs:?}");
    assert!((jobs["101"] - 85.0).abs() < 1e-9, "{jobs:?}");
    assert!((jobs["102"] - 5.0).abs() < 1e-9, "{jobs:?}");

    // Before any scrape there is no data: an empty answer, not an error.
    assert!(job_utilization(&src, window, now() - 3600).unwrap().is_empty());

    // A query not aggregated by job gives one series per GPU: refused rather than guessed at.
    let per_gpu = PrometheusSource { query: "DCGM_FI_DEV_GPU_UTIL{hpc_job=\"101\"}".into(), ..src.clone() };
    let e = job_utilization(&per_gpu, window, now()).unwrap_err();
    assert!(matches!(e, PrometheusError::DuplicateJob { ref job } if job == "101"), "{e:?}");

    let bad = PrometheusSource { query: "avg by (hpc_job) (".into(), ..src.clone() };
    let e = job_utilization(&bad, window, now()).unwrap_err();
    assert!(matches!(e, PrometheusError::Query { status: 400, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("bad_data") && text.contains("parse error"), "{text}");

    let range = PrometheusSource { query: "DCGM_FI_DEV_GPU_UTIL[$window]".into(), ..src };
    let e = job_utilization(&range, window, now()).unwrap_err();
    assert!(matches!(e, PrometheusError::NotVector(ref t) if t == "matrix"), "{e:?}");
    eprintln!("prometheus test took {:?}", started.elapsed());
}

#[test]
fn unreachable_prometheus_is_named() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let src = PrometheusSource { timeout: Duration::from_secs(2), ..source(&url) };
    let e = job_utilization(&src, Duration::from_secs(60), now()).unwrap_err();
    assert!(matches!(e, PrometheusError::Unreachable { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&url) && text.contains("refused"), "{text}");
}

/// `accountd serve` with `[usage] source = "prometheus"`: each check cycle reads job utilization from
/// the real server, shows it on /metrics and flags the job that stays below the idle threshold.
#[test]
fn serve_reads_usage_from_prometheus_and_flags_the_idle_job() {
    let dir = tempfile::tempdir().unwrap();
    let exporter = start_exporter();
    let mut prometheus = Prometheus::start(dir.path(), exporter);
    prometheus.wait_ready();
    let d = dir.path().display();
    let config = dir.path().join("gputokens.toml");
    std::fs::write(
        &config,
        format!(
            "[paths]\nledger = \"{d}/ledger.sqlite\"\nsnapshot = \"{d}/balances.snapshot\"\nsocket = \"{d}/accountd.sock\"\n\
             [intervals]\ncheck = \"1s\"\n[slurm]\nbin_dir = \"{d}/no-slurm\"\n[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n\
             [usage]\nsource = \"prometheus\"\nidle_threshold_percent = 10\nidle_window = \"2s\"\n\
             idle_command = [\"/usr/bin/touch\", \"{d}/idle-{{job}}\"]\n[prometheus]\nurl = \"{}\"\n",
            prometheus.url
        ),
    )
    .unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_accountd")).arg("config").arg("check").arg(&config).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    let log = dir.path().join("serve.log");
    let mut serve = ServeGuard(
        Command::new(env!("CARGO_BIN_EXE_accountd"))
            .args(["--config", config.to_str().unwrap(), "serve"])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let start = Instant::now();
    let metrics_url = loop {
        if let Some(addr) = read_log().lines().find_map(|l| l.split("JSON API on ").nth(1).map(str::to_string)) {
            break format!("{}/metrics", addr.trim());
        }
        assert!(start.elapsed() < DEADLINE && serve.0.try_wait().unwrap().is_none(), "serve: {}", read_log());
        std::thread::sleep(Duration::from_millis(50));
    };
    let client = reqwest::blocking::Client::new();
    loop {
        prometheus.check_alive();
        let metrics = client.get(&metrics_url).send().unwrap().text().unwrap();
        // The job series (served with per_user_metrics); no Slurm here knows the jobs' users.
        let busy = "gputokens_job_gpu_utilization_percent{job=\"101\",user=\"unknown\",node=\"\"} 85.0";
        let idle = "gputokens_job_idle{job=\"102\",user=\"unknown\",node=\"\"} 1";
        if metrics.contains(busy) && metrics.contains(idle) && dir.path().join("idle-102").exists() {
            assert!(metrics.contains("gputokens_job_idle{job=\"101\",user=\"unknown\",node=\"\"} 0"), "{metrics}");
            assert!(!dir.path().join("idle-101").exists());
            break;
        }
        assert!(start.elapsed() < DEADLINE, "no usage from prometheus:\n{metrics}\n{}", read_log());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(read_log().contains("flagged idle"), "{}", read_log());
    let _ = serve.0.kill();
}

struct ServeGuard(Child);

impl Drop for ServeGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
