//! An admin's grant or adjustment of a balance (a user's or a pool's): keyed, appended, and
//! marked for the admin journal.

use std::sync::atomic::{AtomicU64, Ordering};

use gputokens::access::Caller;

use crate::balance_row::SystemUsers;
use gputokens::protocol::Reply;
use gputokens::Tokens;
use ledger::{Applied, EntryKind, Journaled, NewEntry};

use crate::reply::{from_ledger, invalid};
use crate::resources::Resources;

/// An admin's change to a balance, as a request carries it.
pub struct Change {
    pub kind: EntryKind,
    pub amount: Tokens,
    pub reason: String,
    pub key: Option<String>,
    /// A grant's end (unix seconds): what is left of it then expires.
    pub expires: Option<i64>,
}

pub fn record(
    res: &mut Resources,
    caller: &Caller,
    user: &str,
    change: Change,
    now: i64,
    users: &SystemUsers,
) -> Result<(Reply, bool), Reply> {
    let Change { kind, amount, reason, key, expires } = change;
    if reason.trim().is_empty() {
        return Err(invalid("--reason must say why".into()));
    }
    if res.ledger.account(user).map_err(from_ledger)?.is_none() && !users.exists(user) {
        return Err(invalid(format!("unknown user '{user}': not in the ledger and not a user of this system")));
    }
    let key = match key {
        Some(k) => format!("{}:{k}", kind.as_str()),
        None => format!("{}:{user}:{}", kind.as_str(), unique_suffix(now)),
    };
    let entry =
        NewEntry::new(user, kind, amount, now, &caller.name, &reason, key.clone()).journaled(Journaled::AsItsKind);
    let applied = match expires {
        Some(ends) => res.ledger.append_expiring(&entry, ends),
        None => res.ledger.append(&entry),
    }
    .map_err(from_ledger)?;
    let history = res.ledger.history(user).map_err(from_ledger)?;
    let written: Vec<_> = history.into_iter().filter(|e| e.key.as_deref() == Some(key.as_str())).collect();
    Ok((Reply::Recorded { entries: written, replayed: applied == Applied::AlreadyRecorded }, applied == Applied::Added))
}

/// A key suffix no other unkeyed entry shares: time, process and a counter.
pub fn unique_suffix(now: i64) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{now}.{nanos}.{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}
