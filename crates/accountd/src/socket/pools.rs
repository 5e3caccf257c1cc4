//! The pool requests on the socket: admins create pools and change their rules; admins and an
//! account's coordinators (Slurm's, of it or an account above it) grant to it and transfer between
//! the accounts they coordinate; members see their accounts' pools, coordinators the accounts
//! under them, admins all.

use gputokens::access::Caller;
use gputokens::policy::BucketRules;
use gputokens::pools::holder;
use gputokens::pools::PoolMode;
use gputokens::protocol::{PoolBalance, PoolMember, PoolRow, PoolRules, Reply};
use gputokens::statement::Month;
use gputokens::time::local_date;
use gputokens::Tokens;
use ledger::{Applied, EntryKind, Issue, Pool, PoolChange};

use super::record::Change;
use crate::answering::Answering;
use crate::balance_row::SystemUsers;
use crate::reply::{from_ledger, invalid, refused};
use crate::resources::Resources;
use crate::slurm_view::SlurmView;

/// Creates every pool of `pools` that has none, in one transaction.
pub fn import(
    a: &mut Answering,
    caller: &Caller,
    pools: std::collections::BTreeMap<String, PoolRules>,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    if !caller.admin {
        return Err(refused(format!("only gputokens admins may create pools; you are {}", caller.name)));
    }
    let defaults = a.res.config.accounts.pool_defaults;
    let mut list = Vec::with_capacity(pools.len());
    for (account, rules) in pools {
        let chosen = new_pool_rules(&rules, defaults);
        check_rules(&chosen).map_err(|e| match e {
            Reply::Error { kind, message } => Reply::Error { kind, message: format!("{account}: {message}") },
            other => other,
        })?;
        list.push((account, chosen, if rules.no_user_limit { None } else { rules.user_limit }));
    }
    let created = a.res.ledger.add_pools(&list, &caller.name, now).map_err(from_ledger)?;
    let already = list.len() - created.len();
    let changed = !created.is_empty();
    Ok((Reply::PoolsImported { created, already }, changed))
}

/// A new pool's rules: those given, the rest `[accounts]`' defaults.
fn new_pool_rules(rules: &PoolRules, d: BucketRules) -> BucketRules {
    BucketRules {
        initial: rules.initial.unwrap_or(d.initial),
        daily: rules.daily.unwrap_or(d.daily),
        monthly: rules.monthly.unwrap_or(d.monthly),
        cap: if rules.no_cap { None } else { rules.cap.or(d.cap) },
        floor: rules.floor.unwrap_or(d.floor),
    }
}

/// Creates a pool (`create`) or changes its rules (under `key`, or a key of its own).
#[allow(clippy::too_many_arguments)]
pub fn set(
    a: &mut Answering,
    caller: &Caller,
    account: &str,
    create: bool,
    rules: PoolRules,
    key: Option<String>,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    if !caller.admin {
        return Err(refused(format!(
            "only gputokens admins may create pools or change their rules; you are {}",
            caller.name
        )));
    }
    if create {
        let chosen = new_pool_rules(&rules, a.res.config.accounts.pool_defaults);
        check_rules(&chosen)?;
        // Refused before the pool is made: a refused parent leaves nothing behind.
        if let Some(parent) = &rules.parent {
            a.res.ledger.check_parent(account, parent).map_err(from_ledger)?;
        }
        let limit = if rules.no_user_limit { None } else { rules.user_limit };
        a.res.ledger.add_pool(account, chosen, limit, &caller.name, now).map_err(from_ledger)?;
        // Where it draws on another pool or lends: a change of its new rules, its own entry.
        if rules.parent.is_some() || rules.lends.is_some() {
            let change =
                PoolChange { parent: rules.parent.clone().map(Some), lends: rules.lends, ..Default::default() };
            let key = format!("pool-rules:{account}:{}", super::record::unique_suffix(now));
            a.res.ledger.set_pool(account, &change, &caller.name, &key, now).map_err(from_ledger)?;
        }
    } else {
        if rules.initial.is_some() {
            return Err(invalid(
                "a pool's initial balance is given when it is created; grant or adjust it instead".into(),
            ));
        }
        let change = PoolChange {
            daily: rules.daily,
            monthly: rules.monthly,
            cap: if rules.no_cap { Some(None) } else { rules.cap.map(Some) },
            floor: rules.floor,
            user_limit: if rules.no_user_limit { Some(None) } else { rules.user_limit.map(Some) },
            parent: if rules.no_parent { Some(None) } else { rules.parent.clone().map(Some) },
            lends: rules.lends,
        };
        // Checked before anything is written: a refused change leaves the rules as they were.
        if let Some(pool) = a.res.ledger.pool(account).map_err(from_ledger)? {
            check_rules(&change.applied_to(pool.rules, pool.user_limit).0)?;
        }
        let key = key.unwrap_or_else(|| format!("{account}:{}", super::record::unique_suffix(now)));
        let full_key = format!("pool-rules:{key}");
        a.res.ledger.set_pool(account, &change, &caller.name, &full_key, now).map_err(from_ledger)?;
    }
    let rows = rows(a, &[account.to_string()], now)?;
    Ok((Reply::Pools { mode: a.res.config.accounts.mode, rows }, true))
}

fn check_rules(rules: &BucketRules) -> Result<(), Reply> {
    if rules.floor > Tokens::ZERO {
        return Err(invalid(format!("a floor must be 0 or below (got {})", rules.floor)));
    }
    if rules.daily < Tokens::ZERO || rules.monthly < Tokens::ZERO {
        return Err(invalid("daily and monthly grants must not be negative".into()));
    }
    Ok(())
}

/// Makes a dated sub-allocation inside a pool: admins, and the coordinators of that pool's account
/// (or of one above it), who then manage the new pool as they do the one it is in.
pub fn allocate(
    a: &mut Answering,
    caller: &Caller,
    allocation: ledger::Allocation,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    let parent = allocation.parent.clone();
    if !manages(a, caller, &parent) {
        return Err(refused(format!(
            "only gputokens admins and the coordinators of account {parent} (or of an account above it) may make \
             sub-allocations inside its pool; you are {}",
            caller.name
        )));
    }
    let account = allocation.account.clone();
    // Jobs name it with -A: Slurm must have it, under the pool it is made in, so its coordinators
    // manage it and its associations say who may use it (where the account tree could be read).
    let view = a.slurm_view();
    let tree = &view.accounts;
    if tree.parents.is_empty() {
        return Err(invalid(format!(
            "Slurm's account tree has not been read yet (accountd reads it every check cycle): cannot tell that \
             {account} sits under {parent}; try again in a minute"
        )));
    }
    if !tree.ancestry(&account).iter().skip(1).any(|a| *a == parent) {
        return Err(invalid(format!(
            "Slurm has no account {account} under {parent}: make it first (sacctmgr add account {account} \
             parent={parent}) and add its members (sacctmgr add user NAME account={account})"
        )));
    }
    a.res.ledger.allocate(&allocation, &caller.name, now).map_err(from_ledger)?;
    let rows = rows(a, &[account], now)?;
    Ok((Reply::Pools { mode: a.res.config.accounts.mode, rows }, true))
}

/// Whether `caller` may manage `account`'s pool: an admin, or a coordinator of it or above it.
fn manages(a: &Answering, caller: &Caller, account: &str) -> bool {
    caller.admin || a.slurm_view().accounts.coordinates(&caller.name, account)
}

pub fn grant(
    a: &mut Answering,
    caller: &Caller,
    account: &str,
    change: Change,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    let (kind, amount) = (change.kind, change.amount);
    if !manages(a, caller, account) {
        return Err(refused(format!(
            "only gputokens admins and the coordinators of account {account} (or of an account above it) may grant to its pool; you are {}",
            caller.name
        )));
    }
    if kind == EntryKind::Adjust && !caller.admin {
        return Err(refused(format!("only gputokens admins may adjust a pool; you are {}", caller.name)));
    }
    if kind == EntryKind::Grant && amount <= Tokens::ZERO {
        return Err(invalid(format!(
            "a grant must be positive (got {amount}); admins lower a pool with `account adjust`"
        )));
    }
    if amount == Tokens::ZERO {
        return Err(invalid("an adjustment of 0 changes nothing".into()));
    }
    if a.res.ledger.pool(account).map_err(from_ledger)?.is_none() {
        return Err(invalid(format!("account '{account}' has no token pool (accountd admin account add {account})")));
    }
    if let Some(beyond) = amount.beyond_limit("a grant") {
        return Err(invalid(beyond));
    }
    // As a user's grant or adjustment: keyed, recorded in the admin journal.
    super::record::record(&mut a.res, caller, &holder(account), change, now, &SystemUsers::AskNow)
}

#[allow(clippy::too_many_arguments)]
pub fn transfer(
    a: &mut Answering,
    caller: &Caller,
    from: &str,
    to: &str,
    amount: Tokens,
    reason: String,
    key: Option<String>,
    now: i64,
) -> Result<(Reply, bool), Reply> {
    if !(manages(a, caller, from) && manages(a, caller, to)) {
        return Err(refused(format!(
            "only gputokens admins and coordinators of both {from} and {to} may transfer between them; you are {}",
            caller.name
        )));
    }
    if let Some(beyond) = amount.beyond_limit("a transfer") {
        return Err(invalid(beyond));
    }
    if reason.trim().is_empty() {
        return Err(invalid("--reason must say why".into()));
    }
    let (src, dst) = (holder(from), holder(to));
    let key = match key {
        Some(k) => format!("transfer:{k}"),
        None => format!("transfer:{src}:{}", super::record::unique_suffix(now)),
    };
    let applied = a.res.ledger.transfer(&src, &dst, amount, &caller.name, &reason, &key, now).map_err(from_ledger)?;
    let mut entries = Vec::new();
    for (name, side) in [(&src, "from"), (&dst, "to")] {
        let history = a.res.ledger.history(name).map_err(from_ledger)?;
        let wanted = format!("{key}:{side}");
        entries.extend(history.into_iter().filter(|e| e.key.as_deref() == Some(wanted.as_str())));
    }
    Ok((Reply::Recorded { entries, replayed: applied == Applied::AlreadyRecorded }, applied == Applied::Added))
}

/// The pools `caller` may see, or only `account`'s (refused when they may not see it).
pub fn list(a: &Answering, caller: &Caller, account: Option<String>, now: i64) -> Result<(Reply, bool), Reply> {
    let view = a.slurm_view();
    let tree = &view.accounts;
    let sees = |account: &str| {
        caller.admin || tree.is_member(&caller.name, account) || tree.coordinates(&caller.name, account)
    };
    let names: Vec<String> = match account {
        Some(account) if !sees(&account) => {
            return Err(refused(format!(
                "you may see the pools of your own accounts and of those you coordinate; {account} is neither"
            )))
        }
        Some(account) => vec![account],
        None => a.res.ledger.pools().map_err(from_ledger)?.into_iter().map(|p| p.account).filter(|p| sees(p)).collect(),
    };
    let mut rows = rows(a, &names, now)?;
    // A member who does not manage the account sees their own spending, not their colleagues'.
    for row in &mut rows {
        if !manages(a, caller, &row.account) {
            row.members.retain(|m| m.user == caller.name);
        }
    }
    Ok((Reply::Pools { mode: a.res.config.accounts.mode, rows }, false))
}

fn rows(a: &Answering, accounts: &[String], now: i64) -> Result<Vec<PoolRow>, Reply> {
    let month = local_date(now).format("%Y-%m").to_string();
    let spending = a.res.ledger.member_spending(&month).map_err(from_ledger)?;
    let view = a.slurm_view();
    let tree = &view.accounts;
    let mut out = Vec::new();
    for account in accounts {
        let pool: Pool = a
            .res
            .ledger
            .pool(account)
            .map_err(from_ledger)?
            .ok_or_else(|| invalid(format!("account '{account}' has no token pool")))?;
        let mut members: Vec<PoolMember> = tree
            .members
            .get(account)
            .into_iter()
            .flatten()
            .map(|user| PoolMember { user: user.clone(), spent_month: Tokens::ZERO })
            .collect();
        for s in spending.iter().filter(|s| &s.account == account) {
            match members.iter_mut().find(|m| m.user == s.user) {
                Some(m) => m.spent_month = s.spent,
                None => members.push(PoolMember { user: s.user.clone(), spent_month: s.spent }),
            }
        }
        members.sort_by(|x, y| x.user.cmp(&y.user));
        out.push(PoolRow {
            parent: tree.parents.get(account).cloned(),
            draws_on: pool.parent.clone(),
            lends: pool.lends,
            balance: pool.balance,
            floor: pool.rules.floor,
            status: pool.rules.status(pool.balance),
            daily: pool.rules.daily,
            monthly: pool.rules.monthly,
            cap: pool.rules.cap,
            user_limit: pool.user_limit,
            coordinators: tree.coordinators_of(account),
            members,
            account: pool.account,
        });
    }
    Ok(out)
}

/// `account`'s statement of `month` with what each member's jobs took from it: admins and the
/// account's coordinators (a member's own spending is in `sbalance -A`).
pub fn statement(a: &Answering, caller: &Caller, account: &str, month: Month, now: i64) -> Result<Reply, Reply> {
    if !manages(a, caller, account) {
        return Err(refused(format!(
            "only gputokens admins and the coordinators of account {account} may read its statement; you are {}",
            caller.name
        )));
    }
    let current = Month::of(local_date(now));
    if month > current {
        return Err(invalid(format!(
            "{month} has not begun: there are statements for {current} (so far) and the months before"
        )));
    }
    let issue = Issue { at: now, partial: month == current };
    let ledger = &a.res.ledger;
    ledger
        .pool(account)
        .map_err(from_ledger)?
        .ok_or_else(|| invalid(format!("account '{account}' has no token pool")))?;
    let mut statement = ledger.statement(&holder(account), month, issue).map_err(from_ledger)?;
    statement.user = account.to_string();
    statement.members = ledger
        .member_spending(&month.to_string())
        .map_err(from_ledger)?
        .into_iter()
        .filter(|s| s.account == account)
        .map(|s| (s.user, s.spent))
        .collect();
    Ok(Reply::Statements { statements: vec![statement] })
}

/// With pools on: the pool of `user`'s default account, if it has one.
pub fn default_pool(res: &Resources, view: &SlurmView, user: &str) -> Result<Option<PoolBalance>, Reply> {
    if res.config.accounts.mode == PoolMode::User {
        return Ok(None);
    }
    let Some(account) = view.default_accounts.get(user) else { return Ok(None) };
    let pool = res.ledger.pool(account).map_err(from_ledger)?;
    Ok(pool.map(|p| PoolBalance {
        status: p.rules.status(p.balance),
        account: p.account,
        balance: p.balance,
        floor: p.rules.floor,
    }))
}
