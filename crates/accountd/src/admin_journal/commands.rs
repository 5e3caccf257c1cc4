//! The commands a journal line gives for changes its entry alone does not describe: a pool made,
//! its rules changed, tokens moved between pools. Each is one line, every value quoted.

use gputokens::policy::BucketRules;
use gputokens::pools::account_of;
use gputokens::Tokens;

use super::shell_words::quote;

/// `accountd admin account add` that makes the pool of `holder` again.
pub fn pool_created(holder: &str, rules: &BucketRules, user_limit: Option<Tokens>) -> String {
    let account = account_of(holder).unwrap_or(holder);
    format!(
        "accountd admin account add {} --initial {} {}",
        quote(account),
        rules.initial,
        rule_flags(rules, user_limit)
    )
}

/// `accountd admin account set` that gives the pool these rules again, under the change's key.
pub fn pool_rules(
    holder: &str,
    entry_key: &str,
    rules: &BucketRules,
    user_limit: Option<Tokens>,
    (parent, lends): (Option<&str>, bool),
) -> String {
    let account = account_of(holder).unwrap_or(holder);
    let key = entry_key.strip_prefix("pool-rules:").unwrap_or(entry_key);
    let parent = parent.map_or("--no-parent".to_string(), |p| format!("--parent {}", quote(p)));
    let lends = if lends { "--lends" } else { "--no-lends" };
    format!(
        "accountd admin account set {} {} {parent} {lends} --key {}",
        quote(account),
        rule_flags(rules, user_limit),
        quote(key)
    )
}

/// `accountd admin account allocate` that makes the sub-allocation again.
pub fn allocation(holder: &str, parent: &str, amount: Tokens, (starts, ends): (i64, i64)) -> String {
    let account = account_of(holder).unwrap_or(holder);
    format!(
        "accountd admin account allocate {} --in {} --amount {amount} --from {} --until {}",
        quote(account),
        quote(parent),
        gputokens::time::format_rfc3339(starts),
        gputokens::time::format_rfc3339(ends)
    )
}

/// `accountd admin account transfer` that moves the tokens again, under the transfer's key.
pub fn transfer(from: &str, to: &str, amount: Tokens, reason: &str, key: &str) -> String {
    let (from, to) = (account_of(from).unwrap_or(from), account_of(to).unwrap_or(to));
    let key = key.strip_prefix("transfer:").unwrap_or(key);
    format!(
        "accountd admin account transfer {} {} {amount} --reason {} --key {}",
        quote(from),
        quote(to),
        quote(reason),
        quote(key)
    )
}

/// The options of `accountd admin account add|set` that give a pool these rules.
fn rule_flags(rules: &BucketRules, user_limit: Option<Tokens>) -> String {
    let cap = rules.cap.map_or("--no-cap".to_string(), |c| format!("--cap {c}"));
    let limit = user_limit.map_or("--no-user-limit".to_string(), |l| format!("--user-limit {l}"));
    format!("--daily {} --monthly {} {cap} --floor {} {limit}", rules.daily, rules.monthly, rules.floor)
}
