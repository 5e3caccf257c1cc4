//! Partitions' time limits from `scontrol -o show partition` (one `Key=Value ...` line each): what a
//! job without `--time` gets, for the job_submit plugin's estimate and `max_job_duration`.

/// A partition's name and time limits, in seconds (None = none or unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// The partition jobs go to when they name none.
    pub default: bool,
    pub default_time: Option<u64>,
    pub max_time: Option<u64>,
}

impl Partition {
    /// The limit a job without `--time` gets here: DefaultTime, else MaxTime.
    pub fn limit_for_untimed(&self) -> Option<u64> {
        self.default_time.or(self.max_time)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PartitionError {
    #[error("scontrol show partition: line {0} has no PartitionName")]
    NoName(usize),
    #[error("scontrol show partition: partition {name}: {key}={value} is not a Slurm time")]
    BadTime { name: String, key: &'static str, value: String },
}

pub fn parse(text: &str) -> Result<Vec<Partition>, PartitionError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let value = |key: &str| {
            line.split_whitespace().find_map(|kv| kv.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
        };
        let name = value("PartitionName").ok_or(PartitionError::NoName(i + 1))?.to_string();
        let time = |key: &'static str| match value(key) {
            None => Ok(None),
            Some(v) => parse_duration(v).map_err(|NotATime| PartitionError::BadTime {
                name: name.clone(),
                key,
                value: v.to_string(),
            }),
        };
        out.push(Partition {
            default: value("Default") == Some("YES"),
            default_time: time("DefaultTime")?,
            max_time: time("MaxTime")?,
            name,
        });
    }
    Ok(out)
}

/// Each partition's nodes (`Nodes=`, expanded) from the same `scontrol -o show partition` text;
/// a partition without nodes, or whose list does not expand, is left out (its nodes are not known).
pub fn nodes(text: &str) -> std::collections::HashMap<String, Vec<String>> {
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        let value = |key: &str| {
            line.split_whitespace().find_map(|kv| kv.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
        };
        let (Some(name), Some(list)) = (value("PartitionName"), value("Nodes")) else { continue };
        if let Some(nodes) = super::hostlist::expand(list).filter(|n| !n.is_empty() && list != "(null)") {
            out.insert(name.to_string(), nodes);
        }
    }
    out
}

/// The limit a job without `--time` gets in `requested` (a comma list, the largest counts; None or
/// empty = the default partition). Outer None: unlimited, or the partition is unknown.
pub fn limit_for_untimed(partitions: &[Partition], requested: Option<&str>) -> Option<u64> {
    largest(partitions, requested, Partition::limit_for_untimed)
}

/// The MaxTime of `requested` (as [`limit_for_untimed`]): what `--time=UNLIMITED` gets.
pub fn max_time(partitions: &[Partition], requested: Option<&str>) -> Option<u64> {
    largest(partitions, requested, |p| p.max_time)
}

/// The partitions a job may run in: those it names in `requested` (a comma list), else the default.
pub fn may_run_in<'a>(partitions: &'a [Partition], requested: Option<&'a str>) -> Vec<&'a str> {
    match requested.filter(|r| !r.is_empty()) {
        Some(list) => list.split(',').map(str::trim).collect(),
        None => partitions.iter().filter(|p| p.default).map(|p| p.name.as_str()).collect(),
    }
}

fn largest(
    partitions: &[Partition],
    requested: Option<&str>,
    limit: impl Fn(&Partition) -> Option<u64>,
) -> Option<u64> {
    let named: Vec<&Partition> =
        may_run_in(partitions, requested).into_iter().filter_map(|n| partitions.iter().find(|p| p.name == n)).collect();
    if named.is_empty() {
        return None;
    }
    named.iter().map(|p| limit(p)).try_fold(0u64, |most, limit| limit.map(|l| most.max(l)))
}

/// Slurm's time forms: `UNLIMITED`/`INFINITE`/`NONE` (None), `minutes`, `minutes:seconds`,
/// `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`.
/// A text that is none of Slurm's time forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotATime;

pub fn parse_duration(text: &str) -> Result<Option<u64>, NotATime> {
    let text = text.trim();
    if matches!(text, "UNLIMITED" | "INFINITE" | "NONE" | "infinite" | "unlimited") {
        return Ok(None);
    }
    let number = |s: &str| -> Result<u64, NotATime> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotATime);
        }
        s.parse().map_err(|_| NotATime)
    };
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (Some(number(d)?), rest),
        None => (None, text),
    };
    let parts: Vec<u64> = rest.split(':').map(number).collect::<Result<_, _>>()?;
    let (d, h, m, s) = match (days, parts.as_slice()) {
        (None, [m]) => (0, 0, *m, 0),
        (None, [m, s]) => (0, 0, *m, *s),
        (None, [h, m, s]) => (0, *h, *m, *s),
        (Some(d), [h]) => (d, *h, 0, 0),
        (Some(d), [h, m]) => (d, *h, *m, 0),
        (Some(d), [h, m, s]) => (d, *h, *m, *s),
        _ => return Err(NotATime),
    };
    // In u128 then checked: digits from Slurm never wrap into a short limit.
    let seconds = d as u128 * 86400 + h as u128 * 3600 + m as u128 * 60 + s as u128;
    u64::try_from(seconds).map(Some).map_err(|_| NotATime)
}

/// `2-00:00:00`, `4:00:00`, as `--time` takes it.
pub fn format_duration(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h}:{m:02}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As 22.05's `scontrol -o show partition` prints them (trimmed).
    const SHOWN: &str = "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL Default=YES QoS=N/A \
        DefaultTime=04:00:00 DisableRootJobs=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 State=UP\n\
        PartitionName=long AllowGroups=ALL Default=NO DefaultTime=NONE MaxTime=UNLIMITED State=UP\n\
        PartitionName=short Default=NO DefaultTime=NONE MaxTime=30:00 State=UP\n";

    #[test]
    fn reads_each_partitions_nodes() {
        let shown = "PartitionName=gpu Default=YES Nodes=g[1-2] State=UP\nPartitionName=all Nodes=g[1-2],c1\n\
                     PartitionName=empty Nodes=(null)\nPartitionName=none State=UP\n";
        let nodes = nodes(shown);
        assert_eq!(nodes["gpu"], ["g1", "g2"]);
        assert_eq!(nodes["all"], ["g1", "g2", "c1"]);
        assert!(!nodes.contains_key("empty") && !nodes.contains_key("none"), "{nodes:?}");
    }

    #[test]
    fn reads_scontrol_lines() {
        let parts = parse(SHOWN).unwrap();
        assert_eq!(
            parts[0],
            Partition { name: "gpu".into(), default: true, default_time: Some(4 * 3600), max_time: Some(2 * 86400) }
        );
        assert_eq!(parts[1], Partition { name: "long".into(), default: false, default_time: None, max_time: None });
        assert_eq!(parts[2].limit_for_untimed(), Some(1800));
        assert_eq!(parse("Default=YES\n"), Err(PartitionError::NoName(1)));
        let bad = parse("PartitionName=x MaxTime=soon\n").unwrap_err();
        assert_eq!(bad.to_string(), "scontrol show partition: partition x: MaxTime=soon is not a Slurm time");
    }

    #[test]
    fn the_limit_of_a_job_without_time() {
        let parts = parse(SHOWN).unwrap();
        assert_eq!(limit_for_untimed(&parts, None), Some(4 * 3600), "the default partition's DefaultTime");
        assert_eq!(limit_for_untimed(&parts, Some("short")), Some(1800), "no DefaultTime: MaxTime");
        assert_eq!(limit_for_untimed(&parts, Some("short,gpu")), Some(4 * 3600), "the largest of a list");
        assert_eq!(limit_for_untimed(&parts, Some("long")), None, "unlimited");
        assert_eq!(limit_for_untimed(&parts, Some("nosuch")), None);
        assert_eq!(max_time(&parts, None), Some(2 * 86400), "--time=UNLIMITED: MaxTime");
    }

    #[test]
    fn slurm_durations() {
        assert_eq!(parse_duration("30"), Ok(Some(1800)));
        assert_eq!(parse_duration("30:15"), Ok(Some(1815)));
        assert_eq!(parse_duration("04:00:00"), Ok(Some(14400)));
        assert_eq!(parse_duration("1-12"), Ok(Some(129600)));
        assert_eq!(parse_duration("1-00:30"), Ok(Some(88200)));
        assert_eq!(parse_duration("2-00:00:00"), Ok(Some(172800)));
        assert_eq!(parse_duration("UNLIMITED"), Ok(None));
        for bad in ["", "x", "1:2:3:4", "-5", "1-", "1-2-3"] {
            assert_eq!(parse_duration(bad), Err(NotATime), "{bad:?}");
        }
        assert_eq!(format_duration(172800), "2-00:00:00");
        assert_eq!(format_duration(5400), "1:30:00");
    }

    /// Regression: `d * 86400 + ...` wrapped (release) or panicked (debug) for huge digits from sinfo.
    #[test]
    fn times_too_long_to_count_are_not_times() {
        assert_eq!(parse_duration("213503982334601-07:00:15"), Ok(Some(u64::MAX)));
        assert_eq!(parse_duration("213503982334601-07:00:16"), Err(NotATime));
        assert_eq!(parse_duration("18446744073709551615:00"), Err(NotATime));
        assert_eq!(format_duration(u64::MAX), "213503982334601-07:00:15");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_text_is_a_time_or_not(text in "[0-9:-]{0,30}|\\PC{0,20}") {
                if let Ok(Some(seconds)) = parse_duration(&text) {
                    prop_assert_eq!(parse_duration(&format_duration(seconds)), Ok(Some(seconds)));
                }
            }
        }
    }
}
