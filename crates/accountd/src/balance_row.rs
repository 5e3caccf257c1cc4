//! One user's balance as every surface shows it (sbalance, the JSON API, the status page): the
//! balance, its status, the usage of the last 30 days, the next grant and the recovery date.

use std::collections::{BTreeMap, HashSet};

use gputokens::access::system_user_exists;
use gputokens::protocol::{BalanceRow, Expiring, Reply};
use gputokens::time::local_date;
use gputokens::Tokens;

use crate::reply::{from_ledger, invalid};
use crate::resources::Resources;

/// Usage shown by `sbalance` covers this many days.
/// Used30d: today and the 29 local days before it.
pub const USAGE_WINDOW_DAYS: u64 = 30;

/// Which names are users of this system, for a user not in the ledger: looked up before the
/// answering lock is taken (a directory server may take seconds), or, where no lock is held (the
/// CLI, tests), when asked.
pub enum SystemUsers {
    AskNow,
    Known(HashSet<String>),
}

impl SystemUsers {
    /// Looks up each of `names` now (call it with no lock held).
    pub fn looked_up<'a>(names: impl IntoIterator<Item = &'a String>) -> SystemUsers {
        SystemUsers::Known(names.into_iter().filter(|n| system_user_exists(n)).cloned().collect())
    }

    pub fn exists(&self, name: &str) -> bool {
        match self {
            SystemUsers::AskNow => system_user_exists(name),
            SystemUsers::Known(known) => known.contains(name),
        }
    }
}

pub fn balance_row(res: &Resources, user: &str, now: i64, users: &SystemUsers) -> Result<BalanceRow, Reply> {
    let rules = res.ledger.rules();
    let account = res.ledger.account(user).map_err(from_ledger)?;
    if account.is_none() && !users.exists(user) {
        return Err(invalid(format!("unknown user '{user}': not in the ledger and not a user of this system")));
    }
    let balance = account.as_ref().map(|a| a.balance).unwrap_or(rules.initial);
    let today = local_date(now);
    let used_30d = match account {
        Some(_) => {
            let first_day = today - chrono::Days::new(USAGE_WINDOW_DAYS - 1);
            res.ledger.used_since_day(user, first_day).map_err(from_ledger)?
        }
        None => BTreeMap::new(),
    };
    Ok(BalanceRow {
        user: user.to_string(),
        balance,
        floor: rules.floor,
        status: rules.status(balance),
        used_30d,
        next_grant: rules.next_grant(today, balance).map(|g| (g.date.to_string(), g.amount)),
        recovers: rules.recovers_on(today, balance).map(|d| d.to_string()),
        in_ledger: account.is_some(),
        default_pool: None,
        expiring: expiring(res, user, balance, now)?,
        borrowed: borrowed(res, user, now)?,
    })
}

/// `[lending]`: the user's borrowed runs of the last week.
fn borrowed(res: &Resources, user: &str, now: i64) -> Result<Vec<gputokens::protocol::BorrowedRunRow>, Reply> {
    if !res.config.lending.enabled {
        return Ok(Vec::new());
    }
    let runs = res.ledger.borrowed_runs_of(user, now.saturating_sub(7 * 86_400)).map_err(from_ledger)?;
    Ok(runs
        .into_iter()
        .map(|r| gputokens::protocol::BorrowedRunRow {
            job_id: res.config.clusters.job_shown(&r.job_id),
            started: gputokens::time::format_rfc3339(r.run_start),
            reclaimed_for: r.reclaimed.map(|(waiting, _)| waiting),
        })
        .collect())
}

/// The soonest-ending grant of `user` with tokens at stake that ends within `[notify] expiry_warning`.
fn expiring(res: &Resources, user: &str, balance: Tokens, now: i64) -> Result<Option<Expiring>, Reply> {
    let until = now.saturating_add(res.config.notify.expiry_warning.as_secs() as i64);
    let open = res.ledger.open_grants(user).map_err(from_ledger)?;
    Ok(open.into_iter().filter(|g| g.expires_at <= until).find_map(|g| {
        let tokens = g.at_stake(balance);
        (tokens > Tokens::ZERO).then(|| Expiring {
            tokens,
            at: gputokens::time::format_local(g.expires_at),
            ends: g.expires_at,
        })
    }))
}
