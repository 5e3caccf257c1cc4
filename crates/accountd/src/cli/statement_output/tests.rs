use super::*;
use gputokens::entry::{Entry, EntryKind};
use gputokens::statement::StatementBuilder;
use gputokens::time::parse_timestamp;
use gputokens::Tokens;

fn entry(kind: EntryKind, amount: &str, when: &str) -> Entry {
    Entry {
        id: 1,
        // The builder is of one user and reads neither the entry's user nor its balance after.
        user: String::new(),
        kind,
        amount: amount.parse().unwrap(),
        balance_after: Tokens::ZERO,
        at: parse_timestamp(when).unwrap(),
        actor: "gputokens".into(),
        reason: String::new(),
        key: None,
        job_id: None,
        gpu_type: None,
        gpu_seconds: None,
    }
}

fn charge(gpu_type: &str, amount: &str, gpu_seconds: u64) -> Entry {
    Entry {
        gpu_type: Some(gpu_type.into()),
        gpu_seconds: Some(gpu_seconds),
        ..entry(EntryKind::Charge, amount, "2026-12-01T20:00:00")
    }
}

/// The seed's worked example for December, and `extra` entries after it.
fn worked_example(user: &str, extra: &[Entry], closing: &str, partial: bool) -> Statement {
    let mut builder = StatementBuilder::new(user, "2026-12".parse().unwrap(), Tokens::whole(100));
    let entries = [
        entry(EntryKind::Monthly, "30", "2026-12-01T00:00:00"),
        charge("rtx2080", "-20", 144_000),
        charge("rtx3090", "-40", 144_000),
        charge("a6000", "-24", 21_600),
    ];
    for e in entries.iter().chain(extra) {
        builder.add(e).unwrap();
    }
    builder.finish(closing.parse().unwrap(), parse_timestamp("2026-12-14T10:22:03").unwrap(), partial).unwrap()
}

#[test]
fn text_reads_line_by_line() {
    let s = worked_example("alice", &[], "46", false);
    assert_eq!(
        text(&s, true),
        "Statement of alice for 2026-12
Date        Item                   Amount  Note
2026-12-01  opening balance           100
2026-12-01  monthly grant             +30
            rtx2080, 40 GPU-hours     -20
            rtx3090, 40 GPU-hours     -40
            a6000, 6 GPU-hours        -24
2026-12-31  closing balance            46
"
    );
}

#[test]
fn text_says_so_far_and_who_did_what() {
    let refund = Entry {
        actor: "carol".into(),
        reason: "node\\nfailure".replace("\\n", "\n"),
        job_id: Some("103".into()),
        ..entry(EntryKind::Refund, "24", "2026-12-06T10:00:00")
    };
    let days = [
        entry(EntryKind::Replenish, "1", "2026-12-02T00:00:00"),
        entry(EntryKind::Replenish, "1", "2026-12-03T00:00:00"),
    ];
    let extra: Vec<Entry> = days.into_iter().chain([refund]).collect();
    let s = worked_example("alice", &extra, "72", true);
    let out = text(&s, false);
    assert!(
        out.starts_with("Statement of alice for 2026-12 (so far, as of 2026-12-14T10:22:03)\n2026-12-01  opening"),
        "{out}"
    );
    assert!(out.contains("\n            daily replenishment, 2 days      +2\n"), "{out}");
    assert!(
        out.contains("\n2026-12-06  refund of job 103               +24  carol: node\\nfailure\n"),
        "the reason's newline shown escaped, on one line: {out}"
    );
    assert!(out.ends_with("\n2026-12-14  closing balance (so far)         72\n"), "{out}");
}

/// A reader of `-P` or CSV checks a statement by summing the Amount column up to the closing row.
#[test]
fn rows_sum_to_the_closing_row() {
    let s = worked_example("alice", &[], "46", false);
    let all = rows(&s);
    let items: Vec<(&str, &str, &str)> = all.iter().map(|r| (r[2].as_str(), r[4].as_str(), r[6].as_str())).collect();
    assert_eq!(
        items,
        [
            ("opening", "100", ""),
            ("monthly", "+30", ""),
            ("charge", "-20", "40"),
            ("charge", "-40", "40"),
            ("charge", "-24", "6"),
            ("closing", "46", "")
        ]
    );
    let sum: Tokens = all[..all.len() - 1].iter().map(|r| r[4].parse::<Tokens>().unwrap()).sum();
    assert_eq!(sum.to_string(), all[all.len() - 1][4]);
    assert_eq!(all[2][5..8], ["rtx2080", "40", "144000"]);
    assert_eq!((all[5][3].as_str(), all[5][12].as_str()), ("2026-12-31", ""));
    let partial = worked_example("alice", &[], "46", true);
    let closing = rows(&partial).pop().unwrap();
    assert_eq!((closing[3].as_str(), closing[12].as_str()), ("2026-12-14", "so far: the month is not over"));
}

#[test]
fn parsable_rows_keep_one_line_each() {
    let adjust = Entry {
        actor: "root".into(),
        reason: "two\nlines | and a bar".into(),
        ..entry(EntryKind::Adjust, "-1", "2026-12-07T10:00:00")
    };
    let s = worked_example("alice", &[adjust], "45", false);
    let cells = parsable_cells(&s);
    // Hand-made changes come before the charges.
    assert_eq!((cells[2][2].as_str(), cells[2][12].as_str()), ("adjust", "two lines | and a bar"));
}

#[test]
fn csv_quotes_what_needs_it() {
    assert_eq!(csv_record(&["alice", "2026-12", "+30"]), "alice,2026-12,+30\r\n");
    assert_eq!(csv_record(&["a,b", "say \"hi\"", ""]), "\"a,b\",\"say \"\"hi\"\"\",\r\n");
    assert_eq!(csv_record(&["two\nlines", "cr\r"]), "\"two\nlines\",\"cr\r\"\r\n");
}

#[test]
fn json_has_exact_amounts_and_gpu_hours() {
    let s = worked_example("alice", &[], "46", false);
    let value: serde_json::Value = serde_json::from_str(&json(&[s])).unwrap();
    let december = &value["statements"][0];
    assert_eq!((december["opening"].as_str(), december["closing"].as_str()), (Some("100"), Some("46")));
    assert_eq!(december["lines"][1]["item"], "charge");
    assert_eq!(december["lines"][1]["amount"], "-20");
    assert_eq!(december["lines"][1]["gpu_seconds"], 144_000);
    assert_eq!(december["lines"][1]["gpu_hours"], 40.0);
    assert!(december["lines"][0].get("gpu_hours").is_none());
    assert_eq!(value["schema"], 1);
    let issued = december["issued_unix"].as_i64().unwrap();
    assert_eq!(december["issued"].as_str(), Some(gputokens::time::format_rfc3339(issued).as_str()), "{december}");
}

/// The worked example with GPU energy measured for three jobs: kWh on each charge line and in
/// every form, the month's sum and its jobs in a sentence.
#[test]
fn energy_is_on_each_charge_line_and_summed_for_the_month() {
    let mut builder = StatementBuilder::new("alice", "2026-12".parse().unwrap(), Tokens::whole(100));
    for e in [
        entry(EntryKind::Monthly, "30", "2026-12-01T00:00:00"),
        charge("rtx2080", "-20", 144_000),
        charge("rtx3090", "-40", 144_000),
        charge("a6000", "-24", 21_600),
    ] {
        builder.add(&e).unwrap();
    }
    builder.add_energy("101", "rtx2080", 9_000_000); // 2.5 kWh
    builder.add_energy("102", "rtx3090", 3_600_000);
    builder.add_energy("104", "rtx3090", 1_800);
    let s = builder.finish("46".parse().unwrap(), parse_timestamp("2026-12-14T10:22:03").unwrap(), false).unwrap();
    let out = text(&s, false);
    assert!(out.contains("\n            rtx2080, 40 GPU-hours, 2.5 kWh       -20\n"), "{out}");
    assert!(out.contains("\n            rtx3090, 40 GPU-hours, 1.001 kWh     -40\n"), "{out}");
    assert!(out.contains("\n            a6000, 6 GPU-hours                   -24\n"), "nothing measured: {out}");
    assert!(
        out.ends_with("Your jobs' GPUs used 3.501 kWh this month (jobs 101 2.5 kWh, 102 1 kWh, 104 0.001 kWh).\n"),
        "{out}"
    );

    let rows = rows(&s);
    assert_eq!(ROW_HEADER[8], "KWh");
    let kwh: Vec<(&str, &str)> = rows.iter().map(|r| (r[5].as_str(), r[8].as_str())).collect();
    assert_eq!(kwh, [("", ""), ("", ""), ("rtx2080", "2.5"), ("rtx3090", "1.001"), ("a6000", ""), ("", "")]);

    let v: serde_json::Value = serde_json::from_str(&json(std::slice::from_ref(&s))).unwrap();
    let december = &v["statements"][0];
    assert_eq!(
        (december["lines"][1]["energy_joules"].as_u64(), december["lines"][1]["kwh"].as_f64()),
        (Some(9_000_000), Some(2.5))
    );
    assert!(december["lines"][3].get("kwh").is_none());
    assert_eq!(
        december["energy"][1],
        serde_json::json!({"job_id": "102", "gpu_type": "rtx3090", "joules": 3_600_000, "kwh": 1.0})
    );
}

/// `[prices] per_kwh`: an energy charge is on its GPU type's line, which says what of it paid for
/// energy (and, beside it, what was spent on idle GPUs); the month's sentence says what energy cost.
#[test]
fn priced_energy_is_in_its_lines_amount_and_said_apart() {
    let mut builder = StatementBuilder::new("alice", "2026-12".parse().unwrap(), Tokens::whole(100));
    let energy = Entry {
        key: Some("energy:101:1:gpu1:2026-12-01:9000000:alice".into()),
        job_id: Some("101".into()),
        gpu_seconds: None,
        ..charge("a6000", "-1.25", 0)
    };
    for e in [charge("a6000", "-24", 21_600), energy] {
        builder.add(&e).unwrap();
    }
    builder.add_idle("a6000", Tokens::whole(6));
    builder.add_energy("101", "a6000", 9_000_000);
    let s = builder.finish("74.75".parse().unwrap(), parse_timestamp("2026-12-14T10:22:03").unwrap(), true).unwrap();
    let out = text(&s, false);
    let line = out.lines().find(|l| l.contains("a6000, 6 GPU-hours, 2.5 kWh")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.ends_with("-25.25  1.25 of it for energy; 6 of it on idle GPUs"), "{out}");
    assert!(out.ends_with("(job 101 2.5 kWh), charged 1.25 tokens.\n"), "{out}");
    let a6000 = rows(&s).into_iter().find(|r| r[5] == "a6000").unwrap();
    assert_eq!((a6000[4].as_str(), a6000[12].as_str()), ("-25.25", "1.25 of it for energy; 6 of it on idle GPUs"));
    let v: serde_json::Value = serde_json::from_str(&json(std::slice::from_ref(&s))).unwrap();
    assert_eq!(v["statements"][0]["lines"][0]["energy_tokens"], "1.25");
}

/// A ledger of two clusters: the refund and the energy of each job name its cluster, the first
/// cluster's bare keys too; a ledger of one cluster shows its keys as they are.
#[test]
fn jobs_name_their_cluster_where_the_ledger_has_several() {
    let refund = Entry { job_id: Some("new:41".into()), ..entry(EntryKind::Refund, "5", "2026-12-02T10:00:00") };
    let mut builder = StatementBuilder::new("alice", "2026-12".parse().unwrap(), Tokens::whole(100));
    builder.add(&refund).unwrap();
    builder.add(&Entry { job_id: Some("41".into()), ..charge("a6000", "-4", 3600) }).unwrap();
    builder.add_energy("41", "a6000", 3_600_000);
    let statement =
        builder.finish("101".parse().unwrap(), parse_timestamp("2026-12-14T10:22:03").unwrap(), false).unwrap();
    let clusters = Clusters { names: vec!["old".into(), "new".into()], local: Some("new".into()) };

    let mut shown = statement.clone();
    show_jobs(&mut shown, &clusters);
    let out = text(&shown, false);
    assert!(out.contains("refund of job new:41"), "{out}");
    assert!(out.contains("(job old:41 1 kWh)"), "{out}");
    // Charge lines are per GPU type: the refund's is the one job column.
    let jobs: Vec<String> = rows(&shown).iter().map(|r| r[10].clone()).filter(|j| !j.is_empty()).collect();
    assert_eq!(jobs, ["new:41"]);
    let v: serde_json::Value = serde_json::from_str(&json(std::slice::from_ref(&shown))).unwrap();
    assert_eq!(v["statements"][0]["energy"][0]["job_id"], "old:41");

    let mut alone = statement.clone();
    show_jobs(&mut alone, &Clusters::default());
    assert_eq!(alone, statement, "one cluster: the keys as they are");
}
