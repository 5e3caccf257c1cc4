//! What accountd answers on its socket: [`handle`]. Pure request → reply over the ledger, so
//! unit tests call it directly; the caller comes from the kernel, never from the request.

use gputokens::access::Caller;
use gputokens::protocol::{ErrorKind, Reply, Request};
use gputokens::statement::Month;
use gputokens::time::local_date;
use gputokens::Tokens;
use ledger::{EntryKind, Issue};

use super::record::Change;
use crate::answering::Answering;
use crate::balance_row::{balance_row, SystemUsers};
use crate::reply::{from_ledger, invalid, refused};
use crate::resources::Resources;
use crate::slurm_view::SlurmView;

/// Users one balance request may name (`sbalance -u a,b,...`).
pub const MAX_USERS_PER_REQUEST: usize = 1000;

/// Answers `request` from `caller` at time `now`. Returns the reply and whether the ledger changed.
/// [`handle_with`], users not in the ledger looked up when asked (the CLI and tests: no lock held).
pub fn handle(answering: &mut Answering, caller: &Caller, request: Request, now: i64) -> (Reply, bool) {
    handle_with(answering, caller, request, now, &SystemUsers::AskNow)
}

/// The users a request names (looked up before the answering lock: [`SystemUsers::looked_up`]);
/// none past the most a request may name (it is refused).
pub fn named_users(request: &Request) -> Vec<&String> {
    match request {
        Request::Balances { users, .. } if users.len() <= MAX_USERS_PER_REQUEST => users.iter().collect(),
        Request::Grant { user, .. } | Request::Adjust { user, .. } => vec![user],
        _ => Vec::new(),
    }
}

/// Answers `request`; `users` says which names not in the ledger are users of this system.
pub fn handle_with(
    answering: &mut Answering,
    caller: &Caller,
    request: Request,
    now: i64,
    system_users: &SystemUsers,
) -> (Reply, bool) {
    // Anyone may read balances (as `balances` allows), and their own history and statements.
    let is_caller = |user: &Option<String>| user.as_deref().is_none_or(|u| u == caller.name);
    let own_ledger = match &request {
        Request::History { user, .. } => is_caller(user),
        Request::Statement { user, all, account: None, .. } => !all && is_caller(user),
        _ => false,
    };
    // Pool requests check who may do what themselves (coordinators, members).
    let checks_itself = matches!(
        request,
        Request::Balances { .. }
            | Request::WebLogin
            | Request::PoolSet { .. }
            | Request::PoolImport { .. }
            | Request::PoolGrant { .. }
            | Request::Allocate { .. }
            | Request::Borrow { .. }
            | Request::Transfer { .. }
            | Request::Pools { .. }
            | Request::Statement { account: Some(_), .. }
    );
    if !checks_itself && !own_ledger && !caller.admin {
        let what = match request {
            Request::History { .. } | Request::Actions { .. } | Request::Statement { .. } => "read ledger histories",
            _ => "change balances",
        };
        return (
            refused(format!(
                "only root, the SlurmUser ({}) and gputokens admins may {what}; you are {}",
                answering.res.config.slurm_user, caller.name
            )),
            false,
        );
    }
    let result = match request {
        Request::Balances { users, all } => {
            let view = answering.slurm_view();
            balances(&answering.res, &view, caller, users, all, now, system_users).map(|r| (r, false))
        }
        Request::Grant { user, amount, reason, key, expires } => {
            if amount <= Tokens::ZERO {
                Err(invalid(format!("a grant must be positive (got {amount}); use `adjust` to lower a balance")))
            } else if let Some(beyond) = amount.beyond_limit("a grant") {
                Err(invalid(beyond))
            } else {
                let change = Change { kind: EntryKind::Grant, amount, reason, key, expires };
                super::record::record(&mut answering.res, caller, &user, change, now, system_users)
            }
        }
        Request::Adjust { user, amount, reason, key } => {
            if amount == Tokens::ZERO {
                Err(invalid("an adjustment of 0 changes nothing".into()))
            } else if let Some(beyond) = amount.beyond_limit("an adjustment") {
                Err(invalid(beyond))
            } else {
                let change = Change { kind: EntryKind::Adjust, amount, reason, key, expires: None };
                super::record::record(&mut answering.res, caller, &user, change, now, system_users)
            }
        }
        Request::Refund { job_id, reason } => answering
            .res
            .ledger
            // A job of this cluster by its ID, any cluster's by its CLUSTER:ID.
            .refund_job(&answering.res.config.clusters.job_key(&job_id), &caller.name, &reason, now)
            .map(|entries| (Reply::Recorded { entries, replayed: false }, true))
            .map_err(from_ledger),
        Request::History { user, limit } => {
            let user = user.unwrap_or_else(|| caller.name.clone());
            let entries = match limit {
                Some(n) => answering.res.ledger.recent(&user, n),
                None => answering.res.ledger.history(&user),
            };
            entries.map(|entries| (Reply::History { user, entries }, false)).map_err(from_ledger)
        }
        Request::Statement { month, account: Some(account), .. } => {
            super::pools::statement(answering, caller, &account, month, now).map(|r| (r, false))
        }
        Request::Statement { month, user, all, account: None } => {
            statements(&answering.res, caller, month, user, all, now).map(|r| (r, false))
        }
        Request::Actions { limit } => {
            answering.res.ledger.actions(limit).map(|actions| (Reply::Actions { actions }, false)).map_err(from_ledger)
        }
        Request::WebLogin => super::web_login::login_link(answering, caller, now)
            .map(|(url, expires)| (Reply::WebLink { url, expires }, false))
            .map_err(|message| Reply::Error { kind: ErrorKind::Invalid, message }),
        Request::PoolSet { account, create, rules, key } => {
            super::pools::set(answering, caller, &account, create, rules, key, now)
        }
        Request::PoolImport { pools } => super::pools::import(answering, caller, pools, now),
        // Anyone borrows for themselves, within the site's limit.
        Request::Borrow { amount } => answering
            .res
            .ledger
            .borrow(&caller.name, amount, now)
            .map(|entry| (Reply::Recorded { entries: vec![entry], replayed: false }, true))
            .map_err(from_ledger),
        Request::Allocate { account, parent, amount, starts, ends } => {
            let allocation = ledger::Allocation { account, parent, amount, starts, ends };
            super::pools::allocate(answering, caller, allocation, now)
        }
        Request::PoolGrant { account, amount, reason, key, adjust, expires } => {
            let kind = if adjust { EntryKind::Adjust } else { EntryKind::Grant };
            super::pools::grant(answering, caller, &account, Change { kind, amount, reason, key, expires }, now)
        }
        Request::Transfer { from, to, amount, reason, key } => {
            super::pools::transfer(answering, caller, &from, &to, amount, reason, key, now)
        }
        Request::Pools { account } => super::pools::list(answering, caller, account, now),
        Request::Import { balances } => {
            let total = balances.len();
            let beyond = balances.iter().find_map(|(user, b)| b.beyond_limit(&format!("{user}'s imported balance")));
            if let Some(beyond) = beyond {
                return (invalid(beyond), false);
            }
            answering
                .res
                .ledger
                .import(&balances, &caller.name, now)
                .map(|entries| {
                    let imported = entries.len();
                    (Reply::Imported { imported, already: total - imported }, imported > 0)
                })
                .map_err(from_ledger)
        }
    };
    result.unwrap_or_else(|error| (error, false))
}

fn balances(
    res: &Resources,
    view: &SlurmView,
    caller: &Caller,
    users: Vec<String>,
    all: bool,
    now: i64,
    system_users: &SystemUsers,
) -> Result<Reply, Reply> {
    let names: Vec<String> = if all && (caller.admin || res.config.balances_public) {
        res.ledger.accounts().map_err(from_ledger)?.into_iter().map(|a| a.user).collect()
    } else if users.is_empty() {
        vec![caller.name.clone()]
    } else {
        // Each name costs a lookup in the system's user database (SSSD, LDAP), made before the
        // answering lock was taken: bounded, and once.
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
        if !caller.may_view(&name, &res.config) {
            return Err(refused(format!(
                "you may only see your own balance ({}); balances on this cluster are private",
                caller.name
            )));
        }
        let mut row = balance_row(res, &name, now, system_users)?;
        // The caller's own row names the pool of their default account (sbatch's balance line);
        // `-a` over many users does not look up a pool each.
        if name == caller.name {
            row.default_pool = super::pools::default_pool(res, view, &name)?;
        }
        rows.push(row);
    }
    // Shadow mode's counts are added with the answering lock released (`shadow_view`).
    Ok(Reply::Balances { rows, shadow: None })
}

/// Statements of `month`: the current month's so far (partial); a month not begun has none.
fn statements(
    res: &Resources,
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
        (true, None) => res.ledger.statements(month, issue),
        (false, user) => res.ledger.statement(user.as_deref().unwrap_or(&caller.name), month, issue).map(|s| vec![s]),
    };
    statements.map(|statements| Reply::Statements { statements }).map_err(from_ledger)
}
