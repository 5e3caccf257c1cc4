//! The one JSON shape of a balance, schema 1: what `sbalance --json`, `/v1/balances` and the
//! status page's `/web/api/me` give for a user, all from [`BalanceJson`] so they cannot drift.
//! Amounts are exact decimal strings (`"-10.4"`: gputokens keeps micro-tokens exactly, a float
//! would not); instants are RFC 3339 with their offset, unix seconds beside; days are `YYYY-MM-DD`.
//! A ledger entry likewise has one shape, [`EntryJson`], in `sbalance --history --json` and
//! `accountd admin history --json`; an action one, [`ActionJson`]. docs/operation.md (JSON shapes) documents every field.

use std::collections::BTreeMap;

use gputokens::decision::codes::{replenished_at, Code, ANY_TYPE, REPLENISHED_WITHIN};
use gputokens::entry::{Action, Entry, EntryKind};
use gputokens::policy::Status;
use gputokens::protocol::{BalanceRow, PoolBalance};
use gputokens::time::format_rfc3339;
use gputokens::Tokens;
use serde::{Deserialize, Serialize};

/// The version of these shapes, the `schema` field of every response that carries them. A field
/// added keeps it; one renamed, removed or changed in meaning raises it.
pub const SCHEMA: u32 = 1;

/// One user's balance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalanceJson {
    pub user: String,
    /// false: not in the ledger yet; the row shows what the user would start with.
    pub in_ledger: bool,
    pub balance: Tokens,
    pub floor: Tokens,
    pub status: Status,
    /// What the status means for the user's GPU jobs, a sentence (sbatch's line has the same words).
    pub explanation: String,
    /// Tokens charged per GPU type over today and the 29 days before.
    pub used_30d: BTreeMap<String, Tokens>,
    /// The next replenishment, or null when none comes (no daily or monthly grant, or at the cap).
    pub next_grant: Option<NextGrant>,
    /// In debt: the day replenishment alone ends it, or null.
    pub recovers: Option<String>,
    /// The soonest-ending grant with tokens left, within `[notify] expiry_warning`, or null.
    pub expiring: Option<ExpiringJson>,
    /// With account pools: the pool of the user's default account, or null.
    pub default_pool: Option<PoolBalance>,
    /// What the job_submit plugin's balance rule makes of the user's GPU jobs now, with the code and
    /// `retry_after` its messages end with (docs/workflows.md).
    pub admission: AdmissionJson,
    /// `[lending]`: the user's borrowed runs of the last week (left out where there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub borrowed: Vec<gputokens::protocol::BorrowedRunRow>,
}

/// The balance rule's verdict on a GPU job, for programs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionJson {
    /// `ok` (accepted untouched), `overdraft` (accepted with lower priority) or `floor` (refused).
    pub code: String,
    /// Seconds until replenishment alone ends it, per GPU type (`*`: every type); empty for `ok`,
    /// or where nothing is ever replenished.
    pub retry_after: BTreeMap<String, u64>,
    /// That instant, RFC 3339 with the local offset; null when none.
    pub retry_at: Option<String>,
}

impl AdmissionJson {
    fn of(row: &BalanceRow, now: i64) -> AdmissionJson {
        let code = match row.status {
            Status::Ok => "ok",
            Status::Overdraft => Code::Overdraft.as_str(),
            Status::Blocked => Code::Floor.as_str(),
        };
        let day = row.recovers.as_deref().and_then(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
        let at = day.filter(|_| row.status != Status::Ok).map(|d| replenished_at(d, REPLENISHED_WITHIN));
        AdmissionJson {
            code: code.to_string(),
            retry_after: at.map(|at| (ANY_TYPE.to_string(), (at - now).max(0) as u64)).into_iter().collect(),
            retry_at: at.map(format_rfc3339),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextGrant {
    /// Local day, `YYYY-MM-DD`.
    pub date: String,
    pub amount: Tokens,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpiringJson {
    /// What is left of the grant, and expires then.
    pub tokens: Tokens,
    /// RFC 3339 with the local offset.
    pub at: String,
    pub at_unix: i64,
}

impl From<&BalanceRow> for BalanceJson {
    fn from(row: &BalanceRow) -> BalanceJson {
        BalanceJson::at(row, gputokens::time::now())
    }
}

impl BalanceJson {
    /// The row as it stands at `now` (unix seconds), which `admission.retry_after` counts from.
    pub fn at(row: &BalanceRow, now: i64) -> BalanceJson {
        BalanceJson {
            user: row.user.clone(),
            in_ledger: row.in_ledger,
            balance: row.balance,
            floor: row.floor,
            status: row.status,
            explanation: format!("{}.", row.status.explanation(row.floor)),
            used_30d: row.used_30d.clone(),
            next_grant: row.next_grant.as_ref().map(|(date, amount)| NextGrant { date: date.clone(), amount: *amount }),
            recovers: row.recovers.clone(),
            expiring: row.expiring.as_ref().map(|e| {
                // An accountd older than `ends` sent local text only: read it back as local time.
                let at_unix = if e.ends != 0 { e.ends } else { gputokens::time::parse_timestamp(&e.at).unwrap_or(0) };
                ExpiringJson { tokens: e.tokens, at: format_rfc3339(at_unix), at_unix }
            }),
            default_pool: row.default_pool.clone(),
            admission: AdmissionJson::of(row, now),
            borrowed: row.borrowed.clone(),
        }
    }
}

/// `{"schema": 1, "users": [...]}`: the answer of `sbalance --json` and `/v1/balances`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Balances {
    pub schema: u32,
    pub users: Vec<BalanceJson>,
}

impl Balances {
    pub fn of(rows: &[BalanceRow]) -> Balances {
        Balances::at(rows, gputokens::time::now())
    }

    pub fn at(rows: &[BalanceRow], now: i64) -> Balances {
        Balances { schema: SCHEMA, users: rows.iter().map(|row| BalanceJson::at(row, now)).collect() }
    }
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryJson {
    pub id: i64,
    pub user: String,
    /// RFC 3339 with the local offset.
    pub at: String,
    pub at_unix: i64,
    pub kind: EntryKind,
    /// Signed: a charge is negative.
    pub amount: Tokens,
    pub balance_after: Tokens,
    /// Who made it: an admin's name, or `gputokens` for what accountd does itself.
    pub actor: String,
    pub reason: String,
    /// A charge's or refund's job, else null.
    pub job_id: Option<String>,
}

impl From<&Entry> for EntryJson {
    fn from(e: &Entry) -> EntryJson {
        EntryJson {
            id: e.id,
            user: e.user.clone(),
            at: format_rfc3339(e.at),
            at_unix: e.at,
            kind: e.kind,
            amount: e.amount,
            balance_after: e.balance_after,
            actor: e.actor.clone(),
            reason: e.reason.clone(),
            job_id: e.job_id.clone(),
        }
    }
}

/// `{"schema": 1, "user": ..., "entries": [...]}`: one user's entries, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub schema: u32,
    pub user: String,
    pub entries: Vec<EntryJson>,
}

impl History {
    pub fn of(user: &str, entries: &[Entry]) -> History {
        History { schema: SCHEMA, user: user.to_string(), entries: entries.iter().map(EntryJson::from).collect() }
    }
}

/// One preemption, requeue or drain (`accountd admin actions --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionJson {
    /// RFC 3339 with the local offset.
    pub at: String,
    pub at_unix: i64,
    pub action: String,
    /// The job or node acted on.
    pub target: String,
    pub user: String,
    pub reason: String,
    /// Logged only, not done (`[preemption] dry_run`).
    pub dry_run: bool,
}

/// `{"schema": 1, "actions": [...]}`, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Actions {
    pub schema: u32,
    pub actions: Vec<ActionJson>,
}

impl Actions {
    pub fn of(actions: &[Action]) -> Actions {
        let actions = actions
            .iter()
            .map(|a| ActionJson {
                at: format_rfc3339(a.at),
                at_unix: a.at,
                action: a.action.clone(),
                target: a.target.clone(),
                user: a.user.clone(),
                reason: a.reason.clone(),
                dry_run: a.dry_run,
            })
            .collect();
        Actions { schema: SCHEMA, actions }
    }
}

/// Pretty JSON with a final newline, as the commands print it.
pub fn pretty<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).map(|text| text + "\n").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::protocol::Expiring;
    use gputokens::time::local_midnight;
    use serde_json::json;

    fn row() -> BalanceRow {
        BalanceRow {
            user: "alice".into(),
            balance: "-5.4".parse().unwrap(),
            floor: Tokens::whole(-10),
            status: Status::Overdraft,
            used_30d: [("a6000".to_string(), "122.222223".parse().unwrap())].into_iter().collect(),
            next_grant: Some(("2026-11-28".into(), Tokens::whole(1))),
            recovers: Some("2026-12-03".into()),
            in_ledger: true,
            default_pool: None,
            expiring: Some(Expiring { tokens: Tokens::whole(42), at: "ignored".into(), ends: 1_795_000_000 }),
            borrowed: Vec::new(),
        }
    }

    #[test]
    fn a_balance_is_exact_strings_with_every_field_and_the_schema() {
        // Noon on 2026-12-01: back at 0 by replenishment on the 3rd, counted 31 min after midnight.
        let now = local_midnight(chrono::NaiveDate::from_ymd_opt(2026, 12, 1).unwrap()) + 12 * 3600;
        let value = serde_json::to_value(Balances::at(&[row()], now)).unwrap();
        let at = format_rfc3339(1_795_000_000);
        let retry_at = format_rfc3339(now + 36 * 3600 + 1860);
        assert_eq!(
            value,
            json!({ "schema": 1, "users": [{
                "user": "alice", "in_ledger": true, "balance": "-5.4", "floor": "-10", "status": "overdraft",
                "explanation": format!("{}.", Status::Overdraft.explanation(Tokens::whole(-10))),
                "used_30d": { "a6000": "122.222223" },
                "next_grant": { "date": "2026-11-28", "amount": "1" },
                "recovers": "2026-12-03",
                "expiring": { "tokens": "42", "at": at, "at_unix": 1_795_000_000 },
                "default_pool": null,
                "admission": { "code": "overdraft", "retry_after": { "*": 131_460 }, "retry_at": retry_at },
            }]})
        );
        // The instant with its offset: the same second read anywhere.
        assert_eq!(gputokens::time::parse_timestamp(&at), Some(1_795_000_000), "{at}");
        assert_eq!(at.len(), "2026-11-18T07:06:40+00:00".len(), "{at}");
    }

    #[test]
    fn absent_parts_are_null_never_missing() {
        let mut bare = row();
        (bare.next_grant, bare.recovers, bare.expiring) = (None, None, None);
        let value = serde_json::to_value(BalanceJson::from(&bare)).unwrap();
        for key in ["next_grant", "recovers", "expiring", "default_pool"] {
            assert_eq!(value.get(key), Some(&serde_json::Value::Null), "{key}: {value}");
        }
        // And it reads back as the type: a consumer may parse it strictly.
        assert_eq!(serde_json::from_value::<BalanceJson>(value).unwrap(), BalanceJson::from(&bare));
    }

    /// The balance rule's code as the plugin's message tail gives it: nothing to wait for when fine,
    /// `floor` until the recovery day's replenishment, never a wait in the past.
    #[test]
    fn admission_names_the_code_and_when_replenishment_ends_it() {
        let now = local_midnight(chrono::NaiveDate::from_ymd_opt(2026, 12, 2).unwrap()) + 3600;
        let fine = BalanceRow { status: Status::Ok, recovers: None, ..row() };
        let json = BalanceJson::at(&fine, now).admission;
        assert_eq!((json.code.as_str(), json.retry_after.len(), json.retry_at), ("ok", 0, None));
        let blocked = BalanceRow { status: Status::Blocked, ..row() };
        let json = BalanceJson::at(&blocked, now).admission;
        assert_eq!(json.code, "floor");
        assert_eq!(json.retry_after, BTreeMap::from([("*".to_string(), 23 * 3600 + 1860)]));
        let late = BalanceJson::at(&blocked, now + 2 * 86_400).admission;
        assert_eq!(late.retry_after["*"], 0, "a recovery day past (an old row): now");
        let never = BalanceRow { recovers: None, ..blocked };
        assert!(BalanceJson::at(&never, now).admission.retry_after.is_empty(), "no replenishment: no retry");
    }

    #[test]
    fn an_older_accountd_s_local_end_is_read_back() {
        let mut old = row();
        let local = gputokens::time::format_local(1_795_000_000);
        old.expiring = Some(Expiring { tokens: Tokens::whole(1), at: local, ends: 0 });
        assert_eq!(BalanceJson::from(&old).expiring.unwrap().at_unix, 1_795_000_000);
    }

    #[test]
    fn an_entry_has_its_instant_twice() {
        let entry = Entry {
            id: 7,
            user: "alice".into(),
            at: 1_795_000_000,
            kind: EntryKind::Charge,
            amount: "-0.5".parse().unwrap(),
            balance_after: "99.5".parse().unwrap(),
            actor: "gputokens".into(),
            reason: "job 12".into(),
            job_id: Some("12".into()),
            key: None,
            gpu_type: Some("rtx2080".into()),
            gpu_seconds: Some(3600),
        };
        let value = serde_json::to_value(History::of("alice", &[entry])).unwrap();
        assert_eq!(value["schema"], 1);
        let e = &value["entries"][0];
        assert_eq!(
            (e["amount"].as_str(), e["balance_after"].as_str(), e["kind"].as_str()),
            (Some("-0.5"), Some("99.5"), Some("charge"))
        );
        assert_eq!(
            (e["at"].as_str(), e["at_unix"].as_i64()),
            (Some(format_rfc3339(1_795_000_000).as_str()), Some(1_795_000_000))
        );
        assert!(e.get("gpu_type").is_none(), "what the wire never carried stays out: {e}");
    }

    #[test]
    fn an_action_has_its_instant_twice_too() {
        let action = Action {
            at: 1_795_000_000,
            action: "requeue".into(),
            target: "812".into(),
            user: "bob".into(),
            reason: "overdraft; carol waits for a6000".into(),
            dry_run: true,
        };
        let value = serde_json::to_value(Actions::of(&[action])).unwrap();
        assert_eq!(
            value,
            json!({ "schema": 1, "actions": [{ "at": format_rfc3339(1_795_000_000), "at_unix": 1_795_000_000,
                    "action": "requeue", "target": "812", "user": "bob", "reason": "overdraft; carol waits for a6000",
                    "dry_run": true }] })
        );
    }
}
