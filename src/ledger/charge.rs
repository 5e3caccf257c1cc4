//! Charging GPU time. Each (job, run segment, GPU type) remembers how many seconds it was charged
//! for and how much, in the same transaction as the charge entry, so a record is never charged twice
//! and a running job charged every cycle adds up to exactly its final cost.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::{params, OptionalExtension, Transaction};

use super::{add_to_balance, append_entry, ensure_user, Applied, EntryKind, Ledger, LedgerError, NewEntry};
use crate::policy::BucketRules;
use crate::pricing::{cost_milli, PriceTable};
use crate::tokens::Tokens;
use crate::tres::MILLI;

/// GPU time held by one run segment of one job, up to now (running) or to its end (finished).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRecord {
    pub job_id: String,
    pub user: String,
    /// Unix start of this run segment (a requeued job has several).
    pub segment_start: i64,
    /// Milli-GPUs held per lower-case GPU type (1000 = one GPU; shards and MPS are fractions).
    pub milli_gpus: BTreeMap<String, u64>,
    /// Seconds held so far.
    pub elapsed: u64,
    /// Share of the price charged, in permille: 1000 charges the allocation; less with
    /// `charge_basis = "measured"`.
    pub weight_permille: u32,
}

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
    /// Jobs that were charged anything.
    pub jobs: std::collections::BTreeSet<String>,
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
        let tx = self.conn.transaction()?;
        let mut outcome = ChargeOutcome::default();
        // Users are added once and balances moved once per user, in this same transaction.
        let mut batch = Batch::default();
        for record in records {
            let before = outcome.entries;
            charge_record(&tx, &rules, prices, record, now, &mut batch, &mut outcome)?;
            if outcome.entries == before {
                outcome.unchanged += 1;
            }
        }
        for (user, delta) in &batch.balance_deltas {
            add_to_balance(&tx, user, *delta)?;
        }
        tx.commit()?;
        Ok(outcome)
    }

    /// Seconds already charged for one segment and GPU type (tests and diagnostics).
    pub fn charged_until(&self, job_id: &str, segment_start: i64, gpu_type: &str) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT charged_until FROM job_charges WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3",
                params![job_id, segment_start, gpu_type],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(|s| s as u64))
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

/// What one charge cycle keeps between records.
#[derive(Default)]
struct Batch {
    users_seen: HashSet<String>,
    balance_deltas: HashMap<String, Tokens>,
}

fn charge_record(
    tx: &Transaction<'_>,
    rules: &BucketRules,
    prices: &PriceTable,
    record: &UsageRecord,
    now: i64,
    batch: &mut Batch,
    outcome: &mut ChargeOutcome,
) -> Result<(), LedgerError> {
    for (gpu_type, &milli) in &record.milli_gpus {
        let progress: Option<(i64, i64)> = tx
            .prepare_cached(
                "SELECT charged_until, charged FROM job_charges
                 WHERE job_id = ?1 AND segment_start = ?2 AND gpu_type = ?3",
            )?
            .query_row(params![record.job_id, record.segment_start, gpu_type], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (until, charged) = progress.map(|(u, c)| (u as u64, Tokens::from_micro(c))).unwrap_or_default();
        if record.elapsed <= until {
            continue;
        }
        let price = prices.applied(gpu_type);
        let weighted = Tokens::from_micro(price.per_gpu_hour.micro() * record.weight_permille.min(1000) as i64 / 1000);
        let total = cost_milli(weighted, milli * record.elapsed);
        // A price lowered mid-job never turns into a refund: charges only move forward.
        let due = (total - charged).max(Tokens::ZERO);
        if !price.listed {
            *outcome.unlisted_types.entry(gpu_type.clone()).or_default() += milli * (record.elapsed - until) / MILLI;
        }
        if !batch.users_seen.contains(&record.user) {
            ensure_user(tx, rules, &record.user, now)?;
            batch.users_seen.insert(record.user.clone());
        }
        let mut entry = NewEntry::new(
            &record.user,
            EntryKind::Charge,
            -due,
            now,
            "gputokens",
            &format!("{} × {gpu_type} for {}s at {}/GPU-hour", gpus_text(milli), record.elapsed, weighted),
            format!("charge:{}:{}:{}:{}", record.job_id, record.segment_start, gpu_type, record.elapsed),
        );
        entry.job_id = Some(record.job_id.clone());
        entry.gpu_type = Some(gpu_type.clone());
        entry.gpu_seconds = Some(milli * (record.elapsed - until) / MILLI);
        if append_entry(tx, &entry)? == Applied::Added {
            let delta = batch.balance_deltas.entry(record.user.clone()).or_insert(Tokens::ZERO);
            *delta = *delta - due;
            outcome.entries += 1;
            outcome.charged = outcome.charged + due;
            let by_type = outcome.by_user_type.entry((record.user.clone(), gpu_type.clone())).or_default();
            *by_type = *by_type + due;
            outcome.jobs.insert(record.job_id.clone());
        }
        tx.prepare_cached(
            "INSERT INTO job_charges (job_id, segment_start, gpu_type, user, charged_until, charged)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (job_id, segment_start, gpu_type)
             DO UPDATE SET charged_until = excluded.charged_until, charged = excluded.charged",
        )?
        .execute(params![
            record.job_id,
            record.segment_start,
            gpu_type,
            record.user,
            record.elapsed as i64,
            (charged + due).micro()
        ])?;
    }
    Ok(())
}

/// `8`, or `0.25` for a quarter of a GPU.
fn gpus_text(milli: u64) -> String {
    crate::tokens::Tokens::from_micro((milli * 1000) as i64).to_string()
}
