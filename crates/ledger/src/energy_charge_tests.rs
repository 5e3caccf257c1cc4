//! GPU energy priced (`[prices] per_kwh`): charged once, to whoever paid for the run's GPU time,
//! on the statement's line of its GPU type; passed over while not priced; refunded with its run;
//! counted by `admin verify`; a ledger from before gains the columns with nothing to charge.

use std::collections::BTreeMap;

use super::*;
use gputokens::pools::{holder, PoolMode};
use gputokens::pricing::PriceTable;
use gputokens::statement::{Item, Month};
use gputokens::time::{local_date, parse_timestamp};
use gputokens::tokens::Tokens;

const KWH: u64 = 3_600_000;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn prices() -> PriceTable {
    PriceTable::new(BTreeMap::from([("a6000".to_string(), Tokens::whole(4))]), None)
}

fn half() -> Option<Tokens> {
    Some(Tokens::from_micro(500_000))
}

/// Alice's job `job` on one a6000 from `start`, `hours` of it so far.
fn run(job: &str, start: &str, hours: u64) -> UsageRecord {
    super::energy_tests::run(job, "a6000", start, hours)
}

/// Run `start` (unix) of `job`, lost to the system: all of it given back at `at`.
fn lost_run(job: &str, start: i64, at: i64) -> RunRefund<'_> {
    RunRefund {
        job_id: job,
        segment_start: start,
        share: (1, 1),
        reason: "lost run",
        at,
        month_cap: Tokens::whole(1000),
        month_start: 0,
    }
}

fn ledger(dir: &tempfile::TempDir) -> Ledger {
    crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap()
}

fn balance(l: &Ledger, name: &str) -> Tokens {
    l.account(name).unwrap().unwrap().balance
}

fn no_problems(l: &Ledger) {
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

#[test]
fn energy_is_charged_once_to_the_runs_user_on_its_gpu_types_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let start = at("2026-11-26T06:00:00");
    l.charge(&[run("1", "2026-11-26T06:00:00", 2)], &prices(), start + 7200).unwrap();
    l.record_energy("1", start + 30, "gpu1", start + 3600, KWH).unwrap();

    let first = l.charge_energy(half(), start + 7200).unwrap();
    assert_eq!((first.entries, first.tokens, first.joules), (1, Tokens::from_micro(500_000), KWH));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100) - Tokens::whole(8) - Tokens::from_micro(500_000));
    let again = l.charge_energy(half(), start + 7300).unwrap();
    assert_eq!((again.entries, again.tokens), (0, Tokens::ZERO), "nothing new, nothing charged");

    // Half a kWh more, then the job's GPU time charged further: each charged for what is new.
    l.record_energy("1", start + 30, "gpu1", start + 7000, KWH / 2).unwrap();
    l.charge(&[run("1", "2026-11-26T06:00:00", 3)], &prices(), start + 10_800).unwrap();
    assert_eq!(l.charge_energy(half(), start + 10_800).unwrap().tokens, Tokens::from_micro(250_000));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100) - Tokens::whole(12) - Tokens::from_micro(750_000));

    let history = l.history("alice").unwrap();
    let energy: Vec<&str> = history.iter().filter(|e| e.is_energy_charge()).map(|e| e.reason.as_str()).collect();
    assert_eq!(energy, ["GPU energy on gpu1: 1 kWh at 0.5/kWh", "GPU energy on gpu1: 0.5 kWh at 0.5/kWh"]);
    assert!(history.iter().filter(|e| e.is_energy_charge()).all(|e| e.job_id.as_deref() == Some("1")));

    let month = Month::of(local_date(start));
    let statement = l.statement("alice", month, Issue { at: start + 10_800, partial: true }).unwrap();
    let line = statement.lines.iter().find(|l| l.item == Item::Charge).unwrap();
    assert_eq!(line.gpu_type.as_deref(), Some("a6000"));
    assert_eq!(line.amount, -(Tokens::whole(12) + Tokens::from_micro(750_000)), "GPU time and energy");
    assert_eq!(line.energy_tokens, Some(Tokens::from_micro(750_000)));
    assert_eq!(line.gpu_seconds, Some(3 * 3600), "energy adds no GPU time");
    assert_eq!(line.energy_joules, Some(KWH + KWH / 2));
    let used = l.used_since_day("alice", local_date(start)).unwrap();
    assert_eq!(used.get("a6000"), Some(&(Tokens::whole(12) + Tokens::from_micro(750_000))));
    no_problems(&l);
}

#[test]
fn energy_measured_while_unpriced_is_never_charged_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let start = at("2026-11-26T06:00:00");
    l.charge(&[run("1", "2026-11-26T06:00:00", 1)], &prices(), start + 3600).unwrap();
    l.record_energy("1", start, "gpu1", start + 600, KWH).unwrap();
    let off = l.charge_energy(None, start + 3600).unwrap();
    assert_eq!((off.entries, off.passed_over), (0, KWH));
    // Priced from now on: only what is measured from now on is charged.
    assert_eq!(l.charge_energy(Some(Tokens::whole(1)), start + 3700).unwrap().entries, 0);
    l.record_energy("1", start, "gpu1", start + 3600, KWH / 4).unwrap();
    let on = l.charge_energy(Some(Tokens::whole(1)), start + 3800).unwrap();
    assert_eq!((on.entries, on.tokens), (1, Tokens::from_micro(250_000)));
    no_problems(&l);
}

#[test]
fn energy_waits_for_its_runs_charge_and_a_run_never_charged_is_passed_over_after_a_week() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let start = at("2026-11-26T06:00:00");
    l.record_energy("5", start, "gpu1", start + 600, KWH).unwrap();
    let early = l.charge_energy(half(), start + 700).unwrap();
    assert_eq!((early.entries, early.waiting), (0, 1));
    l.charge(&[run("5", "2026-11-26T06:00:00", 1)], &prices(), start + 3600).unwrap();
    assert_eq!(l.charge_energy(half(), start + 3600).unwrap().entries, 1, "charged once its run was");

    // Job 6's GPU time is never charged (Slurm's records never showed it on a GPU).
    l.record_energy("6", start, "gpu1", start + 600, KWH).unwrap();
    assert_eq!(l.charge_energy(half(), start + 86_400).unwrap().waiting, 1);
    let week = l.charge_energy(half(), start + 600 + UNMATCHED_AFTER + 1).unwrap();
    assert_eq!((week.waiting, week.passed_over, week.entries), (0, KWH, 0));
    no_problems(&l);
}

#[test]
fn a_requeued_jobs_energy_goes_to_the_run_it_was_measured_in_and_comes_back_with_its_refund() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let (first, second) = ("2026-11-26T06:00:00", "2026-11-26T08:00:00");
    let now = at("2026-11-26T09:00:00");
    l.charge(&[run("7", first, 1), run("7", second, 1)], &prices(), now).unwrap();
    l.record_energy("7", at(first) + 20, "gpu1", at(first) + 3000, KWH).unwrap();
    l.record_energy("7", at(second) + 20, "gpu2", at(second) + 3000, 2 * KWH).unwrap();
    l.charge_energy(Some(Tokens::whole(1)), now).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(100 - 8 - 3));

    // The second run is lost to the system: its GPU time and its energy come back, not the first's.
    let refund = lost_run("7", at(second), now + 60);
    let back = l.refund_run(&refund).unwrap();
    assert_eq!(back.iter().map(|e| e.amount).sum::<Tokens>(), Tokens::whole(4 + 2));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100 - 4 - 1));
    no_problems(&l);
}

#[test]
fn in_mode_both_the_user_and_the_pool_each_pay_the_energy() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    l.set_pool_mode(PoolMode::Both);
    let rules = BucketRules { daily: Tokens::ZERO, ..BucketRules::default() };
    let start = at("2026-11-26T06:00:00");
    l.add_pool("lab", rules, None, "root", start - 3600).unwrap();
    let record = UsageRecord { account: Some("lab".into()), ..run("9", "2026-11-26T06:00:00", 1) };
    l.charge(&[record], &prices(), start + 3600).unwrap();
    let (alice, lab) = (balance(&l, "alice"), balance(&l, &holder("lab")));
    l.record_energy("9", start, "gpu1", start + 3000, 2 * KWH).unwrap();
    let charged = l.charge_energy(Some(Tokens::whole(1)), start + 3600).unwrap();
    assert_eq!((charged.entries, charged.tokens), (2, Tokens::whole(2)), "one run's energy, paid twice");
    assert_eq!(balance(&l, "alice"), alice - Tokens::whole(2));
    assert_eq!(balance(&l, &holder("lab")), lab - Tokens::whole(2));
    let pool_entry = l.history(&holder("lab")).unwrap().into_iter().find(|e| e.is_energy_charge()).unwrap();
    assert_eq!(pool_entry.job_id.as_deref(), Some("9"));
    let spent = l.member_spending("2026-11").unwrap();
    assert_eq!(spent.iter().map(|s| (s.user.as_str(), s.spent)).collect::<Vec<_>>(), [("alice", Tokens::whole(6))]);
    no_problems(&l);
    // A refund of the run gives each what it paid, energy included.
    let refund = lost_run("9", start, start + 4000);
    l.refund_run(&refund).unwrap();
    assert_eq!(balance(&l, "alice"), alice + Tokens::whole(4));
    assert_eq!(balance(&l, &holder("lab")), lab + Tokens::whole(4));
    no_problems(&l);
}

/// Schema 18: a version 17 ledger's energy was measured while nothing priced it: none is charged.
#[test]
fn a_version_17_ledgers_energy_is_never_charged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 17).unwrap();
    drop(conn);
    {
        // Written as a version 17 ledger would have been: no charged_joules yet.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "INSERT INTO job_energy (job_id, since, node, day, joules, last_at)
               VALUES ('3', 100, 'gpu1', '2026-11-26', 3600000, 200);",
        )
        .unwrap();
    }
    let mut l = crate::testdb::open(&path, BucketRules::default()).unwrap();
    let start = at("2026-11-26T06:00:00");
    let charged = l.charge_energy(Some(Tokens::whole(1)), start).unwrap();
    assert_eq!((charged.entries, charged.joules, charged.passed_over), (0, 0, 0));
    no_problems(&l);
}

/// In mode "account" a pool pays its members' jobs: a run that cost nothing yet (a GPU type priced
/// 0) has no shares to go by, and its energy is still the pool's, never its member's.
#[test]
fn a_pools_run_that_cost_nothing_yet_has_its_energy_paid_by_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    l.set_pool_mode(PoolMode::Account);
    let start = at("2026-11-26T06:00:00");
    l.add_pool("lab", BucketRules { daily: Tokens::ZERO, ..BucketRules::default() }, None, "root", start - 3600)
        .unwrap();
    let free = PriceTable::new(BTreeMap::from([("a6000".to_string(), Tokens::ZERO)]), None);
    let record = UsageRecord { account: Some("lab".into()), ..run("9", "2026-11-26T06:00:00", 1) };
    l.charge(&[record], &free, start + 3600).unwrap();
    let lab = balance(&l, &holder("lab"));
    l.record_energy("9", start, "gpu1", start + 3000, KWH).unwrap();
    let charged = l.charge_energy(Some(Tokens::whole(1)), start + 3600).unwrap();
    assert_eq!((charged.entries, charged.failures.len()), (1, 0), "{:?}", charged.failures);
    assert_eq!(balance(&l, &holder("lab")), lab - Tokens::whole(1));
    assert_eq!(l.account("alice").unwrap(), None, "alice's own bucket is never touched in mode account");
    no_problems(&l);
}

/// A requeued job's next run whose GPU time is not charged yet, and a job ID Slurm used again, wait:
/// their energy never lands on an earlier run. A short first run keeps its own energy.
#[test]
fn energy_lands_on_the_run_it_was_measured_in_or_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let first = at("2026-11-26T06:00:00");
    // Run 1 lasted 5 minutes; run 2 began a minute after it ended and is not charged yet.
    let short = UsageRecord { elapsed: 300, ..run("3", "2026-11-26T06:00:00", 0) };
    l.charge(&[short], &prices(), first + 300).unwrap();
    l.record_energy("3", first + 10, "gpu1", first + 290, KWH).unwrap();
    l.record_energy("3", first + 370, "gpu1", first + 400, KWH).unwrap();
    let pass = l.charge_energy(Some(Tokens::whole(1)), first + 400).unwrap();
    assert_eq!((pass.entries, pass.waiting, pass.joules), (1, 1, KWH), "run 1's kWh charged, run 2's waits");
    let second = UsageRecord { elapsed: 600, ..run("3", "2026-11-26T06:06:00", 0) };
    l.charge(&[second], &prices(), first + 1000).unwrap();
    assert_eq!(l.charge_energy(Some(Tokens::whole(1)), first + 1000).unwrap().entries, 1, "run 2's, once charged");
    let refund = lost_run("3", first, first + 1100);
    let back: Tokens = l.refund_run(&refund).unwrap().iter().map(|e| e.amount).sum();
    assert_eq!(back, Tokens::from_micro(333_334) + Tokens::whole(1), "run 1's 5 minutes of an a6000 and its kWh");

    // Job 3 again, months later (Slurm's IDs wrapped), measured before its first charge: it waits.
    let later = at("2027-03-01T06:00:00");
    l.record_energy("3", later, "gpu1", later + 60, KWH).unwrap();
    assert_eq!(l.charge_energy(Some(Tokens::whole(1)), later + 60).unwrap().waiting, 1);
    no_problems(&l);
}

/// A run refunded automatically is given back once: energy its GPUs reported after (its last
/// report's half step) is passed over, not charged for good.
#[test]
fn energy_of_a_run_already_refunded_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir);
    let start = at("2026-11-26T06:00:00");
    l.charge(&[run("4", "2026-11-26T06:00:00", 1)], &prices(), start + 3600).unwrap();
    let refund = lost_run("4", start, start + 3700);
    l.refund_run(&refund).unwrap();
    let refunded = balance(&l, "alice");
    l.record_energy("4", start + 30, "gpu1", start + 3590, KWH).unwrap();
    let pass = l.charge_energy(Some(Tokens::whole(1)), start + 3800).unwrap();
    assert_eq!((pass.entries, pass.passed_over), (0, KWH));
    assert_eq!(balance(&l, "alice"), refunded);
    no_problems(&l);
}
