//! The NVML node agent end to end: real Slurm jobs on the test cluster, GPUs simulated by the fake
//! libnvidia-ml (the real nvml-wrapper code path), reports to a real `accountd serve`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster::{sbatch, serial, wait_until};
use crate::common::{bin, http_get, run_as, Site};

/// A process of `job` (its batch script), from `scontrol listpids`. With proctrack/cgroup the list
/// also holds the step's slurmstepd, which has no task ID ("-").
pub fn pid_of(job: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run_as(None, Path::new("/usr/bin/scontrol"), &["listpids", job]);
        let pid = out.stdout.lines().skip(1).find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            match fields.as_slice() {
                [pid, _job, _step, local_id, ..] if *local_id != "-" => pid.parse().ok(),
                _ => None,
            }
        });
        if let Some(pid) = pid {
            return pid;
        }
        assert!(Instant::now() < deadline, "job {job} has no processes: {}{}", out.stdout, out.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Eight GPUs like the cluster's gres.conf; the busy job's process on GPU 6, the idle one's on GPU 4.
pub(crate) fn fake_state(busy_pid: u32, idle_pid: u32) -> String {
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

/// One `gputokens-agent --once` with the fake NVML state `state`.
pub fn report_once(agent_config: &str, state: &str) {
    let out = Command::new(bin("gputokens-agent"))
        .args(["--config", agent_config, "--node", "vm", "--once"])
        .env("FAKE_NVML_STATE", state)
        .output()
        .unwrap();
    assert!(out.status.success(), "agent: {}", String::from_utf8_lossy(&out.stderr));
}

/// A site that charges from the cluster, preempts nothing and flags a job idle after a second
/// below 5 %, with per-job metrics.
fn idle_watching_site() -> Site {
    Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[usage]\nidle_threshold_percent = 5\nidle_window = \"1s\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
    )
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn agent_reports_job_utilization_and_accountd_flags_the_idle_job() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = idle_watching_site();
    let busy = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let idle = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 60"]);
    let state = site.file("nvml-state.toml", &fake_state(pid_of(&busy), pid_of(&idle)));
    let config = agent_config(&site);
    report_once(&config, &state);
    // One report below the threshold is not yet idle_window (1 s) of it.
    let idle_flag = format!("gputokens_job_idle{{job=\"{idle}\",user=\"{bob}\",node=\"vm\"}} ");
    let (_, first) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(first.contains(&format!("{idle_flag}0")), "flagged idle at its first report:\n{first}");
    // The agent reports again and again: the job is flagged once accountd has seen it below the
    // threshold for the idle window, by its own clock.
    let metrics = wait_until(30, &format!("job {idle} flagged idle"), || {
        report_once(&config, &state);
        let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
        match metrics.contains(&format!("{idle_flag}1")) {
            true => Ok(metrics),
            false => {
                Err(metrics.lines().filter(|l| l.starts_with("gputokens_job_idle")).collect::<Vec<_>>().join("; "))
            }
        }
    });
    run_as(None, Path::new("/usr/bin/scancel"), &[&busy, &idle]).ok();
    let busy_util =
        format!("gputokens_job_gpu_utilization_percent{{job=\"{busy}\",user=\"{alice}\",node=\"vm\"}} 90.0");
    assert!(metrics.contains(&busy_util), "{metrics}");
    assert!(
        metrics.contains(&format!("gputokens_job_idle{{job=\"{busy}\",user=\"{alice}\",node=\"vm\"}} 0")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("gputokens_job_idle{{job=\"{idle}\",user=\"{bob}\",node=\"vm\"}} 1")),
        "{metrics}"
    );
    assert!(metrics.contains("gputokens_idle_jobs{node=\"vm\"} 1"), "one of the node's two jobs: {metrics}");
    assert!(
        metrics.contains("gputokens_gpu_utilization_percent{node=\"vm\",gpu=\"6\",uuid=\"GPU-00000006\"} 90.0"),
        "{metrics}"
    );
    assert!(site.log().contains("flagged idle"), "{}", site.log());
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn measured_basis_charges_by_reported_utilization() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::with_prices(
        "",
        "[prices]\na6000 = 3600\nrtx3090 = 900\n",
        "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1m\"\n[preemption]\nenabled = false\n[usage]\ncharge_basis = \"measured\"\nmeasured_min_fraction = 0.25\n",
    );
    site.accountd(None, &["tick"]).ok();
    let busy = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 6"]);
    let idle = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 6"]);
    // alice's GPU at 90 % (fake GPU 6), bob's at 1 % (GPU 4): he pays the 25 % minimum.
    let state = site.file("nvml-state.toml", &fake_state(pid_of(&busy), pid_of(&idle)));
    report_once(&agent_config(&site), &state);
    crate::cluster::wait_finished(&busy);
    crate::cluster::wait_finished(&idle);
    site.accountd(None, &["tick"]).ok();

    let elapsed = |job: &str| -> u64 {
        crate::cluster::sacct(&["-j", job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap()
    };
    use crate::by_hand::gpu_cost as cost;
    use gputokens::Tokens;
    assert_eq!(site.balance(alice), (Tokens::whole(100) - cost(Tokens::whole(3240), elapsed(&busy))).to_string());
    assert_eq!(site.balance(bob), (Tokens::whole(100) - cost(Tokens::whole(225), elapsed(&idle))).to_string());
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_whose_processes_the_agent_cannot_see_is_measured_on_its_recorded_gpus() {
    let cluster = serial();
    let alice = cluster.alice;
    crate::spank::remove_stale_records();
    let site = Site::start("", "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n");
    let jobs_dir = crate::spank::jobs_dir();
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
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
    // Without per_user_metrics (the default) no series names the job or its user: the node's
    // count of idle jobs stands for them.
    assert!(!metrics.contains(&format!("job=\"{job}\"")), "{metrics}");
    assert!(!metrics.contains(&format!("\"{alice}\"")), "{metrics}");
    assert!(metrics.contains("gputokens_idle_jobs{node=\"vm\"} 0"), "{metrics}");
    let per_user = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
    );
    let config = agent_config_with(&per_user, &format!("jobs_dir = \"{}\"\n", jobs_dir.display()));
    report_once(&config, &state);
    let (_, metrics) = http_get(&format!("{}/metrics", per_user.http_url()));
    let series = format!("gputokens_job_gpu_utilization_percent{{job=\"{job}\",user=\"{alice}\",node=\"vm\"}}");
    let line = metrics.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("no {series}:\n{metrics}"));
    assert_eq!(line, format!("{series} {}.0", 10 + 10 * gpu), "GPU {gpu}");
    let memory = format!("gputokens_job_gpu_memory_bytes{{job=\"{job}\",user=\"{alice}\",node=\"vm\"}} 4096.0");
    assert!(metrics.contains(&memory), "{metrics}");
    let site = per_user;

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

/// Issue 37's shared GPU on the test cluster: alice's busy job and bob's idle one recorded on one GPU
/// (as gres/shard or MPS give them; the test writes the records as the prolog would, in a jobs_dir
/// of its own), and a process of bob's outside Slurm claiming alice's job. accountd reads each job's
/// own use, flags bob's job idle after idle_window and not alice's, and gives neither the claimant.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn jobs_sharing_a_gpu_are_measured_by_their_own_processes_and_the_idle_one_is_flagged() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = idle_watching_site();
    let busy = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let idle = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let uid = |user: &str| run_as(None, Path::new("/usr/bin/id"), &["-u", user]).ok().stdout.trim().to_string();
    let jobs_dir = tempfile::tempdir().unwrap();
    for (job, user) in [(&busy, alice), (&idle, bob)] {
        pid_of(job);
        // The run's SLUID (25.11+) as the job's prolog recorded it: 26.05 names job cgroups by it.
        let prolog = std::fs::read_to_string(crate::spank::jobs_dir().join(job)).unwrap_or_default();
        let sluid = prolog.lines().find(|l| l.starts_with("sluid=")).map(|l| format!("{l}\n")).unwrap_or_default();
        let record = format!("gpus=6\nuuids=GPU-00000006\nuid={}\n{sluid}", uid(user));
        std::fs::write(jobs_dir.path().join(job), record).unwrap();
    }
    let mut claimant = Command::new("/usr/bin/setpriv")
        .args(["--reuid", &uid(bob), "--regid", &uid(bob), "--clear-groups", "/usr/bin/env"])
        .arg(format!("SLURM_JOB_ID={busy}"))
        .args(["/bin/sleep", "60"])
        .spawn()
        .unwrap();
    // GPU 6 at 100 %: alice's process 95 %, bob's 0 %, the claimant 0 % with 3 MiB.
    let mut state: String = (0..8)
        .map(|i| {
            let util = if i == 6 { 100 } else { 0 };
            format!(
                "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"fake\"\nutil_gpu = {util}\nmem_used = 1\nmem_total = 8192\n"
            )
        })
        .collect();
    state += &format!(
        "[[process]]\npid = {}\ngpu = 6\nused_memory = 2097152\nsm_util = 95\n\
         [[process]]\npid = {}\ngpu = 6\nused_memory = 1048576\nsm_util = 0\n\
         [[process]]\npid = {}\ngpu = 6\nused_memory = 3145728\nsm_util = 0\n",
        pid_of(&busy),
        pid_of(&idle),
        claimant.id()
    );
    let state = site.file("nvml-state.toml", &state);
    let config = agent_config_with(&site, &format!("jobs_dir = \"{}\"\n", jobs_dir.path().display()));
    let series =
        |name: &str, job: &str, user: &str| format!("gputokens_{name}{{job=\"{job}\",user=\"{user}\",node=\"vm\"}} ");
    let metrics = wait_until(30, &format!("job {idle} flagged idle"), || {
        report_once(&config, &state);
        let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
        match metrics.contains(&format!("{}1", series("job_idle", &idle, bob))) {
            true => Ok(metrics),
            false => Err(metrics.lines().filter(|l| l.contains("gputokens_job_")).collect::<Vec<_>>().join("; ")),
        }
    });
    let _ = claimant.kill();
    let _ = claimant.wait();
    run_as(None, Path::new("/usr/bin/scancel"), &[&busy, &idle]).ok();
    for (line, why) in [
        (format!("{}95.0", series("job_gpu_utilization_percent", &busy, alice)), "alice's own process"),
        (format!("{}0.0", series("job_gpu_utilization_percent", &idle, bob)), "bob's own, not the GPU's 100"),
        (format!("{}2097152.0", series("job_gpu_memory_bytes", &busy, alice)), "not the claimant's 3 MiB"),
        (format!("{}0", series("job_idle", &busy, alice)), "the busy job is not idle"),
        (format!("{}1", series("job_idle", &idle, bob)), "the idle one is"),
    ] {
        assert!(metrics.contains(&line), "{why}: no {line}\n{metrics}");
    }
}

/// The release's cgroup naming, as the test cluster's slurmd runs it: `GPUTOKENS_CGROUP=v2` (set by
/// tests/slurm-releases/enter.sh for 24.11 and 26.05) means Slurm's cgroup/v2 with proctrack/cgroup.
fn cgroup_v2() -> bool {
    std::env::var("GPUTOKENS_CGROUP").as_deref() == Ok("v2")
}

/// The cluster's slurmd restarted by up.sh with `cgroup_conf` as extra cgroup.conf lines; back to the
/// plain cluster when dropped.
struct CgroupConf;

impl CgroupConf {
    fn set(extra: &str) -> CgroupConf {
        up_with_cgroup_conf(extra);
        CgroupConf
    }
}

impl Drop for CgroupConf {
    fn drop(&mut self) {
        up_with_cgroup_conf("");
    }
}

fn up_with_cgroup_conf(extra: &str) {
    let up = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cluster/up.sh");
    let out = Command::new("bash").arg(up).env("GPUTOKENS_CGROUP_CONF", extra).output().unwrap();
    assert!(
        out.status.success(),
        "up.sh: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A job's SLUID, from the SPANK record of its GPUs on the node (the prolog's SLURM_JOB_SLUID).
fn recorded_sluid(job: &str) -> Option<String> {
    let record = crate::spank::jobs_dir().join(job);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !record.exists() {
        assert!(Instant::now() < deadline, "no {}", record.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&record).unwrap();
    text.lines().find_map(|l| l.strip_prefix("sluid=")).map(str::to_owned)
}

/// alice's job 1 runs its GPU process with `SLURM_JOB_ID` of her job 2 in its environment. Her process
/// is in job 1's cgroup, which Slurm named (job_<id>, or on 26.05 by default the job's SLUID): the agent
/// counts it for job 1, so job 2's utilization is its own GPU's alone. Returns the process's cgroup.
/// `alice`: the test's own (`serial()`).
fn cgroup_names_the_job_whatever_the_environment_says(site: &Site, alice: &str) -> String {
    let claimed = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    let liar = sbatch(alice, &["--gres=gpu:rtx3090:1", "--wrap", &format!("SLURM_JOB_ID={claimed} exec sleep 60")]);
    let (liar_pid, claimed_pid) = (pid_of(&liar), pid_of(&claimed));
    // pid_of may find the batch shell before its exec: wait for the exec'd sleep's environment.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read(format!("/proc/{liar_pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == format!("SLURM_JOB_ID={claimed}").as_bytes()))
    {
        assert!(Instant::now() < deadline, "job {liar}'s process never claimed job {claimed}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cgroup = std::fs::read_to_string(format!("/proc/{liar_pid}/cgroup")).unwrap();
    // The liar's process on GPU 4 at 80 %, the claimed job's on GPU 6 at 10 %.
    let mut state = String::new();
    for i in 0..8 {
        let util = match i {
            4 => 80,
            6 => 10,
            _ => 0,
        };
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"fake\"\nutil_gpu = {util}\nmem_used = 1\nmem_total = 8192\n"
        );
    }
    state += &format!(
        "[[process]]\npid = {liar_pid}\ngpu = 4\nused_memory = 1\nsm_util = 80\n\
         [[process]]\npid = {claimed_pid}\ngpu = 6\nused_memory = 1\nsm_util = 10\n"
    );
    let state = site.file("nvml-state.toml", &state);
    report_once(&agent_config(site), &state);
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    run_as(None, Path::new("/usr/bin/scancel"), &[&liar, &claimed]).ok();
    let util =
        |job: &str| format!("gputokens_job_gpu_utilization_percent{{job=\"{job}\",user=\"{alice}\",node=\"vm\"}}");
    assert!(metrics.contains(&format!("{} 80.0", util(&liar))), "{cgroup}{metrics}");
    // Counted for job 2, the liar's GPU would have raised its mean to 45.
    assert!(metrics.contains(&format!("{} 10.0", util(&claimed))), "{cgroup}{metrics}");
    // The SLUID the cgroup may be named by, as the prolog recorded it.
    match recorded_sluid(&liar) {
        Some(sluid) if cgroup.contains(&format!("/{sluid}/")) => format!("{cgroup}(SLUID {sluid} of job {liar})"),
        _ => {
            assert!(cgroup.contains(&format!("/job_{liar}/")), "{cgroup}");
            cgroup
        }
    }
}

/// 24.11 and 26.05 with Slurm's cgroup/v2: 26.05 names a job's cgroup by its SLUID by default
/// (`CgroupJobIdPaths=no`), `job_<id>` with `CgroupJobIdPaths=yes` and on 24.11; the agent maps the
/// process to its job either way and never by its environment. (22.05's test cluster runs without
/// cgroups: tests/slurm-releases/enter.sh.)
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_agent_maps_a_process_by_its_slurm_cgroup_sluid_or_job_id() {
    let cluster = serial();
    let alice = cluster.alice;
    if !cgroup_v2() {
        eprintln!("the test cluster runs without cgroups here (GPUTOKENS_CGROUP unset): nothing to map by");
        return;
    }
    crate::spank::remove_stale_records();
    // A fresh accountd for each round: one that asked Slurm for the node's jobs within the last
    // seconds refuses reports naming jobs it has not seen yet (report_gate's JOBS_REFRESH).
    let site = || {
        Site::start(
            "",
            "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
        )
    };
    let release = std::env::var("GPUTOKENS_SLURM_RELEASE").unwrap_or_default();
    let seen = cgroup_names_the_job_whatever_the_environment_says(&site(), alice);
    eprintln!("Slurm {release}, default cgroup.conf: {seen}");
    match release.as_str() {
        "26.05" => {
            assert!(seen.contains("(SLUID "), "26.05 names the job's cgroup by its SLUID: {seen}");
            let _restored_after = CgroupConf::set("CgroupJobIdPaths=yes");
            let seen = cgroup_names_the_job_whatever_the_environment_says(&site(), alice);
            eprintln!("Slurm 26.05, CgroupJobIdPaths=yes: {seen}");
            assert!(!seen.contains("(SLUID "), "{seen}");
        }
        _ => assert!(!seen.contains("(SLUID "), "{seen}"),
    }
}

/// The old audit's L4, end to end: with `[agent] auth = "token"` the agent signs each report with
/// its node's token (which never travels) and accountd takes it; a token file others can read is
/// refused by both.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn token_mode_reports_are_signed_with_a_private_node_token() {
    use std::os::unix::fs::PermissionsExt;
    let _cluster = serial();
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "site-s3cret\n").unwrap();
    std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let site = Site::start(
        "",
        &format!(
            "[slurm]\nfirst_lookback = \"1s\"\n[agent]\nauth = \"token\"\ntoken_file = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n",
            secret.path().display()
        ),
    );
    let token = site.accountd(None, &["admin", "node-token", "vm"]).ok().stdout.trim().to_string();
    let node_token = site.file("node-token", &format!("{token}\n"));
    let config = agent_config_with(&site, &format!("auth = \"token\"\ntoken_file = \"{node_token}\"\n"));
    std::fs::set_permissions(&node_token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out =
        Command::new(bin("gputokens-agent")).args(["--config", &config, "--node", "vm", "--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("readable by it alone (mode 0600; it is 644"), "{stderr}");

    std::fs::set_permissions(&node_token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let state = site.file("nvml-state.toml", &fake_state(1, 2));
    report_once(&config, &state);
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(metrics.contains("gputokens_gpu_utilization_percent{node=\"vm\",gpu=\"6\""), "{metrics}");
    assert!(!site.log().contains("refused"), "{}", site.log());
}
