//! accountd's HTTP listener: Prometheus metrics and the operators' JSON API.

use crate::common::{http_get, Site};

#[test]
fn metrics_and_json_api_show_balances() {
    let site = Site::start("", "");
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n5|alice|gres/gpu:a6000=2,gres/gpu=2|5400|2026-11-30T08:00:00|COMPLETED\n",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    let base = site.http_url();

    let (status, metrics) = http_get(&format!("{base}/metrics"));
    assert_eq!(status, 200);
    assert!(metrics.contains("gputokens_balance_tokens{user=\"alice\"} 88.0"), "{metrics}");
    assert!(metrics.contains("gputokens_cycle_duration_seconds{cycle=\"check\"}"), "{metrics}");
    // This site has no Slurm (bin_dir points nowhere): its charge cycle failed, and says so.
    assert!(metrics.contains("gputokens_cycle_failures_total{cycle=\"charge\"} 1"), "{metrics}");
    assert!(site.log().contains("charge cycle failed: cannot run"), "{}", site.log());

    let (status, body) = http_get(&format!("{base}/v1/balances/alice"));
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["users"][0]["balance"], "88");
    assert_eq!(json["users"][0]["status"], "ok");
    assert_eq!(json["users"][0]["used_30d"]["a6000"], "12");

    let (status, body) = http_get(&format!("{base}/v1/balances/nosuchuser"));
    assert_eq!(status, 404);
    assert!(body.contains("unknown user 'nosuchuser'"), "{body}");
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let mut site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "bob", "1", "--reason", "x"]).ok();
    let status = site.stop();
    assert!(status.success(), "{status:?}: {}", site.log());
    assert!(site.log().contains("SIGTERM received") && site.log().contains("accountd stopping"), "{}", site.log());
    assert!(!site.path("run/accountd.sock").exists(), "socket removed");
}
