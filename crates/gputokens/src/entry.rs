//! The words of the ledger that the protocol and the API share: an entry and its kinds, and the
//! audit row of an action on a job or a node. The ledger crate stores them; clients only read them.

use serde::{Deserialize, Serialize};

use crate::tokens::Tokens;

/// One ledger entry, with the user's balance right after it: what the ledger returns, what the
/// protocol carries (a history, the entries a grant or refund wrote) and what a statement sums
/// into its lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: i64,
    pub user: String,
    /// Unix seconds.
    pub at: i64,
    pub kind: EntryKind,
    pub amount: Tokens,
    /// The user's balance right after this entry. Read for a statement: the month's running
    /// balance (its opening balance plus the month's entries up to this one), which a statement
    /// does not use.
    pub balance_after: Tokens,
    pub actor: String,
    pub reason: String,
    pub job_id: Option<String>,
    /// The idempotency key; charges have none (their job_charges row keeps them from being
    /// recorded twice). Not on the wire, nor are the two below: the protocol's history rows never
    /// carried them, and no client reads them.
    #[serde(skip)]
    pub key: Option<String>,
    /// A charge's GPU type.
    #[serde(skip)]
    pub gpu_type: Option<String>,
    /// The GPU-seconds a charge is for.
    #[serde(skip)]
    pub gpu_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Grant,
    Replenish,
    Monthly,
    Charge,
    Refund,
    Adjust,
    Import,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Grant => "grant",
            EntryKind::Replenish => "replenish",
            EntryKind::Monthly => "monthly",
            EntryKind::Charge => "charge",
            EntryKind::Refund => "refund",
            EntryKind::Adjust => "adjust",
            EntryKind::Import => "import",
        }
    }

    /// The name as the ledger stores it; anything unknown is an import (the schema admits nothing else).
    pub fn parse(text: &str) -> EntryKind {
        match text {
            "grant" => EntryKind::Grant,
            "replenish" => EntryKind::Replenish,
            "monthly" => EntryKind::Monthly,
            "charge" => EntryKind::Charge,
            "refund" => EntryKind::Refund,
            "adjust" => EntryKind::Adjust,
            _ => EntryKind::Import, // the schema's CHECK admits nothing else
        }
    }
}

/// The idempotency key of a user's initial balance: the ledger writes it once, and a statement
/// tells that grant from an admin's by it.
pub fn initial_key(user: &str) -> String {
    format!("initial:{user}")
}

/// The idempotency key of what is left of grant `grant_entry` expiring at its end.
pub fn expiry_key(grant_entry: i64) -> String {
    format!("expire:{grant_entry}")
}

impl Entry {
    /// Whether this entry is a grant's unused rest expiring (written by gputokens, keyed by the grant).
    pub fn is_expiry(&self) -> bool {
        self.actor == "gputokens" && self.key.as_deref().is_some_and(|k| k.starts_with("expire:"))
    }

    /// Whether this entry charges a job's GPU energy (`[prices] per_kwh`), not its GPU time: the
    /// ledger keys those `energy:...` (a charge for GPU time has no key).
    pub fn is_energy_charge(&self) -> bool {
        self.kind == EntryKind::Charge && self.key.as_deref().is_some_and(|k| k.starts_with(ENERGY_KEY_PREFIX))
    }
}

/// The key prefix of an energy charge's entry (see [`Entry::is_energy_charge`]).
pub const ENERGY_KEY_PREFIX: &str = "energy:";

/// The audit actions of a job taken off a GPU drained for a hardware fault: requeued, or cancelled
/// where it could not be requeued. The run they end is lost to the system (`crate::refunds`).
pub const FAULT_REQUEUE: &str = "fault-requeue";
pub const FAULT_CANCEL: &str = "fault-cancel";

/// An audit row: what gputokens did to a job or a node, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub at: i64,
    pub action: String,
    pub target: String,
    pub user: String,
    pub reason: String,
    pub dry_run: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON sbalance, `accountd admin` and the tests read: these fields, these names, no more.
    #[test]
    fn an_entry_travels_as_the_history_rows_always_did() {
        let charge = Entry {
            id: 42,
            user: "alice".into(),
            at: 1_795_500_000,
            kind: EntryKind::Charge,
            amount: Tokens::from_micro(-8_000_000),
            balance_after: Tokens::whole(92),
            actor: "gputokens".into(),
            reason: "2 × a6000 for 3600s at 4/GPU-hour".into(),
            job_id: Some("7".into()),
            key: None,
            gpu_type: Some("a6000".into()),
            gpu_seconds: Some(7200),
        };
        let json = serde_json::to_string(&charge).unwrap();
        assert_eq!(
            json,
            r#"{"id":42,"user":"alice","at":1795500000,"kind":"charge","amount":"-8","balance_after":"92","actor":"gputokens","reason":"2 × a6000 for 3600s at 4/GPU-hour","job_id":"7"}"#
        );
        let read: Entry = serde_json::from_str(&json).unwrap();
        assert_eq!(read, Entry { gpu_type: None, gpu_seconds: None, ..charge });
        let grant = r#"{"id":1,"user":"bob","at":5,"kind":"grant","amount":"100","balance_after":"100","actor":"root","reason":"r","job_id":null}"#;
        let grant: Entry = serde_json::from_str(grant).unwrap();
        assert_eq!((grant.kind, grant.job_id, grant.key), (EntryKind::Grant, None, None));
    }
}
