//! A real job's GPU energy: alice's job on the test cluster, its GPU's energy counter (fake NVML)
//! read by the real agent, charged at `per_kwh` by the charge cycle after it.

use crate::common::Site;
use gputokens::Tokens;

/// Eight fake GPUs like gres.conf, each at `energy_mj` on its counter; `pid` on GPU 6 (an a6000).
fn gpus_at(pid: u32, energy_mj: u64) -> String {
    let mut state = String::new();
    for i in 0..8 {
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"fake\"\nutil_gpu = 90\nmem_used = 1048576\nmem_total = 25769803776\n\
             temp = 50\npower_mw = 300000\nenergy_mj = {energy_mj}\n"
        );
    }
    state + &format!("[[process]]\npid = {pid}\ngpu = 6\nused_memory = 2097152\n")
}

/// On the real cluster: alice's a6000 job runs while her GPU's energy counter climbs at 300 W (the
/// real agent reading the fake NVML every second); with `[prices] per_kwh`, the cycle after the job
/// charges its GPU time and its energy, at per_kwh times what her statement says it used.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_real_jobs_energy_is_charged_at_per_kwh_by_the_cycle_after_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let cluster = crate::cluster::serial();
    let alice = cluster.alice;
    let prices = format!("{}per_kwh = 100\n", crate::common::PRICES);
    let site = Site::with_prices("", &prices, "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n");
    let job = crate::cluster::sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 8"]);
    let pid = crate::agent::pid_of(&job);
    let state = site.path("nvml-state.toml");
    std::fs::write(&state, gpus_at(pid, 0)).unwrap();
    let agent = crate::health::Agent::start(&site, &state);
    // 300 W: the counter rewritten every 200 ms until the job is over.
    let over = std::sync::Arc::new(AtomicBool::new(false));
    let climbing = {
        let (over, state) = (over.clone(), state.clone());
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while !over.load(Ordering::SeqCst) {
                let mj = started.elapsed().as_millis() as u64 * 300;
                let next = state.with_extension("next");
                std::fs::write(&next, gpus_at(pid, mj)).unwrap();
                std::fs::rename(&next, &state).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        })
    };
    assert_eq!(crate::cluster::wait_finished(&job), "COMPLETED");
    drop(agent);
    over.store(true, Ordering::SeqCst);
    climbing.join().unwrap();
    let out = site.accountd(None, &["tick"]).ok().stdout;

    let month = gputokens::statement::Month::of(gputokens::time::local_date(gputokens::time::now())).to_string();
    let json = site.sbalance(Some(alice), &["--statement", &month, "--json"]).ok().stdout;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let line = v["statements"][0]["lines"].as_array().unwrap().iter().find(|l| l["gpu_type"] == "a6000").cloned();
    let line = line.unwrap_or_else(|| panic!("no a6000 line: {json}"));
    let joules = line["energy_joules"].as_u64().unwrap_or_else(|| panic!("no energy measured: {line}"));
    // 300 W for the seconds the agent saw the job (at most the run and a report either side).
    assert!((300..=300 * 20).contains(&joules), "{joules} J: {line}");
    let expected = crate::by_hand::energy_cost(Tokens::whole(100), joules);
    let charged: Tokens = line["energy_tokens"].as_str().unwrap_or_else(|| panic!("{out}: {line}")).parse().unwrap();
    // One charge per run, node and local day, each rounded up to the micro-token.
    assert!((charged - expected).micro().abs() <= 2, "{charged} charged for {joules} J at 100/kWh ({expected})");
    let history = site.sbalance(Some(alice), &["--history", "20", "-P", "-n"]).ok().stdout;
    let energy_entries: Vec<&str> =
        history.lines().filter(|l| l.contains(&format!("|{job}|")) && l.contains("GPU energy on vm: ")).collect();
    assert!(!energy_entries.is_empty(), "{history}");
    let verify = site.accountd(None, &["admin", "verify"]).ok().stdout;
    assert!(verify.contains("consistent"), "{verify}");
}
