//! Token pools of Slurm accounts: their rules, what their members spent per month, and transfers
//! between balances. A pool's balance and entries are a `users` row named by
//! [`gputokens::pools::holder`], so everything that reads balances reads pools too.

use std::collections::HashMap;

use crate::db::{params, OptionalExtension, Transaction};

use gputokens::entry::EntryKind;
use gputokens::policy::BucketRules;
use gputokens::pools::{account_name_problem, holder};
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::accounts::{ensure_user, insert_entry, Applied, NewEntry};
use super::{Ledger, LedgerError};
use crate::journal::Journaled;

/// An account's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub account: String,
    pub rules: BucketRules,
    /// What one member may spend of it per calendar month; None: no limit.
    pub user_limit: Option<Tokens>,
    pub balance: Tokens,
    pub created: i64,
    /// The account whose pool it draws on: its charges count there too.
    pub parent: Option<String>,
    /// Whether the pools drawing on it may go below their own floor while it is above its own.
    pub lends: bool,
    /// A dated sub-allocation's window (unix seconds): open from `starts` until `ends`.
    pub window: Option<(i64, i64)>,
}

/// A change of a pool's rules: each field given replaces the pool's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolChange {
    pub daily: Option<Tokens>,
    pub monthly: Option<Tokens>,
    /// Some(None) removes the cap.
    pub cap: Option<Option<Tokens>>,
    pub floor: Option<Tokens>,
    /// Some(None) removes the limit.
    pub user_limit: Option<Option<Tokens>>,
    /// Some(None): it draws on no pool any more.
    pub parent: Option<Option<String>>,
    pub lends: Option<bool>,
}

impl PoolChange {
    /// The rules and per-user limit after this change.
    pub fn applied_to(&self, mut rules: BucketRules, user_limit: Option<Tokens>) -> (BucketRules, Option<Tokens>) {
        rules.daily = self.daily.unwrap_or(rules.daily);
        rules.monthly = self.monthly.unwrap_or(rules.monthly);
        rules.cap = self.cap.unwrap_or(rules.cap);
        rules.floor = self.floor.unwrap_or(rules.floor);
        (rules, self.user_limit.unwrap_or(user_limit))
    }
}

/// What a member spent of a pool in a month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpending {
    pub account: String,
    pub user: String,
    pub spent: Tokens,
}

const POOL_COLUMNS: &str =
    "p.account, p.initial, p.daily, p.monthly, p.cap, p.floor, p.user_limit, p.created, u.balance, p.parent, p.lends, p.starts, p.ends";
/// Each pool joined to its balance row, named `?1` (the holder prefix) followed by the account.
const POOLS_WITH_BALANCES: &str = "pools p JOIN users u ON u.name = ?1 || p.account";

fn pool_row(r: &crate::db::Row<'_>) -> crate::db::Result<Pool> {
    let tokens = |i: usize| r.get::<i64>(i).map(Tokens::from_micro);
    let optional = |i: usize| r.get::<Option<i64>>(i).map(|v| v.map(Tokens::from_micro));
    Ok(Pool {
        account: r.get(0)?,
        rules: BucketRules {
            initial: tokens(1)?,
            daily: tokens(2)?,
            monthly: tokens(3)?,
            cap: optional(4)?,
            floor: tokens(5)?,
        },
        user_limit: optional(6)?,
        created: r.get(7)?,
        balance: tokens(8)?,
        parent: r.get(9)?,
        lends: r.get::<i64>(10)? != 0,
        window: match (r.get::<Option<i64>>(11)?, r.get::<Option<i64>>(12)?) {
            (Some(starts), Some(ends)) => Some((starts, ends)),
            _ => None,
        },
    })
}

impl Ledger {
    /// Creates `account`'s pool with `rules` (its initial balance granted now) and, audited as an
    /// entry of the pool, who made it. An existing pool is an error: its rules change with
    /// [`Ledger::set_pool`].
    pub fn add_pool(
        &mut self,
        account: &str,
        rules: BucketRules,
        user_limit: Option<Tokens>,
        actor: &str,
        now: i64,
    ) -> Result<Pool, LedgerError> {
        let tx = self.conn.transaction()?;
        if !add_pool_in(&tx, account, rules, user_limit, actor, now)? {
            return Err(LedgerError::PoolExists(account.to_string()));
        }
        tx.commit()?;
        self.pool(account)?.ok_or_else(|| LedgerError::UnknownPool(account.to_string()))
    }

    /// Creates every pool of `pools` not made yet, in one transaction (all or none: a bad name fails
    /// them all); returns the accounts created now, leaving those that had a pool as they are.
    pub fn add_pools(
        &mut self,
        pools: &[(String, BucketRules, Option<Tokens>)],
        actor: &str,
        now: i64,
    ) -> Result<Vec<String>, LedgerError> {
        let tx = self.conn.transaction()?;
        let mut added = Vec::new();
        for (account, rules, user_limit) in pools {
            if add_pool_in(&tx, account, *rules, *user_limit, actor, now)? {
                added.push(account.clone());
            }
        }
        tx.commit()?;
        Ok(added)
    }

    /// Changes a pool's rules (its grants, floor, per-user limit, the pool it draws on and whether
    /// it lends); the change is an entry of the pool (amount 0) under `key`, naming what changed.
    /// Returns the pool and whether an entry was written: none when the rules are already so, or
    /// `key` was used before (a change entered again). A parent must be a pool, and never the
    /// pool itself or one drawing on it.
    pub fn set_pool(
        &mut self,
        account: &str,
        change: &PoolChange,
        actor: &str,
        key: &str,
        now: i64,
    ) -> Result<(Pool, bool), LedgerError> {
        let before = self.pool(account)?.ok_or_else(|| LedgerError::UnknownPool(account.to_string()))?;
        let (rules, user_limit) = change.applied_to(before.rules, before.user_limit);
        let parent = change.parent.clone().unwrap_or_else(|| before.parent.clone());
        let lends = change.lends.unwrap_or(before.lends);
        if let Some(parent) = parent.as_deref().filter(|p| before.parent.as_deref() != Some(*p)) {
            self.refuse_parent(account, parent)?;
        }
        let was = describe_pool(&before.rules, before.user_limit, before.parent.as_deref(), before.lends);
        let now_is = describe_pool(&rules, user_limit, parent.as_deref(), lends);
        if was == now_is {
            return Ok((before, false));
        }
        let tx = self.conn.transaction()?;
        tx.execute(
            "UPDATE pools SET daily = ?2, monthly = ?3, cap = ?4, floor = ?5, user_limit = ?6, parent = ?7, lends = ?8
             WHERE account = ?1",
            params![
                account,
                rules.daily.micro(),
                rules.monthly.micro(),
                rules.cap.map(Tokens::micro),
                rules.floor.micro(),
                user_limit.map(Tokens::micro),
                parent.as_deref(),
                i64::from(lends)
            ],
        )?;
        let reason = format!("pool rules changed: {was} → {now_is}");
        let audit = NewEntry::new(&holder(account), EntryKind::Adjust, Tokens::ZERO, now, actor, &reason, key.into())
            .journaled(Journaled::PoolRules { rules, user_limit, parent, lends });
        // A key used before (the change entered again): dropping the transaction undoes the update.
        if insert_entry(&tx, &audit)? == Applied::AlreadyRecorded {
            return Ok((before, false));
        }
        tx.commit()?;
        let after = self.pool(account)?.ok_or_else(|| LedgerError::UnknownPool(account.to_string()))?;
        Ok((after, true))
    }

    /// Refuses `parent` as the pool `account` draws on: it must be a pool, and never `account`
    /// nor a pool that draws on it (a loop would count each charge round and round).
    pub(crate) fn refuse_parent(&self, account: &str, parent: &str) -> Result<(), LedgerError> {
        if parent == account {
            return Err(LedgerError::Refused(format!("account {account}'s pool cannot draw on itself")));
        }
        let pools = self.pools()?;
        let parent_of = |a: &str| pools.iter().find(|p| p.account == a)?.parent.as_deref();
        if !pools.iter().any(|p| p.account == parent) {
            return Err(LedgerError::Refused(format!(
                "account {parent} has no pool for {account}'s to draw on; make it first (accountd admin account add {parent})"
            )));
        }
        let above = gputokens::pools::ancestors(parent, parent_of);
        if above.contains(&account) {
            return Err(LedgerError::Refused(format!(
                "account {parent}'s pool draws on {account}'s ({parent} → {}): {account}'s cannot draw on it",
                above.join(" → ")
            )));
        }
        // The pools below `account` draw on everything above it too: the deepest of them counts.
        let below = depth_below(account, &pools);
        let deepest = below + 1 + above.len();
        if deepest > gputokens::pools::MAX_DEPTH {
            return Err(LedgerError::Refused(format!(
                "a pool draws on at most {} pools above it; under {parent}, a pool below {account} would draw on {deepest}",
                gputokens::pools::MAX_DEPTH
            )));
        }
        Ok(())
    }

    /// Refuses `parent` for a pool `account` about to be made, before anything is written.
    pub fn check_parent(&self, account: &str, parent: &str) -> Result<(), LedgerError> {
        self.refuse_parent(account, parent)
    }

    pub fn pool(&self, account: &str) -> Result<Option<Pool>, LedgerError> {
        let sql = format!("SELECT {POOL_COLUMNS} FROM {POOLS_WITH_BALANCES} WHERE p.account = ?2");
        Ok(self.conn.prepare_cached(&sql)?.query_row(params![holder(""), account], pool_row).optional()?)
    }

    /// Every pool, by account name.
    pub fn pools(&self) -> Result<Vec<Pool>, LedgerError> {
        all_pools(&self.conn)
    }

    /// What each member spent of each pool in `month` (YYYY-MM).
    pub fn member_spending(&self, month: &str) -> Result<Vec<MemberSpending>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT account, user, charged FROM pool_member_months WHERE month = ?1 ORDER BY account, user",
        )?;
        let rows = stmt
            .query_map([month], |r| {
                Ok(MemberSpending { account: r.get(0)?, user: r.get(1)?, spent: Tokens::from_micro(r.get(2)?) })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Moves `amount` from one balance to another (users' names or pools' holders) in one
    /// transaction: two entries under `key` (`KEY:from`, `KEY:to`), both or neither. A key used
    /// before moves nothing again.
    #[allow(clippy::too_many_arguments)]
    pub fn transfer(
        &mut self,
        from: &str,
        to: &str,
        amount: Tokens,
        actor: &str,
        reason: &str,
        key: &str,
        now: i64,
    ) -> Result<Applied, LedgerError> {
        if amount <= Tokens::ZERO {
            return Err(LedgerError::Refused(format!("a transfer moves a positive amount (got {amount})")));
        }
        if from == to {
            return Err(LedgerError::Refused("a transfer needs two different balances".into()));
        }
        let rules = self.rules;
        let pool_rules = pool_rules(&self.conn)?;
        let tx = self.conn.transaction()?;
        for name in [from, to] {
            ensure_user(&tx, pool_rules.get(name).unwrap_or(&rules), name, now)?;
        }
        let replay = tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM entry_keys WHERE key = ?1)")?
            .query_row([format!("{key}:from")], |r| r.get::<bool>(0))?;
        if !replay {
            refuse_beyond_movable(&tx, from, pool_rules.get(from).unwrap_or(&rules).floor, amount)?;
        }
        let out = NewEntry::new(
            from,
            EntryKind::Adjust,
            -amount,
            now,
            actor,
            &format!("transfer to {to}: {reason}"),
            format!("{key}:from"),
        )
        .journaled(Journaled::Transfer {
            from: from.into(),
            to: to.into(),
            amount,
            reason: reason.into(),
            key: key.into(),
        });
        let into = NewEntry::new(
            to,
            EntryKind::Adjust,
            amount,
            now,
            actor,
            &format!("transfer from {from}: {reason}"),
            format!("{key}:to"),
        );
        // A replay must name the same destination too: each half's key refuses another change.
        let applied = insert_entry(&tx, &out)?;
        if insert_entry(&tx, &into)? != applied {
            return Err(LedgerError::Refused(format!("transfer key {key}: one half is recorded, the other not")));
        }
        tx.commit()?;
        Ok(applied)
    }
}

/// Refuses a transfer of more than `from` may move: what it holds above its floor, and never what
/// is left of its grants that expire (those tokens expire where they are: moved, they would escape
/// their end; the audit's L4).
fn refuse_beyond_movable(tx: &Transaction<'_>, from: &str, floor: Tokens, amount: Tokens) -> Result<(), LedgerError> {
    let balance = Tokens::from_micro(
        tx.prepare_cached("SELECT balance FROM users WHERE name = ?1")?.query_row([from], |r| r.get(0))?,
    );
    let expiring = Tokens::from_micro(
        tx.prepare_cached(
            // Ended grants too, until the check cycle has expired them.
            "SELECT COALESCE(SUM(unused), 0) FROM grant_expiries
             WHERE user = ?1 AND expired_entry IS NULL AND unused > 0",
        )?
        .query_row(params![from], |r| r.get(0))?,
    );
    // Down to the floor, but never into what is left of expiring grants.
    let keep = if expiring > Tokens::ZERO { floor.max(expiring) } else { floor };
    let movable = (balance - keep).max(Tokens::ZERO);
    if amount > movable {
        let expiring_note = match expiring > Tokens::ZERO {
            true => format!(", {expiring} of it from grants that expire, which expire where they are"),
            false => String::new(),
        };
        return Err(LedgerError::Refused(format!(
            "{from} may move at most {movable} tokens (balance {balance}, floor {floor}{expiring_note}); \
             {amount} asked"
        )));
    }
    Ok(())
}

/// Creates `account`'s pool (its initial grant and an audit entry naming its rules and `actor`);
/// false when it had one.
fn add_pool_in(
    tx: &Transaction<'_>,
    account: &str,
    rules: BucketRules,
    user_limit: Option<Tokens>,
    actor: &str,
    now: i64,
) -> Result<bool, LedgerError> {
    let reason = format!("pool created: {}", describe_rules(&rules, user_limit));
    add_pool_audited(
        tx,
        account,
        (rules, user_limit),
        actor,
        now,
        (reason, Journaled::PoolCreated { rules, user_limit }),
    )
}

/// [`add_pool_in`], its audit entry saying `reason` and journaled as `journaled`.
pub(crate) fn add_pool_audited(
    tx: &Transaction<'_>,
    account: &str,
    (rules, user_limit): (BucketRules, Option<Tokens>),
    actor: &str,
    now: i64,
    (reason, journaled): (String, Journaled),
) -> Result<bool, LedgerError> {
    if let Some(why) = account_name_problem(account) {
        return Err(LedgerError::BadAccountName { name: gputokens::free_text::printable(account).into_owned(), why });
    }
    let added = tx
        .prepare_cached(tx.dialect().pick(
            "INSERT INTO pools (account, initial, daily, monthly, cap, floor, user_limit, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (account) DO NOTHING",
            "INSERT INTO pools (account, initial, daily, monthly, cap, floor, user_limit, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON DUPLICATE KEY UPDATE account = account",
        ))?
        .execute(params![
            account,
            rules.initial.micro(),
            rules.daily.micro(),
            rules.monthly.micro(),
            rules.cap.map(Tokens::micro),
            rules.floor.micro(),
            user_limit.map(Tokens::micro),
            now
        ])?;
    if added == 0 {
        return Ok(false);
    }
    ensure_user(tx, &rules, &holder(account), now)?;
    let audit =
        NewEntry::new(&holder(account), EntryKind::Adjust, Tokens::ZERO, now, actor, &reason, created_key(account))
            .journaled(journaled);
    insert_entry(tx, &audit)?;
    Ok(true)
}

/// The key of the entry that records `account`'s pool being made.
pub fn created_key(account: &str) -> String {
    format!("pool:{account}:created")
}

/// Each pool's rules by its holder name.
pub(crate) fn pool_rules(conn: &crate::db::Connection) -> Result<HashMap<String, BucketRules>, LedgerError> {
    Ok(all_pools(conn)?.into_iter().map(|p| (holder(&p.account), p.rules)).collect())
}

/// How many pools deep the pools below `account` go (0: none draws on it).
fn depth_below(account: &str, pools: &[Pool]) -> usize {
    let mut depth = 0;
    let mut level: Vec<&str> = vec![account];
    // Bounded: a loop (which set_pool never makes) ends at the limit.
    while depth <= gputokens::pools::MAX_DEPTH {
        let next: Vec<&str> = pools
            .iter()
            .filter(|p| p.parent.as_deref().is_some_and(|parent| level.contains(&parent)))
            .map(|p| p.account.as_str())
            .collect();
        if next.is_empty() {
            break;
        }
        depth += 1;
        level = next;
    }
    depth
}

/// Each dated sub-allocation's window, by its account.
pub(crate) fn pool_windows(conn: &crate::db::Connection) -> Result<HashMap<String, (i64, i64)>, LedgerError> {
    Ok(all_pools(conn)?.into_iter().filter_map(|p| Some((p.account, p.window?))).collect())
}

/// Each pool that draws on another, by its account: that pool's account.
pub(crate) fn pool_parents(conn: &crate::db::Connection) -> Result<HashMap<String, String>, LedgerError> {
    Ok(all_pools(conn)?.into_iter().filter_map(|p| Some((p.account, p.parent?))).collect())
}

/// Every pool, by account name.
fn all_pools(conn: &crate::db::Connection) -> Result<Vec<Pool>, LedgerError> {
    let sql = format!("SELECT {POOL_COLUMNS} FROM {POOLS_WITH_BALANCES} ORDER BY p.account");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([holder("")], pool_row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Adds what `user` spent of `account`'s pool to the month of `now`.
pub(crate) fn add_member_spending(
    tx: &Transaction<'_>,
    account: &str,
    user: &str,
    spent: Tokens,
    now: i64,
) -> Result<(), LedgerError> {
    let month = local_date(now).format("%Y-%m").to_string();
    tx.prepare_cached(tx.dialect().pick(
        "INSERT INTO pool_member_months (account, user, month, charged) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO UPDATE SET charged = charged + excluded.charged",
        "INSERT INTO pool_member_months (account, user, month, charged) VALUES (?1, ?2, ?3, ?4)
         ON DUPLICATE KEY UPDATE charged = charged + VALUES(charged)",
    ))?
    .execute(params![account, user, month, spent.micro()])?;
    Ok(())
}

/// The rules, then `, draws on dept` and `, lends to the pools drawing on it` where so.
fn describe_pool(rules: &BucketRules, user_limit: Option<Tokens>, parent: Option<&str>, lends: bool) -> String {
    let mut text = describe_rules(rules, user_limit);
    if let Some(parent) = parent {
        text.push_str(&format!(", draws on {parent}"));
    }
    if lends {
        text.push_str(", lends to the pools drawing on it");
    }
    text
}

/// `initial 100, +1/day, +30/month, floor -10, no cap, no per-user limit`.
fn describe_rules(rules: &BucketRules, user_limit: Option<Tokens>) -> String {
    let cap = rules.cap.map_or("no cap".to_string(), |c| format!("cap {c}"));
    let limit = user_limit.map_or("no per-user limit".to_string(), |l| format!("per-user limit {l}/month"));
    format!(
        "initial {}, +{}/day, +{}/month, floor {}, {cap}, {limit}",
        rules.initial, rules.daily, rules.monthly, rules.floor
    )
}

/// Lowers what `member` spent of `account`'s pool in the month of `at` by `amount` micro-tokens,
/// never below 0.
pub(crate) fn lower_member_spending(
    tx: &crate::db::Transaction<'_>,
    account: &str,
    member: &str,
    amount: i64,
    at: i64,
) -> Result<(), LedgerError> {
    let month = gputokens::time::local_date(at).format("%Y-%m").to_string();
    tx.prepare_cached(
        "UPDATE pool_member_months SET charged = CASE WHEN charged > ?4 THEN charged - ?4 ELSE 0 END
         WHERE account = ?1 AND user = ?2 AND month = ?3",
    )?
    .execute(params![account, member, month, amount])?;
    Ok(())
}
