//! Refunds from saved records, without a cluster: a run that ended NODE_FAIL is refunded once, and
//! nothing else. Refunds of runs lost to a GPU fault on the real cluster are in
//! tests/cluster/refunds.rs.

use crate::common::Site;

/// Saved sacct records through `accountd charge --sacct-file`: the NODE_FAIL run is refunded once,
/// with its node in the reason; the runs that failed, timed out, ran out of memory or were cancelled
/// (by their user: no fault action of gputokens) are not; `[refunds]` decides the causes and the cap.
#[test]
fn a_node_fail_run_in_saved_records_is_refunded_once_and_nothing_else() {
    let start = gputokens::time::now() - 7200;
    let rows = |job: u32, user: &str, state: &str, node: &str| {
        format!("{job}|{user}|gres/gpu:a6000=1,gres/gpu=1|3600|{start}|{}|{state}|{node}\n", start + 3600)
    };
    let mut text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|End|State|NodeList\n".to_string();
    for (job, state) in [
        (1, "NODE_FAIL"),
        (2, "FAILED"),
        (3, "TIMEOUT"),
        (4, "OUT_OF_MEMORY"),
        (5, "CANCELLED by 1001"),
        (6, "REQUEUED"),
    ] {
        text += &rows(job, "bob", state, "gpu7");
    }
    // gpu7's failure took carol's run too: the system's doing. gpu8's took only bob's run: his job
    // may have brought the node down itself, so an admin decides.
    text += &rows(7, "carol", "NODE_FAIL", "gpu7");
    text += &rows(8, "bob", "NODE_FAIL", "gpu8");
    let site = Site::start("", "");
    let file = site.file("sacct.txt", &text);
    let out = site.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert!(out.stdout.contains("2 runs lost to the system refunded"), "{}", out.stdout);
    // Seven a6000-hours at 4, one of them given back; carol's one given back.
    assert_eq!((site.balance("bob").as_str(), site.balance("carol").as_str()), ("76", "100"));
    let again = site.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert!(again.stdout.contains("0 runs lost to the system refunded"), "{}", again.stdout);
    assert_eq!(site.balance("bob"), "76");
    let refunds: Vec<_> = site.history_rows("bob").into_iter().filter(|(k, ..)| k == "refund").collect();
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!((refunds[0].1.as_str(), refunds[0].2.as_str()), ("+4", "1"));
    assert!(refunds[0].3.contains("lost to a node failure (NODE_FAIL on gpu7)"), "{refunds:?}");
    assert!(out.stderr.contains("job 8 of bob: run from "), "{}", out.stderr);
    assert!(
        out.stderr.contains("ended NODE_FAIL on gpu8, but no other user's job failed with that node"),
        "{}",
        out.stderr
    );

    // A site that refunds no node failures; one that caps a run at half a GPU-hour.
    let off = Site::start("", "[refunds]\ncauses = [\"gpu_fault\"]\n");
    let file = off.file("sacct.txt", &text);
    off.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert_eq!(off.balance("bob"), "72");
    let capped = Site::start("", "[refunds]\nmax_gpu_hours = 0.5\n");
    let file = capped.file("sacct.txt", &text);
    capped.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert_eq!(capped.balance("bob"), "74");
    // At most 3 tokens back per balance a month: bob's 4 is cut to 3.
    let month = Site::start("", "[refunds]\nmax_tokens_per_month = 3\n");
    let file = month.file("sacct.txt", &text);
    month.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert_eq!((month.balance("bob").as_str(), month.balance("carol").as_str()), ("75", "99"));
    let reasons: Vec<String> =
        capped.history_rows("bob").into_iter().filter(|(k, ..)| k == "refund").map(|r| r.3).collect();
    assert!(reasons[0].ends_with("; 0.5 of its 1 GPU-hours refunded ([refunds] max_gpu_hours)"), "{reasons:?}");
    // A cause gputokens does not know is named.
    let bad = Site::start("", "");
    std::fs::write(
        &bad.config,
        std::fs::read_to_string(&bad.config).unwrap() + "[refunds]\ncauses = [\"user_cancel\"]\n",
    )
    .unwrap();
    let check = bad.accountd(None, &["config", "check"]);
    assert!(
        check.stderr.contains("unknown cause \"user_cancel\"")
            || check.stdout.contains("unknown cause \"user_cancel\""),
        "{}{}",
        check.stdout,
        check.stderr
    );
}
