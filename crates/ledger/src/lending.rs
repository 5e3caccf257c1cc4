//! Idle GPUs lent to users in debt (`[lending]`): which runs are *borrowed* (their payer's balance
//! was below 0 when they started, as the ledger stood then), and which of them accountd reclaimed
//! for a user in credit who waited (requeued: charged nothing). Each run is judged once, the first
//! time a cycle sees it, and the judgement kept, so later charges and grants never change it.

use std::collections::HashMap;

use crate::db::{params, OptionalExtension};
use gputokens::tokens::Tokens;

use super::{Ledger, LedgerError};

/// A run to judge: its job, its start, and the balances that pay for it (the user's, a pool's and
/// those it draws on), each with the balance below which it lends (0, or just above its floor
/// where the site lends at the floor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunToJudge {
    pub job_id: String,
    pub run_start: i64,
    pub payers: Vec<(String, Tokens)>,
}

/// A borrowed run as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BorrowedRun {
    pub job_id: String,
    pub run_start: i64,
    /// The balance that was in debt when it started.
    pub payer: String,
    /// The waiting jobs it was requeued for, and when; None while it was not reclaimed.
    pub reclaimed: Option<(String, i64)>,
    /// Judged by this call (not stored before it): the caller marks it in Slurm.
    pub judged_now: bool,
}

/// Runs (job, start) as judged: whether borrowed, and the row.
type Judgements = HashMap<(String, i64), (bool, BorrowedRun)>;

/// The columns [`run_row`] reads, in its order.
const RUN_COLUMNS: &str = "job_id, run_start, payer, reclaimed_for, reclaimed_at";

/// A borrowed run from [`RUN_COLUMNS`] starting at column `at`.
fn run_row(r: &crate::db::Row<'_>, at: usize) -> crate::db::Result<BorrowedRun> {
    let reclaimed = match (r.get::<Option<String>>(at + 3)?, r.get::<Option<i64>>(at + 4)?) {
        (Some(waiting), Some(when)) => Some((waiting, when)),
        _ => None,
    };
    Ok(BorrowedRun {
        job_id: r.get(at)?,
        run_start: r.get(at + 1)?,
        payer: r.get(at + 2)?,
        reclaimed,
        judged_now: false,
    })
}

impl Ledger {
    /// `holder`'s balance as the ledger stood at `at` (its entries after `at` taken off); a
    /// balance the ledger does not know stands at `initial`.
    fn balance_at(&self, holder: &str, at: i64) -> Result<Tokens, LedgerError> {
        let now: Option<i64> = self
            .conn
            .prepare_cached("SELECT balance FROM users WHERE name = ?1")?
            .query_row(params![holder], |r| r.get(0))
            .optional()?;
        let Some(now) = now else { return Ok(self.rules.initial) };
        // Down the balance's chain of entries from its newest while they are later than `at` (a
        // few lookups, where a sum over its entries by time would read them all: MariaDB keeps no
        // index of entries by balance).
        let since: i64 = self
            .conn
            .prepare_cached(
                "WITH RECURSIVE chain(id, amount, prev, at) AS (
                    SELECT e.id, e.amount, e.prev_id, e.at FROM users u JOIN entries e ON e.id = u.last_entry
                    WHERE u.name = ?1
                    UNION ALL
                    SELECT e.id, e.amount, e.prev_id, e.at FROM chain JOIN entries e ON e.id = chain.prev
                    WHERE chain.at > ?2
                 )
                 SELECT COALESCE(SUM(amount), 0) FROM chain WHERE at > ?2",
            )?
            .query_row(params![holder, at], |r| r.get(0))?;
        Ok(Tokens::from_micro(now.saturating_sub(since)))
    }

    /// Judges the runs not judged yet (borrowed where a payer's balance was below 0 when the run
    /// started) and returns every borrowed one among `runs`.
    pub fn judge_borrowed(
        &mut self,
        runs: &[RunToJudge],
        now: i64,
    ) -> Result<HashMap<(String, i64), BorrowedRun>, LedgerError> {
        let mut found = HashMap::new();
        let mut unjudged = Vec::new();
        let mut stored = self.judged_among(runs)?;
        for run in runs {
            match stored.remove(&(run.job_id.clone(), run.run_start)) {
                Some((true, borrowed)) => {
                    found.insert((run.job_id.clone(), run.run_start), borrowed);
                }
                Some((false, _)) => {}
                None => unjudged.push(run),
            }
        }
        if unjudged.is_empty() {
            return Ok(found);
        }
        let mut judged = Vec::new();
        for run in unjudged {
            let mut in_debt = None;
            for (payer, below) in &run.payers {
                if self.balance_at(payer, run.run_start)? < *below {
                    in_debt = Some(payer.clone());
                    break;
                }
            }
            judged.push((run, in_debt));
        }
        let tx = self.conn.transaction()?;
        for (run, in_debt) in &judged {
            let payer = in_debt.as_deref().or(run.payers.first().map(|(p, _)| p.as_str())).unwrap_or_default();
            tx.prepare_cached(tx.dialect().pick(
                "INSERT INTO borrowed_runs (job_id, run_start, borrowed, payer, judged_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT DO NOTHING",
                "INSERT INTO borrowed_runs (job_id, run_start, borrowed, payer, judged_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON DUPLICATE KEY UPDATE job_id = job_id",
            ))?
            .execute(params![run.job_id, run.run_start, i64::from(in_debt.is_some()), payer, now])?;
        }
        tx.commit()?;
        // As stored: where another process judged a run first, its judgement stands.
        for (run, _) in judged {
            if let Some((true, borrowed)) = self.borrowed_run(&run.job_id, run.run_start)? {
                found.insert((run.job_id.clone(), run.run_start), BorrowedRun { judged_now: true, ..borrowed });
            }
        }
        Ok(found)
    }

    /// How each of `runs` judged before was judged, read [`crate::db::Dialect::in_list`] jobs a
    /// statement (a cycle asks it of every running GPU job).
    fn judged_among(&self, runs: &[RunToJudge]) -> Result<Judgements, LedgerError> {
        let mut jobs: Vec<&str> = runs.iter().map(|r| r.job_id.as_str()).collect();
        jobs.sort_unstable();
        jobs.dedup();
        let sql = format!("SELECT borrowed, {RUN_COLUMNS} FROM borrowed_runs WHERE job_id IN (?LIST)");
        let rows = crate::db::query_among(&self.conn, &sql, &jobs, |r| Ok((r.get::<i64>(0)? != 0, run_row(r, 1)?)))?;
        Ok(rows.into_iter().map(|(borrowed, run)| ((run.job_id.clone(), run.run_start), (borrowed, run))).collect())
    }

    /// How a run was judged: whether it is borrowed, and its row.
    fn borrowed_run(&self, job_id: &str, run_start: i64) -> Result<Option<(bool, BorrowedRun)>, LedgerError> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT borrowed, {RUN_COLUMNS} FROM borrowed_runs WHERE job_id = ?1 AND run_start = ?2"
            ))?
            .query_row(params![job_id, run_start], |r| Ok((r.get::<i64>(0)? != 0, run_row(r, 1)?)))
            .optional()?)
    }

    /// Records that the borrowed run `run_start` of `job_id` is requeued for the waiting jobs
    /// `waiting` (before scontrol runs, so no crash loses it): it is charged nothing. False where it
    /// is not a borrowed run, or was reclaimed before (the first reclaim stands).
    pub fn mark_reclaimed(
        &mut self,
        job_id: &str,
        run_start: i64,
        waiting: &str,
        now: i64,
    ) -> Result<bool, LedgerError> {
        let changed = self.conn.execute(
            "UPDATE borrowed_runs SET reclaimed_for = ?3, reclaimed_at = ?4
             WHERE job_id = ?1 AND run_start = ?2 AND borrowed = 1 AND reclaimed_at IS NULL",
            params![job_id, run_start, waiting, now],
        )?;
        Ok(changed == 1)
    }

    /// The borrowed runs of `payer` judged since `since`, newest first.
    pub fn borrowed_runs_of(&self, payer: &str, since: i64) -> Result<Vec<BorrowedRun>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM borrowed_runs
                      WHERE payer = ?1 AND borrowed = 1 AND judged_at >= ?2 ORDER BY run_start DESC"
        ))?;
        let rows = stmt.query_map(params![payer, since], |r| run_row(r, 0))?.collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::accounts::NewEntry;
    use gputokens::entry::EntryKind;
    use gputokens::lending::Lent;
    use gputokens::policy::BucketRules;
    use gputokens::pricing::PriceTable;

    const T0: i64 = 1_795_000_000;

    fn run(job: &str, start: i64, payer: &str) -> RunToJudge {
        RunToJudge { job_id: job.into(), run_start: start, payers: vec![(payer.into(), Tokens::ZERO)] }
    }

    fn record(job: &str, user: &str, start: i64, elapsed: u64, lent: Option<Lent>) -> crate::UsageRecord {
        crate::UsageRecord {
            job_id: job.into(),
            user: user.into(),
            account: None,
            segment_start: start,
            sluid: None,
            milli_gpus: BTreeMap::from([("a6000".to_string(), 1000)]),
            elapsed,
            nodes: 1,
            weight_permille: 1000,
            held: Default::default(),
            stranding: None,
            lent,
        }
    }

    /// A run is borrowed where its payer was in debt when it started, as the ledger stood then, and
    /// the judgement stands whatever the balance does after.
    #[test]
    fn a_run_is_borrowed_by_its_payers_balance_when_it_started_and_judged_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
        l.append(&NewEntry::new("alice", EntryKind::Adjust, Tokens::whole(-105), T0, "root", "t", "a:1".into()))
            .unwrap();
        l.ensure_user("bob", T0).unwrap();
        let first = l.judge_borrowed(&[run("1", T0 + 10, "alice"), run("2", T0 + 10, "bob")], T0 + 12).unwrap();
        assert_eq!(first.keys().cloned().collect::<Vec<_>>(), [("1".to_string(), T0 + 10)]);
        assert!(first[&("1".to_string(), T0 + 10)].judged_now);
        l.append(&NewEntry::new("alice", EntryKind::Grant, Tokens::whole(50), T0 + 20, "root", "t", "g:1".into()))
            .unwrap();
        let later = [run("1", T0 + 10, "alice"), run("3", T0 + 30, "alice"), run("4", T0 + 15, "alice")];
        let again = l.judge_borrowed(&later, T0 + 40).unwrap();
        let mut borrowed: Vec<&str> = again.keys().map(|(job, _)| job.as_str()).collect();
        borrowed.sort_unstable();
        assert_eq!(borrowed, ["1", "4"], "3 began after the grant; 4 before it, judged from the history");
        assert!(!again[&("1".to_string(), T0 + 10)].judged_now, "judged before");
        let unknown = l.judge_borrowed(&[run("5", T0, "nobody")], T0 + 40).unwrap();
        assert!(unknown.is_empty(), "a payer the ledger does not know stands at initial");
        assert!(l.mark_reclaimed("1", T0 + 10, "9", T0 + 50).unwrap());
        assert!(!l.mark_reclaimed("1", T0 + 10, "10", T0 + 60).unwrap(), "the first reclaim stands");
        assert!(!l.mark_reclaimed("3", T0 + 30, "9", T0 + 60).unwrap(), "not borrowed");
        let runs = l.borrowed_runs_of("alice", T0).unwrap();
        assert_eq!(runs[1].reclaimed, Some(("9".to_string(), T0 + 50)));
    }

    /// A reclaimed run is charged nothing, in an entry that says why, once; a finished one its
    /// price less the discount.
    #[test]
    fn a_reclaimed_run_leaves_an_entry_of_nothing_and_a_finished_one_pays_less_the_discount() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
        let prices = PriceTable::new([("a6000".to_string(), Tokens::whole(4))].into(), None);
        let reclaimed = record("1", "alice", T0, 3600, Some(Lent::Reclaimed { waiting: "9".into() }));
        l.charge(std::slice::from_ref(&reclaimed), &prices, T0 + 3600).unwrap();
        l.charge(&[reclaimed], &prices, T0 + 3700).unwrap();
        let history = l.history("alice").unwrap();
        let charges: Vec<_> = history.iter().filter(|e| e.kind == EntryKind::Charge).collect();
        assert_eq!(charges.len(), 1, "once");
        assert_eq!(charges[0].amount, Tokens::ZERO);
        assert!(
            charges[0].reason.ends_with("; a borrowed run of idle GPUs, reclaimed for job 9: not charged"),
            "{}",
            charges[0].reason
        );
        let finished = record("2", "alice", T0, 3600, Some(Lent::Finished { discount_percent: 25 }));
        l.charge(&[finished], &prices, T0 + 3600).unwrap();
        assert_eq!(l.account("alice").unwrap().unwrap().balance, Tokens::whole(100 - 3), "4 × 75%");
        assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
    }
}
