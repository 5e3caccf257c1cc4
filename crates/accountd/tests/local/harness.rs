//! The tests' own harness (tests/support/), checked: what it reads from Slurm's output, and that the
//! one-node cluster has a set of users for each of its tests, and the charges the tests work out by
//! hand (support/by_hand.rs) come to its worked examples.

use std::path::Path;

use crate::{by_hand, cluster};

#[test]
fn squeues_times_used_read_as_seconds() {
    assert_eq!(cluster::time_used_secs("0:05"), Some(5));
    assert_eq!(cluster::time_used_secs("12:34"), Some(754));
    assert_eq!(cluster::time_used_secs("1:02:03"), Some(3723));
    assert_eq!(cluster::time_used_secs("2-01:00:00"), Some(2 * 86_400 + 3600));
    assert_eq!(cluster::time_used_secs("INVALID"), None);
    assert_eq!(cluster::time_used_secs(""), None);
}

/// tests/cluster/up.sh makes the sets `serial()` hands out, and there are at least as many as the
/// one-node suite has tests: within one run no two tests share a set, even after a failed one.
#[test]
fn there_are_as_many_user_sets_as_cluster_tests() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(here.join("../../tests/cluster/lib.sh")).unwrap();
    let made: Option<usize> =
        lib.lines().find_map(|l| l.strip_prefix("TEST_USER_SETS=")).and_then(|n| n.trim().parse().ok());
    assert_eq!(made, Some(cluster::USER_SETS), "TEST_USER_SETS in tests/cluster/lib.sh");
    // The one-node suite's tests: every test of the `cluster` target (each is ignored: it needs the
    // cluster that tests/run.sh starts).
    let mut tests = 0;
    for entry in std::fs::read_dir(here.join("tests/cluster")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let (marked, ignored) = (text.matches("#[test]\n").count(), text.matches("#[test]\n#[ignore").count());
            // A test here that needs no cluster belongs in tests/local/ (the unit suite's).
            assert_eq!(marked, ignored, "{}: every test of the cluster target needs the cluster", path.display());
            tests += marked;
        }
    }
    assert!(tests > 50, "found only {tests} tests in tests/cluster/");
    assert!(
        cluster::USER_SETS >= tests,
        "{tests} cluster tests share {} sets of users: raise TEST_USER_SETS",
        cluster::USER_SETS
    );
}

#[test]
fn charges_worked_out_by_hand_come_to_the_worked_examples() {
    let t = |s: &str| s.parse::<gputokens::Tokens>().unwrap();
    // The README's: 2 a6000 (4 tokens per GPU-hour) for 2 hours.
    assert_eq!(by_hand::gpu_cost(t("4"), 2 * 7200).to_string(), "16");
    // An rtx2080 (0.5) for 90 s: 0.0125.
    assert_eq!(by_hand::gpu_cost(t("0.5"), 90).to_string(), "0.0125");
    // One rtx3090-second (1 per hour) is 0.000277… and rounds up.
    assert_eq!(by_hand::gpu_cost(t("1"), 1).to_string(), "0.000278");
    // 300 W for 60 s (18 kJ) at 100 per kWh: 0.5.
    assert_eq!(by_hand::energy_cost(t("100"), 18_000).to_string(), "0.5");
    // 1 J at 2.5 per kWh: 0.000000694… rounds up to one micro-token.
    assert_eq!(by_hand::energy_cost(t("2.5"), 1).to_string(), "0.000001");
}
