use super::*;
use crate::time::parse_timestamp;

fn at(local: &str) -> i64 {
    parse_timestamp(local).unwrap()
}

fn month(text: &str) -> Month {
    text.parse().unwrap()
}

fn entry(kind: EntryKind, amount: Tokens, when: &str) -> Entry {
    Entry {
        id: 1,
        // The builder is of one user and reads neither the entry's user nor its balance after.
        user: String::new(),
        kind,
        amount,
        balance_after: Tokens::ZERO,
        at: at(when),
        actor: "gputokens".into(),
        reason: String::new(),
        key: None,
        job_id: None,
        gpu_type: None,
        gpu_seconds: None,
    }
}

fn by(actor: &str, reason: &str, mut e: Entry) -> Entry {
    e.actor = actor.into();
    e.reason = reason.into();
    e
}

fn charge(gpu_type: &str, tokens: &str, gpu_seconds: u64, when: &str) -> Entry {
    Entry {
        gpu_type: Some(gpu_type.into()),
        gpu_seconds: Some(gpu_seconds),
        job_id: Some("7".into()),
        ..entry(EntryKind::Charge, -tokens.parse::<Tokens>().unwrap(), when)
    }
}

fn initial(user: &str, when: &str) -> Entry {
    Entry { key: Some(initial_key(user)), ..entry(EntryKind::Grant, Tokens::whole(100), when) }
}

fn build(
    user: &str,
    m: &str,
    opening: Tokens,
    entries: &[Entry],
    closing: Tokens,
) -> Result<Statement, StatementError> {
    let mut builder = StatementBuilder::new(user, month(m), opening);
    for e in entries {
        builder.add(e)?;
    }
    builder.finish(closing, at("2027-01-15T12:00:00"), false)
}

/// (item, amount) of each line, the way a reader checks a statement.
fn items(s: &Statement) -> Vec<(Item, String)> {
    s.lines.iter().map(|l| (l.item, l.amount.to_string())).collect()
}

/// The seed's worked example: first seen the evening before the 1st, the monthly 30 at midnight,
/// then 8 × rtx2080 × 5 h, 4 × rtx3090 × 10 h and 2 × a6000 × 3 h.
#[test]
fn worked_example_adds_up_to_46_line_by_line() {
    let november =
        build("alice", "2026-11", Tokens::ZERO, &[initial("alice", "2026-11-30T20:00:00")], Tokens::whole(100))
            .unwrap();
    assert_eq!(items(&november), [(Item::Initial, "100".into())]);
    assert_eq!(november.lines[0].date, NaiveDate::from_ymd_opt(2026, 11, 30));

    let december = build(
        "alice",
        "2026-12",
        november.closing,
        &[
            entry(EntryKind::Monthly, Tokens::whole(30), "2026-12-01T00:00:00"),
            charge("rtx2080", "20", 8 * 5 * 3600, "2026-12-01T20:00:00"),
            charge("rtx3090", "40", 4 * 10 * 3600, "2026-12-01T20:00:00"),
            charge("a6000", "24", 2 * 3 * 3600, "2026-12-01T20:00:00"),
        ],
        Tokens::whole(46),
    )
    .unwrap();
    assert_eq!(december.opening, Tokens::whole(100));
    assert_eq!(
        items(&december),
        [
            (Item::Monthly, "30".into()),
            (Item::Charge, "-20".into()),
            (Item::Charge, "-40".into()),
            (Item::Charge, "-24".into())
        ]
    );
    let hours: Vec<(Option<&str>, String)> =
        december.lines[1..].iter().map(|l| (l.gpu_type.as_deref(), gpu_hours(l.gpu_seconds.unwrap()))).collect();
    assert_eq!(hours, [(Some("rtx2080"), "40".into()), (Some("rtx3090"), "40".into()), (Some("a6000"), "6".into())]);
    assert_eq!(december.closing, Tokens::whole(46));
}

/// A running job is charged every cycle: its charges of the month are one line per GPU type, in
/// the order the types were first charged, with the GPU-seconds summed.
#[test]
fn charges_sum_per_gpu_type_in_the_order_first_charged() {
    let s = build(
        "bob",
        "2026-11",
        Tokens::whole(10),
        &[
            charge("rtx3090", "0.5", 1800, "2026-11-03T10:00:00"),
            charge("a6000", "4", 3600, "2026-11-03T10:00:00"),
            charge("rtx3090", "0.25", 900, "2026-11-03T11:00:00"),
            charge("rtx3090", "0.000001", 1, "2026-11-04T11:00:00"),
        ],
        "5.249999".parse().unwrap(),
    )
    .unwrap();
    assert_eq!(items(&s), [(Item::Charge, "-0.750001".into()), (Item::Charge, "-4".into())]);
    assert_eq!(s.lines[0].gpu_seconds, Some(2701));
    assert_eq!(gpu_hours(2701), "0.75");
    assert_eq!(s.lines[0].date, None);
}

/// A job cancelled before it ran is charged nothing for no time: no line. GPU time at a price of 0
/// is still stated.
#[test]
fn charges_of_nothing_are_left_out() {
    let s = build(
        "bob",
        "2026-11",
        Tokens::whole(10),
        &[charge("a6000", "0", 0, "2026-11-03T10:00:00"), charge("free", "0", 3600, "2026-11-03T10:00:00")],
        Tokens::whole(10),
    )
    .unwrap();
    assert_eq!(items(&s), [(Item::Charge, "0".into())]);
    assert_eq!(s.lines[0].gpu_type.as_deref(), Some("free"));
}

#[test]
fn daily_replenishment_is_one_line_with_its_days() {
    let mut entries: Vec<Entry> = (1..=30)
        .map(|day| entry(EntryKind::Replenish, Tokens::whole(1), &format!("2026-11-{day:02}T00:00:00")))
        .collect();
    // A day the cap held back is recorded at 0 and still counts as replenished.
    entries[29].amount = Tokens::ZERO;
    entries.insert(0, entry(EntryKind::Monthly, Tokens::whole(30), "2026-11-01T00:00:00"));
    let s = build("alice", "2026-11", Tokens::whole(50), &entries, Tokens::whole(109)).unwrap();
    assert_eq!(items(&s), [(Item::Monthly, "30".into()), (Item::Daily, "29".into())]);
    assert_eq!(s.lines[1].days, Some(30));
}

/// What people did is listed entry by entry, with date, actor and reason; the initial balance is
/// told from an admin's grant by its key.
#[test]
fn grants_adjustments_and_refunds_are_lines_of_their_own() {
    let refund = Entry {
        job_id: Some("12".into()),
        ..by("root", "node failure", entry(EntryKind::Refund, Tokens::whole(3), "2026-11-07T09:30:00"))
    };
    let s = build(
        "alice",
        "2026-11",
        Tokens::ZERO,
        &[
            initial("alice", "2026-11-02T08:00:00"),
            by("root", "course credit", entry(EntryKind::Grant, Tokens::whole(5), "2026-11-05T10:00:00")),
            charge("a6000", "8", 7200, "2026-11-06T10:00:00"),
            refund,
            by("carol", "manual fix", entry(EntryKind::Adjust, "-1.5".parse().unwrap(), "2026-11-08T10:00:00")),
            // Someone else's initial key is no initial balance of alice's.
            Entry {
                key: Some(initial_key("bob")),
                ..by("root", "x", entry(EntryKind::Grant, Tokens::whole(1), "2026-11-09T10:00:00"))
            },
        ],
        "99.5".parse().unwrap(),
    )
    .unwrap();
    let lines: Vec<String> = s.lines.iter().map(described).collect();
    assert_eq!(
        lines,
        [
            "initial 100 2026-11-02 gputokens: ",
            "grant 5 2026-11-05 root: course credit",
            "refund 3 2026-11-07 root: node failure",
            "adjust -1.5 2026-11-08 carol: manual fix",
            "grant 1 2026-11-09 root: x",
            "charge -8 - -: ",
        ]
    );
    assert_eq!(s.lines[2].job_id.as_deref(), Some("12"));
}

/// `item amount date actor: reason`, `-` for what a line has not.
fn described(l: &Line) -> String {
    let date = l.date.map(|d| d.to_string()).unwrap_or_else(|| "-".into());
    let (actor, reason) = (l.actor.as_deref().unwrap_or("-"), l.reason.as_deref().unwrap_or(""));
    format!("{} {} {date} {actor}: {reason}", l.item.as_str(), l.amount)
}

#[test]
fn an_import_is_a_line() {
    let import = by("root", "imported", entry(EntryKind::Import, "87.5".parse().unwrap(), "2026-11-02T08:00:00"));
    let s = build("dan", "2026-11", Tokens::ZERO, &[import], "87.5".parse().unwrap()).unwrap();
    assert_eq!(items(&s), [(Item::Import, "87.5".into())]);
}

/// A statement that does not add up to the ledger's closing balance is never shown, even off by one
/// micro-token.
#[test]
fn a_statement_that_does_not_add_up_is_refused() {
    let entries = [charge("a6000", "4", 3600, "2026-11-03T10:00:00")];
    let err = build("alice", "2026-11", Tokens::whole(10), &entries, Tokens::from_micro(6_000_001)).unwrap_err();
    assert_eq!(
        err,
        StatementError::Unbalanced {
            user: "alice".into(),
            month: month("2026-11"),
            opening: Tokens::whole(10),
            lines: Tokens::whole(-4),
            closing: Tokens::from_micro(6_000_001),
        }
    );
    assert!(err.to_string().contains("does not add up"), "{err}");
    assert!(build("alice", "2026-11", Tokens::whole(10), &entries, Tokens::whole(6)).is_ok());
}

#[test]
fn an_entry_of_another_month_is_refused() {
    let entries = [entry(EntryKind::Replenish, Tokens::whole(1), "2026-12-01T00:00:00")];
    let err = build("alice", "2026-11", Tokens::ZERO, &entries, Tokens::whole(1)).unwrap_err();
    assert!(matches!(err, StatementError::OutsideMonth { date, .. } if date.to_string() == "2026-12-01"), "{err:?}");
}

#[test]
fn sums_beyond_64_bits_are_refused_not_saturated() {
    let big = Tokens::from_micro(i64::MAX - 5);
    let entries = [
        by("root", "x", entry(EntryKind::Grant, big, "2026-11-02T08:00:00")),
        entry(EntryKind::Grant, big, "2026-11-03T08:00:00"),
    ];
    let err = build("alice", "2026-11", Tokens::ZERO, &entries, Tokens::MAX).unwrap_err();
    assert!(matches!(err, StatementError::OutOfRange { .. }), "{err:?}");
    let days = [
        entry(EntryKind::Replenish, big, "2026-11-02T00:00:00"),
        entry(EntryKind::Replenish, big, "2026-11-03T00:00:00"),
    ];
    assert!(matches!(build("a", "2026-11", Tokens::ZERO, &days, Tokens::MAX), Err(StatementError::OutOfRange { .. })));
}

#[test]
fn gpu_hours_round_to_hundredths() {
    for (seconds, text) in
        [(0, "0"), (1, "0"), (18, "0.01"), (36, "0.01"), (1800, "0.5"), (3600, "1"), (144_000, "40"), (5 * 36, "0.05")]
    {
        assert_eq!(gpu_hours(seconds), text, "{seconds}");
    }
    // No overflow at the top: u64::MAX seconds are 5124095576030431.004 hours.
    assert_eq!(gpu_hours(u64::MAX), "5124095576030431");
}

#[test]
fn travels_as_json_with_exact_amounts() {
    let s = build("alice", "2026-11", Tokens::ZERO, &[initial("alice", "2026-11-30T20:00:00")], Tokens::whole(100))
        .unwrap();
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains(r#""month":"2026-11""#) && text.contains(r#""opening":"0""#), "{text}");
    assert!(text.contains(r#""item":"initial","amount":"100","date":"2026-11-30""#), "{text}");
    assert_eq!(serde_json::from_str::<Statement>(&text).unwrap(), s);
}

#[test]
fn kwh_round_to_the_watt_hour() {
    for (joules, text) in
        [(0, "0"), (1799, "0"), (1800, "0.001"), (3_600_000, "1"), (4_500_000, "1.25"), (18_500, "0.005")]
    {
        assert_eq!(kwh(joules), text, "{joules}");
    }
    assert_eq!(kwh(u64::MAX), "5124095576030.431");
}
