//! Automatic refunds of runs lost to the system (`[refunds]`): what one run of a job was charged,
//! or a share of it, goes back to whoever paid for the job, once, keyed by the run.

use crate::db::{params, OptionalExtension};

use gputokens::entry::{Entry, EntryKind};
use gputokens::tokens::Tokens;

use super::accounts::{insert_entry, Applied, NewEntry};
use super::admin::{job_payers, refunded_to, run_payers};
use super::{Ledger, LedgerError};

/// One run to refund.
#[derive(Debug, Clone, Copy)]
pub struct RunRefund<'a> {
    pub job_id: &'a str,
    /// The run's start, as its charges were recorded.
    pub segment_start: i64,
    /// The share of its charge refunded: (numerator, denominator), at most 1.
    pub share: (u64, u64),
    pub reason: &'a str,
    pub at: i64,
    /// At most this much is refunded automatically to one balance in the month from
    /// `month_start` (unix seconds) on: what it already had back since then counts.
    pub month_cap: Tokens,
    pub month_start: i64,
}

/// The actor of automatic refunds.
const AUTOMATIC: &str = "gputokens";

/// What `holder` had back in automatic refunds since `since` (micro-tokens).
fn automatic_refunds_since(tx: &crate::db::Transaction<'_>, holder: &str, since: i64) -> Result<i128, LedgerError> {
    let sum: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(amount), 0) FROM entries
             WHERE user = ?1 AND kind = 'refund' AND actor = ?2 AND at >= ?3",
        )?
        .query_row(params![holder, AUTOMATIC, since], |r| r.get(0))?;
    Ok(i128::from(sum))
}

/// What job `job_id` was charged in all, every run, GPU time and energy (micro-tokens).
fn job_paid_in_all(tx: &crate::db::Transaction<'_>, job_id: &str) -> Result<i128, LedgerError> {
    let sum: i64 = tx.query_row(
        "SELECT COALESCE(SUM(charged + energy_charged), 0) FROM job_charges WHERE job_id = ?1",
        params![job_id],
        |r| r.get(0),
    )?;
    Ok(i128::from(sum))
}

/// The key of the refund of run `segment_start` of `job_id` to `holder`: each run refunded once.
pub fn run_refund_key(job_id: &str, segment_start: i64, holder: &str) -> String {
    // Under `refund:JOB:` like an admin's refund of the job, so each counts what the other gave back.
    format!("refund:{job_id}:run:{segment_start}:{holder}")
}

impl Ledger {
    /// Refunds `run.share` of what run `run.segment_start` of `run.job_id` was charged, to the
    /// balances that paid for the job in proportion to what each paid, never more than a balance
    /// paid for the job and has not had back. Once per run: a second call adds nothing. Returns the
    /// entries written now.
    pub fn refund_run(&mut self, run: &RunRefund) -> Result<Vec<Entry>, LedgerError> {
        let (numerator, denominator) = run.share;
        if numerator == 0 || denominator == 0 || numerator > denominator {
            return Err(LedgerError::Refused(format!(
                "a run's refunded share {numerator}/{denominator} is not within 0 and 1"
            )));
        }
        let tx = self.conn.transaction()?;
        let run_charged: i64 = tx.query_row(
            "SELECT COALESCE(SUM(charged + energy_charged), 0) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2",
            params![run.job_id, run.segment_start],
            |r| r.get(0),
        )?;
        let refunded = i128::from(run_charged) * i128::from(numerator) / i128::from(denominator);
        // Each payer paid this share of each token the run cost: all of it alone, both of them all
        // of it in mode "both" (the user's bucket and the pool each pay the whole charge), a part
        // after a mode switch. Each gets that share of the run's refund back (the audit's L2), from
        // what it paid for this run: not for another job that had the same ID before.
        let job_paid = job_payers(&tx, run.job_id)?;
        let (payers, basis) = match run_payers(&tx, run.job_id, run.segment_start)? {
            Some(payers) => (payers, i128::from(run_charged)),
            // Kept before schema 15 for all runs together: the job's shares.
            None => (job_paid.clone(), job_paid_in_all(&tx, run.job_id)?),
        };
        let member: Option<String> = tx
            .query_row(
                "SELECT user FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 LIMIT 1",
                params![run.job_id, run.segment_start],
                |r| r.get(0),
            )
            .optional()?;
        let mut ids = Vec::new();
        for (holder, holder_paid) in &payers {
            if refunded <= 0 || basis <= 0 {
                break;
            }
            let share = refunded * i128::from(*holder_paid) / basis;
            // Never more than the holder paid for the job and has not had back (an admin's refund).
            let paid_for_job = job_paid.iter().find(|(h, _)| h == holder).map_or(0, |(_, paid)| *paid);
            let given_back = refunded_to(&tx, run.job_id, holder)?;
            let amount = share.min(i128::from(paid_for_job) - i128::from(given_back));
            let month_left = i128::from(run.month_cap.micro()) - automatic_refunds_since(&tx, holder, run.month_start)?;
            let capped = amount > month_left;
            let Ok(amount) = i64::try_from(amount.min(month_left)) else { continue };
            if amount <= 0 {
                continue;
            }
            let reason = match capped {
                true => format!("{}; capped by [refunds] max_tokens_per_month ({})", run.reason, run.month_cap),
                false => run.reason.to_string(),
            };
            let mut entry = NewEntry::new(
                holder,
                EntryKind::Refund,
                Tokens::from_micro(amount),
                run.at,
                AUTOMATIC,
                &reason,
                run_refund_key(run.job_id, run.segment_start, holder),
            );
            entry.job_id = Some(run.job_id.to_string());
            if insert_entry(&tx, &entry)? == Applied::Added {
                ids.push(tx.last_insert_rowid());
                super::expiries::undraw(&tx, holder, run.job_id, amount, run.at)?;
                // A pool's refund lowers what its member spent in the run's month (their limit).
                if let (Some(account), Some(member)) = (gputokens::pools::account_of(holder), member.as_deref()) {
                    super::pools::lower_member_spending(&tx, account, member, amount, run.segment_start)?;
                }
            }
        }
        tx.commit()?;
        self.entries_by_id(&ids)
    }

    /// Whether run `segment_start` of `job_id` was refunded automatically.
    pub fn run_refunded(&self, job_id: &str, segment_start: i64) -> Result<bool, LedgerError> {
        run_refunded(&self.conn, job_id, segment_start)
    }
}

/// [`Ledger::run_refunded`], on any connection or transaction: its refunds' keys share a prefix.
pub(crate) fn run_refunded(
    conn: &crate::db::Connection,
    job_id: &str,
    segment_start: i64,
) -> Result<bool, LedgerError> {
    let prefix = format!("refund:{job_id}:run:{segment_start}:");
    let found: i64 = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM entry_keys WHERE key >= ?1 AND key < ?2)")?
        .query_row(params![prefix, format!("refund:{job_id}:run:{segment_start};")], |r| r.get(0))?;
    Ok(found == 1)
}
