//! GPU health against the real cluster: the real agent (loop mode, fake libnvidia-ml, XIDs through
//! nvml-wrapper's event sets), a real `accountd serve`, real `scontrol` drains of node `vm`. Only
//! hardware faults drain, and a restarted accountd does not drain again for a fault an admin resumed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::serial;
use crate::common::{bin, http_get, run_as, Site};

/// Resumes `vm` however the test ends: other tests share the node.
struct ResumeNode;

impl Drop for ResumeNode {
    fn drop(&mut self) {
        let _ = Command::new("/usr/bin/scontrol").args(["update", "nodename=vm", "state=resume"]).output();
    }
}

/// `gputokens-agent` sampling every second until dropped.
pub(crate) struct Agent(Child);

impl Agent {
    pub(crate) fn start(site: &Site, state: &Path) -> Agent {
        let config = crate::agent::agent_config(site);
        let log = std::fs::File::create(site.path("agent.log")).unwrap();
        let child = Command::new(bin("gputokens-agent"))
            .args(["--config", &config, "--node", "vm"])
            .env("FAKE_NVML_STATE", state)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start gputokens-agent");
        Agent(child)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

/// The fake GPUs: eight like gres.conf. GPU 0's utilization is a tick that tells reports apart.
#[derive(Clone)]
pub(crate) struct Gpus {
    tick: u32,
    temp: [u32; 8],
    pub(crate) xids: [Vec<u64>; 8],
    /// NVML says the GPU slows its clocks down for heat (written only when true).
    pub(crate) slowed_for_heat: [bool; 8],
}

impl Gpus {
    /// GPU 7's temperature at `tick`: 10 to 39 °C, a different one each tick.
    fn tick_temperature(tick: u32) -> u32 {
        10 + tick % 30
    }

    pub(crate) fn new() -> Gpus {
        Gpus { tick: 0, temp: [50; 8], xids: Default::default(), slowed_for_heat: [false; 8] }
    }

    pub(crate) fn text(&self) -> String {
        (0..8)
            .map(|i| {
                let util = if i == 0 { self.tick } else { 0 };
                // GPU 7's temperature carries the tick too: a public series, whatever the site's
                // per_user_metrics (it stays far below any max_temperature).
                let temp = if i == 7 { Gpus::tick_temperature(self.tick) } else { self.temp[i] };
                let slowed = if self.slowed_for_heat[i] { "thermal_slowdown = true\n" } else { "" };
                format!(
                    "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"NVIDIA GPU\"\nutil_gpu = {util}\nmem_used = 0\n\
                     mem_total = 25769803776\ntemp = {temp}\necc_uncorrected = 0\nxids = {:?}\n{slowed}",
                    self.xids[i]
                )
            })
            .collect()
    }
}

/// Writes the state (by rename: the fake never reads half a file) and waits until accountd has wholly
/// taken a report made after it: reports are posted one at a time, so once a second state's report
/// shows on /metrics, the first one's is done.
pub(crate) fn settle(site: &Site, path: &Path, gpus: &mut Gpus) {
    for _ in 0..2 {
        gpus.tick += 1;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, gpus.text()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        let series = format!(
            "gputokens_gpu_temperature_celsius{{node=\"vm\",gpu=\"7\",uuid=\"GPU-00000007\"}} {}.0",
            Gpus::tick_temperature(gpus.tick)
        );
        wait_for(site, &format!("a report with tick {}", gpus.tick), || metrics(site).contains(&series));
    }
}

fn metrics(site: &Site) -> String {
    http_get(&format!("{}/metrics", site.http_url())).1
}

fn wait_for(site: &Site, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        let agent = std::fs::read_to_string(site.path("agent.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "no {what}:\nagent: {agent}\nserve: {}", site.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `vm`'s state and drain reason (`none` without one).
pub(crate) fn node() -> (String, String) {
    let sinfo = |f: &str| run_as(None, Path::new("/usr/bin/sinfo"), &["-h", "-n", "vm", "-o", f]).ok().stdout;
    (sinfo("%t").trim().to_string(), sinfo("%E").trim().to_string())
}

pub(crate) fn drained() -> bool {
    let (state, _) = node();
    state.starts_with("drain") || state.starts_with("drng")
}

fn drain_rows(site: &Site) -> Vec<String> {
    let out = site.accountd(None, &["admin", "actions"]).ok().stdout;
    out.lines().filter(|l| l.split_whitespace().any(|w| w == "drain")).map(str::to_string).collect()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn only_hardware_faults_drain_and_a_resumed_node_stays_resumed_across_a_restart() {
    let _cluster = serial();
    let _resume = ResumeNode;
    let mut site = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n\
         [http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n\
         [health]\nmax_temperature = 85\ntemperature_for = \"30s\"\nrepeat_after = \"1d\"\n",
    );
    let state = site.path("nvml-state.toml");
    let mut gpus = Gpus::new();
    // Written before the agent starts: it registers for XIDs on its first sample.
    std::fs::write(&state, gpus.text()).unwrap();
    let agent = Agent::start(&site, &state);
    settle(&site, &state, &mut gpus);
    assert!(!drained(), "{:?}", node());

    // XID 13 (graphics engine exception) is what any user's program can cause: counted, logged, no drain.
    gpus.xids[2].push(13);
    settle(&site, &state, &mut gpus);
    assert!(!drained(), "drained for XID 13: {:?}", node());
    assert_eq!(node().1, "none");
    assert!(
        metrics(&site).contains("gputokens_gpu_xids_ignored_total{node=\"vm\",xid=\"13\"} 1"),
        "{}",
        metrics(&site)
    );
    assert_eq!(site.log().matches("reported XID 13, an application error").count(), 1, "{}", site.log());

    // A few seconds above max_temperature, shorter than temperature_for: no drain.
    gpus.temp[5] = 95;
    settle(&site, &state, &mut gpus);
    settle(&site, &state, &mut gpus);
    gpus.temp[5] = 50;
    settle(&site, &state, &mut gpus);
    assert!(!drained(), "drained for a short spike: {:?}", node());

    // XID 79 (fell off the bus) is a hardware fault: drained once.
    gpus.xids[1].push(79);
    settle(&site, &state, &mut gpus);
    settle(&site, &state, &mut gpus);
    let (state_now, reason) = node();
    assert!(drained(), "not drained for XID 79: {state_now}");
    assert_eq!(reason, "gputokens: GPU 1 reported XID 79");
    assert_eq!(drain_rows(&site).len(), 1, "{:?}", drain_rows(&site));

    // The admin resumes the node; accountd restarts on the same ledger; XID 79 again, within
    // repeat_after: the same fault, not drained again.
    run_as(None, Path::new("/usr/bin/scontrol"), &["update", "nodename=vm", "state=resume"]).ok();
    assert!(!drained(), "{:?}", node());
    drop(agent);
    site.restart();
    let _agent = Agent::start(&site, &state);
    settle(&site, &state, &mut gpus);
    gpus.xids[1].push(79);
    settle(&site, &state, &mut gpus);
    settle(&site, &state, &mut gpus);
    assert!(!drained(), "drained again after the restart: {:?}", node());
    assert_eq!(drain_rows(&site).len(), 1, "{:?}", drain_rows(&site));
    assert!(site.log().contains("already acted on"), "{}", site.log());
    site.accountd(None, &["admin", "verify"]).ok();
}
