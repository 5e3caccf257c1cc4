//! Amounts beyond what gputokens can count, through the real accountd: left out or refused by name,
//! never wrapped or saturated into smaller ones, and the other records charged exactly.

use crate::common::Site;

#[test]
fn records_beyond_counting_are_left_out_and_the_rest_charged() {
    // The highest price the config takes: a hundred thousand GPUs for ten years at it is past 64 bits.
    let site = Site::with_prices("", "[prices]\na6000 = 1000000000\nrtx3090 = 1\n", "");
    let start = 1_795_430_400;
    let rows = [
        format!("1|alice|gres/gpu:a6000=100000,gres/gpu=100000|316224000|{start}|COMPLETED"),
        format!("2|alice|gres/gpu:rtx3090=1,gres/gpu=1|3600|{start}|COMPLETED"),
        format!("3|bob|gres/gpu:rtx3090=1000000000000000000|60|{start}|COMPLETED"), // 10^18 GPUs
        format!("4|bob|gres/gpu:rtx3090=1|9223372036854775807|{start}|COMPLETED"),  // ElapsedRaw = 2^63 - 1
        format!("5|bob|gres/gpu:rtx3090=2|1800|{start}|COMPLETED"),
    ];
    let text = format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n{}\n", rows.join("\n"));
    let sacct = site.file("sacct.txt", &text);
    let out = site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    assert!(out.stdout.contains("2 charge entries, 2 tokens charged"), "{}", out.stdout);
    assert!(out.stdout.contains("3 that cannot be charged left out"), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("job 1: not charged (absurd_value): its cost or GPU-seconds are more than the ledger can hold"),
        "{}",
        out.stderr
    );
    assert_eq!(site.balance("alice"), "99");
    assert_eq!(site.balance("bob"), "99");
    assert!(site.accountd(None, &["admin", "verify"]).ok().stdout.contains("consistent"));
}
