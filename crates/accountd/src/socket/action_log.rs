//! The daemon's log line of an admin's change, for a person to read: who did what to whom, amounts
//! in tokens, the reason and key, and what the balance is now, e.g.
//! `root granted alice +10 (welcome) key=w1; balance now 26`.

use gputokens::free_text::printable;
use gputokens::protocol::{PoolRules, Reply, Request};
use gputokens::time::format_rfc3339;
use gputokens::Tokens;

/// What a changing request does, worded before it is answered (the request is consumed then).
pub struct Action(String);

impl Action {
    /// The request's words, or None for one that changes nothing (balances, histories, links).
    pub fn of(request: &Request) -> Option<Action> {
        let words = match request {
            Request::Grant { user, amount, reason, key, expires } => {
                format!("granted {user} {}{}{}", change(*amount, reason), keyed(key), until(*expires))
            }
            Request::Adjust { user, amount, reason, key } => {
                format!("adjusted {user} {}{}", change(*amount, reason), keyed(key))
            }
            Request::Refund { job_id, reason } => format!("refunded job {job_id} ({})", printable(reason)),
            Request::Import { balances } => format!("imported the balances of {}", count(balances.len(), "user")),
            Request::PoolSet { account, create: true, rules, .. } => {
                format!("created the pool of account {account}{}", listed(rules))
            }
            Request::PoolSet { account, create: false, rules, key } => {
                format!("changed the rules of account {account}'s pool{}{}", listed(rules), keyed(key))
            }
            Request::PoolImport { pools } => format!("imported {}", count(pools.len(), "pool")),
            Request::Borrow { amount } => format!("borrowed {amount} against their next monthly grant"),
            Request::Allocate { account, parent, amount, starts, ends } => {
                let allocation = ledger::Allocation {
                    account: account.clone(),
                    parent: parent.clone(),
                    amount: *amount,
                    starts: *starts,
                    ends: *ends,
                };
                format!("made the sub-allocation {account} of {}", allocation.describe())
            }
            Request::PoolGrant { account, amount, reason, key, adjust, expires } => {
                let verb = if *adjust { "adjusted" } else { "granted" };
                format!("{verb} account {account} {}{}{}", change(*amount, reason), keyed(key), until(*expires))
            }
            Request::Transfer { from, to, amount, reason, key } => {
                format!("moved {amount} from account {from} to account {to} ({}){}", printable(reason), keyed(key))
            }
            Request::Balances { .. }
            | Request::History { .. }
            | Request::Actions { .. }
            | Request::Statement { .. }
            | Request::WebLogin
            | Request::Pools { .. } => return None,
        };
        Some(Action(words))
    }

    /// The whole line: `caller`, the request's words, and what `reply` says came of it.
    pub fn line(&self, caller: &str, reply: &Reply) -> String {
        format!("{caller} {}{}", self.0, outcome(reply))
    }
}

/// `+10 (welcome)`, `-56.4 (overspent)`.
fn change(amount: Tokens, reason: &str) -> String {
    let sign = if amount > Tokens::ZERO { "+" } else { "" };
    format!("{sign}{amount} ({})", printable(reason))
}

fn keyed(key: &Option<String>) -> String {
    key.as_deref().map(|k| format!(" key={}", printable(k))).unwrap_or_default()
}

fn until(expires: Option<i64>) -> String {
    expires.map(|at| format!(" expiring {}", format_rfc3339(at))).unwrap_or_default()
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// ` (daily 1, monthly 40, no cap)`: the rules a pool request gives, or nothing.
fn listed(rules: &PoolRules) -> String {
    let given = [
        ("initial", rules.initial),
        ("daily", rules.daily),
        ("monthly", rules.monthly),
        ("cap", rules.cap),
        ("floor", rules.floor),
        ("user limit", rules.user_limit),
    ];
    let mut parts: Vec<String> =
        given.iter().filter_map(|(name, value)| value.map(|v| format!("{name} {v}"))).collect();
    if rules.no_cap {
        parts.push("no cap".into());
    }
    if rules.no_user_limit {
        parts.push("no user limit".into());
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// `; balance now 26`, `; balances now: account lab 20, account course 40`, `: 2 new, 1 there before`,
/// a pool's rules after the change.
fn outcome(reply: &Reply) -> String {
    match reply {
        Reply::Recorded { entries, .. } => {
            // Each holder's balance after its last entry, in the order they first appear (a pool's
            // holder is named `account lab` in the ledger).
            let mut now: Vec<(&str, Tokens)> = Vec::new();
            for e in entries {
                match now.iter_mut().find(|(h, _)| *h == e.user) {
                    Some(slot) => slot.1 = e.balance_after,
                    None => now.push((&e.user, e.balance_after)),
                }
            }
            match now.as_slice() {
                [] => String::new(),
                [(_, balance)] => format!("; balance now {balance}"),
                many => {
                    let each: Vec<String> = many.iter().map(|(h, b)| format!("{h} {b}")).collect();
                    format!("; balances now: {}", each.join(", "))
                }
            }
        }
        Reply::Imported { imported, already } => format!(": {imported} new, {already} there before"),
        Reply::PoolsImported { created, already } => {
            format!(
                ": created {}; {already} there before",
                if created.is_empty() { "none".into() } else { created.join(", ") }
            )
        }
        Reply::Pools { rows, .. } => match rows.as_slice() {
            [row] => {
                let or_none = |t: Option<Tokens>| t.map_or_else(|| "none".to_string(), |t| t.to_string());
                format!(
                    "; now balance {}, daily {}, monthly {}, cap {}, floor {}, user limit {}",
                    row.balance,
                    row.daily,
                    row.monthly,
                    or_none(row.cap),
                    row.floor,
                    or_none(row.user_limit)
                )
            }
            _ => String::new(),
        },
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::entry::{Entry, EntryKind};

    fn recorded(holders: &[(&str, &str)]) -> Reply {
        let entries = holders
            .iter()
            .enumerate()
            .map(|(i, (user, after))| Entry {
                id: i as i64,
                user: user.to_string(),
                at: 0,
                kind: EntryKind::Grant,
                amount: Tokens::whole(1),
                balance_after: after.parse().unwrap(),
                actor: "root".into(),
                reason: "r".into(),
                job_id: None,
                key: None,
                gpu_type: None,
                gpu_seconds: None,
            })
            .collect();
        Reply::Recorded { entries, replayed: false }
    }

    #[test]
    fn a_grant_reads_as_a_sentence_in_tokens() {
        let grant = Request::Grant {
            user: "alice".into(),
            amount: Tokens::whole(10),
            reason: "welcome".into(),
            key: Some("w1".into()),
            expires: None,
        };
        let line = Action::of(&grant).unwrap().line("root", &recorded(&[("alice", "26")]));
        assert_eq!(line, "root granted alice +10 (welcome) key=w1; balance now 26");
    }

    #[test]
    fn every_changing_request_has_its_words() {
        let amount: Tokens = "-56.4".parse().unwrap();
        let cases = [
            (
                Request::Adjust { user: "alice".into(), amount, reason: "overspent".into(), key: None },
                recorded(&[("alice", "-5.4")]),
                "root adjusted alice -56.4 (overspent); balance now -5.4",
            ),
            (
                Request::Refund { job_id: "14".into(), reason: "node died".into() },
                recorded(&[("bob", "90.5")]),
                "root refunded job 14 (node died); balance now 90.5",
            ),
            (
                Request::Import { balances: [("a".into(), Tokens::whole(1))].into_iter().collect() },
                Reply::Imported { imported: 1, already: 0 },
                "root imported the balances of 1 user: 1 new, 0 there before",
            ),
            (
                Request::PoolSet {
                    account: "lab".into(),
                    create: false,
                    rules: PoolRules { monthly: Some(Tokens::whole(40)), no_cap: true, ..Default::default() },
                    key: None,
                },
                Reply::Error { kind: gputokens::protocol::ErrorKind::Internal, message: String::new() },
                "root changed the rules of account lab's pool (monthly 40, no cap)",
            ),
            (
                Request::PoolImport { pools: [("lab".to_string(), PoolRules::default())].into_iter().collect() },
                Reply::PoolsImported { created: vec!["lab".into()], already: 2 },
                "root imported 1 pool: created lab; 2 there before",
            ),
            (
                Request::PoolGrant {
                    account: "lab".into(),
                    amount: "0.5".parse().unwrap(),
                    reason: "course".into(),
                    key: None,
                    adjust: false,
                    expires: None,
                },
                recorded(&[(gputokens::pools::holder("lab").as_str(), "70.5")]),
                "root granted account lab +0.5 (course); balance now 70.5",
            ),
            (
                Request::Transfer {
                    from: "lab".into(),
                    to: "course".into(),
                    amount: Tokens::whole(20),
                    reason: "term".into(),
                    key: Some("t1".into()),
                },
                recorded(&[
                    (gputokens::pools::holder("lab").as_str(), "50"),
                    (gputokens::pools::holder("course").as_str(), "20"),
                ]),
                "root moved 20 from account lab to account course (term) key=t1; balances now: account lab 50, \
                 account course 20",
            ),
        ];
        for (request, reply, expected) in cases {
            assert_eq!(Action::of(&request).unwrap().line("root", &reply), expected);
        }
        assert!(Action::of(&Request::Balances { users: vec![], all: true }).is_none(), "a read is no action");
    }

    #[test]
    fn reasons_cannot_break_the_line() {
        let adjust = Request::Adjust {
            user: "bob".into(),
            amount: Tokens::whole(-1),
            reason: "a\nroot granted".into(),
            key: None,
        };
        let line = Action::of(&adjust).unwrap().line("root", &Reply::Imported { imported: 0, already: 0 });
        assert!(!line.contains('\n'), "{line}");
    }
}
