//! Charging GPU time. Each (job, run, GPU type) remembers how many seconds it was charged for and
//! how much, in the same transaction as the charge entry, so a record is never charged twice and a
//! running job charged every cycle adds up to exactly its final cost. A run is named by its SLUID
//! where Slurm gives one (25.11+), else by its start time (`start:<unix start>`).

use std::collections::{BTreeMap, HashMap};

use std::fmt::Write;

use rusqlite::{params, Statement, Transaction};

use super::accounts::{ensure_user, move_balance};
use super::error::out_of_range;
use super::pools::add_member_spending;
use super::{Ledger, LedgerError, UsageRecord};
use gputokens::policy::BucketRules;
use gputokens::pools::{self, Payers};
use gputokens::pricing::{cost_of, weighted_price, AppliedPrice, PriceTable};
use gputokens::time::local_date;
use gputokens::tokens::Tokens;
use gputokens::tres::{gpu_count, MILLI};

/// What a charging pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChargeOutcome {
    /// Charge entries added.
    pub entries: usize,
    /// Total charged.
    pub charged: Tokens,
    /// Records that had nothing new to charge.
    pub unchanged: usize,
    /// GPU types charged at the unlisted-type price, with the GPU-seconds charged so.
    pub unlisted_types: BTreeMap<String, u64>,
    /// Tokens charged per (user, GPU type).
    pub by_user_type: BTreeMap<(String, String), Tokens>,
    /// Records (job run segments) that were charged anything.
    pub records: usize,
    /// Job IDs of records left out because their cost or GPU-seconds are beyond what the ledger can
    /// hold (absurd counts, times or prices): never wrapped or saturated into a smaller charge.
    pub uncountable: Vec<String>,
}

impl Ledger {
    /// Charges every record for the time it held GPUs beyond what was already charged, in one
    /// transaction. `now` stamps the entries.
    pub fn charge(
        &mut self,
        records: &[UsageRecord],
        prices: &PriceTable,
        now: i64,
    ) -> Result<ChargeOutcome, LedgerError> {
        let rules = self.rules;
        let pool_rules = super::pools::pool_rules(&self.conn)?;
        let mode = self.pool_mode;
        let tx = self.conn.transaction()?;
        let mut outcome = ChargeOutcome::default();
        let mut batch = Batch::default();
        let mut statements = Statements::prepare(&tx)?;
        let with_grants = super::expiries::balances_with_open_grants(&tx)?;
        for record in records {
            let Some(priced) = price_record(record, prices) else {
                outcome.uncountable.push(record.job_id.clone());
                continue;
            };
            let payers = pools::payers(mode, record.account.as_deref(), |a| pool_rules.contains_key(&pools::holder(a)));
            if charge_record(&tx, &mut statements, &rules, payers, record, &priced, now, &mut batch)? {
                outcome.records += 1;
            } else {
                outcome.unchanged += 1;
            }
        }
        drop(statements);
        // Per user, once: the balance, the newest entry, and the day's usage per GPU type.
        let day = local_date(now).to_string();
        for (user, pending) in batch.users {
            if let Some(last_entry) = pending.last_entry {
                move_balance(&tx, &user, pending.delta, last_entry)?;
            }
            if with_grants.contains(&user) {
                super::expiries::draw(&tx, &user, -pending.delta, now)?;
            }
            for (gpu_type, tokens) in pending.by_type {
                // Read back: a sum SQLite could not keep as an integer (it becomes REAL) fails the
                // cycle instead of being stored inexactly.
                tx.prepare_cached(
                    "INSERT INTO usage_days (user, day, gpu_type, charged) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT DO UPDATE SET charged = charged + excluded.charged RETURNING charged",
                )?
                .query_row(params![user, day, gpu_type, tokens.micro()], |r| r.get::<_, i64>(0))?;
                if pools::account_of(&user).is_none() {
                    outcome.by_user_type.insert((user.clone(), gpu_type), tokens);
                }
            }
        }
        for ((account, member), spent) in batch.member_spending {
            add_member_spending(&tx, &account, &member, spent, now)?;
        }
        for ((job_id, holder), paid) in batch.payments {
            tx.prepare_cached(
                "INSERT INTO job_payments (job_id, holder, charged) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO UPDATE SET charged = charged + excluded.charged RETURNING charged",
            )?
            .query_row(params![job_id, holder, paid.micro()], |r| r.get::<_, i64>(0))?;
        }
        tx.commit()?;
        outcome.entries = batch.entries;
        outcome.charged = batch.charged;
        outcome.unlisted_types = batch.unlisted_types;
        Ok(outcome)
    }

    /// Seconds already charged for one segment and GPU type (tests and diagnostics).
    pub fn charged_until(&self, job_id: &str, segment_start: i64, gpu_type: &str) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT MAX(charged_until) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3",
                params![job_id, segment_start, gpu_type],
                |r| r.get::<_, Option<i64>>(0),
            )?
            .map(|s| s as u64))
    }

    /// The runs of a job charged so far, as the ledger names them (SLUID, else `start:<unix start>`),
    /// oldest first.
    pub fn charged_runs(&self, job_id: &str) -> Result<Vec<String>, LedgerError> {
        let mut statement =
            self.conn.prepare("SELECT DISTINCT run FROM job_charges WHERE job_id = ?1 ORDER BY segment_start, run")?;
        let runs = statement.query_map([job_id], |r| r.get(0))?.collect::<Result<_, _>>()?;
        Ok(runs)
    }

    /// Seconds of a run segment charged for every GPU type it holds (the least of them); None when
    /// nothing of it was charged yet.
    pub fn charged_seconds(&self, job_id: &str, segment_start: i64) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT MIN(charged_until) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2",
                params![job_id, segment_start],
                |r| r.get::<_, Option<i64>>(0),
            )?
            .map(|s| s as u64))
    }
}

/// What one charge cycle keeps between records: users are added once, and their balance and
/// newest entry are written once, at the end of the transaction.
#[derive(Default)]
struct Batch {
    users: HashMap<String, PendingUser>,
    entries: usize,
    charged: Tokens,
    unlisted_types: BTreeMap<String, u64>,
    /// (account, member) → what the member's jobs took from the pool.
    member_spending: BTreeMap<(String, String), Tokens>,
    /// (job, payer) → what the payer paid for the job, for refunds.
    payments: BTreeMap<(String, String), Tokens>,
}

/// A balance (a user's or a pool's) charged in this cycle.
struct PendingUser {
    delta: Tokens,
    /// Their newest entry: the next charge links to it.
    last_entry: Option<i64>,
    by_type: Vec<(String, Tokens)>,
}

/// One GPU type of a record, priced: its milli-GPUs, the price applied, that price weighted, and the
/// record's whole cost for it so far.
struct Priced<'r> {
    gpu_type: &'r String,
    milli: u64,
    price: AppliedPrice,
    weighted: Tokens,
    total: Tokens,
}

/// Every GPU type of `record` priced; None when its elapsed time, GPU-seconds or cost do not fit
/// the ledger's 64-bit columns.
fn price_record<'r>(record: &'r UsageRecord, prices: &PriceTable) -> Option<Vec<Priced<'r>>> {
    i64::try_from(record.elapsed).ok()?;
    let priced = |(gpu_type, &milli): (&'r String, &u64)| {
        i64::try_from(milli as u128 * record.elapsed as u128 / MILLI as u128).ok()?;
        let price = prices.applied(gpu_type);
        let weighted = weighted_price(price.per_gpu_hour, record.weight_permille);
        let total = cost_of(weighted, milli, record.elapsed)?;
        Some(Priced { gpu_type, milli, price, weighted, total })
    };
    record.milli_gpus.iter().map(priced).collect()
}

/// Charges the GPU time of `record` not charged yet to its `payers`; true when it added entries.
#[allow(clippy::too_many_arguments)]
fn charge_record(
    tx: &Transaction<'_>,
    statements: &mut Statements<'_>,
    rules: &BucketRules,
    payers: Payers<'_>,
    record: &UsageRecord,
    priced: &[Priced<'_>],
    now: i64,
    batch: &mut Batch,
) -> Result<bool, LedgerError> {
    let mut charged_any = false;
    let pool_holder = payers.pool.map(pools::holder);
    let payer_names = payers.user.then_some(&record.user).into_iter().chain(pool_holder.as_ref());
    let payer_names: Vec<&String> = payer_names.collect();
    let tracked = track_payments(statements, payers, record, batch)?;
    for &Priced { gpu_type, milli, price, weighted, total } in priced {
        let Some(until) = statements.move_progress(record, gpu_type, total)? else { continue };
        // A price lowered mid-job never turns into a refund: charges only move forward.
        let due = (total - until.charged).max(Tokens::ZERO);
        // Fits: at most the record's GPU-seconds, which price_record checked.
        let gpu_seconds = (milli as u128 * (record.elapsed - until.seconds) as u128 / MILLI as u128) as u64;
        if !price.listed {
            let slot = batch.unlisted_types.entry(gpu_type.clone()).or_default();
            *slot = slot.saturating_add(gpu_seconds);
        }
        for &payer in &payer_names {
            let pending = match batch.users.get_mut(payer) {
                Some(pending) => pending,
                None => {
                    ensure_user(tx, rules, payer, now)?;
                    let last_entry = tx
                        .prepare_cached("SELECT last_entry FROM users WHERE name = ?1")?
                        .query_row([payer], |r| r.get(0))?;
                    let pending = PendingUser { delta: Tokens::ZERO, last_entry, by_type: Vec::new() };
                    batch.users.entry(payer.clone()).or_insert(pending)
                }
            };
            // A run of no GPU time (cancelled as it started) is remembered as charged (its progress
            // row above) and makes its user known (from then on replenished), but leaves no "+0"
            // entry in the history and statement.
            if gpu_seconds == 0 && due == Tokens::ZERO {
                continue;
            }
            let member = (payer != &record.user).then_some(&record.user);
            let reason = &mut statements.reason;
            reason.clear();
            let _ = write!(reason, "{} × {gpu_type} for {}s at {}/GPU-hour", gpus(milli), record.elapsed, weighted);
            statements.insert_entry.execute(params![
                payer,
                (-due).micro(),
                now,
                reason.as_str(),
                record.job_id,
                gpu_type,
                gpu_seconds as i64,
                pending.last_entry,
                member,
            ])?;
            pending.last_entry = Some(tx.last_insert_rowid());
            pending.delta = pending.delta.checked_sub(due).ok_or_else(|| out_of_range(payer, pending.delta, -due))?;
            match pending.by_type.iter_mut().find(|(t, _)| t == gpu_type) {
                Some((_, tokens)) => *tokens = *tokens + due,
                None => pending.by_type.push((gpu_type.clone(), due)),
            }
            if let (Some(account), Some(member)) = (payers.pool, member) {
                let spent = batch.member_spending.entry((account.to_string(), member.clone())).or_default();
                *spent = *spent + due;
            }
            if tracked {
                let paid = batch.payments.entry((record.job_id.clone(), payer.clone())).or_default();
                *paid = *paid + due;
            }
            batch.entries += 1;
            charged_any = true;
        }
        batch.charged = batch.charged + due;
    }
    Ok(charged_any)
}

/// Whether the record's payments are kept per payer in `job_payments` (for refunds to whoever
/// paid). A job paid by its user alone, as every job is in mode "user", needs no row: its
/// `job_charges` say what its user paid. From the first time a pool pays for a job, its payments
/// are kept, starting with what its user paid before (all of its charges so far).
fn track_payments(
    statements: &mut Statements<'_>,
    payers: Payers<'_>,
    record: &UsageRecord,
    batch: &mut Batch,
) -> Result<bool, LedgerError> {
    let job = &record.job_id;
    let in_batch = batch.payments.range((job.clone(), String::new())..).next().is_some_and(|((j, _), _)| j == job);
    if in_batch || statements.has_payments.query_row([job], |r| r.get::<_, bool>(0))? {
        return Ok(true);
    }
    if payers.pool.is_none() {
        return Ok(false);
    }
    let before: i64 = statements.charged_so_far.query_row([job], |r| r.get(0))?;
    batch.payments.insert((job.clone(), record.user.clone()), Tokens::from_micro(before));
    Ok(true)
}

/// How far a run segment and GPU type had been charged.
#[derive(Default)]
struct Progress {
    seconds: u64,
    charged: Tokens,
}

/// The statements a charge cycle runs per record, prepared once per cycle.
struct Statements<'tx> {
    insert_progress: Statement<'tx>,
    insert_progress_by_start: Statement<'tx>,
    run_by_start: Statement<'tx>,
    adopt_progress: Statement<'tx>,
    read_progress: Statement<'tx>,
    update_progress: Statement<'tx>,
    insert_entry: Statement<'tx>,
    has_payments: Statement<'tx>,
    charged_so_far: Statement<'tx>,
    /// Reused for every entry's reason.
    reason: String,
}

impl<'tx> Statements<'tx> {
    fn prepare(tx: &'tx Transaction<'_>) -> Result<Self, LedgerError> {
        Ok(Statements {
            insert_progress: tx.prepare(
                "INSERT INTO job_charges (job_id, run, segment_start, gpu_type, user, charged_until, charged)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
            )?,
            insert_progress_by_start: tx.prepare(
                "INSERT INTO job_charges (job_id, run, segment_start, gpu_type, user, charged_until, charged)
                 SELECT ?1, 'start:' || ?2, ?2, ?3, ?4, ?5, ?6
                 WHERE NOT EXISTS (SELECT 1 FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3)",
            )?,
            run_by_start: tx.prepare(
                "SELECT run FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3
                 ORDER BY run LIMIT 1",
            )?,
            // A row of the same run keyed by its start (charged before Slurm gave the SLUID: an
            // older ledger, or a Slurm upgraded under the job) becomes the SLUID's.
            adopt_progress: tx.prepare(
                "UPDATE job_charges SET run = ?2
                 WHERE job_id = ?1 AND run = 'start:' || ?3 AND gpu_type = ?4
                   AND NOT EXISTS (SELECT 1 FROM job_charges WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?4)",
            )?,
            read_progress: tx.prepare(
                "SELECT charged_until, charged FROM job_charges
                 WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?3",
            )?,
            update_progress: tx.prepare(
                "UPDATE job_charges SET charged_until = ?4, charged = ?5
                 WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?3",
            )?,
            insert_entry: tx.prepare(
                "INSERT INTO entries (user, kind, amount, at, actor, reason, job_id, gpu_type, gpu_seconds, prev_id, member)
                 VALUES (?1, 'charge', ?2, ?3, 'gputokens', ?4, ?5, ?6, ?7, ?8, ?9)",
            )?,
            has_payments: tx.prepare("SELECT EXISTS (SELECT 1 FROM job_payments WHERE job_id = ?1)")?,
            charged_so_far: tx.prepare("SELECT COALESCE(SUM(charged), 0) FROM job_charges WHERE job_id = ?1")?,
            reason: String::new(),
        })
    }

    /// Moves the job_charges row of (record, GPU type) to the record's elapsed time and `total`
    /// cost; returns where it was, or None when the record adds nothing (already charged that far).
    /// A new job (the common case) costs one insert; a known one a read and an update.
    ///
    /// A record with a SLUID finds its run by it, taking over a row its run was charged under by
    /// start time; one without finds its run by start time, whatever key the row has (a Slurm that
    /// stopped giving SLUIDs, a downgrade): a run is never charged twice under two names.
    fn move_progress(
        &mut self,
        record: &UsageRecord,
        gpu_type: &str,
        total: Tokens,
    ) -> Result<Option<Progress>, LedgerError> {
        let job = &record.job_id;
        let (start, elapsed, user) = (record.segment_start, record.elapsed as i64, &record.user);
        let run = match &record.sluid {
            Some(sluid) => {
                self.adopt_progress.execute(params![job, sluid, start, gpu_type])?;
                let inserted =
                    self.insert_progress.execute(params![job, sluid, start, gpu_type, user, elapsed, total.micro()])?;
                if inserted == 1 {
                    return Ok(Some(Progress::default()));
                }
                sluid.clone()
            }
            None => {
                let inserted = self.insert_progress_by_start.execute(params![
                    job,
                    start,
                    gpu_type,
                    user,
                    elapsed,
                    total.micro()
                ])?;
                if inserted == 1 {
                    return Ok(Some(Progress::default()));
                }
                self.run_by_start.query_row(params![job, start, gpu_type], |r| r.get(0))?
            }
        };
        let (seconds, charged): (i64, i64) =
            self.read_progress.query_row(params![job, run, gpu_type], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let before = Progress { seconds: seconds as u64, charged: Tokens::from_micro(charged) };
        if record.elapsed <= before.seconds {
            return Ok(None);
        }
        let charged = total.max(before.charged);
        self.update_progress.execute(params![job, run, gpu_type, elapsed, charged.micro()])?;
        Ok(Some(before))
    }
}

/// `8`, or `0.25` for a quarter of a GPU.
fn gpus(milli: u64) -> Tokens {
    gpu_count(milli)
}
