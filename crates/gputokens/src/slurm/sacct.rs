//! Job records from `sacct --parsable2` (with a header line). Parsable text rather than `--json`: its
//! columns are stable from 22.05 to 24.x while the JSON schema changed with every OpenAPI version, and
//! a month of records parses in a fraction of the time.

use std::collections::HashMap;

use super::rejected::{self, Reason, Rejected};
use crate::gpu_time::UsageRecord;
use crate::time::parse_timestamp;
use crate::tres::{parse_alloc_tres, Sharing};

/// The columns to ask sacct for (`sacct -X -D -P -o ...`); any order works when parsing.
pub const FIELDS: &str = "JobIDRaw,User,Account,AllocTRES,ElapsedRaw,Start,End,State,NodeList";
/// The same and each run's SLUID, from Slurm 25.11 (whose sacct knows the column).
pub const FIELDS_WITH_SLUID: &str = "JobIDRaw,User,Account,AllocTRES,ElapsedRaw,Start,End,State,NodeList,SLUID";

/// States in which a job still holds its allocation: its row is not final.
const ACTIVE_STATES: [&str; 3] = ["RUNNING", "SUSPENDED", "COMPLETING"];

/// GPU type name for untyped allocations whose node type is not known.
pub const UNTYPED: &str = "gpu";

/// What makes the whole output unreadable; a bad row is [`Parsed::rejected`] instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SacctError {
    #[error("sacct output has no header line")]
    NoHeader,
    #[error("sacct output lacks the column {0} (run sacct -P -o {FIELDS})")]
    MissingColumn(&'static str),
}

/// Records that carry GPUs. Rows without GPUs, without a start (never ran) or without a user
/// (job steps) are left out; `skipped` counts them. Rows that cannot be charged are `rejected`,
/// each alone: the other rows are still read.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Final rows: finished jobs and ended run segments of requeued ones.
    pub records: Vec<UsageRecord>,
    /// Rows of jobs still holding GPUs, with the time held so far.
    pub active: Vec<UsageRecord>,
    /// NodeList of each record's job, where the output has that column.
    pub nodes: HashMap<String, String>,
    /// How each final record's run ended, by (job, run start), where the output has a State column
    /// (automatic refunds read it).
    pub ends: HashMap<(String, i64), RunEnded>,
    pub skipped: usize,
    pub rejected: Vec<Rejected>,
}

/// Where each column is.
struct Columns {
    count: usize,
    job: usize,
    user: usize,
    account: Option<usize>,
    tres: usize,
    elapsed: usize,
    start: usize,
    end: Option<usize>,
    state: Option<usize>,
    node_list: Option<usize>,
    sluid: Option<usize>,
}

/// How one run ended: its State's first word ("CANCELLED by 0" is CANCELLED), that run's own
/// NodeList (a requeued job's later runs may be elsewhere) and its End (unix), where the output
/// has those columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnded {
    pub state: String,
    pub nodes: Option<String>,
    pub end: Option<i64>,
}

/// What one row is. Made and taken apart one row at a time, never stored: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Row {
    Record { record: UsageRecord, active: bool, nodes: Option<String>, state: Option<String>, end: Option<i64> },
    NoGpuTime,
}

/// Reads `sacct -P` output. Times are unix seconds (sacct run with `SLURM_TIME_FORMAT=%s`) or, in
/// saved files, local `YYYY-MM-DDTHH:MM:SS`.
pub fn parse(text: &str, sharing: Sharing) -> Result<Parsed, SacctError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or(SacctError::NoHeader)?;
    let names: HashMap<&str, usize> = header.split('|').enumerate().map(|(i, c)| (c.trim(), i)).collect();
    let col = |name: &'static str| names.get(name).copied().ok_or(SacctError::MissingColumn(name));
    let columns = Columns {
        count: header.split('|').count(),
        job: col("JobIDRaw")?,
        user: col("User")?,
        account: col("Account").ok(),
        tres: col("AllocTRES")?,
        elapsed: col("ElapsedRaw")?,
        start: col("Start")?,
        end: col("End").ok(),
        state: col("State").ok(),
        node_list: col("NodeList").ok(),
        sluid: col("SLUID").ok(),
    };

    let mut parsed = Parsed::default();
    for (index, line) in lines {
        match row(line, &columns, sharing) {
            Ok(Row::NoGpuTime) => parsed.skipped += 1,
            Ok(Row::Record { record, active, nodes, state, end }) => {
                if let Some(nodes) = &nodes {
                    parsed.nodes.insert(record.job_id.clone(), nodes.clone());
                }
                if active {
                    parsed.active.push(record);
                } else {
                    if let Some(state) = state {
                        let ended = RunEnded { state, nodes: nodes.clone(), end };
                        parsed.ends.insert((record.job_id.clone(), record.segment_start), ended);
                    }
                    parsed.records.push(record);
                }
            }
            Err((reason, detail)) => {
                parsed.rejected.push(Rejected { reason, origin: format!("sacct line {}", index + 1), detail })
            }
        }
    }
    Ok(parsed)
}

fn row(line: &str, columns: &Columns, sharing: Sharing) -> Result<Row, (Reason, String)> {
    let unparseable = |detail: String| (Reason::Unparseable, detail);
    let fields: Vec<&str> = line.split('|').collect();
    if fields.len() != columns.count {
        let excerpt: String = line.chars().take(120).collect();
        return Err(unparseable(format!(
            "{} fields, the header has {}: '{}'",
            fields.len(),
            columns.count,
            crate::free_text::printable(&excerpt)
        )));
    }
    let (job_id, user) = (fields[columns.job].trim(), fields[columns.user].trim());
    if job_id.is_empty() {
        return Err(unparseable("no JobIDRaw".into()));
    }
    // Controls escaped, quotes as they are: the line stays one line and reads as written.
    let quoted = |text: &str| crate::free_text::printable(text).into_owned();
    let gpus = parse_alloc_tres(fields[columns.tres])
        .map_err(|e| unparseable(format!("job {}: AllocTRES: {}", quoted(job_id), quoted(&e.to_string()))))?;
    let start = fields[columns.start].trim();
    let segment_start =
        match start {
            "Unknown" | "None" | "" => None,
            text => Some(parse_timestamp(text).ok_or_else(|| {
                unparseable(format!("job {}: Start '{}' is not a time", quoted(job_id), quoted(text)))
            })?),
        };
    // Steps (with -X there are none), jobs that never ran, allocations without GPUs.
    let (Some(segment_start), false, false, false) =
        (segment_start, user.is_empty(), gpus.is_empty(), job_id.contains('.'))
    else {
        return Ok(Row::NoGpuTime);
    };
    let elapsed_text = fields[columns.elapsed].trim();
    let elapsed: u64 = elapsed_text.parse().map_err(|_| {
        unparseable(format!("job {}: ElapsedRaw '{}' is not a number", quoted(job_id), quoted(elapsed_text)))
    })?;
    let record = UsageRecord {
        job_id: job_id.to_string(),
        user: user.to_string(),
        account: columns.account.map(|i| fields[i].trim().to_string()).filter(|a| !a.is_empty()),
        segment_start,
        sluid: columns.sluid.and_then(|i| super::sluid::parse(fields[i].trim())),
        milli_gpus: gpus.milli_by_type(UNTYPED, sharing),
        elapsed,
        nodes: crate::tres::node_count(fields[columns.tres]),
        weight_permille: 1000,
        held: crate::stranding::Held::from_tres(fields[columns.tres]),
        stranding: None,
        lent: None,
    };
    rejected::check(&record).map_err(|(reason, detail)| (reason, format!("job {}: {detail}", quoted(job_id))))?;
    // "CANCELLED by 0" and friends: only the first word is the state.
    let state = columns.state.map(|i| fields[i].split_whitespace().next().unwrap_or_default());
    // A run without an end is not final whatever its state says: right after slurmdbd comes back,
    // slurmctld's queued messages arrive one by one, and for a moment a job reads COMPLETED with
    // End "Unknown" and an ElapsedRaw that keeps growing. Charged then, it would pay for time it
    // never ran; a later cycle (`reread`) charges the finished row.
    let unended = columns.end.is_some_and(|i| matches!(fields[i].trim(), "Unknown" | "None" | ""));
    let active = unended || state.is_some_and(|s| ACTIVE_STATES.contains(&s));
    let nodes = columns.node_list.map(|i| fields[i].trim().to_string());
    let end = columns.end.and_then(|i| parse_timestamp(fields[i].trim()));
    Ok(Row::Record { record, active, nodes, state: state.map(str::to_string), end })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
7|alice|billing=1,cpu=1,gres/gpu:a6000=1,gres/gpu=1,mem=500M,node=1|61|2026-11-22T10:00:00|COMPLETED
8|bob|billing=1,cpu=1,mem=500M,node=1|30|2026-11-22T10:00:00|COMPLETED
9|alice||0|Unknown|PENDING
10|alice|cpu=2,gres/gpu=2,node=1|10|2026-11-22T10:00:00|RUNNING
";

    /// slurmdbd catching up after an outage: COMPLETED but no End yet is not final; with its End it is.
    #[test]
    fn a_finished_state_without_an_end_is_not_final() {
        let sharing = Sharing { shards_per_gpu: 1, mps_per_gpu: 100 };
        let catching_up = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|End|State\n\
            1|bob|gres/gpu:a6000=1|12|2026-11-26T02:39:26|Unknown|COMPLETED\n";
        let parsed = parse(catching_up, sharing).unwrap();
        assert!(parsed.records.is_empty(), "{parsed:?}");
        assert_eq!(parsed.active.len(), 1, "{parsed:?}");
        let caught_up = catching_up.replace("|12|", "|5|").replace("Unknown", "2026-11-26T02:39:31");
        let parsed = parse(&caught_up, sharing).unwrap();
        assert_eq!(parsed.records.len(), 1, "{parsed:?}");
        assert_eq!(parsed.records[0].elapsed, 5);
    }

    /// The records of the six jobs of squeue's samples as each release's sacct printed them
    /// (tests/slurm-releases/capture.sh): four ran a few seconds with GPUs, two never started.
    #[test]
    fn every_release_reads_the_same() {
        let samples = [
            ("22.05", include_str!("../../tests/data/sacct-22.05.txt")),
            ("24.11", include_str!("../../tests/data/sacct-24.11.txt")),
            ("26.05", include_str!("../../tests/data/sacct-26.05.txt")),
        ];
        let sharing = Sharing { shards_per_gpu: 8, mps_per_gpu: 100 };
        for (release, sample) in samples {
            let parsed = parse(sample, sharing).unwrap_or_else(|e| panic!("{release}: {e}"));
            let got: Vec<_> = parsed
                .records
                .iter()
                .map(|r| (r.user.as_str(), r.milli_gpus.clone().into_iter().collect::<Vec<_>>()))
                .collect();
            let gpus = |t: &str, n| vec![(t.to_string(), n)];
            assert_eq!(
                got,
                [
                    ("alice", gpus("a6000", 1000)),
                    ("bob", gpus("rtx3090", 2000)),
                    ("alice", gpus("rtx2080", 1000)),
                    ("bob", gpus("rtx2080", 1000)),
                ],
                "{release}"
            );
            assert!(parsed.records.iter().all(|r| (1..=10).contains(&r.elapsed)), "{release}: {:?}", parsed.records);
            assert!(parsed.active.is_empty() && parsed.rejected.is_empty(), "{release}: {parsed:?}");
            assert_eq!(parsed.skipped, 2, "{release}");
            assert!(parsed.nodes.values().all(|n| n == "vm"), "{release}");
            assert!(
                parsed.ends.len() == 4 && parsed.ends.values().all(|e| e.state == "CANCELLED"),
                "{release}: {parsed:?}"
            );
        }
    }

    #[test]
    fn keeps_gpu_records_and_skips_the_rest() {
        let p = parse(SAMPLE, Sharing::default()).unwrap();
        assert_eq!(p.skipped, 2);
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.records[0].job_id, "7");
        assert_eq!(p.records[0].milli_gpus.get("a6000"), Some(&1000));
        assert_eq!(p.records[0].elapsed, 61);
        assert_eq!(p.active.len(), 1);
        assert_eq!(p.active[0].milli_gpus.get(UNTYPED), Some(&2000));
    }

    /// Array tasks and heterogeneous components each have a JobIDRaw of their own (sacct -X shows
    /// them as `N_i` and `N+i`): each is its own record.
    #[test]
    fn het_components_and_array_tasks_are_records_of_their_own() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
1852|bob|cpu=1,gres/gpu:a6000=1,gres/gpu=1,node=1|5|2026-11-22T10:00:00|COMPLETED
1853|bob|cpu=1,gres/gpu:rtx3090=2,gres/gpu=2,node=1|5|2026-11-22T10:00:00|COMPLETED
1854|alice|cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3|2026-11-22T10:00:00|COMPLETED
1851|alice|cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3|2026-11-22T10:00:00|COMPLETED
";
        let p = parse(text, Sharing::default()).unwrap();
        let ids: Vec<&str> = p.records.iter().map(|r| r.job_id.as_str()).collect();
        assert_eq!(ids, ["1852", "1853", "1854", "1851"]);
        assert_eq!(p.records[0].milli_gpus, [("a6000".to_string(), 1000)].into());
        assert_eq!(p.records[1].milli_gpus, [("rtx3090".to_string(), 2000)].into());
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse("", Sharing::default()).unwrap_err(), SacctError::NoHeader);
        assert_eq!(parse("JobIDRaw|User\n", Sharing::default()).unwrap_err(), SacctError::MissingColumn("AllocTRES"));
    }

    /// One bad row is left out with its reason; every other row is read.
    #[test]
    fn bad_rows_are_rejected_alone() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
1|alice|gres/gpu:a6000=1|zz|1795444368|COMPLETED
2|alice|gres/gpu:a6000=1|60|1795444368|COMPLETED
garbage row without fields
3|bob|gres/gpu:a6000=1|60|yesterday|COMPLETED
4|bob|gres/gpu:a6000=x|60|1795444368|COMPLETED
5|a b|gres/gpu:a6000=1|60|1795444368|COMPLETED
6|bob|gres/gpu:a6000=1|999999999999|1795444368|COMPLETED
7|bob|gres/gpu:a6000=1|60|1795444368|COMPLETED|extra
|bob|gres/gpu:a6000=1|60|1795444368|COMPLETED
8|bob|gres/gpu:a6000=1|60|1795444368|COMPLETED
";
        let p = parse(text, Sharing::default()).unwrap();
        let ids: Vec<&str> = p.records.iter().map(|r| r.job_id.as_str()).collect();
        assert_eq!(ids, ["2", "8"]);
        let why: Vec<(&str, Reason)> = p.rejected.iter().map(|r| (r.origin.as_str(), r.reason)).collect();
        assert_eq!(
            why,
            [
                ("sacct line 2", Reason::Unparseable),
                ("sacct line 4", Reason::Unparseable),
                ("sacct line 5", Reason::Unparseable),
                ("sacct line 6", Reason::Unparseable),
                ("sacct line 7", Reason::BadUserName),
                ("sacct line 8", Reason::AbsurdValue),
                ("sacct line 9", Reason::Unparseable),
                ("sacct line 10", Reason::Unparseable),
            ]
        );
        assert_eq!(p.rejected[0].detail, "job 1: ElapsedRaw 'zz' is not a number");
        assert_eq!(p.rejected[1].detail, "1 fields, the header has 6: 'garbage row without fields'");
        assert_eq!(p.rejected[2].detail, "job 3: Start 'yesterday' is not a time");
        // Quotes as written (the log once showed \'x\'), controls escaped: one line.
        assert_eq!(
            p.rejected[3].detail,
            "job 4: AllocTRES: bad TRES entry 'gres/gpu:a6000=x': GPU count is not a whole number"
        );
        let control =
            parse("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\nit's\u{1b}[2K\n", Sharing::default()).unwrap();
        assert_eq!(control.rejected[0].detail, "1 fields, the header has 6: 'it's\\u{1b}[2K'");
    }

    /// `SLURM_TIME_FORMAT=%s`: Start is unix seconds, the same instant squeue's start_time gives, in
    /// the repeated hour of a DST change too.
    #[test]
    fn epoch_starts_and_any_user_name() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
21|ann@example.org|gres/gpu:a6000=1|60|1795444368|COMPLETED
22|j.doe|gres/gpu:a6000=1|60|1795444368|COMPLETED
23|zoë|gres/gpu:a6000=1|60|1795444368|COMPLETED
";
        let p = parse(text, Sharing::default()).unwrap();
        assert!(p.rejected.is_empty(), "{:?}", p.rejected);
        let users: Vec<&str> = p.records.iter().map(|r| r.user.as_str()).collect();
        assert_eq!(users, ["ann@example.org", "j.doe", "zoë"]);
        assert!(p.records.iter().all(|r| r.segment_start == 1_795_444_368));
    }

    /// Slurm 25.11+: each run of a requeued job is a row of its own with its own SLUID.
    #[test]
    fn each_run_carries_its_sluid_where_sacct_has_the_column() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State|NodeList|SLUID
31|ann|gres/gpu:a6000=1|60|1795444368|REQUEUED|vm|s359M8A2NFAK00
31|ann|gres/gpu:a6000=1|30|1795444500|RUNNING|vm|s45HM8A2FXAC00
32|ann|gres/gpu:a6000=1|60|1795444368|COMPLETED|vm|not-a-sluid
";
        let p = parse(text, Sharing::default()).unwrap();
        let sluids: Vec<Option<&str>> = p.records.iter().chain(&p.active).map(|r| r.sluid.as_deref()).collect();
        assert_eq!(sluids, [Some("s359M8A2NFAK00"), None, Some("s45HM8A2FXAC00")]);
        assert!(parse(SAMPLE, Sharing::default()).unwrap().records.iter().all(|r| r.sluid.is_none()));
    }

    /// Each final run's state, nodes and end, by job and start; "CANCELLED by 0" is CANCELLED.
    #[test]
    fn each_final_run_keeps_how_when_and_where_it_ended() {
        let text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|End|State|NodeList
40|ann|gres/gpu:a6000=1|60|1795444368|1795444428|NODE_FAIL|node3
40|ann|gres/gpu:a6000=1|30|1795444500|Unknown|RUNNING|node1
41|bob|gres/gpu:a6000=1|60|1795444368|1795444429|CANCELLED by 1001|node2
";
        let p = parse(text, Sharing::default()).unwrap();
        assert_eq!(p.ends.len(), 2, "{p:?}");
        let ended = |job: &str| p.ends[&(job.to_string(), 1795444368)].clone();
        let node_fail = RunEnded { state: "NODE_FAIL".into(), nodes: Some("node3".into()), end: Some(1795444428) };
        assert_eq!(ended("40"), node_fail);
        let cancelled = RunEnded { state: "CANCELLED".into(), nodes: Some("node2".into()), end: Some(1795444429) };
        assert_eq!(ended("41"), cancelled);
        assert_eq!(p.nodes["40"], "node1", "the job's newest run's nodes");
    }
}
