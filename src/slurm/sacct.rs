//! Job records from `sacct --parsable2` (with a header line). Parsable text rather than `--json`: its
//! columns are stable from 22.05 to 24.x while the JSON schema changed with every OpenAPI version, and
//! a month of records parses in a fraction of the time.

use std::collections::HashMap;

use crate::ledger::UsageRecord;
use crate::time::parse_timestamp;
use crate::tres::{parse_alloc_tres, Sharing, TresError};

/// The columns to ask sacct for (`sacct -X -D -P -o ...`); any order works when parsing.
pub const FIELDS: &str = "JobIDRaw,User,AllocTRES,ElapsedRaw,Start,State,NodeList";

/// States in which a job still holds its allocation: its row is not final.
const ACTIVE_STATES: [&str; 3] = ["RUNNING", "SUSPENDED", "COMPLETING"];

/// GPU type name for untyped allocations whose node type is not known.
pub const UNTYPED: &str = "gpu";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SacctError {
    #[error("sacct output has no header line")]
    NoHeader,
    #[error("sacct output lacks the column {0} (run sacct -P -o {FIELDS})")]
    MissingColumn(&'static str),
    #[error("sacct line {line}: {reason}")]
    BadLine { line: usize, reason: String },
}

/// Records that carry GPUs. Rows without GPUs, without a start (never ran) or without a user
/// (job steps) are left out; `skipped` counts them.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Final rows: finished jobs and ended run segments of requeued ones.
    pub records: Vec<UsageRecord>,
    /// Rows of jobs still holding GPUs, with the time held so far.
    pub active: Vec<UsageRecord>,
    /// NodeList of each record's job, where the output has that column.
    pub nodes: HashMap<String, String>,
    pub skipped: usize,
}

pub fn parse(text: &str, sharing: Sharing) -> Result<Parsed, SacctError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or(SacctError::NoHeader)?;
    let columns: HashMap<&str, usize> = header.split('|').enumerate().map(|(i, c)| (c.trim(), i)).collect();
    let col = |name: &'static str| columns.get(name).copied().ok_or(SacctError::MissingColumn(name));
    let (job, user, tres, elapsed, start) =
        (col("JobIDRaw")?, col("User")?, col("AllocTRES")?, col("ElapsedRaw")?, col("Start")?);
    let (state, node_list) = (col("State").ok(), col("NodeList").ok());

    let mut parsed = Parsed::default();
    for (index, line) in lines {
        let fields: Vec<&str> = line.split('|').collect();
        let bad = |reason: String| SacctError::BadLine { line: index + 1, reason };
        if fields.len() < columns.len() {
            return Err(bad(format!("{} fields, the header has {}", fields.len(), columns.len())));
        }
        let gpus = parse_alloc_tres(fields[tres]).map_err(|e: TresError| bad(e.to_string()))?;
        let (job_id, user) = (fields[job].trim(), fields[user].trim());
        let segment_start = parse_timestamp(fields[start].trim());
        let (Some(segment_start), false, false) = (segment_start, user.is_empty(), gpus.is_empty()) else {
            parsed.skipped += 1;
            continue;
        };
        if job_id.is_empty() || job_id.contains('.') {
            parsed.skipped += 1;
            continue;
        }
        let elapsed: u64 = fields[elapsed]
            .trim()
            .parse()
            .map_err(|_| bad(format!("ElapsedRaw '{}' is not a number", fields[elapsed])))?;
        let record = UsageRecord {
            job_id: job_id.to_string(),
            user: user.to_string(),
            segment_start,
            milli_gpus: gpus.milli_by_type(UNTYPED, sharing),
            elapsed,
            weight_permille: 1000,
        };
        if let Some(i) = node_list {
            parsed.nodes.insert(record.job_id.clone(), fields[i].trim().to_string());
        }
        // "CANCELLED by 0" and friends: only the first word is the state.
        let row_state = state.map(|i| fields[i].split_whitespace().next().unwrap_or_default());
        if row_state.is_some_and(|s| ACTIVE_STATES.contains(&s)) {
            parsed.active.push(record);
        } else {
            parsed.records.push(record);
        }
    }
    Ok(parsed)
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
        let err = parse(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start\n1|a|gres/gpu:x=1|zz|2026-11-22T10:00:00\n",
            Sharing::default(),
        );
        assert!(err.unwrap_err().to_string().contains("ElapsedRaw 'zz'"));
    }
}
