//! The hold trail per run of a job (`last_hold_action`).

use super::*;
use gputokens::holds;

fn hold_action(action: &str, at: i64) -> Action {
    Action {
        at,
        action: action.into(),
        target: "41".into(),
        user: "alice".into(),
        reason: "test".into(),
        dry_run: false,
    }
}

fn open() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    (dir, ledger)
}

/// Slurm sets a requeued run's submit_time when its epilog ends: a hold taken on the run before
/// that, then released by an admin, is still this run's (else the next cycle holds it again).
#[test]
fn a_hold_taken_before_a_requeued_runs_submit_time_is_that_runs() {
    let (_dir, mut l) = open();
    let t = 1_800_000_000;
    l.record_run_action(&hold_action(holds::HOLD, t), 1).unwrap();
    l.record_run_action(&hold_action(holds::HOLD_LIFTED, t + 60), 1).unwrap();
    // The run's submit_time, set after the epilog, is after the hold.
    assert_eq!(l.last_hold_action("41", 1, t + 5).unwrap().as_deref(), Some(holds::HOLD_LIFTED));
    // The next run of the job begins with nothing done to it.
    assert_eq!(l.last_hold_action("41", 2, t + 600).unwrap(), None);
    // A job that was never requeued counts from its submit_time: a job of the same ID before it
    // (Slurm's IDs wrap) is not this one.
    assert_eq!(l.last_hold_action("41", 0, t + 5).unwrap(), None);
    l.record_run_action(&hold_action(holds::HOLD, t + 700), 0).unwrap();
    assert_eq!(l.last_hold_action("41", 0, t + 650).unwrap().as_deref(), Some(holds::HOLD));
    // Nor is an older job of the same ID that was requeued as often, a day and more before.
    assert_eq!(l.last_hold_action("41", 1, t + 61 + REQUEUED_RUN_SLACK).unwrap(), None);
}

/// A hold recorded before schema 17 has no run: it counts from the job's submit_time as it did.
#[test]
fn a_hold_recorded_before_runs_were_kept_counts_from_the_submit_time() {
    let (_dir, mut l) = open();
    let t = 1_800_000_000;
    l.record_action(&hold_action(holds::HOLD, t)).unwrap();
    assert_eq!(l.last_hold_action("41", 0, t).unwrap().as_deref(), Some(holds::HOLD));
    assert_eq!(l.last_hold_action("41", 3, t - 10).unwrap().as_deref(), Some(holds::HOLD));
    assert_eq!(l.last_hold_action("41", 0, t + 1).unwrap(), None);
}
