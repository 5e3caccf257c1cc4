//! One JSON shape per thing: a user's balance read through `sbalance --json` (as that user),
//! `/v1/balances` (the admin token) and the status page's `/web/api/me` (behind the trusted proxy)
//! is the same object, field for field; a ledger entry is the same in `sbalance --history --json`
//! and `accountd admin history --json`.

use crate::common::Site;
use crate::status_page::{get_with, proxy_settings, PROXY_SECRET};

/// Every field of a balance (schema 1), as docs/operation.md (JSON shapes) documents them.
const BALANCE_FIELDS: [&str; 12] = [
    "user",
    "in_ledger",
    "balance",
    "floor",
    "status",
    "explanation",
    "used_30d",
    "next_grant",
    "recovers",
    "expiring",
    "default_pool",
    "admission",
];

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The one row of `users` in a `{"schema": 1, "users": [...]}` answer.
fn only_row(answer: &serde_json::Value) -> serde_json::Value {
    assert_eq!(answer["schema"], 1, "{answer}");
    let users = answer["users"].as_array().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(users.len(), 1, "{answer}");
    users[0].clone()
}

#[test]
fn a_balance_is_one_object_in_sbalance_the_json_api_and_the_status_page() {
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), "admin-s3cret\n").unwrap();
    let (web, _secret) = proxy_settings();
    let site = Site::start(
        "",
        &format!(
            "[http]\nlisten = \"127.0.0.1:0\"\nadmin_token_file = \"{}\"\n[web]\nallow_http = true\n{web}\
             [notify]\nexpiry_warning = \"1d\"\n",
            token_file.path().display()
        ),
    );
    // alice: charged 12.5 on two GPU types, with a grant ending within the warning; bob in overdraft.
    let start = gputokens::time::now() - 7200;
    let sacct = site.file(
        "sacct.txt",
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n\
             1|alice|gres/gpu:a6000=1,gres/gpu=1|10800|{start}|COMPLETED\n\
             2|alice|gres/gpu:rtx2080=1,gres/gpu=1|1800|{start}|COMPLETED\n"
        ),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    site.accountd(None, &["admin", "grant", "alice", "7.25", "--reason", "course", "--expires", "2h"]).ok();
    site.accountd(None, &["admin", "adjust", "bob", "-104.5", "--reason", "test: overdraft"]).ok();

    let base = site.http_url();
    for (user, balance) in [("alice", "95"), ("bob", "-4.5")] {
        let mut from_sbalance = only_row(&json(&site.sbalance(Some(user), &["--json"]).ok().stdout));
        let (status, body) = get_with(
            "127.0.0.1",
            &format!("{base}/v1/balances/{user}"),
            &[("Authorization", "Bearer admin-s3cret".into())],
        );
        assert_eq!(status, 200, "{body}");
        let mut from_api = only_row(&json(&body));
        let proxied = [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
        let (status, body) = get_with("127.0.0.2", &format!("{base}/web/api/me"), &proxied);
        assert_eq!(status, 200, "{body}");
        let mut page = json(&body);
        assert_eq!(page["schema"], 1, "{page}");
        // The seconds to wait count from when, and by whose clock, each was asked (sbalance's own,
        // which a dated run does not fake for a user's process): `retry_at`, the instant, is one.
        let retry = |row: &mut serde_json::Value| row["admission"]["retry_after"].take();
        let waits = [retry(&mut from_sbalance), retry(&mut from_api), retry(&mut page)];
        let any = |w: &serde_json::Value| w.get("*").and_then(serde_json::Value::as_u64);
        match (user, waits.each_ref().map(any)) {
            ("alice", [None, None, None]) => assert!(waits.iter().all(|w| w == &serde_json::json!({})), "{waits:?}"),
            ("bob", [Some(_), Some(b), Some(c)]) => assert!(b.abs_diff(c) <= 2, "{waits:?}"),
            _ => panic!("{user}: {waits:?}"),
        }
        let code = if user == "alice" { "ok" } else { "overdraft" };
        assert_eq!(from_sbalance["admission"]["code"], code, "{from_sbalance}");

        let fields: Vec<&str> = from_sbalance.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = BALANCE_FIELDS.to_vec();
        expected.sort();
        assert_eq!(fields, expected, "every field, no other: {from_sbalance}");
        assert_eq!(from_api, from_sbalance, "/v1/balances and sbalance --json");
        for field in BALANCE_FIELDS {
            assert_eq!(page[field], from_sbalance[field], "{user}'s {field} on the status page: {page}");
        }
        // Amounts are exact decimal strings, never floats.
        assert_eq!((from_sbalance["balance"].as_str(), from_sbalance["floor"].as_str()), (Some(balance), Some("-10")));
        assert!(from_sbalance["next_grant"]["amount"].is_string(), "{from_sbalance}");
    }

    let alice = only_row(&json(&site.sbalance(Some("alice"), &["--json"]).ok().stdout));
    assert_eq!(alice["used_30d"], serde_json::json!({ "a6000": "12", "rtx2080": "0.25" }), "{alice}");
    let expiring = &alice["expiring"];
    assert_eq!(expiring["tokens"], "7.25", "{alice}");
    // The instant with its offset, and the same in unix seconds.
    let at = expiring["at"].as_str().unwrap();
    let ends = expiring["at_unix"].as_i64().unwrap();
    assert_eq!(chrono::DateTime::parse_from_rfc3339(at).map(|t| t.timestamp()), Ok(ends), "{alice}");
    assert!((ends - gputokens::time::now() - 7200).abs() < 60, "ends in 2 h: {alice}");
    assert!(alice["recovers"].is_null(), "{alice}");
    let bob = only_row(&json(&site.sbalance(Some("bob"), &["--json"]).ok().stdout));
    assert_eq!((bob["status"].as_str(), bob["expiring"].is_null()), (Some("overdraft"), true), "{bob}");
    assert!(bob["recovers"].as_str().is_some_and(|d| d.len() == 10), "a day: {bob}");
}

#[test]
fn an_entry_is_one_object_in_sbalance_history_and_admin_history() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "alice", "0.5", "--reason", "welcome", "--key", "w1"]).ok();
    site.accountd(None, &["admin", "adjust", "alice", "-1.25", "--reason", "test: fix"]).ok();
    let own = json(&site.sbalance(Some("alice"), &["--history", "--json"]).ok().stdout);
    let admin = json(&site.accountd(None, &["admin", "history", "alice", "--json"]).ok().stdout);
    assert_eq!(own, admin, "the same entries, the same shape");
    assert_eq!((own["schema"].as_i64(), own["user"].as_str()), (Some(1), Some("alice")), "{own}");
    let entries = own["entries"].as_array().unwrap();
    let amounts: Vec<(&str, &str)> =
        entries.iter().map(|e| (e["amount"].as_str().unwrap(), e["balance_after"].as_str().unwrap())).collect();
    assert_eq!(amounts, [("100", "100"), ("0.5", "100.5"), ("-1.25", "99.25")], "the initial balance first: {own}");
    for e in entries {
        let at = e["at"].as_str().unwrap_or_else(|| panic!("{e}"));
        let at_unix = e["at_unix"].as_i64().unwrap();
        assert_eq!(chrono::DateTime::parse_from_rfc3339(at).map(|t| t.timestamp()), Ok(at_unix), "{e}");
    }
}
