//! A job's GPU energy end to end, without a cluster: the real agent (`gputokens-agent --once`, the
//! real nvml-wrapper path against the fake libnvidia-ml, whose energy counter the test raises) posts
//! to a real `accountd serve`, which gives the job its GPU's energy; `accountd charge --sacct-file`
//! charges the job; its statement line shows the kWh (issue 37, done-when 3). A real job's energy on
//! the cluster is in tests/cluster/energy.rs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{bin, http_get, run_as, Site};

/// One GPU (index 0), at 90 %, its energy counter at `energy_mj`.
fn one_gpu(energy_mj: u64) -> String {
    format!(
        "[[gpu]]\nuuid = \"GPU-00000000\"\nname = \"NVIDIA RTX A6000\"\nutil_gpu = 90\nutil_mem = 10\nmem_used = 1048576\n\
         mem_total = 25769803776\ntemp = 50\npower_mw = 300000\nenergy_mj = {energy_mj}\n"
    )
}

fn private_file(site: &Site, name: &str, text: &str) -> String {
    let path = site.file(name, text);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Slurm as far as accountd asks it about agent reports: node vm and its job 4242, alice's.
fn slurm_stubs(dir: &Path) {
    let stub = "#!/bin/sh\ncase \"$(basename \"$0\") $*\" in\n\
        \"sinfo \"*) echo \"vm|127.0.0.1|localhost|gpu:a6000:2(S:0)\" ;;\n\
        \"squeue \"*\"-w vm\"*) echo \"4242|alice|cpu=1,gres/gpu=1,gres/gpu:a6000=1\" ;;\n\
        \"squeue \"*\"-j 4242 \"*) echo alice ;;\n\
        *) echo 'no Slurm here (stub)' >&2; exit 1 ;;\nesac\n";
    std::fs::create_dir_all(dir).unwrap();
    for name in ["sinfo", "squeue"] {
        std::fs::write(dir.join(name), stub).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A site whose agent on node vm reported alice's job 4242 using 1 kWh (the fake NVML's energy
/// counter rising 3.6 MJ over four reports, the first through a 0.1.0 unit's `accountd agent`),
/// `[prices]` with `more_prices` added.
struct MeasuredSite {
    site: Site,
    /// Joules the counter rose.
    delta_joules: u64,
    _secrets: (tempfile::NamedTempFile, tempfile::NamedTempFile),
    _slurm: tempfile::TempDir,
}

fn site_with_a_measured_job(more_prices: &str) -> MeasuredSite {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "site-s3cret\n").unwrap();
    std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let slurm = tempfile::Builder::new().prefix("gputokens-it-slurm-").tempdir().unwrap();
    slurm_stubs(slurm.path());
    // The status page behind its proxy, for alice's page.
    let (web, _proxy_secret) = crate::status_page::proxy_settings();
    let site = Site::with_prices(
        "",
        &format!("{}{more_prices}", crate::common::PRICES),
        &format!(
            "[agent]\nauth = \"token\"\ntoken_file = \"{}\"\ninterval = \"900s\"\n[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\n\
             [slurm]\nbin_dir = \"{}\"\n[web]\nallow_http = true\n{web}",
            secret.path().display(),
            slurm.path().display()
        ),
    );
    // Job 4242 of alice's holds GPU 0, as spank_gputokens.so's prolog records it.
    let alice_uid = run_as(None, Path::new("/usr/bin/id"), &["-u", "alice"]).ok().stdout.trim().to_string();
    let jobs_dir = site.path("jobs");
    std::fs::create_dir(&jobs_dir).unwrap();
    std::fs::write(jobs_dir.join("4242"), format!("gpus=0\nuuids=GPU-00000000\nuid={alice_uid}\n")).unwrap();
    let token = site.accountd(None, &["admin", "node-token", "vm"]).ok().stdout.trim().to_string();
    let node_token = private_file(&site, "node-token", &format!("{token}\n"));
    let agent_config = site.file(
        "agent.toml",
        &format!(
            "[agent]\nreport_to = \"{}\"\nnvml_library = \"{}\"\nlisten = \"off\"\ninterval = \"1s\"\njobs_dir = \"{}\"\n\
             auth = \"token\"\ntoken_file = \"{node_token}\"\n",
            site.http_url(),
            bin("libnvidia_ml.so").display(),
            jobs_dir.display()
        ),
    );
    // The counter rises 3.6 MJ (1 kWh) between the first two reports, then stays: the reports come
    // a moment apart, and accountd believes a GPU's 5 kW over the time that really passed and its
    // own interval's slack (900 s here) once, however many reports share it.
    let start_mj = 987_654_321;
    for step in 0..4u64 {
        let state = site.file("nvml-state.toml", &one_gpu(start_mj + step.min(1) * 3_600_000_000));
        // The first report as a unit of 0.1.0 ran the agent, `accountd agent`: it runs gputokens-agent.
        let mut agent = match step {
            0 => Command::new(bin("accountd")),
            _ => Command::new(bin("gputokens-agent")),
        };
        if step == 0 {
            agent.args(["--config", &agent_config, "agent"]);
        } else {
            agent.args(["--config", &agent_config]);
        }
        let out = agent.args(["--node", "vm", "--once"]).env("FAKE_NVML_STATE", &state).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "agent: {stderr}");
        assert_eq!(step == 0, stderr.contains("`accountd agent` is now `gputokens-agent`"), "{stderr}");
        assert!(stderr.contains("reported 1 GPUs"), "{stderr}");
    }
    let delta_joules: u64 = 3_600_000_000 / 1000;
    MeasuredSite { site, delta_joules, _secrets: (secret, _proxy_secret), _slurm: slurm }
}

#[test]
fn a_jobs_kwh_on_its_statement_line_is_its_gpus_counter_rise() {
    let MeasuredSite { site, delta_joules, _secrets, _slurm } = site_with_a_measured_job("");
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(metrics.contains(&format!("gputokens_jobs_gpu_energy_joules_total {delta_joules}.0")), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "gputokens_job_gpu_energy_joules_total{{job=\"4242\",user=\"alice\",node=\"vm\"}} {delta_joules}.0"
        )),
        "{metrics}"
    );

    // The job ran an hour on one a6000 and is charged for it.
    let start = gputokens::time::now() - 3600;
    let sacct = site.file(
        "sacct.txt",
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State|NodeList\n4242|alice|gres/gpu:a6000=1,gres/gpu=1|3600|{start}|COMPLETED|vm\n"
        ),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();

    let month = gputokens::statement::Month::of(gputokens::time::local_date(gputokens::time::now())).to_string();
    let within_1_percent = |joules: f64| (joules - delta_joules as f64).abs() <= delta_joules as f64 / 100.0;
    let json = site.sbalance(Some("alice"), &["--statement", &month, "--json"]).ok().stdout;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lines = v["statements"][0]["lines"].as_array().unwrap();
    let line = lines.iter().find(|l| l["gpu_type"] == "a6000").unwrap_or_else(|| panic!("no a6000 line: {json}"));
    let joules = line["energy_joules"].as_f64().unwrap_or_else(|| panic!("no energy on {line}"));
    assert!(within_1_percent(joules), "{joules} J on the line, the counter rose {delta_joules} J");
    assert!(within_1_percent(line["kwh"].as_f64().unwrap() * 3.6e6), "{line}");
    assert_eq!(v["statements"][0]["energy"][0]["job_id"], "4242", "{json}");
    assert_eq!(line["amount"], "-4", "energy is not priced unless [prices] per_kwh says: {line}");
    assert!(line.get("energy_tokens").is_none(), "{line}");

    let text = site.sbalance(Some("alice"), &["--statement", &month]).ok().stdout;
    let charge = text.lines().find(|l| l.contains("a6000, 1 GPU-hours")).unwrap_or_else(|| panic!("{text}"));
    let kwh: f64 = charge.split(", ").nth(2).and_then(|k| k.split(" kWh").next()).unwrap().parse().unwrap();
    assert!(within_1_percent(kwh * 3.6e6), "{charge}");
    assert!(text.contains("Your jobs' GPUs used 1 kWh this month (job 4242 1 kWh)."), "{text}");
    let rows = site.sbalance(Some("alice"), &["--statement", &month, "-P", "-n"]).ok().stdout;
    assert!(rows.lines().any(|r| r.contains("|charge|") && r.split('|').nth(8) == Some("1")), "{rows}");

    // Her status page: the month's kWh, and the job's.
    let page = crate::status_page::page_of(&site, "alice");
    assert_eq!(page["energy_month"]["kwh"], "1", "{page}");
    let job = page["jobs"].as_array().unwrap().iter().find(|j| j["job"] == "4242").cloned();
    assert_eq!(job.map(|j| j["kwh_month"].clone()), Some(serde_json::json!("1")), "{page}");
    assert_eq!(crate::status_page::page_of(&site, "bob")["energy_month"]["kwh"], serde_json::Value::Null);
}

/// `[prices] per_kwh`: the same job's kWh charged on top of its GPU-hour, once, to alice, on her
/// statement's a6000 line and in her history; the ledger still verifies (serve's cycles count it
/// in `/metrics`: the metrics module's tests).
#[test]
fn priced_energy_is_charged_once_on_top_of_the_gpu_hours() {
    let MeasuredSite { site, delta_joules, _secrets, _slurm } = site_with_a_measured_job("per_kwh = 2.5\n");
    let start = gputokens::time::now() - 3600;
    let sacct = site.file(
        "sacct.txt",
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State|NodeList\n4242|alice|gres/gpu:a6000=1,gres/gpu=1|3600|{start}|COMPLETED|vm\n"
        ),
    );
    let out = site.accountd(None, &["charge", "--sacct-file", &sacct]).ok().stdout;
    // The job's part of its GPU's energy, as its statement line gives it, at 2.5 per kWh (3.6 MJ).
    let month = gputokens::statement::Month::of(gputokens::time::local_date(gputokens::time::now())).to_string();
    let json = site.sbalance(Some("alice"), &["--statement", &month, "--json"]).ok().stdout;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let line = v["statements"][0]["lines"].as_array().unwrap().iter().find(|l| l["gpu_type"] == "a6000").cloned();
    let line = line.unwrap_or_else(|| panic!("no a6000 line: {json}"));
    let joules = line["energy_joules"].as_u64().unwrap();
    assert!(joules.abs_diff(delta_joules) <= delta_joules / 100, "{joules} J, the counter rose {delta_joules} J");
    let energy_tokens = crate::by_hand::energy_cost("2.5".parse().unwrap(), joules);
    assert!(out.contains(&format!("GPU energy: 1 charge entries, {energy_tokens} tokens for ")), "{out}");
    assert_eq!(line["energy_tokens"], energy_tokens.to_string(), "{line}");
    let four: gputokens::Tokens = "4".parse().unwrap();
    assert_eq!(line["amount"], format!("-{}", four + energy_tokens), "the GPU-hour and the energy: {line}");

    let balance = site.sbalance(Some("alice"), &["-P", "-n"]).ok().stdout;
    let hundred: gputokens::Tokens = "100".parse().unwrap();
    assert!(balance.contains(&format!("|{}|", hundred - four - energy_tokens)), "{balance}");
    let text = site.sbalance(Some("alice"), &["--statement", &month]).ok().stdout;
    assert!(text.contains(&format!("{energy_tokens} of it for energy")), "{text}");
    assert!(text.contains(&format!("(job 4242 1 kWh), charged {energy_tokens} tokens.")), "{text}");
    let history = site.sbalance(Some("alice"), &["--history", "10"]).ok().stdout;
    assert!(history.contains("GPU energy on vm: 1 kWh at 2.5/kWh"), "{history}");

    // Charged again (a cycle re-reading the same record, no new report): nothing more.
    let again = site.accountd(None, &["charge", "--sacct-file", &sacct]).ok().stdout;
    assert!(!again.contains("GPU energy"), "{again}");
    assert_eq!(site.sbalance(Some("alice"), &["-P", "-n"]).ok().stdout, balance);
    let verify = site.accountd(None, &["admin", "verify"]).ok().stdout;
    assert!(verify.contains("consistent"), "{verify}");
}
