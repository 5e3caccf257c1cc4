//! Idle GPUs in tokens on the real cluster: alice's a6000 job sits at 0 % for its whole run (the
//! agent, fake NVML), bob's rtx3090 job works; her statement, status page and the next threshold
//! notification say what she spent on idle GPUs this month, his say nothing of it; with
//! `[usage] idle_notify` she is told once, when her job has idled for the window.

use crate::agent::pid_of;
use crate::cluster::{sbatch, serial, wait_finished};
use crate::common::Site;
use crate::health::Agent;
use crate::notify_capture::{args, capture_script, captured};
use crate::status_page::{page_of, proxy_settings};

/// Eight fake GPUs like gres.conf: alice's process on GPU 6 (an a6000) at 0 %, bob's on GPU 4 (an
/// rtx3090) at 90 %.
fn gpus(alice_pid: u32, bob_pid: u32) -> String {
    let mut state = String::new();
    for i in 0..8 {
        let util = if i == 4 { 90 } else { 0 };
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"fake\"\nutil_gpu = {util}\nmem_used = 1048576\nmem_total = 25769803776\ntemp = 50\n"
        );
    }
    for (pid, gpu) in [(alice_pid, 6), (bob_pid, 4)] {
        state += &format!("[[process]]\npid = {pid}\ngpu = {gpu}\nused_memory = 2097152\n");
    }
    state
}

/// The tokens `user` was charged for `job` (their history).
fn charged(site: &Site, user: &str, job: &str) -> gputokens::Tokens {
    let out = site.sbalance(Some(user), &["--history", "100", "-P", "-n"]).ok().stdout;
    out.lines()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|f| f[1] == "charge" && f[4] == job)
        .map(|f| -f[2].parse::<gputokens::Tokens>().unwrap())
        .sum()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_idle_for_its_whole_run_shows_its_tokens_as_idle() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (web, _secret) = proxy_settings();
    let mut site = Site::start(
        "",
        &format!(
            "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n\
             [usage]\nidle_threshold_percent = 5\nidle_window = \"2s\"\nidle_notify = true\n[web]\nallow_http = true\n{web}"
        ),
    );
    let command = capture_script(&site);
    let config = std::fs::read_to_string(&site.config).unwrap();
    std::fs::write(&site.config, format!("{config}\n[notify]\ncommand = [\"{command}\"]\nwarn_below = 10\n")).unwrap();
    site.restart();

    let alices = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 10"]);
    let bobs = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 10"]);
    let state = site.file("nvml-state.toml", &gpus(pid_of(&alices), pid_of(&bobs)));
    // The agent samples every second until both jobs end.
    let agent = Agent::start(&site, std::path::Path::new(&state));
    assert_eq!(wait_finished(&alices), "COMPLETED");
    assert_eq!(wait_finished(&bobs), "COMPLETED");
    drop(agent);
    site.accountd(None, &["tick"]).ok();

    // Every sample of alice's job was idle: all it was charged, on idle GPUs.
    let spent = charged(&site, alice, &alices);
    assert!(spent > gputokens::Tokens::ZERO, "alice's job was charged");
    let month = chrono::Local::now().format("%Y-%m").to_string();
    let statement = site.sbalance(Some(alice), &["--statement", &month]).ok().stdout;
    assert!(
        statement.contains(&format!("You spent {spent} tokens on idle GPUs this month (a6000 {spent}).")),
        "{statement}"
    );
    let a6000 = statement.lines().find(|l| l.contains("a6000, ")).unwrap_or_else(|| panic!("{statement}"));
    assert!(a6000.ends_with(&format!("{spent} of it on idle GPUs")), "{statement}");
    let json = site.sbalance(Some(alice), &["--statement", &month, "--json"]).ok().stdout;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let line = json["statements"][0]["lines"].as_array().unwrap().iter().find(|l| l["gpu_type"] == "a6000").cloned();
    assert_eq!(line.map(|l| l["idle"].clone()), Some(serde_json::json!(spent.to_string())), "{json}");
    // bob's GPU worked.
    let statement = site.sbalance(Some(bob), &["--statement", &month]).ok().stdout;
    assert!(!statement.contains("idle GPUs"), "{statement}");
    assert!(charged(&site, bob, &bobs) > gputokens::Tokens::ZERO);

    // The status page says it, per GPU type.
    let page = page_of(&site, alice);
    let idle = &page["idle_month"];
    assert_eq!(idle["tokens"].as_str(), Some(spent.to_string().as_str()), "{page}");
    assert_eq!(idle["per_type"][0]["gpu_type"], "a6000", "{page}");
    assert_eq!(page_of(&site, bob)["idle_month"]["per_type"], serde_json::json!([]));

    // Her next threshold notification says where the tokens went.
    site.accountd(None, &["admin", "adjust", alice, "-95", "--reason", "test: near the floor"]).ok();
    site.accountd(None, &["tick", "--skip-charge"]).ok();
    let spent_line = format!("This month you spent {spent} tokens on idle GPUs (a6000 {spent}).");
    let all = crate::cluster::wait_until(10, "her threshold notification", || {
        let all = captured(&site).join("\n");
        match all.contains(&spent_line) {
            true => Ok(all),
            false => Err(all),
        }
    });
    // And alice was told once, when her job had idled for the window; bob never.
    let told = format!("STDIN: gputokens: your GPU job {alices} on vm has used its GPUs below 5% for 2s");
    assert_eq!(all.matches(&told).count(), 1, "{all}");
    let idle_notice = |user: &str| format!(" idle {user}");
    assert_eq!(args(&site).iter().filter(|a| a.ends_with(&idle_notice(alice))).count(), 1, "{:?}", args(&site));
    assert!(!args(&site).iter().any(|a| a.ends_with(&idle_notice(bob))), "{:?}", args(&site));
}
