//! One line of the admin journal: the entry's identity (ledger id and idempotency key), time, admin,
//! user, kind, amount and reason; and the command that enters it again.

use gputokens::entry::{Entry, EntryKind};
use gputokens::Tokens;
use serde::{Deserialize, Serialize};

use super::shell_words::quote;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLine {
    /// The idempotency key: the entry is in a ledger exactly when an entry has this key.
    pub key: String,
    /// The entry's id in the ledger that recorded it (a restored ledger gives others).
    pub entry_id: i64,
    /// Unix seconds.
    pub at: i64,
    pub admin: String,
    pub user: String,
    pub kind: EntryKind,
    pub amount: Tokens,
    pub reason: String,
    pub job_id: Option<String>,
    /// The command that enters the change again, where its entry alone does not say (a pool made,
    /// its rules changed, a transfer); else it follows from the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl JournalLine {
    /// The line of a ledger entry; None for an entry without a key (a charge, never an admin's).
    pub fn of(entry: &Entry) -> Option<JournalLine> {
        Some(JournalLine {
            key: entry.key.clone()?,
            entry_id: entry.id,
            at: entry.at,
            admin: entry.actor.clone(),
            user: entry.user.clone(),
            kind: entry.kind,
            amount: entry.amount,
            reason: entry.reason.clone(),
            job_id: entry.job_id.clone(),
            command: None,
        })
    }

    /// The command an admin runs to enter this change again. Grants and adjustments carry their
    /// original key, so running it twice changes nothing; a refund is keyed by the job and what it
    /// was charged, an import by the user, so theirs are as safe to repeat.
    pub fn reenter_command(&self) -> String {
        if let Some(command) = &self.command {
            return command.clone();
        }
        let (user, reason) = (quote(&self.user), quote(&self.reason));
        match self.kind {
            EntryKind::Grant | EntryKind::Adjust => {
                let kind = self.kind.as_str();
                // accountd admin grant --key K stores `grant:K`.
                let key = self.key.strip_prefix(&format!("{kind}:")).unwrap_or(&self.key);
                // A pool's grant or adjustment is entered again through `admin account`.
                let whom = match gputokens::pools::account_of(&self.user) {
                    Some(account) => format!("account {kind} {}", quote(account)),
                    None => format!("{kind} {user}"),
                };
                format!("accountd admin {whom} {} --reason {reason} --key {}", self.amount, quote(key))
            }
            EntryKind::Refund => {
                let job = self.job_id.as_deref().unwrap_or("JOBID");
                format!("accountd admin refund {} --reason {reason}", quote(job))
            }
            EntryKind::Import | EntryKind::Replenish | EntryKind::Monthly | EntryKind::Charge => {
                let state = serde_json::json!({ &self.user: self.amount.to_string() });
                format!("echo {} | accountd admin import /dev/stdin", quote(&state.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: EntryKind, key: &str, amount: &str) -> JournalLine {
        JournalLine {
            key: key.into(),
            entry_id: 7,
            at: 1_700_000_000,
            admin: "root".into(),
            user: "alice".into(),
            kind,
            amount: amount.parse().unwrap(),
            reason: "course's quota".into(),
            job_id: None,
            command: None,
        }
    }

    #[test]
    fn each_kind_is_entered_again_under_its_original_identity() {
        assert_eq!(
            line(EntryKind::Grant, "grant:c1", "10").reenter_command(),
            r#"accountd admin grant alice 10 --reason 'course'\''s quota' --key c1"#
        );
        assert_eq!(
            line(EntryKind::Adjust, "adjust:alice:1700000000.5.9.0", "-2.5").reenter_command(),
            r#"accountd admin adjust alice -2.5 --reason 'course'\''s quota' --key alice:1700000000.5.9.0"#
        );
        let refund = JournalLine { job_id: Some("42".into()), ..line(EntryKind::Refund, "refund:42:alice:3", "3") };
        assert_eq!(refund.reenter_command(), r#"accountd admin refund 42 --reason 'course'\''s quota'"#);
        assert_eq!(
            line(EntryKind::Import, "import:alice", "87.5").reenter_command(),
            r#"echo '{"alice":"87.5"}' | accountd admin import /dev/stdin"#
        );
        let pool = JournalLine { user: "account lab".into(), ..line(EntryKind::Grant, "grant:term-1", "50") };
        assert_eq!(
            pool.reenter_command(),
            r#"accountd admin account grant lab 50 --reason 'course'\''s quota' --key term-1"#,
            "a pool's grant"
        );
    }

    #[test]
    fn a_line_round_trips_through_json() {
        let l = line(EntryKind::Grant, "grant:c1", "0.000001");
        let text = serde_json::to_string(&l).unwrap();
        assert!(text.contains(r#""amount":"0.000001""#) && text.contains(r#""kind":"grant""#), "{text}");
        assert_eq!(serde_json::from_str::<JournalLine>(&text).unwrap(), l);
    }
}
