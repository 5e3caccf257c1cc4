//! accountd's HTTP listener: Prometheus metrics and the operators' JSON API.

use crate::common::{http_get, Site};

/// A GET with `Authorization: Bearer <token>`: status and body.
fn get_with_token(url: &str, token: &str) -> (u16, String) {
    let out = crate::common::run_as(
        None,
        std::path::Path::new("/usr/bin/curl"),
        &["-s", "-w", "\n%{http_code}", "-H", &format!("Authorization: Bearer {token}"), url],
    );
    let (body, code) = out.stdout.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

#[test]
fn metrics_and_json_api_show_balances() {
    // The admin token's file is private to accountd's user (a temp file is created 0600).
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), "admin-s3cret\n").unwrap();
    let site = Site::start(
        "",
        &format!(
            "[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\nadmin_token_file = \"{}\"\n",
            token_file.path().display()
        ),
    );
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n5|alice|gres/gpu:a6000=2,gres/gpu=2|5400|2026-11-30T08:00:00|COMPLETED\n",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    let base = site.http_url();

    // serve's first cycles run as it starts; on a busy machine they may finish after this scrape.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let metrics = loop {
        let (status, metrics) = http_get(&format!("{base}/metrics"));
        assert_eq!(status, 200);
        let cycled = metrics.contains("gputokens_cycle_duration_seconds{cycle=\"check\"}")
            && metrics.contains("gputokens_cycle_failures_total{cycle=\"charge\"}");
        if cycled || std::time::Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(metrics.contains("gputokens_balance_tokens{user=\"alice\"} 88.0"), "{metrics}");
    assert!(metrics.contains("gputokens_cycle_duration_seconds{cycle=\"check\"}"), "{metrics}");
    // This site has no Slurm (bin_dir points nowhere): its charge cycle failed, and says so.
    assert!(metrics.contains("gputokens_cycle_failures_total{cycle=\"charge\"} 1"), "{metrics}");
    assert!(site.log().contains("charge cycle failed: cannot run"), "{}", site.log());

    let (status, _) = http_get(&format!("{base}/v1/balances/alice"));
    assert_eq!(status, 401, "the JSON API needs a MUNGE credential or the admin token");
    let (status, _) = get_with_token(&format!("{base}/v1/balances/alice"), "admin-s3cre");
    assert_eq!(status, 401);
    let (status, body) = get_with_token(&format!("{base}/v1/balances/alice"), "admin-s3cret");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["users"][0]["balance"], "88");
    assert_eq!(json["users"][0]["status"], "ok");
    assert_eq!(json["users"][0]["used_30d"]["a6000"], "12");

    let (status, body) = get_with_token(&format!("{base}/v1/balances/nosuchuser"), "admin-s3cret");
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

/// Issue 36's shadow mode in /metrics: gputokens_enforcing says whether gputokens acts, and what each
/// controller's plugin would have done comes from the status file it writes.
#[test]
fn shadow_mode_and_what_each_controller_would_have_done_are_in_metrics() {
    use gputokens::controller_status::{ControllerStatus, Shadow, ViewStatus};
    let dir = tempfile::tempdir().unwrap();
    let status = ControllerStatus {
        host: "ctl1.example.org".into(),
        pid: 7,
        written: gputokens::time::now(),
        snapshot: "/var/lib/gputokens/balances.snapshot".into(),
        view: ViewStatus::Unavailable { problem: "the snapshot is missing".into() },
        shadow: Some(Shadow {
            since: 1,
            would: [("refuse".to_string(), 3), ("deprioritize".to_string(), 2)].into(),
            refused_by_uid: [(1001, 3)].into(),
        }),
    };
    std::fs::write(dir.path().join("ctl1.json"), status.to_json()).unwrap();
    // A controller that stopped writing a minute ago (retired, crashed) is not counted.
    let gone = ControllerStatus { host: "ctl2".into(), written: gputokens::time::now() - 60, ..status.clone() };
    std::fs::write(dir.path().join("ctl2.json"), gone.to_json()).unwrap();
    let site = Site::from_config(&format!(
        "[prices]\na6000 = 4\n[admission]\nenforce = false\n[slurm]\nbin_dir = \"/nonexistent\"\n[paths]\n\
         ledger = \"x\"\nsnapshot = \"x\"\nsocket = \"x\"\ncontroller_status = \"{}\"\n[http]\nlisten = \"127.0.0.1:9817\"\n",
        dir.path().display()
    ));
    let url = format!("{}/metrics", site.http_url());
    let metrics = crate::cluster::wait_until(20, "the shadow counts in /metrics", || {
        let (_, text) = http_get(&url);
        match text.contains("gputokens_shadow_decisions{controller=\"ctl1\",decision=\"refuse\"} 3") {
            true => Ok(text),
            false => Err(text.lines().filter(|l| l.contains("shadow")).collect::<Vec<_>>().join("; ")),
        }
    });
    assert!(
        metrics.contains("gputokens_shadow_decisions{controller=\"ctl1\",decision=\"deprioritize\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("gputokens_enforcing 0"), "{metrics}");
    assert!(!metrics.contains("controller=\"ctl2\""), "{metrics}");
    // A site that enforces says so from its start, before any check cycle.
    let enforcing = Site::start("", "");
    let (_, metrics) = http_get(&format!("{}/metrics", enforcing.http_url()));
    assert!(metrics.contains("gputokens_enforcing 1"), "{metrics}");
}
