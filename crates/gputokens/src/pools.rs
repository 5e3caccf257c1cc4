//! Token pools of Slurm accounts (a lab, a project, a course) beside each user's own bucket: which
//! the site uses (`[accounts] mode`), how a pool is named in the ledger, and who pays for a job.

/// What holds tokens at a site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// Every user has a bucket; accounts hold nothing (what a site had before pools).
    #[default]
    User,
    /// A job under an account with a pool is paid by the pool; any other job by its user.
    Account,
    /// A job under an account with a pool is paid by the pool and by its user's own bucket: both must
    /// have tokens (the user's bucket then limits each person across all the accounts they use).
    Both,
}

impl PoolMode {
    pub fn parse(text: &str) -> Option<PoolMode> {
        match text {
            "user" => Some(PoolMode::User),
            "account" => Some(PoolMode::Account),
            "both" => Some(PoolMode::Both),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::User => "user",
            PoolMode::Account => "account",
            PoolMode::Both => "both",
        }
    }
}

/// Who pays for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payers<'a> {
    /// The user's own bucket.
    pub user: bool,
    /// The account whose pool pays.
    pub pool: Option<&'a str>,
}

/// Who pays for a job of `account` (None: the job's account is not known) under `mode`, where
/// `has_pool` says which accounts hold a pool.
pub fn payers<'a>(mode: PoolMode, account: Option<&'a str>, has_pool: impl Fn(&str) -> bool) -> Payers<'a> {
    let pool = match mode {
        PoolMode::User => None,
        PoolMode::Account | PoolMode::Both => account.filter(|a| has_pool(a)),
    };
    let user = pool.is_none() || mode == PoolMode::Both;
    Payers { user, pool }
}

/// The balance that stands for a job's payers (preemption's debtor test): the pool's, or when the
/// user pays too (mode "both") the lower of the two; the user's own when no pool pays.
pub fn paying_balance(
    payers: Payers,
    own: crate::tokens::Tokens,
    pool: impl Fn(&str) -> Option<crate::tokens::Tokens>,
) -> crate::tokens::Tokens {
    match payers.pool.and_then(pool) {
        Some(pool) if payers.user => pool.min(own),
        Some(pool) => pool,
        None => own,
    }
}

/// A pool as the job_submit plugin decides from it (the snapshot's `pool`, `coordinators` and
/// `spent` lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStanding {
    pub balance: crate::tokens::Tokens,
    /// The pool's rules; no cap (the plugin never replenishes).
    pub rules: crate::policy::BucketRules,
    /// What one member may spend of it per month.
    pub user_limit: Option<crate::tokens::Tokens>,
    /// Its Slurm coordinators (and those of the accounts above it): whom its members ask for tokens.
    pub coordinators: Vec<String>,
    /// What each member's jobs took from it in the snapshot's `spent_month`.
    pub spent: std::collections::HashMap<String, crate::tokens::Tokens>,
    /// The pool it draws on: its charges count there too, and that pool's floor and limits hold
    /// for its jobs.
    pub parent: Option<String>,
    /// Whether the pools drawing on it may go below their own floor while it is above its own.
    pub lends: bool,
    /// A dated sub-allocation's window (unix seconds): open from the first until the second.
    pub window: Option<(i64, i64)>,
}

/// How many pools above a pool count at most: a chain longer than this (or a loop, which the
/// ledger refuses to make) stops there.
pub const MAX_DEPTH: usize = 16;

/// The pools `account`'s pool draws on, nearest first (`parent_of` says each one's parent), never
/// `account` itself nor any pool twice.
pub fn ancestors<'a>(account: &str, parent_of: impl Fn(&str) -> Option<&'a str>) -> Vec<&'a str> {
    let mut chain: Vec<&'a str> = Vec::new();
    let mut at = account;
    while let Some(parent) = parent_of(at) {
        if parent == account || chain.contains(&parent) || chain.len() == MAX_DEPTH {
            break;
        }
        chain.push(parent);
        at = parent;
    }
    chain
}

/// Prefix of a pool's row among the ledger's balances. User names never contain whitespace
/// ([`crate::user_name`]), so a pool's row can never be taken for a user's, nor the other way round.
const HOLDER_PREFIX: &str = "account ";

/// The ledger's name for `account`'s pool: `account lab`.
pub fn holder(account: &str) -> String {
    format!("{HOLDER_PREFIX}{account}")
}

/// The account whose pool a ledger name is; None for a user.
pub fn account_of(holder: &str) -> Option<&str> {
    holder.strip_prefix(HOLDER_PREFIX)
}

/// `name` as Slurm keeps an account name: lower-case (ASCII, as slurmctld's `xstrtolower`). slurmctld
/// lower-cases a job's `-A` only after the job_submit plugins ran, and sacctmgr every name it is
/// given, so `LAB`, `Lab` and `lab` are all the account `lab`: every account name from a user, an
/// admin or a job goes through this before it is compared with a pool.
pub fn slurm_account_name(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// Why `name` cannot be a Slurm account with a pool, or None when it can. Slurm keeps account names
/// lower-case; the formats that carry them split at whitespace, `|` and `,`.
pub fn account_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > crate::user_name::MAX_BYTES {
        Some("it is longer than 255 bytes")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it contains whitespace or a control character")
    } else if name.contains(['|', ',', ':']) {
        Some("it contains '|', ',' or ':'")
    } else if name.chars().any(|c| c.is_uppercase()) {
        Some("it has upper-case letters (Slurm keeps account names lower-case)")
    } else {
        None
    }
}

/// `account` and the pools it draws on, nearest first: every pool a charge of its jobs counts at.
pub fn chain<'a>(account: &'a str, parent_of: impl Fn(&str) -> Option<&'a str>) -> Vec<&'a str> {
    let mut chain = vec![account];
    chain.extend(ancestors(account, parent_of));
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_pays_in_each_mode() {
        let lab = |a: &str| a == "lab";
        assert_eq!(payers(PoolMode::User, Some("lab"), lab), Payers { user: true, pool: None });
        assert_eq!(payers(PoolMode::Account, Some("lab"), lab), Payers { user: false, pool: Some("lab") });
        assert_eq!(payers(PoolMode::Account, Some("ops"), lab), Payers { user: true, pool: None }, "no pool");
        assert_eq!(payers(PoolMode::Account, None, lab), Payers { user: true, pool: None });
        assert_eq!(payers(PoolMode::Both, Some("lab"), lab), Payers { user: true, pool: Some("lab") });
        assert_eq!(payers(PoolMode::Both, Some("ops"), lab), Payers { user: true, pool: None });
    }

    #[test]
    fn the_paying_balance_is_the_pools_or_the_lower_of_both() {
        use crate::tokens::Tokens;
        let pool = |a: &str| (a == "lab").then_some(Tokens::whole(-3));
        let lab = |a: &str| a == "lab";
        let paying = |mode, account| paying_balance(payers(mode, Some(account), lab), Tokens::whole(20), pool);
        assert_eq!(paying(PoolMode::Account, "lab"), Tokens::whole(-3), "the pool in overdraft: a debtor's job");
        assert_eq!(paying(PoolMode::Both, "lab"), Tokens::whole(-3));
        assert_eq!(paying(PoolMode::Account, "ops"), Tokens::whole(20));
        assert_eq!(paying(PoolMode::User, "lab"), Tokens::whole(20));
        let rich = |_: &str| Some(Tokens::whole(90));
        assert_eq!(
            paying_balance(payers(PoolMode::Both, Some("lab"), lab), Tokens::whole(-1), rich),
            Tokens::whole(-1)
        );
    }

    #[test]
    fn a_pool_is_never_a_user() {
        assert_eq!(account_of(&holder("lab")), Some("lab"));
        assert_eq!(account_of("alice"), None);
        assert!(crate::user_name::problem(&holder("lab")).is_some(), "no user name has a space");
        assert_eq!(PoolMode::parse("both"), Some(PoolMode::Both));
        assert_eq!(PoolMode::parse("Users"), None);
    }

    #[test]
    fn a_pool_draws_on_its_parents_nearest_first_and_a_loop_ends_the_chain() {
        let parents = |a: &str| match a {
            "course" => Some("dept"),
            "dept" => Some("school"),
            "loop-a" => Some("loop-b"),
            "loop-b" => Some("loop-a"),
            _ => None,
        };
        assert_eq!(ancestors("course", parents), ["dept", "school"]);
        assert_eq!(chain("course", parents), ["course", "dept", "school"]);
        assert_eq!(ancestors("school", parents), Vec::<&str>::new());
        assert_eq!(ancestors("loop-a", parents), ["loop-b"], "never itself");
        let deep = |a: &str| Some(if a.len().is_multiple_of(2) { "x" } else { "yy" });
        assert_eq!(ancestors("z", deep), ["yy", "x"], "each pool once");
    }

    #[test]
    fn account_names() {
        assert_eq!(account_name_problem("lab-2"), None);
        for bad in ["", "a b", "a|b", "a,b", "a:b", "Lab"] {
            assert!(account_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
