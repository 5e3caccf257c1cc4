//! A user's monthly statement: the month's ledger entries summed into lines an accountant (or a PI)
//! reads — opening balance, grants, replenishment, refunds, charges per GPU type, closing balance —
//! and the proof that they add up. Pure: the ledger crate reads the entries, accountd answers with
//! the result, sbalance prints it.

mod month;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

pub use month::{Month, MonthError};

use crate::entry::{initial_key, Entry, EntryKind};
use crate::time::local_date;
use crate::tokens::Tokens;

/// One statement: everything that moved the user's balance in the month, in micro-tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statement {
    pub user: String,
    pub month: Month,
    /// The month is not over: the statement so far, as of `issued`.
    pub partial: bool,
    /// When it was drawn up (unix seconds).
    pub issued: i64,
    /// The balance at the month's first instant.
    pub opening: Tokens,
    pub lines: Vec<Line>,
    /// The balance at the month's end (so far, when `partial`): `opening` plus every line's amount.
    pub closing: Tokens,
    /// An account pool's statement: what each member's jobs took from it in the month.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<(String, Tokens)>,
    /// The GPU energy of the month's charged jobs (see [`JobEnergy`]), the most first; empty where
    /// no node agent reported an energy counter for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub energy: Vec<JobEnergy>,
}

/// What one job charged on a statement used of its GPUs' energy in the statement's month: NVML's
/// energy counters, as node agents reported them, its part of each GPU (accountd's
/// `utilization::energy`), summed over the month's local days.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnergy {
    pub job_id: String,
    /// The GPU type of the job's first charge of the month: the charge line its energy is counted on.
    pub gpu_type: String,
    pub joules: u64,
}

/// What a line stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Item {
    /// The balance a user starts with, when gputokens first saw them in this month.
    Initial,
    /// The balance carried over from the system gputokens replaced.
    Import,
    Monthly,
    /// Every daily replenishment of the month, summed.
    Daily,
    /// An admin's grant.
    Grant,
    Adjust,
    Refund,
    /// One GPU type's charges of the month, summed.
    Charge,
    /// What was left of a grant with an end date when it ended.
    Expired,
}

impl Item {
    pub fn as_str(self) -> &'static str {
        match self {
            Item::Initial => "initial",
            Item::Import => "import",
            Item::Monthly => "monthly",
            Item::Daily => "daily",
            Item::Grant => "grant",
            Item::Adjust => "adjust",
            Item::Refund => "refund",
            Item::Charge => "charge",
            Item::Expired => "expired",
        }
    }
}

/// One line of a statement. Lines of one entry carry its date, actor and reason; summed lines
/// (daily replenishment, charges) carry what they sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub item: Item,
    pub amount: Tokens,
    /// The entry's local date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A refund's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Daily: how many days were replenished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Charges: the GPU-seconds charged for (GPU-hours × 3600, exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<u64>,
    /// Charges: how many of the tokens charged were spent on idle GPUs (see [`idle_part`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Tokens>,
    /// Charges: the GPU energy (joules) the line's jobs used in the month, where agents measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_joules: Option<u64>,
    /// Charges: how many of the line's tokens were charged for GPU energy (`[prices] per_kwh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_tokens: Option<Tokens>,
    /// Charges: how many of the line's tokens paid, beyond its jobs' own GPUs, for GPUs the CPUs or
    /// memory they held left idle (`[prices] stranded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stranded: Option<Tokens>,
}

impl Line {
    fn summed(item: Item) -> Line {
        Line {
            item,
            amount: Tokens::ZERO,
            date: None,
            actor: None,
            reason: None,
            job_id: None,
            days: None,
            gpu_type: None,
            gpu_seconds: None,
            idle: None,
            energy_joules: None,
            energy_tokens: None,
            stranded: None,
        }
    }

    fn of_entry(item: Item, entry: &Entry) -> Line {
        Line {
            amount: entry.amount,
            date: Some(local_date(entry.at)),
            actor: Some(entry.actor.clone()),
            reason: Some(entry.reason.clone()),
            job_id: entry.job_id.clone(),
            ..Line::summed(item)
        }
    }
}

/// A statement that cannot be drawn up. Each is a bug or a damaged ledger, never the caller's doing:
/// a statement that does not add up is refused rather than shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    #[error(
        "{user}'s statement for {month} does not add up: opening {opening} plus its lines ({lines}) is not the \
         closing balance {closing} (a bug in gputokens, or a damaged ledger: run `accountd admin verify`)"
    )]
    Unbalanced { user: String, month: Month, opening: Tokens, lines: Tokens, closing: Tokens },
    #[error("{user}'s statement for {month} sums beyond what 64-bit micro-tokens hold")]
    OutOfRange { user: String, month: Month },
    #[error("{user}'s entry of {date} is not in {month}")]
    OutsideMonth { user: String, month: Month, date: NaiveDate },
}

/// Sums one user's entries of one month, fed oldest first, into a [`Statement`].
#[derive(Debug, Clone)]
pub struct StatementBuilder {
    user: String,
    month: Month,
    opening: Tokens,
    /// Initial balance and imports, then monthly grants: the month's income, as it came.
    opening_items: Vec<Line>,
    monthly: Vec<Line>,
    daily: Option<Line>,
    /// Admin grants, adjustments and refunds, as they came.
    by_people: Vec<Line>,
    /// One line per GPU type, in the order the month first charged them.
    charges: Vec<Line>,
    energy: Vec<JobEnergy>,
}

impl StatementBuilder {
    pub fn new(user: &str, month: Month, opening: Tokens) -> StatementBuilder {
        StatementBuilder {
            user: user.to_string(),
            month,
            opening,
            opening_items: Vec::new(),
            monthly: Vec::new(),
            daily: None,
            by_people: Vec::new(),
            charges: Vec::new(),
            energy: Vec::new(),
        }
    }

    pub fn add(&mut self, entry: &Entry) -> Result<(), StatementError> {
        let date = local_date(entry.at);
        if Month::of(date) != self.month {
            return Err(StatementError::OutsideMonth { user: self.user.clone(), month: self.month, date });
        }
        let out_of_range = || StatementError::OutOfRange { user: self.user.clone(), month: self.month };
        match entry.kind {
            EntryKind::Grant if entry.key.as_deref() == Some(initial_key(&self.user).as_str()) => {
                self.opening_items.push(Line::of_entry(Item::Initial, entry))
            }
            EntryKind::Import => self.opening_items.push(Line::of_entry(Item::Import, entry)),
            EntryKind::Monthly => self.monthly.push(Line::of_entry(Item::Monthly, entry)),
            EntryKind::Grant => self.by_people.push(Line::of_entry(Item::Grant, entry)),
            EntryKind::Adjust if entry.is_expiry() => self.by_people.push(Line::of_entry(Item::Expired, entry)),
            EntryKind::Adjust => self.by_people.push(Line::of_entry(Item::Adjust, entry)),
            EntryKind::Refund => self.by_people.push(Line::of_entry(Item::Refund, entry)),
            EntryKind::Replenish => {
                let daily = self.daily.get_or_insert_with(|| Line { days: Some(0), ..Line::summed(Item::Daily) });
                daily.amount = daily.amount.checked_add(entry.amount).ok_or_else(out_of_range)?;
                // A capped day (amount 0) was still a day replenished.
                daily.days = daily.days.and_then(|d| d.checked_add(1));
            }
            EntryKind::Charge => {
                let gpu_type = entry.gpu_type.clone().unwrap_or_else(|| UNTYPED_LINE.to_string());
                let index = match self.charges.iter().position(|l| l.gpu_type.as_ref() == Some(&gpu_type)) {
                    Some(index) => index,
                    None => {
                        let line =
                            Line { gpu_type: Some(gpu_type), gpu_seconds: Some(0), ..Line::summed(Item::Charge) };
                        self.charges.push(line);
                        self.charges.len() - 1
                    }
                };
                let line = &mut self.charges[index];
                line.amount = line.amount.checked_add(entry.amount).ok_or_else(out_of_range)?;
                if entry.is_energy_charge() {
                    let energy = line.energy_tokens.unwrap_or(Tokens::ZERO).checked_sub(entry.amount);
                    line.energy_tokens = Some(energy.ok_or_else(out_of_range)?);
                }
                let beyond = crate::stranding::beyond_own_gpus(entry.amount, &entry.reason);
                if beyond > Tokens::ZERO {
                    // At most what the line charged: no overflow.
                    line.stranded = Some(line.stranded.unwrap_or(Tokens::ZERO) + beyond);
                }
                let seconds = line.gpu_seconds.unwrap_or(0).checked_add(entry.gpu_seconds.unwrap_or(0));
                line.gpu_seconds = Some(seconds.ok_or_else(out_of_range)?);
            }
        }
        Ok(())
    }

    /// Notes that `tokens` of the month's charges of `gpu_type` (added before) were spent on idle GPUs.
    pub fn add_idle(&mut self, gpu_type: &str, tokens: Tokens) {
        if tokens <= Tokens::ZERO {
            return;
        }
        if let Some(line) = self.charges.iter_mut().find(|l| l.gpu_type.as_deref() == Some(gpu_type)) {
            // At most what the line charged: no overflow.
            line.idle = Some(line.idle.unwrap_or(Tokens::ZERO) + tokens);
        }
    }

    /// Notes that job `job_id`, charged on the `gpu_type` line (added before), used `joules` of GPU
    /// energy in the month; once per job (a second note of the same job is ignored).
    pub fn add_energy(&mut self, job_id: &str, gpu_type: &str, joules: u64) {
        if joules == 0 || self.energy.iter().any(|e| e.job_id == job_id) {
            return;
        }
        if let Some(line) = self.charges.iter_mut().find(|l| l.gpu_type.as_deref() == Some(gpu_type)) {
            line.energy_joules = Some(line.energy_joules.unwrap_or(0).saturating_add(joules));
            self.energy.push(JobEnergy { job_id: job_id.to_string(), gpu_type: gpu_type.to_string(), joules });
        }
    }

    /// The statement, given the closing balance the ledger holds for the month's end: refused unless
    /// the opening balance and the lines add up to it exactly.
    pub fn finish(mut self, closing: Tokens, issued: i64, partial: bool) -> Result<Statement, StatementError> {
        // A job cancelled before it ran leaves a charge of nothing for no time: nothing to state.
        self.charges.retain(|l| l.amount != Tokens::ZERO || l.gpu_seconds != Some(0));
        let charges = &self.charges;
        self.energy.retain(|e| charges.iter().any(|l| l.gpu_type.as_deref() == Some(e.gpu_type.as_str())));
        let lines: Vec<Line> =
            [self.opening_items, self.monthly, self.daily.into_iter().collect(), self.by_people, self.charges]
                .into_iter()
                .flatten()
                .collect();
        let out_of_range = || StatementError::OutOfRange { user: self.user.clone(), month: self.month };
        let moved = lines.iter().try_fold(Tokens::ZERO, |sum, l| sum.checked_add(l.amount)).ok_or_else(out_of_range)?;
        if self.opening.checked_add(moved) != Some(closing) {
            return Err(StatementError::Unbalanced {
                user: self.user,
                month: self.month,
                opening: self.opening,
                lines: moved,
                closing,
            });
        }
        Ok(Statement {
            user: self.user,
            month: self.month,
            partial,
            issued,
            opening: self.opening,
            lines,
            closing,
            members: Vec::new(),
            energy: {
                let mut energy = self.energy;
                energy.sort_by(|a, b| b.joules.cmp(&a.joules).then_with(|| a.job_id.cmp(&b.job_id)));
                energy
            },
        })
    }
}

/// The GPU type of the charge line of charges that name none.
pub const UNTYPED_LINE: &str = "(untyped)";

/// The part of `charged` tokens spent on idle GPUs, for a job `idle_share` of whose utilization
/// samples were idle (idle, all); rounded down to the micro-token.
pub fn idle_part(charged: Tokens, (idle, all): (u64, u64)) -> Tokens {
    if all == 0 || idle == 0 {
        return Tokens::ZERO;
    }
    let micro = i128::from(charged.micro()) * i128::from(idle.min(all)) / i128::from(all);
    Tokens::from_micro(i64::try_from(micro).unwrap_or(0))
}

/// What `statement` says was spent on idle GPUs in all, and per GPU type, in its charge lines.
pub fn idle_by_type(statement: &Statement) -> (Tokens, Vec<(&str, Tokens)>) {
    let per_type: Vec<(&str, Tokens)> = statement
        .lines
        .iter()
        .filter_map(|l| Some((l.gpu_type.as_deref()?, l.idle?)))
        .filter(|(_, t)| *t > Tokens::ZERO)
        .collect();
    (per_type.iter().map(|(_, t)| *t).sum(), per_type)
}

/// What `statement` spent on idle GPUs, for people to read: the total and its GPU types
/// (`a6000 6, rtx3090 3`); None when nothing was.
pub fn idle_summary(statement: &Statement) -> Option<(Tokens, String)> {
    let (total, per_type) = idle_by_type(statement);
    let types: Vec<String> = per_type.iter().map(|(t, v)| format!("{t} {v}")).collect();
    (total > Tokens::ZERO).then(|| (total, types.join(", ")))
}

/// GPU-hours of `seconds`, to two decimals at most (`40`, `0.5`, `0.03`): for reading; the exact
/// GPU-seconds travel beside it.
pub fn gpu_hours(seconds: u64) -> String {
    // Hundredths of an hour, rounded half up: 36 s each.
    let hundredths = (seconds as u128 + 18) / 36;
    let (whole, frac) = (hundredths / 100, hundredths % 100);
    match frac {
        0 => whole.to_string(),
        f if f % 10 == 0 => format!("{whole}.{}", f / 10),
        f => format!("{whole}.{f:02}"),
    }
}

/// Kilowatt-hours of `joules`, to the watt-hour (`1.25`, `0.004`, `0`): for reading; the exact
/// joules travel beside it.
pub fn kwh(joules: u64) -> String {
    // Watt-hours, rounded half up: 3600 J each.
    let wh = (u128::from(joules) + 1800) / 3600;
    let (whole, frac) = (wh / 1000, wh % 1000);
    match frac {
        0 => whole.to_string(),
        f => format!("{whole}.{f:03}").trim_end_matches('0').to_string(),
    }
}

/// The month's GPU energy of `statement`'s jobs in all (joules), None where none was measured.
pub fn energy_total(statement: &Statement) -> Option<u64> {
    statement.lines.iter().filter_map(|l| l.energy_joules).reduce(u64::saturating_add)
}

/// gputokens' own adjustment that expires what was left of a grant (ledger: keyed `expire:<grant>`).
#[cfg(test)]
mod tests;
