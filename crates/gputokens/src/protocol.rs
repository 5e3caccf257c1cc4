//! What `sbalance` and `accountd admin` send to accountd over its Unix socket: one JSON request line,
//! one JSON reply line. The caller's identity is never in the request: accountd takes it from the
//! kernel (SO_PEERCRED).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};

use serde::{Deserialize, Serialize};

use crate::entry::Entry;
use crate::policy::Status;
use crate::statement::{Month, Statement};
use crate::tokens::Tokens;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Balances of `users`, or every visible user with `all`, or the caller's own when both are empty.
    Balances {
        users: Vec<String>,
        all: bool,
    },
    Grant {
        user: String,
        amount: Tokens,
        reason: String,
        key: Option<String>,
        /// Unix time the grant ends: what is left of it then expires.
        #[serde(default)]
        expires: Option<i64>,
    },
    Adjust {
        user: String,
        amount: Tokens,
        reason: String,
        key: Option<String>,
    },
    Refund {
        job_id: String,
        reason: String,
    },
    /// A user's ledger entries: `user` None is the caller's own; `limit` keeps only the newest.
    History {
        #[serde(default)]
        user: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
    },
    Import {
        balances: BTreeMap<String, Tokens>,
    },
    /// The most recent preemptions, requeues and drains.
    Actions {
        limit: usize,
    },
    /// Monthly statements: the caller's own (`user` None), one user's, or with `all` every user's.
    Statement {
        month: Month,
        #[serde(default)]
        user: Option<String>,
        #[serde(default)]
        all: bool,
        /// An account pool's statement, with a line per member (admins and its coordinators).
        #[serde(default)]
        account: Option<String>,
    },
    /// A one-time login link to the status page for the caller (whom the kernel named).
    WebLogin,
    /// Create an account's pool (`create`) or change its rules: admins only.
    PoolSet {
        account: String,
        create: bool,
        #[serde(default)]
        rules: PoolRules,
        /// A rule change's idempotency key (a change entered again under it changes nothing).
        #[serde(default)]
        key: Option<String>,
    },
    /// Add tokens to an account's pool: admins, and the account's coordinators (or those above it).
    /// With `adjust`: add or remove any amount, admins only.
    PoolGrant {
        account: String,
        amount: Tokens,
        reason: String,
        key: Option<String>,
        #[serde(default)]
        adjust: bool,
        /// Unix time the grant ends: what is left of it then expires.
        #[serde(default)]
        expires: Option<i64>,
    },
    /// Borrow against the caller's own next monthly grant (a site's `borrow_limit`).
    Borrow {
        amount: Tokens,
    },
    /// Make a dated sub-allocation inside `parent`'s pool: admins, and the parent's coordinators.
    Allocate {
        account: String,
        parent: String,
        amount: Tokens,
        /// Unix seconds: open from `starts` until `ends`.
        starts: i64,
        ends: i64,
    },
    /// Create many pools at once (admins): those that have one are left as they are.
    PoolImport {
        pools: BTreeMap<String, PoolRules>,
    },
    /// Move tokens from one account's pool to another's, atomically: admins, and coordinators of both.
    Transfer {
        from: String,
        to: String,
        amount: Tokens,
        reason: String,
        key: Option<String>,
    },
    /// The pools the caller may see (members see their accounts', coordinators the accounts they
    /// coordinate and those under them, admins all), or only `account`'s.
    Pools {
        #[serde(default)]
        account: Option<String>,
    },
}

/// The path of accountd's HTTP listener that takes the socket's requests from other hosts.
pub const REQUEST_PATH: &str = "/v1/request";

/// What a MUNGE credential for the request `body` carries: the purpose and the body's SHA-256 (hex),
/// so that it proves who asks this one request and nothing else.
pub fn request_credential_payload(body_sha256_hex: &str) -> String {
    format!("gputokens request v1\n{body_sha256_hex}")
}

impl Request {
    /// Whether the request may change balances or pools (grants, adjustments, refunds, imports,
    /// pool changes, transfers): over the network only where the site allows it.
    pub fn changes_balances(&self) -> bool {
        match self {
            Request::Grant { .. }
            | Request::Adjust { .. }
            | Request::Refund { .. }
            | Request::Import { .. }
            | Request::PoolSet { .. }
            | Request::PoolGrant { .. }
            | Request::PoolImport { .. }
            | Request::Allocate { .. }
            | Request::Borrow { .. }
            | Request::Transfer { .. } => true,
            Request::Balances { .. }
            | Request::History { .. }
            | Request::Actions { .. }
            | Request::Statement { .. }
            | Request::WebLogin
            | Request::Pools { .. } => false,
        }
    }

    /// Whether the request only reads (balances, history, statements, actions, pools): one that may
    /// be asked of several accountd hosts at once, the first answer taken. A login link is made, so
    /// it is not one.
    pub fn only_reads(&self) -> bool {
        !self.changes_balances() && !matches!(self, Request::WebLogin)
    }

    /// Why the request's free text (`--reason`, `--key`) cannot be recorded, or None: see
    /// [`crate::free_text`]. Checked for every caller before anything is done.
    pub fn free_text_problem(&self) -> Option<String> {
        use crate::free_text::{key_problem, reason_problem};
        let (reason, key) = match self {
            Request::Grant { reason, key, .. }
            | Request::Adjust { reason, key, .. }
            | Request::PoolGrant { reason, key, .. }
            | Request::Transfer { reason, key, .. } => (Some(reason), key.as_ref()),
            Request::Refund { reason, .. } => (Some(reason), None),
            Request::PoolSet { key, .. } => (None, key.as_ref()),
            Request::Balances { .. }
            | Request::History { .. }
            | Request::Import { .. }
            | Request::Actions { .. }
            | Request::Statement { .. }
            | Request::WebLogin
            | Request::PoolImport { .. }
            | Request::Allocate { .. }
            | Request::Borrow { .. }
            | Request::Pools { .. } => (None, None),
        };
        reason.and_then(|r| reason_problem(r)).or_else(|| key.and_then(|k| key_problem(k)))
    }

    /// The request with every account name in it as Slurm keeps it (lower-case: `LAB` is the account
    /// `lab`, [`crate::pools::slurm_account_name`]), the history of `account LAB` included: accountd
    /// compares names only after this, whoever sent them.
    pub fn with_slurm_account_names(self) -> Request {
        use crate::pools::{account_of, holder, slurm_account_name as slurm};
        let opt = |a: Option<String>| a.map(|a| slurm(&a));
        match self {
            Request::History { user, limit } => {
                let user = user.map(|u| account_of(&u).map_or(u.clone(), |a| holder(&slurm(a))));
                Request::History { user, limit }
            }
            Request::Statement { month, user, all, account } => {
                Request::Statement { month, user, all, account: opt(account) }
            }
            Request::PoolSet { account, create, rules, key } => {
                Request::PoolSet { account: slurm(&account), create, rules, key }
            }
            Request::PoolGrant { account, amount, reason, key, adjust, expires } => {
                Request::PoolGrant { account: slurm(&account), amount, reason, key, adjust, expires }
            }
            Request::PoolImport { pools } => {
                Request::PoolImport { pools: pools.into_iter().map(|(a, rules)| (slurm(&a), rules)).collect() }
            }
            Request::Transfer { from, to, amount, reason, key } => {
                Request::Transfer { from: slurm(&from), to: slurm(&to), amount, reason, key }
            }
            Request::Pools { account } => Request::Pools { account: opt(account) },
            Request::Allocate { account, parent, amount, starts, ends } => {
                Request::Allocate { account: slurm(&account), parent: slurm(&parent), amount, starts, ends }
            }
            // No account names in these.
            request @ (Request::Balances { .. }
            | Request::Grant { .. }
            | Request::Adjust { .. }
            | Request::Refund { .. }
            | Request::Import { .. }
            | Request::Actions { .. }
            | Request::Borrow { .. }
            | Request::WebLogin) => request,
        }
    }
}

/// A pool's rules as an admin gives them; None keeps the current value (or the config's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRules {
    pub initial: Option<Tokens>,
    pub daily: Option<Tokens>,
    pub monthly: Option<Tokens>,
    pub cap: Option<Tokens>,
    pub floor: Option<Tokens>,
    pub user_limit: Option<Tokens>,
    #[serde(default)]
    pub no_cap: bool,
    #[serde(default)]
    pub no_user_limit: bool,
    /// The account whose pool it draws on (nested pools).
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub no_parent: bool,
    /// Whether it lends to the pools drawing on it.
    #[serde(default)]
    pub lends: Option<bool>,
}

/// An account's pool as `sbalance -A` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRow {
    pub account: String,
    /// The account above it in Slurm's tree.
    pub parent: Option<String>,
    /// The account whose pool it draws on: its charges count there too.
    #[serde(default)]
    pub draws_on: Option<String>,
    /// Whether the pools drawing on it may go below their own floor while it is above its own.
    #[serde(default)]
    pub lends: bool,
    pub balance: Tokens,
    pub floor: Tokens,
    pub status: Status,
    pub daily: Tokens,
    pub monthly: Tokens,
    pub cap: Option<Tokens>,
    /// What one member may spend per month.
    pub user_limit: Option<Tokens>,
    pub coordinators: Vec<String>,
    /// Its members and what each spent of it this month.
    pub members: Vec<PoolMember>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolMember {
    pub user: String,
    pub spent_month: Tokens,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Balances {
        rows: Vec<BalanceRow>,
        /// In shadow mode: what enforcement would have done, as much of it as the caller may see.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shadow: Option<ShadowView>,
    },
    /// Entries written (or already there, for a replayed key).
    Recorded {
        entries: Vec<Entry>,
        replayed: bool,
    },
    History {
        user: String,
        entries: Vec<Entry>,
    },
    Imported {
        imported: usize,
        already: usize,
    },
    Actions {
        actions: Vec<crate::entry::Action>,
    },
    Statements {
        statements: Vec<Statement>,
    },
    /// Pools an import created, and how many it found made already.
    PoolsImported {
        created: Vec<String>,
        already: usize,
    },
    /// Pools under `mode` ([accounts] mode).
    Pools {
        mode: crate::pools::PoolMode,
        rows: Vec<PoolRow>,
    },
    /// A one-time login link to the status page, for the caller; unix time it expires.
    WebLink {
        url: String,
        expires: i64,
    },
    Error {
        kind: ErrorKind,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The caller may not do this.
    Refused,
    /// Bad input: unknown user, malformed amount, nothing to refund.
    Invalid,
    /// accountd could not do it (database trouble).
    Internal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalanceRow {
    pub user: String,
    pub balance: Tokens,
    pub floor: Tokens,
    pub status: Status,
    /// Tokens charged in the last 30 days, per GPU type.
    pub used_30d: BTreeMap<String, Tokens>,
    /// Next replenishment: local date and amount.
    pub next_grant: Option<(String, Tokens)>,
    /// In debt: the local date replenishment alone ends it (blocked: above the floor; overdraft: 0).
    #[serde(default)]
    pub recovers: Option<String>,
    /// false: not in the ledger yet; the row shows what the user would start with.
    pub in_ledger: bool,
    /// With pools: the pool of the user's default account, which pays for their jobs without `-A`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_pool: Option<PoolBalance>,
    /// A grant with tokens left that ends within `[notify] expiry_warning` (the soonest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiring: Option<Expiring>,
    /// `[lending]`: the user's borrowed runs of the last week, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub borrowed: Vec<BorrowedRunRow>,
}

/// A borrowed run (`[lending]`) as sbalance and the JSON API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BorrowedRunRow {
    pub job_id: String,
    /// When the run started, RFC 3339 with the local offset.
    pub started: String,
    /// The waiting jobs it was requeued for (not charged); None: not reclaimed.
    pub reclaimed_for: Option<String>,
}

/// Shadow mode (`[admission] enforce = false`) as `sbalance` and the status page show it: what
/// the plugins would have done. Admins see every controller and user; anyone else only their own
/// count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowView {
    /// accountd's `[admission] enforce`: false is the site's shadow mode; true with `controllers`
    /// means a plugin's config says otherwise than accountd's.
    pub enforce: bool,
    /// Whether `refused` counts every user (an admin asked) or one.
    pub everyone: bool,
    /// For admins: each controller whose plugin is in shadow mode, and what it would have done.
    #[serde(default)]
    pub controllers: Vec<ControllerShadow>,
    /// GPU job submissions that would have been refused, by user (a uid with no name: the number).
    #[serde(default)]
    pub refused: BTreeMap<String, u64>,
}

/// What one controller's plugin would have done since it started in shadow mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerShadow {
    /// The short host name its status file is named by.
    pub controller: String,
    /// Unix time the counts start.
    pub since: i64,
    /// "refuse", "deprioritize", "limit" → GPU jobs.
    pub would: BTreeMap<String, u64>,
}

/// What is left of a grant that ends soon, and when it expires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expiring {
    pub tokens: Tokens,
    /// Local time, `YYYY-MM-DDTHH:MM:SS` (sbatch's line shows it).
    pub at: String,
    /// The same instant in unix seconds (the JSON shows it with its offset); 0 from an accountd
    /// older than this field.
    #[serde(default)]
    pub ends: i64,
}

/// A pool's balance as a line about the user's jobs names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolBalance {
    pub account: String,
    pub balance: Tokens,
    pub floor: Tokens,
    pub status: Status,
}

/// One exchange on a connected stream: `request` as a line out, the reply line back (empty when
/// accountd closed without one). accountd refuses a connection over its caps with a reply sent at
/// once, then closes: the request may then fail to write (EPIPE) while the refusal waits to be read,
/// so a reply that arrived wins over a failed write.
pub fn exchange<S>(stream: &mut S, request: &Request) -> std::io::Result<String>
where
    S: Read + Write,
{
    let mut line = serde_json::to_string(request).map_err(std::io::Error::other)?;
    line.push('\n');
    let written = stream.write_all(line.as_bytes());
    let mut reply = String::new();
    let read = BufReader::new(&mut *stream).read_line(&mut reply);
    match (written, read) {
        (_, Ok(n)) if n > 0 => Ok(reply),
        (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(_)) => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names_are_slurms_whoever_typed_them() {
        let transfer = Request::Transfer {
            from: "LAB".into(),
            to: "Course".into(),
            amount: Tokens::whole(1),
            reason: "Why".into(),
            key: Some("K".into()),
        };
        let Request::Transfer { from, to, reason, key, .. } = transfer.with_slurm_account_names() else { panic!() };
        assert_eq!((from.as_str(), to.as_str(), reason.as_str(), key.as_deref()), ("lab", "course", "Why", Some("K")));
        let history = Request::History { user: Some("account LAB".into()), limit: None }.with_slurm_account_names();
        assert_eq!(history, Request::History { user: Some("account lab".into()), limit: None });
        let user = Request::History { user: Some("Alice".into()), limit: None };
        assert_eq!(user.clone().with_slurm_account_names(), user, "user names are case-sensitive");
        let pools = Request::Pools { account: Some("PHYSICS".into()) }.with_slurm_account_names();
        assert_eq!(pools, Request::Pools { account: Some("physics".into()) });
    }
}
