//! `accountd admin ...`: requests to the daemon, printed for a person.

use gputokens::free_text::printable;
use std::collections::BTreeMap;
use std::path::Path;

use gputokens::entry::Entry;
use gputokens::protocol::{PoolRules, Reply, Request};
use gputokens::time::format_local;
use gputokens::{Config, Tokens};

use crate::cli::{AccountCommand, AdminCommand, ChangeArgs, GrantArgs, LedgerCommand, PoolRuleArgs};
use crate::error::{AccountdError, AccountdResult};
use gputokens_client::{Accountd, ClientError};

/// Derives a node's token from the site secret (only those who can read the secret can).
fn node_token(config: &Config, node: &str) -> AccountdResult {
    let node = crate::slurm::node_name_arg(node)?;
    let path = config
        .agent
        .token_file
        .as_deref()
        .ok_or_else(|| AccountdError::Refused("[agent] token_file (the site secret) is not set".into()))?;
    // Root reads the secret of an accountd that runs as the SlurmUser.
    let service = nix::unistd::User::from_name(&config.slurm_user).ok().flatten().map(|u| u.uid.as_raw());
    let secret = gputokens_node_report::auth::read_private_secret(path, "agent.token_file", service)
        .map_err(AccountdError::Refused)?;
    crate::outln!("{}", gputokens_node_report::auth::node_token(&secret, node));
    Ok(())
}

/// `--expires WHEN` as unix time (this host's clock; accountd checks it again by its own).
fn expires_at(when: Option<&str>) -> AccountdResult<Option<i64>> {
    when.map(|w| crate::cli::expires_arg::resolve(w, gputokens::time::now())).transpose()
}

pub fn run(config: &Config, command: AdminCommand) -> AccountdResult {
    let accountd = Accountd::of(config, crate::CLIENT_TIMEOUT);
    // Checked here for a clear message before anything is sent; accountd checks again.
    let amount = |text: &str, what: &str| -> AccountdResult<Tokens> {
        let amount: Tokens = text.parse().map_err(|e| AccountdError::Refused(format!("AMOUNT: {e}")))?;
        match amount.beyond_limit(what) {
            Some(beyond) => Err(AccountdError::Refused(format!("AMOUNT: {beyond}"))),
            None => Ok(amount),
        }
    };
    let (request, json) = match command {
        AdminCommand::Grant { user, grant: GrantArgs { change: ChangeArgs { amount: a, reason, key }, expires } } => {
            let expires = expires_at(expires.as_deref())?;
            (Request::Grant { user, amount: amount(&a, "a grant")?, reason, key, expires }, false)
        }
        AdminCommand::Adjust { user, change: ChangeArgs { amount: a, reason, key } } => {
            (Request::Adjust { user, amount: amount(&a, "an adjustment")?, reason, key }, false)
        }
        AdminCommand::Refund { job_id, reason } => (Request::Refund { job_id, reason }, false),
        AdminCommand::History { user, last, json } => (Request::History { user: Some(user), limit: last }, json),
        AdminCommand::Actions { limit, json } => (Request::Actions { limit }, json),
        AdminCommand::Import { file } => (Request::Import { balances: read_state_file(&file)? }, false),
        AdminCommand::Verify { file, fingerprint } => return verify(config, file.as_deref(), fingerprint),
        AdminCommand::Ledger { command: LedgerCommand::Copy { to, from, password_file } } => {
            return crate::cli::ledger_copy::copy(config, &to, from.as_deref(), password_file.as_deref())
        }
        AdminCommand::Backup { file, force, keep_days } => {
            return crate::cli::backup::backup(config, &file, force, keep_days)
        }
        AdminCommand::JournalCheck { journal } => {
            return journal_check(config, journal.as_deref().unwrap_or(&config.paths.admin_journal))
        }
        AdminCommand::NodeToken { node } => return node_token(config, &node),
        AdminCommand::Account { command } => {
            let (request, json) = account_request(command, &amount)?;
            return print_account_reply(accountd.call(&request)?, json);
        }
    };
    match accountd.call(&request)? {
        Reply::Recorded { entries, replayed } => {
            if replayed {
                crate::outln!("already recorded under this key; nothing changed");
            }
            for e in &entries {
                crate::outln!("{} {} {}: balance now {}", e.kind.as_str(), signed(e.amount), e.user, e.balance_after);
            }
        }
        Reply::History { user, entries } if json => {
            crate::out!("{}", crate::balance_json::pretty(&crate::balance_json::History::of(&user, &entries)));
        }
        Reply::History { entries, .. } => print_history(&entries, &config.clusters),
        Reply::Actions { actions } if json => {
            crate::out!("{}", crate::balance_json::pretty(&crate::balance_json::Actions::of(&actions)))
        }
        Reply::Actions { actions } => {
            crate::outln!("{:<19} {:<13} {:<10} {:<10} Reason", "Time", "Action", "Target", "User");
            for a in actions {
                let action = if a.dry_run { format!("({})", a.action) } else { a.action };
                crate::outln!(
                    "{:<19} {:<13} {:<10} {:<10} {}",
                    format_local(a.at),
                    action,
                    printable(&a.target),
                    printable(&a.user),
                    printable(&a.reason)
                );
            }
        }
        Reply::Imported { imported, already } => {
            crate::outln!("imported {imported} users ({already} were imported before)")
        }
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    }
    Ok(())
}

type AmountParser<'a> = dyn Fn(&str, &str) -> AccountdResult<Tokens> + 'a;

fn account_request(command: AccountCommand, amount: &AmountParser) -> AccountdResult<(Request, bool)> {
    let rules = |initial: Option<String>, r: PoolRuleArgs| -> AccountdResult<PoolRules> {
        let opt = |v: Option<String>, what: &str| v.map(|v| amount(&v, what)).transpose();
        Ok(PoolRules {
            initial: opt(initial, "an initial balance")?,
            daily: opt(r.daily, "a daily grant")?,
            monthly: opt(r.monthly, "a monthly grant")?,
            cap: opt(r.cap, "a cap")?,
            floor: opt(r.floor, "a floor")?,
            user_limit: opt(r.user_limit, "a per-user limit")?,
            no_cap: r.no_cap,
            no_user_limit: r.no_user_limit,
            parent: r.parent.map(|p| gputokens::pools::slurm_account_name(&p)),
            no_parent: r.no_parent,
            lends: match (r.lends, r.no_lends) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
        })
    };
    Ok(match command {
        AccountCommand::Add { account, initial, rules: r } => {
            (Request::PoolSet { account, create: true, rules: rules(initial, r)?, key: None }, false)
        }
        AccountCommand::Set { account, rules: r, key } => {
            (Request::PoolSet { account, create: false, rules: rules(None, r)?, key }, false)
        }
        AccountCommand::Grant {
            account,
            grant: GrantArgs { change: ChangeArgs { amount: a, reason, key }, expires },
        } => {
            let expires = expires_at(expires.as_deref())?;
            let amount = amount(&a, "a grant")?;
            (Request::PoolGrant { account, amount, reason, key, adjust: false, expires }, false)
        }
        AccountCommand::Adjust { account, change: ChangeArgs { amount: a, reason, key } } => {
            let amount = amount(&a, "an adjustment")?;
            (Request::PoolGrant { account, amount, reason, key, adjust: true, expires: None }, false)
        }
        AccountCommand::Transfer { from, to, change: ChangeArgs { amount: a, reason, key } } => {
            (Request::Transfer { from, to, amount: amount(&a, "a transfer")?, reason, key }, false)
        }
        AccountCommand::Show { account, json } => (Request::Pools { account }, json),
        AccountCommand::Allocate { account, parent, amount: a, from, until } => {
            let (starts, ends) = crate::cli::expires_arg::window(&from, &until, gputokens::time::now())?;
            let amount = amount(&a, "a sub-allocation")?;
            (Request::Allocate { account, parent, amount, starts, ends }, false)
        }
        AccountCommand::Import { file } => (Request::PoolImport { pools: read_pools_file(&file)? }, false),
    })
}

fn print_account_reply(reply: Reply, json: bool) -> AccountdResult {
    match reply {
        Reply::Pools { mode, rows } if json => crate::outln!("{}", crate::cli::pools_output::json(mode, &rows)),
        Reply::Pools { rows, .. } => {
            for line in crate::cli::pools_output::lines(&rows, true, false, true) {
                crate::outln!("{line}");
            }
        }
        Reply::Recorded { entries, replayed } => {
            if replayed {
                crate::outln!("already recorded under this key; nothing changed");
            }
            for e in &entries {
                crate::outln!("{} {} {}: balance now {}", e.kind.as_str(), signed(e.amount), e.user, e.balance_after);
            }
        }
        Reply::PoolsImported { created, already } => {
            crate::outln!("created {} pools ({already} had one already)", created.len())
        }
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    }
    Ok(())
}

/// `account import`: a table per account, each key a pool rule (a number or a decimal string).
fn read_pools_file(path: &Path) -> AccountdResult<BTreeMap<String, PoolRules>> {
    let bad = |problem: String| AccountdError::BadInput { path: path.to_path_buf(), problem };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| bad(format!("not TOML: {e}")))?;
    let mut pools = BTreeMap::new();
    for (account, value) in table {
        let rules = value.as_table().ok_or_else(|| bad(format!("{account}: expected a table ([{account}])")))?;
        let mut out = PoolRules::default();
        for (key, value) in rules {
            let text = match value {
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::String(s) => s.clone(),
                other => return Err(bad(format!("{account}.{key}: {other} is not a number of tokens"))),
            };
            let amount: Tokens = text.parse().map_err(|e| bad(format!("{account}.{key}: {e}")))?;
            let slot = match key.as_str() {
                "initial" => &mut out.initial,
                "daily" => &mut out.daily,
                "monthly" => &mut out.monthly,
                "cap" => &mut out.cap,
                "floor" => &mut out.floor,
                "user_limit" => &mut out.user_limit,
                _ => {
                    return Err(bad(format!(
                        "{account}.{key}: unknown; a pool has initial, daily, monthly, cap, floor, user_limit"
                    )))
                }
            };
            *slot = Some(amount);
        }
        pools.insert(account, out);
    }
    Ok(pools)
}

/// `admin verify`: the ledger's invariants, read from the file (WAL lets it beside accountd serve),
/// then the journal check: after a restore, both are what an admin runs.
fn verify(config: &Config, path: Option<&Path>, fingerprint: bool) -> AccountdResult {
    let scratch = tempfile::tempdir().map_err(AccountdError::io("cannot make a scratch directory"))?;
    let ledger = crate::resources::read_only_ledger(config, path, scratch.path())?;
    let found = ledger.verify()?;
    for problem in &found.problems {
        crate::outln!("problem: {problem}");
    }
    if fingerprint {
        crate::out!("{}", ledger.fingerprint()?);
    }
    let shown = match (path, &config.ledger.url) {
        (None, Some(url)) => url.clone(),
        (path, _) => path.unwrap_or(&config.paths.ledger).display().to_string(),
    };
    let summary = format!("{shown}: {} users, {} entries", found.users, found.entries);
    let (journal, missing) = crate::cli::journal_check::report(&ledger, &config.paths.admin_journal)?;
    match found.problems.len() {
        0 => crate::outln!("{summary}: consistent"),
        n => crate::outln!("{summary}: {n} problem(s)"),
    }
    for line in &journal {
        crate::outln!("{line}");
    }
    match (found.problems.len(), missing) {
        (0, 0) => Ok(()),
        (n, 0) => Err(AccountdError::Refused(format!("{n} problem(s) in the ledger"))),
        (0, m) => Err(AccountdError::Refused(format!(
            "the ledger is consistent, but {m} admin journal entries are missing from it or unreadable"
        ))),
        (n, m) => Err(AccountdError::Refused(format!(
            "{n} problem(s) in the ledger; {m} admin journal entries missing from it or unreadable"
        ))),
    }
}

/// `admin journal-check`: the journal's entries the ledger lacks; exit 2 while any is.
fn journal_check(config: &Config, journal: &Path) -> AccountdResult {
    let scratch = tempfile::tempdir().map_err(AccountdError::io("cannot make a scratch directory"))?;
    let ledger = crate::resources::read_only_ledger(config, None, scratch.path())?;
    let (lines, missing) = crate::cli::journal_check::report(&ledger, journal)?;
    for line in &lines {
        crate::outln!("{line}");
    }
    match missing {
        0 => Ok(()),
        n => Err(AccountdError::Refused(format!("{n} admin journal entries missing from the ledger or unreadable"))),
    }
}

/// `+30` granted, `-24` charged: how histories show amounts.
pub(crate) fn signed(t: Tokens) -> String {
    if t.is_negative() {
        t.to_string()
    } else {
        format!("+{t}")
    }
}

fn print_history(entries: &[Entry], clusters: &gputokens::config::Clusters) {
    crate::outln!(
        "{:>6} {:<19} {:<9} {:>12} {:>12} {:<10} {:<8} Reason",
        "Id",
        "Time",
        "Kind",
        "Amount",
        "Balance",
        "Actor",
        "Job"
    );
    for e in entries {
        crate::outln!(
            "{:>6} {:<19} {:<9} {:>12} {:>12} {:<10} {:<8} {}",
            e.id,
            format_local(e.at),
            e.kind.as_str(),
            signed(e.amount),
            e.balance_after.to_string(),
            printable(&e.actor),
            e.job_id.as_deref().map_or("-".into(), |job| clusters.job_shown(job)),
            printable(&e.reason)
        );
    }
}

/// The original system's state file: a JSON object of user → tokens (numbers or decimal strings).
fn read_state_file(path: &Path) -> AccountdResult<BTreeMap<String, Tokens>> {
    let bad = |problem: String| AccountdError::BadInput { path: path.to_path_buf(), problem };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let object =
        value.as_object().ok_or_else(|| bad("expected an object of user → tokens, e.g. {\"alice\": 87.5}".into()))?;
    let mut balances = BTreeMap::new();
    for (user, tokens) in object {
        let text = match tokens {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) => s.clone(),
            other => return Err(bad(format!("{user}: {other} is not a number of tokens"))),
        };
        let amount = text.parse().map_err(|e| bad(format!("{user}: {e}")))?;
        balances.insert(user.clone(), amount);
    }
    Ok(balances)
}
