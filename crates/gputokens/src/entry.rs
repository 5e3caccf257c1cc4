//! The words of the ledger that the protocol and the API share: the kinds of entry and the audit
//! row of an action on a job or a node. The ledger crate stores them; clients only read them.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// An audit row: what gputokens did to a job or a node, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Action {
    pub at: i64,
    pub action: String,
    pub target: String,
    pub user: String,
    pub reason: String,
    pub dry_run: bool,
}
