//! The NVML node agent end to end: real Slurm jobs on the test cluster, GPUs simulated by the fake
//! libnvidia-ml (the real nvml-wrapper code path), reports to a real `accountd serve`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster::{sbatch, serial};
use crate::common::{bin, http_get, run_as, Site};

/// A process of `job` (its batch script), from `scontrol listpids`.
pub fn pid_of(job: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run_as(None, Path::new("/usr/bin/scontrol"), &["listpids", job]);
        let pid = out.stdout.lines().skip(1).find_map(|l| l.split_whitespace().next()?.parse().ok());
        if let Some(pid) = pid {
            return pid;
        }
        assert!(Instant::now() < deadline, "job {job} has no processes: {}{}", out.stdout, out.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Eight GPUs like the cluster's gres.conf; the busy job's process on GPU 6, the idle one's on GPU 4.
fn fake_state(busy_pid: u32, idle_pid: u32) -> String {
    let mut state = String::new();
    for (i, (name, util)) in [
        ("rtx2080", 0),
        ("rtx2080", 0),
        ("rtx2080", 0),
        ("rtx2080", 0),
        ("rtx3090", 1),
        ("rtx3090", 0),
        ("a6000", 90),
        ("a6000", 0),
    ]
    .iter()
    .enumerate()
    {
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"NVIDIA {name}\"\nutil_gpu = {util}\nutil_mem = 10\nmem_used = 1048576\n\
             mem_total = 25769803776\ntemp = 50\npower_mw = 100000\n"
        );
    }
    state
        + &format!(
            "[[process]]\npid = {busy_pid}\ngpu = 6\nused_memory = 2097152\nsm_util = 88\n\
         [[process]]\npid = {idle_pid}\ngpu = 4\nused_memory = 1048576\nsm_util = 0\n"
        )
}

/// Writes an agent config reporting to `site`, with the fake NVML library; returns its path.
pub fn agent_config(site: &Site) -> String {
    agent_config_with(site, "")
}

/// The same, with more `[agent]` keys. Its jobs_dir is, unless `more` says, where the test cluster's
/// spank_gputokens.so records each job's GPUs and owner: a process's SLURM_JOB_ID counts only for a
/// job recorded there for the process's owner.
fn agent_config_with(site: &Site, more: &str) -> String {
    let jobs_dir = match more.contains("jobs_dir") {
        true => String::new(),
        false => format!("jobs_dir = \"{}\"\n", crate::spank::jobs_dir().display()),
    };
    site.file(
        "agent.toml",
        &format!(
            "[agent]\nreport_to = \"{}\"\nnvml_library = \"{}\"\nlisten = \"off\"\ninterval = \"1s\"\n{jobs_dir}{more}",
            site.http_url(),
            bin("libnvidia_ml.so").display()
        ),
    )
}

/// One `accountd agent --once` with the fake NVML state `state`.
pub fn report_once(agent_config: &str, state: &str) {
    let out = Command::new(bin("accountd"))
        .args(["--config", agent_config, "agent", "--node", "vm", "--once"])
        .env("FAKE_NVML_STATE", state)
        .output()
        .unwrap();
    assert!(out.status.success(), "agent: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn agent_reports_job_utilization_and_accountd_flags_the_idle_job() {
    let _cluster = serial();
    let site = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[usage]\nidle_threshold_percent = 5\nidle_window = \"1s\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
    );
    let busy = sbatch("alice", &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let idle = sbatch("bob", &["--gres=gpu:rtx3090:1", "--wrap", "sleep 60"]);
    let state = site.file("nvml-state.toml", &fake_state(pid_of(&busy), pid_of(&idle)));
    let config = agent_config(&site);
    report_once(&config, &state);
    std::thread::sleep(Duration::from_millis(1500));
    report_once(&config, &state);

    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    run_as(None, Path::new("/usr/bin/scancel"), &[&busy, &idle]).ok();
    let busy_util = format!("gputokens_job_gpu_utilization_percent{{job=\"{busy}\",user=\"alice\",node=\"vm\"}} 90.0");
    assert!(metrics.contains(&busy_util), "{metrics}");
    assert!(
        metrics.contains(&format!("gputokens_job_idle{{job=\"{busy}\",user=\"alice\",node=\"vm\"}} 0")),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("gputokens_job_idle{{job=\"{idle}\",user=\"bob\",node=\"vm\"}} 1")), "{metrics}");
    assert!(
        metrics.contains("gputokens_gpu_utilization_percent{node=\"vm\",gpu=\"6\",uuid=\"GPU-00000006\"} 90.0"),
        "{metrics}"
    );
    assert!(site.log().contains("flagged idle"), "{}", site.log());
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn measured_basis_charges_by_reported_utilization() {
    let _cluster = serial();
    std::thread::sleep(Duration::from_secs(2));
    let site = Site::with_prices(
        "",
        "[prices]\na6000 = 3600\nrtx3090 = 900\n",
        "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1m\"\n[preemption]\nenabled = false\n[usage]\ncharge_basis = \"measured\"\nmeasured_min_fraction = 0.25\n",
    );
    site.accountd(None, &["tick"]).ok();
    let busy = sbatch("alice", &["--gres=gpu:a6000:1", "--wrap", "sleep 6"]);
    let idle = sbatch("bob", &["--gres=gpu:rtx3090:1", "--wrap", "sleep 6"]);
    // alice's GPU at 90 % (fake GPU 6), bob's at 1 % (GPU 4): he pays the 25 % minimum.
    let state = site.file("nvml-state.toml", &fake_state(pid_of(&busy), pid_of(&idle)));
    report_once(&agent_config(&site), &state);
    crate::cluster::wait_finished(&busy);
    crate::cluster::wait_finished(&idle);
    site.accountd(None, &["tick"]).ok();

    let elapsed = |job: &str| -> u64 {
        crate::cluster::sacct(&["-j", job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap()
    };
    use gputokens::pricing::cost;
    use gputokens::Tokens;
    assert_eq!(site.balance("alice"), (Tokens::whole(100) - cost(Tokens::whole(3240), elapsed(&busy))).to_string());
    assert_eq!(site.balance("bob"), (Tokens::whole(100) - cost(Tokens::whole(225), elapsed(&idle))).to_string());
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_whose_processes_the_agent_cannot_see_is_measured_on_its_recorded_gpus() {
    let _cluster = serial();
    crate::spank::remove_stale_records();
    let site = Site::start("", "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n");
    let jobs_dir = crate::spank::jobs_dir();
    let job = sbatch("alice", &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let record = jobs_dir.join(&job);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !record.exists() {
        assert!(Instant::now() < deadline, "no {}", record.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let gpu: usize = text.lines().find_map(|l| l.strip_prefix("gpus=")).and_then(|g| g.parse().ok()).expect(&text);
    // The job's process is nowhere in NVML's list (as from a container): only the record ties GPU and job.
    let mut state: String = (0..8)
        .map(|i| {
            format!(
                "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"fake\"\nutil_gpu = {}\nmem_used = 4096\nmem_total = 8192\n",
                10 + 10 * i
            )
        })
        .collect();
    state += "[[process]]\npid = 1\ngpu = 0\nused_memory = 1\n";
    let state = site.file("nvml-state.toml", &state);
    let config = agent_config_with(&site, &format!("jobs_dir = \"{}\"\n", jobs_dir.display()));
    report_once(&config, &state);

    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    // Without per_user_metrics (the default) the job's series name no user.
    let series = format!("gputokens_job_gpu_utilization_percent{{job=\"{job}\",user=\"\",node=\"vm\"}}");
    let line = metrics.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("no {series}:\n{metrics}"));
    assert_eq!(line, format!("{series} {}.0", 10 + 10 * gpu), "GPU {gpu}");
    let memory = format!("gputokens_job_gpu_memory_bytes{{job=\"{job}\",user=\"\",node=\"vm\"}} 4096.0");
    assert!(metrics.contains(&memory), "{metrics}");

    // The job ends, its epilog removes the record: the next report no longer has it.
    run_as(None, Path::new("/usr/bin/scancel"), &[&job]).ok();
    let deadline = Instant::now() + Duration::from_secs(30);
    while record.exists() {
        assert!(Instant::now() < deadline, "{} still there after scancel", record.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    report_once(&config, &state);
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(!metrics.contains(&series), "{metrics}");
}
