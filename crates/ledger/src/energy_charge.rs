//! Charging GPU energy (`[prices] per_kwh`): the joules `job_energy` gained since the last pass,
//! priced, to whoever paid for the run's GPU time, as charge entries keyed `energy:...`. What a
//! run's energy cost is kept beside what its GPU time cost (`job_charges.energy_charged`), and
//! what each balance paid in `job_payments` where the run's payments are kept, so refunds,
//! verification and pools' member limits count energy as they count GPU time.

use std::collections::{BTreeMap, HashSet};

use crate::db::{params, OptionalExtension, Transaction};

use gputokens::pools::{self, PoolMode};
use gputokens::pricing::energy_cost;
use gputokens::statement::kwh;
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::accounts::{insert_entry, Applied, NewEntry};
use super::{Ledger, LedgerError};
use gputokens::entry::{EntryKind, ENERGY_KEY_PREFIX};

/// How far a node's first report of a job may fall outside its run as slurmctld recorded it: the
/// node's clock and the controller's disagree by at most this (MUNGE refuses credentials from
/// clocks further apart than its 5-minute TTL; NTP keeps them far closer).
const CLOCK_SKEW: i64 = 60;

/// Energy whose run was never charged for GPU time this long after its last report is passed over
/// (a job Slurm's records never showed holding GPUs): never read again by every pass.
pub const UNMATCHED_AFTER: i64 = 7 * 86_400;

/// What one energy pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnergyCharged {
    /// Charge entries added.
    pub entries: usize,
    /// What the runs' energy cost (once per run, whoever paid it).
    pub tokens: Tokens,
    /// Joules charged.
    pub joules: u64,
    /// Joules passed over: energy not priced (`per_kwh` unset), or never matched to a charged run.
    pub passed_over: u64,
    /// Job runs whose energy waits for their GPU time's first charge.
    pub waiting: usize,
    /// Tokens charged per (user, GPU type), pools left out: as [`crate::ChargeOutcome`]'s.
    pub by_user_type: BTreeMap<(String, String), Tokens>,
    /// Rows that could not be charged (rolled back, tried again next pass): the job and why.
    pub failures: Vec<(String, String)>,
}

/// One job_energy row with joules left to charge.
struct Uncharged {
    job_id: String,
    since: i64,
    node: String,
    day: String,
    joules: i64,
    charged_joules: i64,
    last_at: i64,
}

/// The job_charges row of the run a row's energy belongs to.
struct ChargedRun {
    run: String,
    segment_start: i64,
    gpu_type: String,
    user: String,
}

impl Ledger {
    /// Charges the GPU energy measured since the last pass at `per_kwh` tokens per kWh, stamped
    /// `now`; with `per_kwh` None, passes it over (energy measured while it is not priced is never
    /// charged later). Each row's joules are charged once: the entries and the row's progress are
    /// written in one transaction. A row that cannot be charged is rolled back alone and named in
    /// `failures`; the others are charged.
    pub fn charge_energy(&mut self, per_kwh: Option<Tokens>, now: i64) -> Result<EnergyCharged, LedgerError> {
        let (rules, mode) = (self.rules, self.pool_mode);
        let tx = self.conn.transaction()?;
        let mut done = EnergyCharged::default();
        let Some(per_kwh) = per_kwh else {
            // Most sites: every row passed over in two statements, none read one by one.
            done.passed_over = tx
                .query_row(
                    "SELECT COALESCE(SUM(joules - charged_joules), 0) FROM job_energy INDEXED BY job_energy_uncharged
                     WHERE joules > charged_joules",
                    (),
                    |r| r.get::<i64>(0),
                )?
                .max(0) as u64;
            tx.execute(
                "UPDATE job_energy INDEXED BY job_energy_uncharged SET charged_joules = joules WHERE joules > charged_joules",
                (),
            )?;
            tx.commit()?;
            return Ok(done);
        };
        let rows = uncharged_rows(&tx)?;
        let with_grants = super::expiries::balances_with_open_grants(&tx)?;
        let pass = Pass { tx: &tx, now, with_grants: &with_grants, rules: &rules, mode };
        for row in rows {
            tx.execute_batch("SAVEPOINT energy_row")?;
            match charge_row(&pass, &row, per_kwh, &mut done) {
                Ok(()) => tx.execute_batch("RELEASE SAVEPOINT energy_row")?,
                Err(e) => {
                    tx.execute_batch("ROLLBACK TO SAVEPOINT energy_row; RELEASE SAVEPOINT energy_row")?;
                    done.failures.push((row.job_id.clone(), e.to_string()));
                }
            }
        }
        tx.commit()?;
        Ok(done)
    }
}

/// Charges (or passes over) one row's joules not charged yet, counted into `done`.
fn charge_row(
    pass: &Pass<'_, '_>,
    row: &Uncharged,
    per_kwh: Tokens,
    done: &mut EnergyCharged,
) -> Result<(), LedgerError> {
    let tx = pass.tx;
    let left = (row.joules - row.charged_joules).max(0) as u64;
    let Some(run) = charged_run(tx, &row.job_id, row.since)? else {
        if pass.now - row.last_at > UNMATCHED_AFTER {
            done.passed_over += left;
            return pass_over(tx, row);
        }
        done.waiting += 1;
        return Ok(());
    };
    // A run refunded automatically was given back once, for good: what its GPUs used after (the
    // half step of its last report) is not charged.
    let refunded = super::refunds::run_refunded(tx, &row.job_id, run.segment_start)?;
    let cost = |joules: i64| energy_cost(per_kwh, joules.max(0) as u64);
    let (false, Some(total), Some(before)) = (refunded, cost(row.joules), cost(row.charged_joules)) else {
        // Refunded, or beyond what the ledger holds: never saturated into a smaller charge.
        done.passed_over += left;
        return pass_over(tx, row);
    };
    let due = (total - before).max(Tokens::ZERO);
    if due > Tokens::ZERO {
        let reason = format!("GPU energy on {}: {} kWh at {per_kwh}/kWh", row.node, kwh(left));
        if charge_payers(pass, row, &run, due, &reason, done)? {
            tx.prepare_cached(
                "UPDATE job_charges SET energy_charged = energy_charged + ?4
                 WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?3",
            )?
            .execute(params![row.job_id, run.run, run.gpu_type, due.micro()])?;
            // A summary for the log: saturated, never failing the pass.
            done.tokens = done.tokens.checked_add(due).unwrap_or(Tokens::MAX);
        }
    }
    done.joules += left;
    pass_over(tx, row)
}

fn uncharged_rows(tx: &Transaction<'_>) -> Result<Vec<Uncharged>, LedgerError> {
    let mut stmt = tx.prepare_cached(
        "SELECT job_id, since, node, day, joules, charged_joules, last_at
         FROM job_energy INDEXED BY job_energy_uncharged WHERE joules > charged_joules",
    )?;
    let rows = stmt.query_map((), |r| {
        Ok(Uncharged {
            job_id: r.get(0)?,
            since: r.get(1)?,
            node: r.get(2)?,
            day: r.get(3)?,
            joules: r.get(4)?,
            charged_joules: r.get(5)?,
            last_at: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Marks every joule of `row` as charged (or passed over).
fn pass_over(tx: &Transaction<'_>, row: &Uncharged) -> Result<(), LedgerError> {
    tx.prepare_cached(
        "UPDATE job_energy SET charged_joules = ?5 WHERE job_id = ?1 AND since = ?2 AND node = ?3 AND day = ?4",
    )?
    .execute(params![row.job_id, row.since, row.node, row.day, row.joules])?;
    Ok(())
}

/// The run of `job_id` whose node reports began at `since`: a charged run that had begun by then
/// (give or take the nodes' clocks) and was charged at least that far, the one that began nearest
/// to it; its first GPU type names the line. None: no run is charged that far yet (a requeued
/// job's next run before its first charge, a job ID Slurm used again): the energy waits.
fn charged_run(tx: &Transaction<'_>, job_id: &str, since: i64) -> Result<Option<ChargedRun>, LedgerError> {
    Ok(tx
        .prepare_cached(
            "SELECT run, segment_start, gpu_type, user FROM job_charges
             WHERE job_id = ?1 AND segment_start <= ?2 + ?3 AND segment_start + charged_until >= ?2 - ?3
             ORDER BY ABS(segment_start - ?2), gpu_type LIMIT 1",
        )?
        .query_row(params![job_id, since, CLOCK_SKEW], |r| {
            Ok(ChargedRun { run: r.get(0)?, segment_start: r.get(1)?, gpu_type: r.get(2)?, user: r.get(3)? })
        })
        .optional()?)
}

/// Who pays `due` of a run's energy, each with their part: as they paid for its GPU time. Where
/// the run's payments are kept (a pool paid), each balance pays `due` times its share of what the
/// run cost so far (in mode "both" the user and the pool each paid all of it, so each pays all);
/// a run that cost nothing yet goes by the pool mode; else its user alone. `payments_key`: the
/// `job_payments` run key to add to, if kept.
fn payers(pass: &Pass<'_, '_>, job_id: &str, run: &ChargedRun, due: Tokens) -> Result<Payers, LedgerError> {
    let tx = pass.tx;
    let kept = |run_start: i64| -> Result<Vec<(String, i64)>, LedgerError> {
        Ok(tx
            .prepare_cached("SELECT holder, charged FROM job_payments WHERE job_id = ?1 AND run_start = ?2")?
            .query_map(params![job_id, run_start], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    };
    // The run's own payments, else those kept before schema 15 for all runs of the job together.
    let (key, holders, basis_sql) = match kept(run.segment_start)? {
        own if !own.is_empty() => (
            run.segment_start,
            own,
            "SELECT COALESCE(SUM(charged + energy_charged), 0) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2",
        ),
        _ => (-1, kept(-1)?, "SELECT COALESCE(SUM(charged + energy_charged), 0) FROM job_charges WHERE job_id = ?1"),
    };
    if holders.is_empty() {
        return Ok(Payers { parts: vec![(run.user.clone(), due)], payments_key: None });
    }
    let basis: i64 = match key {
        -1 => tx.query_row(basis_sql, params![job_id], |r| r.get(0))?,
        _ => tx.query_row(basis_sql, params![job_id, run.segment_start], |r| r.get(0))?,
    };
    if basis <= 0 {
        // No shares to go by: whoever the pool mode has pay (a pool's holder, its user, or both).
        let parts = holders
            .into_iter()
            .filter(|(holder, _)| match pools::account_of(holder) {
                Some(_) => pass.mode != PoolMode::User,
                None => pass.mode != PoolMode::Account,
            })
            .map(|(holder, _)| (holder, due))
            .collect();
        return Ok(Payers { parts, payments_key: Some(key) });
    }
    let parts = holders
        .into_iter()
        .map(|(holder, paid)| {
            let part = i128::from(due.micro()) * i128::from(paid.max(0)) / i128::from(basis);
            // At most `due` for a holder that paid at most the run's cost.
            (holder, Tokens::from_micro(i64::try_from(part).unwrap_or(due.micro()).min(due.micro())))
        })
        .filter(|(_, part)| *part > Tokens::ZERO)
        .collect();
    Ok(Payers { parts, payments_key: Some(key) })
}

struct Payers {
    parts: Vec<(String, Tokens)>,
    payments_key: Option<i64>,
}

/// Charges `due` of `row`'s energy to its run's payers, counted into `done`; whether anyone was.
fn charge_payers(
    pass: &Pass<'_, '_>,
    row: &Uncharged,
    run: &ChargedRun,
    due: Tokens,
    reason: &str,
    done: &mut EnergyCharged,
) -> Result<bool, LedgerError> {
    let Pass { tx, now, with_grants, rules, .. } = *pass;
    let Payers { parts, payments_key } = payers(pass, &row.job_id, run, due)?;
    let today = local_date(now).to_string();
    let mut charged = false;
    for (holder, amount) in parts {
        let pool = pools::account_of(&holder);
        if pool.is_none() {
            // A user the ledger has no balance for yet (one a pool paid for until now) starts one.
            super::accounts::ensure_user(tx, rules, &holder, now)?;
        }
        let (job, since, node, day, joules) = (&row.job_id, row.since, &row.node, &row.day, row.joules);
        let key = format!("{ENERGY_KEY_PREFIX}{job}:{since}:{node}:{day}:{joules}:{holder}");
        let mut entry = NewEntry::new(&holder, EntryKind::Charge, -amount, now, "gputokens", reason, key);
        entry.job_id = Some(row.job_id.clone());
        entry.gpu_type = Some(run.gpu_type.clone());
        entry.member = pool.map(|_| run.user.clone());
        if insert_entry(tx, &entry)? != Applied::Added {
            continue;
        }
        charged = true;
        done.entries += 1;
        super::charge::add_usage(tx, &holder, &today, &run.gpu_type, amount)?;
        if let Some(run_start) = payments_key {
            super::charge::add_payment(tx, &row.job_id, run_start, &holder, amount)?;
        }
        if let Some(account) = pool {
            super::pools::add_member_spending(tx, account, &run.user, amount, now)?;
        }
        if with_grants.contains(&holder) {
            super::expiries::draw(tx, &holder, amount, now)?;
        }
        if pool.is_none() {
            let spent = done.by_user_type.entry((holder, run.gpu_type.clone())).or_default();
            *spent = spent.checked_add(amount).unwrap_or(Tokens::MAX);
        }
    }
    Ok(charged)
}

/// What every charge of one pass shares.
#[derive(Clone, Copy)]
struct Pass<'t, 'c> {
    tx: &'t Transaction<'c>,
    now: i64,
    /// Balances with grants that charges draw from (`expiries`).
    with_grants: &'t HashSet<String>,
    /// A new user's bucket.
    rules: &'t gputokens::policy::BucketRules,
    /// Who pays a run that cost nothing yet.
    mode: PoolMode,
}
