//! A GPU node's root turned against accountd (issue 46, done-when 2): it signs reports with its
//! node's munged that make up GPUs, fresh ones every time, all holding alice's job.

use std::time::{Duration, Instant};

use crate::{last_report, metric, Cluster, Settings};

/// Run as root on node2: one report naming 100 GPUs, then `rounds` reports whose two GPUs carry
/// fresh UUIDs each time, all holding `job`; prints each answer's HTTP status, one a line.
fn forger(job: &str, rounds: u32) -> String {
    format!(
        r#"set -e
url=http://10.78.0.2:9817/v1/agent/report
gpu() {{ printf '{{"index":%d,"uuid":"%s","name":null,"utilization_percent":50,"memory_utilization_percent":null,"memory_used_bytes":null,"memory_total_bytes":null,"temperature_c":40,"power_w":null,"ecc_uncorrected":0,"xids":[],"health":{{"state":"ok"}},"jobs":["{job}"]}}' "$1" "$2"; }}
post() {{
  hex=$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)
  cred=$(printf 'gputokens agent report v1 sha256=%s' "$hex" | munge)
  printf '%s' "$1" | curl -sS -o /dev/null -w '%{{http_code}}\n' -H "Authorization: MUNGE $cred" \
    -H 'Content-Type: application/json' --data-binary @- "$url"
}}
report() {{ printf '{{"node":"node2","sample":{{"time":"%s","gpus":[%s],"processes":[]}},"interval_secs":3600}}' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1"; }}
gpus=$(gpu 0 GPU-made-up-0)
for i in $(seq 1 99); do gpus="$gpus,$(gpu $i GPU-made-up-$i)"; done
post "$(report "$gpus")"
for r in $(seq 1 {rounds}); do post "$(report "$(gpu 0 GPU-fresh-$r-a),$(gpu 1 GPU-fresh-$r-b)")"; done
"#
    )
}

fn accountd_rss_kib(cluster: &Cluster) -> u64 {
    let out = cluster.on("ctl1", None, &["sh", "-c", "ps -o rss= -C accountd | head -n 1"]).ok().stdout;
    out.trim().parse().unwrap_or_else(|_| panic!("no accountd on ctl1: {out:?}"))
}

/// node2's root names alice's job on 100 made-up GPUs (refused: Slurm shows 2 there), then posts
/// 1,500 reports whose two GPUs carry fresh UUIDs (3,000 in all): each is taken for node2's two
/// GPUs alone, accountd keeps one set of their series and a flat memory, and node1's agent is
/// answered throughout (its last report never older than its interval and a little).
#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_nodes_root_making_up_gpus_fills_nothing_and_silences_no_other_node() {
    let cluster = Cluster::up(Settings::default());
    let job = cluster.sbatch("alice", &["-w", "node2", "--gres=gpu:rtx3090:1", "--wrap", "sleep 300"]);
    cluster.wait_running(&job);
    let before = accountd_rss_kib(&cluster);
    let script = forger(&job, 1500);
    let forging = std::thread::scope(|scope| {
        let posting = scope.spawn(|| cluster.on("node2", None, &["bash", "-c", &script]));
        // While it posts: node1's agent is heard within its interval (2 s) and a little.
        let mut looked = 0;
        while !posting.is_finished() {
            let metrics = cluster.http_get("/metrics");
            let age = chrono::Utc::now().timestamp() as f64
                - metric(&metrics, &last_report("node1")).expect("node1 reported");
            assert!(age <= 6.0, "node1's agent last heard {age} s ago while node2's root posted");
            looked += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        (posting.join().unwrap(), looked)
    });
    let (posted, looked) = forging;
    assert_eq!(posted.code, 0, "{}", posted.stderr);
    let codes: Vec<&str> = posted.stdout.lines().collect();
    assert_eq!(codes.len(), 1501, "{}", posted.stderr);
    assert_eq!(codes[0], "403", "100 made-up GPUs were taken");
    let taken = codes[1..].iter().filter(|c| **c == "200").count();
    assert!(taken >= 1400, "{taken} of the 1,500 reports of node2's two GPUs taken: {:?}", &codes[..20]);
    assert!(looked >= 10, "node1 looked at {looked} times only");

    let metrics = cluster.http_get("/metrics");
    let node2_gpu_series =
        metrics.lines().filter(|l| l.starts_with("gputokens_gpu_") && l.contains("node=\"node2\"")).count();
    assert!(node2_gpu_series <= 2 * 7, "{node2_gpu_series} GPU series of node2's two GPUs");
    assert!(!metrics.contains("GPU-fresh-1-a"), "the first fresh GPU's series stayed");
    let grown = accountd_rss_kib(&cluster).saturating_sub(before);
    assert!(grown < 16 << 10, "accountd grew by {grown} KiB over 3,000 fresh GPUs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&cluster.http_get("/metrics"), &last_report("node2")).is_none() {
        assert!(Instant::now() < deadline, "node2 never reported");
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.on("ctl1", None, &["scancel", &job]).ok();
}
