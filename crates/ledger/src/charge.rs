//! Charging GPU time. Each (job, run, GPU type) remembers how many seconds it was charged for and
//! how much, in the same transaction as the charge entry, so a record is never charged twice and a
//! running job charged every cycle adds up to exactly its final cost. A run is named by its SLUID
//! where Slurm gives one (25.11+), else by its start time (`start:<unix start>`).
//!
//! A cycle charges its records a chunk at a time: first how far each run was charged and moves on
//! to ([`runs`]: read with one query for the chunk, or expected new), then the chunk's entries
//! (written many to a statement: [`entries`]) and its runs' rows; each balance's total, newest entry
//! and usage once, at the end of the cycle. A chunk expected new that holds a run charged before
//! fails to insert that run's row: the cycle's transaction is then dropped, and the cycle charged
//! again with every chunk read.

mod entries;
mod newcomers;
mod runs;
mod settle;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::db::{params, Statement, Transaction};

use entries::{Charge, Entries};
use runs::{chunk_size, Progress, RunStatements, Runs};
use rustc_hash::FxHashMap as FastMap;

use super::accounts::ensure_user;
use super::error::out_of_range;
use super::pools::add_member_spending;
use super::{Ledger, LedgerError, UsageRecord};
use gputokens::mig::{self, Share};
use gputokens::policy::BucketRules;
use gputokens::pools::{self, Payers, PoolMode};
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
        match self.charge_once(records, prices, now, false) {
            // A run expected new had been charged (its row's key was taken): nothing of the cycle
            // was kept; charged again, every chunk's runs read first.
            Err(LedgerError::Db(e)) if e.is_constraint_violation() => self.charge_once(records, prices, now, true),
            done => done,
        }
    }

    /// [`Ledger::charge`], with every chunk's runs read first where `read_all`.
    fn charge_once(
        &mut self,
        records: &[UsageRecord],
        prices: &PriceTable,
        now: i64,
        read_all: bool,
    ) -> Result<ChargeOutcome, LedgerError> {
        let pool_rules = super::pools::pool_rules(&self.conn)?;
        let pool_accounts: HashSet<&str> = pool_rules.keys().filter_map(|h| pools::account_of(h)).collect();
        let parents = super::pools::pool_parents(&self.conn)?;
        let windows = super::pools::pool_windows(&self.conn)?;
        let mode = self.pool_mode;
        let tx = self.conn.transaction()?;
        let mut outcome = ChargeOutcome::default();
        let with_grants = super::expiries::balances_with_open_grants(&tx)?;
        let payments_kept: bool = tx.query_row("SELECT EXISTS (SELECT 1 FROM job_payments)", (), |r| r.get(0))?;
        // Runs charged by a SLUID, in this cycle or before, or pools (a pool's payments start from
        // all of its job's charges): every chunk is read before it is charged.
        let with_sluids = records.iter().any(|r| r.sluid.is_some());
        if with_sluids {
            runs::mark_sluid_runs(&tx)?;
        }
        let read_all = read_all
            || with_sluids
            || runs::any_sluid_runs(&tx)?
            || payments_kept
            || (mode != PoolMode::User && !pool_accounts.is_empty());
        let mut cycle = Cycle {
            tx: &tx,
            rules: self.rules,
            now,
            runs: Runs::default(),
            run_statements: RunStatements::new(&tx),
            entries: Entries::prepare(&tx, now)?,
            reasons: Reasons::default(),
            // Only a ledger that ever kept payments can have some for a job.
            has_payments: match payments_kept {
                true => Some(tx.prepare(
                    "SELECT EXISTS (SELECT 1 FROM job_payments WHERE job_id = ?1 AND run_start = ?2),
                            EXISTS (SELECT 1 FROM job_payments WHERE job_id = ?1),
                            EXISTS (SELECT 1 FROM job_payments WHERE job_id = ?1 AND run_start = -1)",
                )?),
                false => None,
            },
            batch: Batch::default(),
            steps: Vec::new(),
            items: Vec::new(),
            parents,
            windows,
        };
        let mut read = read_all;
        for chunk in records.chunks(chunk_size(tx.dialect())) {
            let had_charged_runs = cycle.charge_chunk(chunk, prices, (mode, &pool_accounts), read)?;
            // Expect the next chunk's runs to be new where this one's were.
            read = read_all || had_charged_runs;
        }
        let batch = std::mem::take(&mut cycle.batch);
        drop(cycle);
        // Per balance, once: the balance, the newest entry, and the day's usage per GPU type.
        let day = local_date(now).to_string();
        let moves: Vec<settle::Move<'_>> = batch
            .users
            .iter()
            .filter_map(|(user, p)| p.last_entry.map(|last_entry| settle::Move { user, amount: p.delta, last_entry }))
            .collect();
        settle::move_balances(&tx, &moves)?;
        let mut usages = Vec::new();
        for (user, pending) in &batch.users {
            if with_grants.contains(user.as_ref()) {
                super::expiries::draw(&tx, user, -pending.delta, now)?;
            }
            for &(gpu_type, tokens) in &pending.by_type {
                usages.push((user.as_ref(), gpu_type, tokens.micro()));
                if pools::account_of(user).is_none() {
                    outcome.by_user_type.insert((user.to_string(), gpu_type.to_string()), tokens);
                }
            }
        }
        settle::add_usages(&tx, &day, &usages)?;
        for ((account, member), spent) in batch.member_spending {
            add_member_spending(&tx, &account, &member, spent, now)?;
        }
        for ((job_id, run_start), holders) in batch.payments {
            for (holder, paid) in holders {
                add_payment(&tx, &job_id, run_start, &holder, paid)?;
            }
        }
        tx.commit()?;
        outcome.entries = batch.entries;
        outcome.charged = batch.charged;
        outcome.unlisted_types = batch.unlisted_types.into_iter().map(|(t, s)| (t.to_string(), s)).collect();
        outcome.records = batch.records;
        outcome.unchanged = batch.unchanged;
        outcome.uncountable = batch.uncountable.into_iter().map(str::to_string).collect();
        Ok(outcome)
    }

    /// Seconds already charged for one segment and GPU type (tests and diagnostics).
    pub fn charged_until(&self, job_id: &str, segment_start: i64, gpu_type: &str) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT MAX(charged_until) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3",
                params![job_id, segment_start, gpu_type],
                |r| r.get::<Option<i64>>(0),
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

    /// [`Ledger::charged_seconds`] of many run segments (job ID, start) at once: those charged
    /// yet, [`crate::db::Dialect::in_list`] jobs a statement (a check cycle asks it of every running job).
    pub fn charged_seconds_of(&self, runs: &[(&str, i64)]) -> Result<HashMap<(String, i64), u64>, LedgerError> {
        let wanted: HashSet<(&str, i64)> = runs.iter().copied().collect();
        let mut jobs: Vec<&str> = runs.iter().map(|(job, _)| *job).collect();
        jobs.sort_unstable();
        jobs.dedup();
        let rows = crate::db::query_among(
            &self.conn,
            "SELECT job_id, segment_start, MIN(charged_until) FROM job_charges WHERE job_id IN (?LIST)
             GROUP BY job_id, segment_start",
            &jobs,
            |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
        )?;
        Ok(rows
            .into_iter()
            .filter(|(job, start, _)| wanted.contains(&(job.as_str(), *start)))
            .map(|(job, start, until)| ((job, start), until.max(0) as u64))
            .collect())
    }

    /// Seconds of a run segment charged for every GPU type it holds (the least of them); None when
    /// nothing of it was charged yet.
    pub fn charged_seconds(&self, job_id: &str, segment_start: i64) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT MIN(charged_until) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2",
                params![job_id, segment_start],
                |r| r.get::<Option<i64>>(0),
            )?
            .map(|s| s as u64))
    }
}

/// Adds `tokens` to what `user` was charged on local `day` for `gpu_type` (`usage_days`). A sum
/// beyond 64 bits (SQLite would keep it as an inexact REAL) is NULL here, which the NOT NULL column
/// refuses: the charge fails instead. Amounts are never negative.
pub(super) fn add_usage(
    tx: &Transaction<'_>,
    user: &str,
    day: &str,
    gpu_type: &str,
    tokens: Tokens,
) -> Result<(), LedgerError> {
    tx.prepare_cached(tx.dialect().pick(
        "INSERT INTO usage_days (user, day, gpu_type, charged) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO UPDATE SET charged = CASE WHEN charged <= 9223372036854775807 - excluded.charged
                                                  THEN charged + excluded.charged END",
        "INSERT INTO usage_days (user, day, gpu_type, charged) VALUES (?1, ?2, ?3, ?4)
         ON DUPLICATE KEY UPDATE charged = CASE WHEN charged <= 9223372036854775807 - VALUES(charged)
                                                  THEN charged + VALUES(charged) END",
    ))?
    .execute(params![user, day, gpu_type, tokens.micro()])?;
    Ok(())
}

/// Adds `paid` to what `holder` paid for run `run_start` of `job_id` (`job_payments`); as
/// [`add_usage`], a sum beyond 64 bits fails.
pub(super) fn add_payment(
    tx: &Transaction<'_>,
    job_id: &str,
    run_start: i64,
    holder: &str,
    paid: Tokens,
) -> Result<(), LedgerError> {
    tx.prepare_cached(tx.dialect().pick(
        "INSERT INTO job_payments (job_id, run_start, holder, charged) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO UPDATE SET charged = CASE WHEN charged <= 9223372036854775807 - excluded.charged
                                                  THEN charged + excluded.charged END",
        "INSERT INTO job_payments (job_id, run_start, holder, charged) VALUES (?1, ?2, ?3, ?4)
         ON DUPLICATE KEY UPDATE charged = CASE WHEN charged <= 9223372036854775807 - VALUES(charged)
                                                  THEN charged + VALUES(charged) END",
    ))?
    .execute(params![job_id, run_start, holder, paid.micro()])?;
    Ok(())
}

/// One charge cycle's state while it goes through the records.
struct Cycle<'tx, 'r> {
    tx: &'tx Transaction<'tx>,
    rules: BucketRules,
    now: i64,
    runs: Runs<'r>,
    run_statements: RunStatements<'tx>,
    entries: Entries<'tx, 'r>,
    reasons: Reasons<'r>,
    /// Whether a job has payments kept for a run, for any run, and from before they were kept per
    /// run: None where `job_payments` had no row when the cycle began (it is written at its end).
    has_payments: Option<Statement<'tx>>,
    batch: Batch<'r>,
    /// The records of the chunk being charged, and each of their GPU types.
    steps: Vec<Step<'r>>,
    items: Vec<Item<'r>>,
    /// Each pool that draws on another: the account of that pool.
    parents: HashMap<String, String>,
    /// Each dated sub-allocation's window: outside it, the pools it draws on pay alone.
    windows: HashMap<String, (i64, i64)>,
}

/// A record of the chunk being charged.
struct Step<'r> {
    record: &'r UsageRecord,
    payers: Payers<'r>,
    /// Its GPU types: `items[items.start..items.end]`; None where the record cannot be charged.
    items: Option<std::ops::Range<usize>>,
    /// What its run was charged before it (where payments are kept, the start of its run's).
    charged_before: Tokens,
}

/// A GPU type of a record: priced, how far its run had been charged (None: nothing new), and the
/// run's row where the record made it.
struct Item<'r> {
    priced: Priced<'r>,
    until: Option<Progress>,
    new_row: Option<usize>,
}

/// What one charge cycle keeps between records: balances are added once, and their total and
/// newest entry are written once, at the end of the transaction.
#[derive(Default)]
struct Batch<'r> {
    users: FastMap<Cow<'r, str>, PendingUser<'r>>,
    entries: usize,
    charged: Tokens,
    unlisted_types: BTreeMap<&'r str, u64>,
    /// (account, member) → what the member's jobs took from the pool.
    member_spending: BTreeMap<(String, String), Tokens>,
    /// (job, run start) → payer → what the payer paid for that run, for refunds.
    payments: BTreeMap<(String, i64), BTreeMap<String, Tokens>>,
    records: usize,
    unchanged: usize,
    uncountable: Vec<&'r str>,
}

/// A balance (a user's or a pool's) charged in this cycle.
struct PendingUser<'r> {
    delta: Tokens,
    /// Their newest entry: the next charge links to it.
    last_entry: Option<i64>,
    /// What was charged per GPU type.
    by_type: Vec<(&'r str, Tokens)>,
}

/// One GPU type of a record, priced: its milli-GPUs, the price applied, that price weighted, and the
/// record's whole cost for it so far.
#[derive(Clone, Copy)]
struct Priced<'r> {
    gpu_type: &'r String,
    milli: u64,
    price: AppliedPrice,
    weighted: Tokens,
    total: Tokens,
}

/// Every GPU type of `record` priced, each given to `add`; false when its elapsed time, GPU-seconds
/// or cost do not fit the ledger's 64-bit columns.
fn price_record<'r>(record: &'r UsageRecord, prices: &PriceTable, mut add: impl FnMut(Priced<'r>)) -> bool {
    if i64::try_from(record.elapsed).is_err() {
        return false;
    }
    for (gpu_type, &milli) in &record.milli_gpus {
        if i64::try_from(milli as u128 * record.elapsed as u128 / MILLI as u128).is_err() {
            return false;
        }
        let price = prices.applied(gpu_type);
        let mut weighted = weighted_price(price.per_gpu_hour, record.weight_permille);
        if let Some(stranding) = &record.stranding {
            // The GPUs it leaves idle: their price on each of its GPU-hours, unweighed (idle they are).
            let Some(surcharged) = stranding.surcharged(weighted) else { return false };
            weighted = surcharged;
        }
        if let Some(lent) = &record.lent {
            weighted = weighted_price(weighted, lent.permille());
        }
        let Some(total) = cost_of(weighted, milli, record.elapsed) else { return false };
        add(Priced { gpu_type, milli, price, weighted, total });
    }
    true
}

impl<'tx, 'r> Cycle<'tx, 'r> {
    /// Charges a chunk of records (at most [`chunk_size`]) to whom `mode` says (`pool_accounts` have a
    /// pool), its jobs' runs read first where `read` (else expected new: a run charged before then
    /// fails the cycle with a constraint violation); returns whether it held runs charged before.
    fn charge_chunk(
        &mut self,
        chunk: &'r [UsageRecord],
        prices: &PriceTable,
        (mode, pool_accounts): (PoolMode, &HashSet<&str>),
        read: bool,
    ) -> Result<bool, LedgerError> {
        self.steps.clear();
        self.items.clear();
        for record in chunk {
            let from = self.items.len();
            let priced =
                price_record(record, prices, |priced| self.items.push(Item { priced, until: None, new_row: None }));
            if !priced {
                self.items.truncate(from);
            }
            let items = priced.then_some(from..self.items.len());
            let payers = pools::payers(mode, record.account.as_deref(), |a| pool_accounts.contains(a));
            self.steps.push(Step { record, payers, items, charged_before: Tokens::ZERO });
        }
        self.advance_runs(chunk, read)?;
        self.runs.store_changed(&mut self.run_statements)?;
        self.know_payers()?;
        for s in 0..self.steps.len() {
            let Step { record, payers, ref items, charged_before } = self.steps[s];
            let Some(items) = items.clone() else {
                self.batch.uncountable.push(&record.job_id);
                continue;
            };
            if self.charge_record(payers, record, items, charged_before)? {
                self.batch.records += 1;
            } else {
                self.batch.unchanged += 1;
            }
        }
        self.entries.write_pending()?;
        self.runs.insert_new(&mut self.run_statements)?;
        Ok(read && self.runs.had_stored())
    }

    /// Makes the balances the chunk charges known to the batch before its records are charged,
    /// many a statement (`newcomers`): each user who pays for a record that charges something and
    /// whom the cycle has not met yet. Pools, and users whose initial balance needs `ensure_user`'s
    /// checks, are met one at a time as their records are charged.
    fn know_payers(&mut self) -> Result<(), LedgerError> {
        let mut names: Vec<&'r str> = Vec::new();
        let mut seen = HashSet::new();
        for step in &self.steps {
            let Some(items) = step.items.clone() else { continue };
            if !step.payers.user || self.items[items].iter().all(|item| item.until.is_none()) {
                continue;
            }
            let user = step.record.user.as_str();
            if !self.batch.users.contains_key(user) && seen.insert(user) {
                names.push(user);
            }
        }
        if names.is_empty() {
            return Ok(());
        }
        let known = newcomers::newest_entries(self.tx, &names)?;
        let mut new = Vec::new();
        for name in names {
            match known.get(name) {
                Some(&last_entry) => self.meet(name, last_entry),
                None => new.push(name),
            }
        }
        if new.is_empty() || !newcomers::initial_within_bound(&self.rules) {
            return Ok(());
        }
        for name in &new {
            super::accounts::check_user_name(name)?;
        }
        let new = newcomers::without_initial_entry(self.tx, &new)?;
        let ids = self.entries.reserve(new.len())?;
        newcomers::add_users(self.tx, &self.rules, &new, ids.clone(), self.now)?;
        for (name, id) in new.into_iter().zip(ids) {
            self.meet(name, Some(id));
        }
        Ok(())
    }

    /// `user`'s balance is charged in this cycle from here on; `last_entry` is its newest entry.
    fn meet(&mut self, user: &'r str, last_entry: Option<i64>) {
        let pending = PendingUser { delta: Tokens::ZERO, last_entry, by_type: Vec::new() };
        self.batch.users.insert(Cow::Borrowed(user), pending);
    }

    /// Moves each run of the chunk on to its record (in memory): with its jobs' runs read where
    /// `read`, else expecting them new.
    fn advance_runs(&mut self, chunk: &'r [UsageRecord], read: bool) -> Result<(), LedgerError> {
        self.runs.begin(&mut self.run_statements, chunk, read)?;
        for step in &mut self.steps {
            let Some(items) = step.items.clone() else { continue };
            if self.has_payments.is_some() || step.payers.pool.is_some() {
                step.charged_before = self.runs.charged_so_far(&step.record.job_id, step.record.segment_start)?;
            }
            for item in &mut self.items[items] {
                let advanced = self.runs.advance(step.record, item.priced.gpu_type, item.priced.total);
                (item.until, item.new_row) = (advanced.until, advanced.new_row);
            }
        }
        Ok(())
    }

    /// Charges the GPU time of `record` not charged yet (its `items`, advanced) to its `payers`;
    /// true when it added entries.
    fn charge_record(
        &mut self,
        payers: Payers<'_>,
        record: &'r UsageRecord,
        items: std::ops::Range<usize>,
        charged_before: Tokens,
    ) -> Result<bool, LedgerError> {
        let mut charged_any = false;
        // The pool that pays and every pool it draws on (a charge counts up the chain), each with
        // its window where it is a dated sub-allocation.
        let chain: Vec<(String, Option<(i64, i64)>)> = match payers.pool {
            Some(pool) => pools::chain(pool, |a| self.parents.get(a).map(String::as_str))
                .into_iter()
                .map(|a| (pools::holder(a), self.windows.get(a).copied()))
                .collect(),
            None => Vec::new(),
        };
        let tracked = self.track_payments(payers, record, charged_before)?;
        for i in items {
            let Item { priced: Priced { gpu_type, milli, price, weighted, total }, until, new_row } = self.items[i];
            let Some(until) = until else { continue };
            // A price lowered mid-job never turns into a refund: charges only move forward.
            let due = (total - until.charged).max(Tokens::ZERO);
            // Fits: at most the record's GPU-seconds, which price_record checked.
            let gpu_seconds = (milli as u128 * (record.elapsed - until.seconds) as u128 / MILLI as u128) as u64;
            if !price.listed {
                let slot = self.batch.unlisted_types.entry(gpu_type).or_default();
                *slot = slot.saturating_add(gpu_seconds);
            }
            // The GPU time this charges, when it was used: a sub-allocation pays for what of it
            // fell inside its window, the pools above it for all of it.
            let start = record.segment_start;
            let used = (start.saturating_add(until.seconds as i64), start.saturating_add(record.elapsed as i64));
            let pool_dues = chain.iter().filter_map(|(pool, window)| {
                let (share, inside) = super::allocations::share_used(*window, used, due);
                (share > Tokens::ZERO || due == Tokens::ZERO).then_some((pool, share, window.map(|_| inside)))
            });
            // Never paid by none at all: outside every window, the job's own pool pays.
            let unpaid = pool_dues.clone().next().is_none();
            let own_pool = chain.first().filter(|_| unpaid).map(|(pool, _)| (pool, due, None));
            let user_due = payers.user.then_some((&record.user, due, None));
            for (payer, due, inside) in user_due.into_iter().chain(pool_dues).chain(own_pool) {
                let own = payer == &record.user;
                let pending = match self.batch.users.get_mut(payer.as_str()) {
                    Some(pending) => pending,
                    None => {
                        let (tx, rules, now) = (self.tx, &self.rules, self.now);
                        // A user added now: their newest entry is the initial balance's.
                        let last_entry = match self.entries.around(|| ensure_user(tx, rules, payer, now))? {
                            Some(initial) => Some(initial),
                            None => tx
                                .prepare_cached("SELECT last_entry FROM users WHERE name = ?1")?
                                .query_row([payer], |r| r.get(0))?,
                        };
                        let pending = PendingUser { delta: Tokens::ZERO, last_entry, by_type: Vec::new() };
                        let key = if own { Cow::Borrowed(record.user.as_str()) } else { Cow::Owned(payer.clone()) };
                        self.batch.users.entry(key).or_insert(pending)
                    }
                };
                // A run of no GPU time (cancelled as it started) is remembered as charged (its
                // progress row) and makes its user known (from then on replenished), but leaves no
                // "+0" entry in the history and statement.
                if gpu_seconds == 0 && due == Tokens::ZERO {
                    continue;
                }
                let member = (!own).then_some(&record.user);
                let charge = Charge {
                    payer: if own { Cow::Borrowed(&record.user) } else { Cow::Owned(payer.clone()) },
                    amount: (-due).micro(),
                    job_id: &record.job_id,
                    gpu_type,
                    gpu_seconds: gpu_seconds as i64,
                    prev_id: pending.last_entry,
                    member: member.map(String::as_str),
                };
                let reasons = &mut self.reasons;
                let account = pools::account_of(payer);
                let drawn_by = payers.pool.filter(|&pool| account.is_some_and(|a| a != pool));
                let id = self.entries.add(charge, |out| {
                    use std::fmt::Write;
                    reasons.write(out, milli, gpu_type, price.slice, record.elapsed, weighted);
                    if let Some(stranding) = &record.stranding {
                        let _ = write!(out, "; {stranding}");
                    }
                    if let Some(lent) = &record.lent {
                        let _ = write!(out, "; {lent}");
                    }
                    if let Some(below) = drawn_by {
                        let _ = write!(out, "; under account {below}, which draws on this pool");
                    }
                    if let Some(inside) = inside.filter(|&s| s < record.elapsed - until.seconds) {
                        let _ = write!(out, "; {inside}s of it inside this sub-allocation's dates");
                    }
                })?;
                pending.last_entry = Some(id);
                pending.delta =
                    pending.delta.checked_sub(due).ok_or_else(|| out_of_range(payer, pending.delta, -due))?;
                match pending.by_type.iter_mut().find(|(t, _)| *t == gpu_type.as_str()) {
                    Some((_, tokens)) => *tokens = *tokens + due,
                    None => pending.by_type.push((gpu_type, due)),
                }
                if let (true, Some(row)) = (own, new_row) {
                    // All of the new run's charge: its row is written from this entry.
                    self.runs.charged_by(row, id);
                }
                if let (Some(account), Some(member)) = (account, member) {
                    let spent = self.batch.member_spending.entry((account.to_string(), member.clone())).or_default();
                    *spent = *spent + due;
                }
                if tracked {
                    let holders = self.batch.payments.entry((record.job_id.clone(), record.segment_start)).or_default();
                    let paid = holders.entry(payer.clone()).or_default();
                    *paid = *paid + due;
                }
                self.batch.entries += 1;
                charged_any = true;
            }
            self.batch.charged = self.batch.charged + due;
        }
        Ok(charged_any)
    }

    /// Whether the record's payments are kept per payer in `job_payments`, per run (for refunds to
    /// whoever paid for the run). A job paid by its user alone, as every job is in mode "user", needs
    /// no row: its `job_charges` say what its user paid. From the first time a pool pays for a job,
    /// the payments of its run are kept, starting with what its user paid before (`charged_before`:
    /// the run's charges so far), and of each run of it after.
    fn track_payments(
        &mut self,
        payers: Payers<'_>,
        record: &UsageRecord,
        charged_before: Tokens,
    ) -> Result<bool, LedgerError> {
        let run = (record.job_id.clone(), record.segment_start);
        if self.batch.payments.contains_key(&run) {
            return Ok(true);
        }
        // Only a ledger that ever kept payments can have some for this job: in one that never did
        // (every one in mode "user") a record costs no query here.
        let (mut job_kept, mut before_runs) = (false, false);
        if let Some(has_payments) = &mut self.has_payments {
            let (run_kept, any, old): (bool, bool, bool) =
                has_payments.query_row(params![run.0, run.1], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            if run_kept {
                return Ok(true);
            }
            (job_kept, before_runs) = (any, old);
        }
        if payers.pool.is_none() && !job_kept {
            return Ok(false);
        }
        // What of the run was charged before schema 15 is in the job's rows from then.
        let before = if before_runs { Tokens::ZERO } else { charged_before };
        self.batch.payments.entry(run).or_default().insert(record.user.clone(), before);
        Ok(true)
    }
}

/// Writes charge reasons (`2 × a6000 for 3600s at 4/GPU-hour`; a MIG slice priced from its GPU
/// type: `1 × a100_3g.20gb (3/7 of the a100 price) for 3600s at 1.714286/GPU-hour`), keeping what
/// it wrote around the seconds for each GPU count, type and price: a cycle's records share a few.
#[derive(Default)]
struct Reasons<'r> {
    around: FastMap<(u64, &'r str, i64), (String, String)>,
}

impl<'r> Reasons<'r> {
    fn write(
        &mut self,
        out: &mut String,
        milli: u64,
        gpu_type: &'r str,
        slice: Option<Share>,
        elapsed: u64,
        weighted: Tokens,
    ) {
        if self.around.len() >= 4096 {
            self.around.clear();
        }
        // A cycle prices a type one way: the type and price key its slice too.
        let (head, tail) = self.around.entry((milli, gpu_type, weighted.micro())).or_insert_with(|| {
            let of_parent = match (slice, mig::parse(gpu_type)) {
                (Some(Share { slices, of }), Some(parsed)) => {
                    format!(" ({slices}/{of} of the {} price)", parsed.parent)
                }
                _ => String::new(),
            };
            (format!("{} × {gpu_type}{of_parent} for ", gpu_count(milli)), format!("s at {weighted}/GPU-hour"))
        });
        out.push_str(head);
        push_number(out, elapsed);
        out.push_str(tail);
    }
}

/// `n` in decimal, as `{}` writes it.
fn push_number(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| d as char));
}
