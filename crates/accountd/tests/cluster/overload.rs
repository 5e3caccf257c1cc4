//! Floods from the agent's own address on the test cluster (munged, node vm): a reopened idle flood
//! and slow bodies never keep the node's real report out. Floods from anywhere else are in
//! tests/local/overload.rs.

use std::time::{Duration, Instant};

use crate::common::{http_get, Site};
use crate::connection_flood::{metric, Holder};

#[test]
#[ignore = "needs the test cluster (munged, node vm): tests/cluster/up.sh"]
fn a_reopened_idle_flood_from_the_agents_own_address_silences_nothing() {
    let cluster = crate::cluster::serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::start(
        "",
        "[http]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"60s\"\nper_user_metrics = true\n[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n",
    );
    let base = site.http_url();
    let port = base.rsplit(':').next().unwrap().to_string();
    let socket = site.path("run/accountd.sock");
    // alice's job on the node floods from the node's own address, 127.0.0.1, which the agent, curl
    // and Prometheus here use too; every connection accountd closes she opens again at once.
    let _tcp = Holder::start(alice, &["--reopen", "tcp", &format!("127.0.0.1:{port}"), "127.0.0.1", "1000"]);
    let _unix = Holder::start(alice, &["--reopen", "unix", socket.to_str().unwrap(), "200"]);

    // "At once" against starved: a starved request waits for request_timeout (60 s) or forever;
    // the bound leaves room for the flood's own reconnect storm on a 2-CPU CI machine (1.03 s seen).
    let at_once = Duration::from_secs(3);
    for _ in 0..5 {
        let asked = Instant::now();
        let (status, metrics) = http_get(&format!("{base}/metrics"));
        let took = asked.elapsed();
        assert_eq!(status, 200, "{metrics}");
        assert!(took < at_once, "/metrics from the flooded address took {took:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A root agent's report from the same address is accepted.
    let state = site.file(
        "nvml.toml",
        "[[gpu]]\nuuid = \"GPU-00000006\"\nname = \"NVIDIA a6000\"\nutil_gpu = 42\nutil_mem = 1\nmem_used = 1\nmem_total = 2\ntemp = 40\npower_mw = 1000\n",
    );
    let asked = Instant::now();
    crate::agent::report_once(&crate::agent::agent_config(&site), &state);
    assert!(asked.elapsed() < Duration::from_secs(5), "the agent's report took {:?}", asked.elapsed());
    let (_, metrics) = http_get(&format!("{base}/metrics"));
    assert!(
        metrics.contains("gputokens_gpu_utilization_percent{node=\"vm\",gpu=\"0\",uuid=\"GPU-00000006\"} 42.0"),
        "{metrics}"
    );
    // Each user's own sbalance answers at once, with what the ledger holds (the value is not the
    // point here).
    for user in [alice, bob] {
        let asked = Instant::now();
        let out = site.sbalance(Some(user), &["-P", "-n", "-o", "Balance"]);
        let took = asked.elapsed();
        assert_eq!(
            (out.code, out.stdout.trim()),
            (0, held_by_the_ledger(&site, user).as_str()),
            "{user}: {}",
            out.stderr
        );
        assert!(took < at_once, "{user}'s sbalance took {took:?}");
    }
    let shed = "gputokens_connections_shed_total{listener=\"http\",reason=\"per_address\"}";
    assert!(metric(&metrics, shed) >= 1000 - 64, "{metrics}");
}

/// The audit's M3: alice's job trickles agent-report POSTs from the node's own address, each
/// sending its headers and a byte of a 200,000-byte body, reopened as soon as accountd closes one.
/// A connection is busy only once its whole request is in, so hers are shed for the agent's (and
/// closed after 5 s anyway): the node's own report still gets through at once.
#[test]
#[ignore = "needs the test cluster (munged, node vm): tests/cluster/up.sh"]
fn slow_bodies_from_the_agents_own_address_never_keep_its_report_out() {
    let cluster = crate::cluster::serial();
    let site = Site::start(
        "",
        "[http]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"60s\"\nper_user_metrics = true\n[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n",
    );
    let base = site.http_url();
    let port = base.rsplit(':').next().unwrap().to_string();
    let _slow = Holder::start(
        cluster.alice,
        &["--reopen", "--slow-body", "tcp", &format!("127.0.0.1:{port}"), "127.0.0.1", "200"],
    );
    let state = site.file(
        "nvml.toml",
        "[[gpu]]\nuuid = \"GPU-00000006\"\nname = \"NVIDIA a6000\"\nutil_gpu = 43\nutil_mem = 1\nmem_used = 1\nmem_total = 2\ntemp = 40\npower_mw = 1000\n",
    );
    for _ in 0..3 {
        let asked = Instant::now();
        crate::agent::report_once(&crate::agent::agent_config(&site), &state);
        assert!(asked.elapsed() < Duration::from_secs(5), "the agent's report took {:?}", asked.elapsed());
    }
    let (_, metrics) = http_get(&format!("{base}/metrics"));
    assert!(
        metrics.contains("gputokens_gpu_utilization_percent{node=\"vm\",gpu=\"0\",uuid=\"GPU-00000006\"} 43.0"),
        "{metrics}"
    );
    let shed = "gputokens_connections_shed_total{listener=\"http\",reason=\"per_address\"}";
    assert!(metric(&metrics, shed) >= 200 - 64, "slow bodies shed: {metrics}");
}

/// `user`'s balance as the site's ledger holds it: after their newest entry, or, for a user the
/// ledger has no entry of, what the site's snapshot says (the initial balance, for a user it lists not).
fn held_by_the_ledger(site: &Site, user: &str) -> String {
    let history = site.accountd(None, &["admin", "history", user, "--json"]);
    if history.code != 0 && history.stderr.contains(&format!("user '{user}' has no entries in the ledger")) {
        let snapshot = std::fs::read_to_string(site.path("lib/balances.snapshot")).expect("the site's snapshot");
        let parsed = gputokens::snapshot::parse(&snapshot).unwrap_or_else(|e| panic!("{e}: {snapshot}"));
        return parsed.balances.get(user).copied().unwrap_or(parsed.rules.initial).to_string();
    }
    let history = history.ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap_or_else(|e| panic!("{e}: {history}"));
    let newest = entries["entries"].as_array().and_then(|e| e.iter().max_by_key(|e| e["id"].as_i64()));
    let newest = newest.unwrap_or_else(|| panic!("{user}'s history lists no entries: {history}"));
    newest["balance_after"].as_str().unwrap_or_else(|| panic!("no balance_after: {newest}")).to_string()
}
