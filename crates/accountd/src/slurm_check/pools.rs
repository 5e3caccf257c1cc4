//! `accountd config check --slurm` for `[accounts]` (pools on): Slurm must keep users out of
//! accounts they are not associated with (else anyone can spend any pool with `sbatch -A`), and
//! each pool must be an account Slurm knows (else no job is ever charged to it).

use std::collections::BTreeSet;

use gputokens::Config;

use crate::slurm_check::finding::Finding;

/// How many accounts without a pool are named before "and N more".
const NAMED: usize = 10;

/// What pools are compared with, each read (by `accountd config check --slurm`) or why it could not be.
#[derive(Debug)]
pub struct AccountFacts {
    /// Slurm's accounts (sacctmgr).
    pub slurm_accounts: Result<BTreeSet<String>, String>,
    /// The pools' accounts, as accountd serve answers the caller.
    pub pools: Result<Vec<String>, String>,
}

/// Nothing when pools are off (no `accounts` read then); `enforce` is AccountingStorageEnforce.
pub fn findings(config: &Config, enforce: Option<&str>, accounts: Option<&AccountFacts>) -> Vec<Finding> {
    let Some(accounts) = accounts else { return Vec::new() };
    let mode = config.accounts.mode.as_str();
    let mut out = vec![associations_enforced(mode, enforce.unwrap_or("none"))];
    out.extend(pools_against_accounts(mode, accounts));
    out
}

fn associations_enforced(mode: &str, enforce: &str) -> Finding {
    if enforce.split(',').map(str::trim).any(|v| v == "associations" || v == "all") {
        return Finding::Ok(format!(
            "AccountingStorageEnforce includes associations ({enforce}): only an account's users run jobs under it"
        ));
    }
    Finding::Problem(format!(
        "AccountingStorageEnforce is '{enforce}', without associations: with [accounts] mode = \"{mode}\" any user \
         can run GPU jobs under any account (sbatch -A ACCOUNT) and spend its pool; set \
         AccountingStorageEnforce=associations (slurm-conf/slurm.conf.gputokens)"
    ))
}

fn pools_against_accounts(mode: &str, facts: &AccountFacts) -> Vec<Finding> {
    let known = match &facts.slurm_accounts {
        Ok(known) => known,
        Err(e) => {
            return vec![Finding::Problem(format!(
                "Slurm's accounts not read ({e}): accountd cannot tell members and coordinators of pools"
            ))]
        }
    };
    let pools = match &facts.pools {
        Ok(pools) => pools,
        Err(e) => return vec![Finding::Ok(format!("pools not compared with Slurm's accounts: accountd: {e}"))],
    };
    if pools.is_empty() {
        return vec![Finding::Problem(format!(
            "[accounts] mode = \"{mode}\" but no account has a pool: every job is paid by its user \
             (accountd admin account add ACCOUNT, or account import FILE)"
        ))];
    }
    let unknown: Vec<&str> = pools.iter().map(String::as_str).filter(|p| !known.contains(*p)).collect();
    let mut out = vec![match unknown.is_empty() {
        true => Finding::Ok(format!("every pool is an account of Slurm's ({} pools)", pools.len())),
        false => Finding::Problem(format!(
            "pools of accounts Slurm does not have: {} (sacctmgr show account): no job runs under them, so their \
             tokens are never spent (a misspelt name? sacctmgr add account, or move the tokens with accountd admin \
             account transfer)",
            unknown.join(", ")
        )),
    }];
    let without: Vec<&str> =
        known.iter().map(String::as_str).filter(|a| *a != "root" && !pools.iter().any(|p| p == a)).collect();
    if !without.is_empty() {
        let more = match without.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        out.push(Finding::Ok(format!(
            "{} of Slurm's accounts have no pool, so their users pay for their jobs: {}{more}",
            without.len(),
            without[..without.len().min(NAMED)].join(", ")
        )));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_findings(enforce: &str, accounts: &[&str], pools: &[&str]) -> Vec<Finding> {
        let facts = AccountFacts {
            slurm_accounts: Ok(accounts.iter().map(|a| a.to_string()).collect()),
            pools: Ok(pools.iter().map(|p| p.to_string()).collect()),
        };
        findings(&account_mode(), Some(enforce), Some(&facts))
    }

    fn account_mode() -> Config {
        Config::parse("[accounts]\nmode = \"account\"\n", std::path::Path::new("test.toml")).unwrap()
    }

    fn problems(found: &[Finding]) -> Vec<&str> {
        found
            .iter()
            .filter_map(|f| match f {
                Finding::Problem(p) => Some(p.as_str()),
                Finding::Ok(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_site_as_it_should_be_has_no_problem() {
        let found = pool_findings("associations,limits", &["root", "lab", "course"], &["lab"]);
        assert!(problems(&found).is_empty(), "{found:?}");
        assert_eq!(
            found[2],
            Finding::Ok("1 of Slurm's accounts have no pool, so their users pay for their jobs: course".into())
        );
    }

    #[test]
    fn unenforced_associations_unknown_pools_and_no_pools_are_problems() {
        let found = pool_findings("none", &["root", "lab"], &["lab", "labb"]);
        let problems = problems(&found);
        assert!(problems[0].starts_with("AccountingStorageEnforce is 'none', without associations"), "{problems:?}");
        assert!(problems[1].starts_with("pools of accounts Slurm does not have: labb "), "{problems:?}");
        let none = pool_findings("associations", &["root", "lab"], &[]);
        assert!(problems_of(&none).contains("no account has a pool"), "{none:?}");
    }

    fn problems_of(found: &[Finding]) -> String {
        problems(found).join("\n")
    }

    #[test]
    fn many_accounts_without_a_pool_are_counted_not_all_named() {
        let names: Vec<String> = (0..25).map(|i| format!("a{i:02}")).collect();
        let accounts: Vec<&str> = names.iter().map(String::as_str).collect();
        let found = pool_findings("associations", &accounts, &["a00"]);
        let Finding::Ok(line) = &found[2] else { panic!("{found:?}") };
        assert!(line.starts_with("24 of Slurm's accounts have no pool") && line.ends_with("a10 and 14 more"), "{line}");
    }

    #[test]
    fn nothing_is_said_when_pools_are_off() {
        let config = Config::parse("", std::path::Path::new("test.toml")).unwrap();
        assert!(findings(&config, Some("none"), None).is_empty());
    }
}
