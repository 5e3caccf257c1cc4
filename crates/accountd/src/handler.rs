//! What accountd answers on its socket: [`handle`]. Pure request → reply over the ledger, so
//! unit tests call it directly; the caller comes from the kernel, never from the request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use gputokens::access::{system_user_exists, Caller};
use gputokens::protocol::{BalanceRow, ErrorKind, Reply, Request};
use gputokens::statement::Month;
use gputokens::time::local_date;
use gputokens::Tokens;
use ledger::{Applied, EntryKind, Issue, LedgerError, NewEntry};

use crate::service::Service;

/// Usage shown by `sbalance` covers this many days.
/// Used30d: today and the 29 local days before it.
pub const USAGE_WINDOW_DAYS: u64 = 30;
/// Users one balance request may name (`sbalance -u a,b,...`).
pub const MAX_USERS_PER_REQUEST: usize = 1000;

fn refused(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Refused, message }
}

fn invalid(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Invalid, message }
}

fn from_ledger(e: LedgerError) -> Reply {
    let kind = if e.is_callers_fault() { ErrorKind::Invalid } else { ErrorKind::Internal };
    Reply::Error { kind, message: e.to_string() }
}

/// Answers `request` from `caller` at time `now`. Returns the reply and whether the ledger changed.
pub fn handle(service: &mut Service, caller: &Caller, request: Request, now: i64) -> (Reply, bool) {
    // Anyone may read balances (as `balances` allows), and their own history and statements.
    let is_caller = |user: &Option<String>| user.as_deref().is_none_or(|u| u == caller.name);
    let own_ledger = match &request {
        Request::History { user, .. } => is_caller(user),
        Request::Statement { user, all, .. } => !all && is_caller(user),
        _ => false,
    };
    if !matches!(request, Request::Balances { .. } | Request::WebLogin) && !own_ledger && !caller.admin {
        let what = match request {
            Request::History { .. } | Request::Actions { .. } | Request::Statement { .. } => "read ledger histories",
            _ => "change balances",
        };
        return (
            refused(format!(
                "only root, the SlurmUser ({}) and gputokens admins may {what}; you are {}",
                service.config.slurm_user, caller.name
            )),
            false,
        );
    }
    let result = match request {
        Request::Balances { users, all } => balances(service, caller, users, all, now).map(|r| (r, false)),
        Request::Grant { user, amount, reason, key } => {
            if amount <= Tokens::ZERO {
                Err(invalid(format!("a grant must be positive (got {amount}); use `adjust` to lower a balance")))
            } else if let Some(beyond) = amount.beyond_limit("a grant") {
                Err(invalid(beyond))
            } else {
                record(service, caller, &user, EntryKind::Grant, amount, reason, key, now)
            }
        }
        Request::Adjust { user, amount, reason, key } => {
            if amount == Tokens::ZERO {
                Err(invalid("an adjustment of 0 changes nothing".into()))
            } else if let Some(beyond) = amount.beyond_limit("an adjustment") {
                Err(invalid(beyond))
            } else {
                record(service, caller, &user, EntryKind::Adjust, amount, reason, key, now)
            }
        }
        Request::Refund { job_id, reason } => service
            .ledger
            .refund_job(&job_id, &caller.name, &reason, now)
            .map(|entries| (Reply::Recorded { entries, replayed: false }, true))
            .map_err(from_ledger),
        Request::History { user, limit } => {
            let user = user.unwrap_or_else(|| caller.name.clone());
            let entries = match limit {
                Some(n) => service.ledger.recent(&user, n),
                None => service.ledger.history(&user),
            };
            entries.map(|entries| (Reply::History { user, entries }, false)).map_err(from_ledger)
        }
        Request::Statement { month, user, all } => {
            statements(service, caller, month, user, all, now).map(|r| (r, false))
        }
        Request::Actions { limit } => {
            service.ledger.actions(limit).map(|actions| (Reply::Actions { actions }, false)).map_err(from_ledger)
        }
        Request::WebLogin => crate::web::login_link(service, caller, now)
            .map(|(url, expires)| (Reply::WebLink { url, expires }, false))
            .map_err(|message| Reply::Error { kind: ErrorKind::Invalid, message }),
        Request::Import { balances } => {
            let total = balances.len();
            let beyond = balances.iter().find_map(|(user, b)| b.beyond_limit(&format!("{user}'s imported balance")));
            if let Some(beyond) = beyond {
                return (invalid(beyond), false);
            }
            service
                .ledger
                .import(&balances, &caller.name, now)
                .map(|imported| (Reply::Imported { imported, already: total - imported }, imported > 0))
                .map_err(from_ledger)
        }
    };
    result.unwrap_or_else(|error| (error, false))
}

fn balances(service: &Service, caller: &Caller, users: Vec<String>, all: bool, now: i64) -> Result<Reply, Reply> {
    let names: Vec<String> = if all && (caller.admin || service.config.balances_public) {
        service.ledger.accounts().map_err(from_ledger)?.into_iter().map(|a| a.user).collect()
    } else if users.is_empty() {
        vec![caller.name.clone()]
    } else {
        // Each name costs a lookup in the system's user database (SSSD, LDAP): bounded, and once.
        let mut seen = std::collections::HashSet::new();
        let users: Vec<String> = users.into_iter().filter(|u| seen.insert(u.clone())).collect();
        if users.len() > MAX_USERS_PER_REQUEST {
            return Err(invalid(format!(
                "at most {MAX_USERS_PER_REQUEST} users per request (got {}); admins can ask for all with --all",
                users.len()
            )));
        }
        users
    };
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        if !caller.may_view(&name, &service.config) {
            return Err(refused(format!(
                "you may only see your own balance ({}); balances on this cluster are private",
                caller.name
            )));
        }
        rows.push(balance_row(service, &name, now)?);
    }
    Ok(Reply::Balances { rows })
}

/// Statements of `month`: the current month's so far (partial); a month not begun has none.
fn statements(
    service: &Service,
    caller: &Caller,
    month: Month,
    user: Option<String>,
    all: bool,
    now: i64,
) -> Result<Reply, Reply> {
    let current = Month::of(local_date(now));
    if month > current {
        return Err(invalid(format!(
            "{month} has not begun: there are statements for {current} (so far) and the months before"
        )));
    }
    let issue = Issue { at: now, partial: month == current };
    let statements = match (all, user) {
        (true, Some(_)) => return Err(invalid("a statement is of one user (-u) or of all (-a), not both".into())),
        (true, None) => service.ledger.statements(month, issue),
        (false, user) => {
            service.ledger.statement(user.as_deref().unwrap_or(&caller.name), month, issue).map(|s| vec![s])
        }
    };
    statements.map(|statements| Reply::Statements { statements }).map_err(from_ledger)
}

pub fn balance_row(service: &Service, user: &str, now: i64) -> Result<BalanceRow, Reply> {
    let rules = service.ledger.rules();
    let account = service.ledger.account(user).map_err(from_ledger)?;
    if account.is_none() && !system_user_exists(user) {
        return Err(invalid(format!("unknown user '{user}': not in the ledger and not a user of this system")));
    }
    let balance = account.as_ref().map(|a| a.balance).unwrap_or(rules.initial);
    let today = local_date(now);
    let used_30d = match account {
        Some(_) => {
            let first_day = today - chrono::Days::new(USAGE_WINDOW_DAYS - 1);
            service.ledger.used_since_day(user, first_day).map_err(from_ledger)?
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
    })
}

#[allow(clippy::too_many_arguments)]
fn record(
    service: &mut Service,
    caller: &Caller,
    user: &str,
    kind: EntryKind,
    amount: Tokens,
    reason: String,
    key: Option<String>,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    if reason.trim().is_empty() {
        return Err(invalid("--reason must say why".into()));
    }
    if service.ledger.account(user).map_err(from_ledger)?.is_none() && !system_user_exists(user) {
        return Err(invalid(format!("unknown user '{user}': not in the ledger and not a user of this system")));
    }
    let key = match key {
        Some(k) => format!("{}:{k}", kind.as_str()),
        None => format!("{}:{user}:{}", kind.as_str(), unique_suffix(now)),
    };
    let entry = NewEntry::new(user, kind, amount, now, &caller.name, &reason, key.clone());
    let applied = service.ledger.append(&entry).map_err(from_ledger)?;
    let history = service.ledger.history(user).map_err(from_ledger)?;
    let written = history.into_iter().filter(|e| e.key.as_deref() == Some(key.as_str())).collect();
    Ok((Reply::Recorded { entries: written, replayed: applied == Applied::AlreadyRecorded }, applied == Applied::Added))
}

/// A key suffix no other unkeyed entry shares: time, process and a counter.
fn unique_suffix(now: i64) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{now}.{nanos}.{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}
