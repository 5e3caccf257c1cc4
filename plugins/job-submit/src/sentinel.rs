//! Slurm's raw numbers in a job description and the typed request's values: the one place the
//! sentinels (NO_VAL, NO_VAL16 = not given, INFINITE = unlimited) and the NICE_OFFSET encoding of
//! nice and site factor are converted, both ways. Safe code; `ffi` calls it.

use gputokens::job_request::{Memory, TimeLimit};

use crate::bindings::{INFINITE, NICE_OFFSET, NO_VAL, NO_VAL16};

/// slurm.h's NO_VAL64, MEM_PER_CPU and JOB_SHARED_NONE, the same in every release: bindgen types
/// the first two from their macros as i32 and i64.
const NO_VAL64: u64 = 0xffff_ffff_ffff_fffe;
const MEM_PER_CPU: u64 = 0x8000_0000_0000_0000;
const JOB_SHARED_NONE: u16 = 0;

/// A 32-bit number; NO_VAL = not given.
pub fn given(raw: u32) -> Option<u32> {
    (raw != NO_VAL).then_some(raw)
}

/// A 16-bit number; NO_VAL16 = not given.
pub fn given16(raw: u16) -> Option<u16> {
    (raw as u32 != NO_VAL16).then_some(raw)
}

/// `pn_min_memory`: MB per node (`--mem`, 0 = all of it), or per CPU with the MEM_PER_CPU bit
/// (`--mem-per-cpu`); NO_VAL64 = not given (NO_VAL, never an amount asked for, too).
pub fn memory(raw: u64) -> Option<Memory> {
    match raw {
        NO_VAL64 => None,
        raw if raw == u64::from(NO_VAL) => None,
        raw if raw & MEM_PER_CPU != 0 => Some(Memory::PerCpu(raw & !MEM_PER_CPU)),
        mb => Some(Memory::PerNode(mb)),
    }
}

/// `shared`: JOB_SHARED_NONE is `--exclusive` (whole nodes); NO_VAL16 the partition's default.
pub fn exclusive(raw: u16) -> bool {
    raw == JOB_SHARED_NONE
}

/// A time limit in minutes; NO_VAL = not given, INFINITE = `--time=UNLIMITED`.
pub fn time_limit(raw: u32) -> Option<TimeLimit> {
    match raw {
        NO_VAL => None,
        INFINITE => Some(TimeLimit::Unlimited),
        minutes => Some(TimeLimit::Minutes(minutes)),
    }
}

/// A nice value as slurmctld stores it (NICE_OFFSET + nice); NO_VAL = not given.
pub fn nice(raw: u32) -> Option<i32> {
    // raw - 2^31 lies within i32 for every u32.
    given(raw).map(|r| (r as i64 - NICE_OFFSET as i64) as i32)
}

/// A signed nice value or site factor as slurmctld stores it: NICE_OFFSET + value.
pub fn offset(value: i32) -> u32 {
    // NICE_OFFSET (2^31) + any i32 lies within u32.
    (NICE_OFFSET as i64 + value as i64) as u32
}

/// A time limit to write: minutes below NO_VAL and INFINITE, so a huge limit stays a limit.
pub fn minutes(limit: u32) -> u32 {
    limit.min(NO_VAL - 1)
}

/// The job an update names: slurmctld passes `scontrol update jobid=` as text (`123`, `123_4`,
/// `123_[1-3]`, `123+1`: the job, array job or heterogeneous job is the leading number); else the
/// numeric `job_id` (NO_VAL or 0 = none, as at submission).
pub fn job_number(text: Option<&str>, numeric: u32) -> Option<u32> {
    let from_text = text.and_then(|t| {
        let digits = t.find(|c: char| !c.is_ascii_digit()).map_or(t, |end| &t[..end]);
        digits.parse().ok()
    });
    from_text.or(given(numeric).filter(|&n| n != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_per_node_or_per_cpu_and_exclusive_nodes() {
        assert_eq!(memory(NO_VAL64), None);
        assert_eq!(memory(u64::from(NO_VAL)), None);
        assert_eq!(memory(8000), Some(Memory::PerNode(8000)));
        assert_eq!(memory(0), Some(Memory::PerNode(0)), "--mem=0: all of the node's");
        assert_eq!(memory(MEM_PER_CPU | 2048), Some(Memory::PerCpu(2048)));
        assert!(exclusive(0));
        assert!(!exclusive(1) && !exclusive(2) && !exclusive(NO_VAL16 as u16));
    }

    #[test]
    fn the_job_an_update_names() {
        assert_eq!(job_number(Some("123"), NO_VAL), Some(123));
        assert_eq!(job_number(Some("123_4"), NO_VAL), Some(123));
        assert_eq!(job_number(Some("123_[1-3]"), NO_VAL), Some(123));
        assert_eq!(job_number(Some("123+1"), NO_VAL), Some(123));
        assert_eq!(job_number(None, 77), Some(77));
        assert_eq!(job_number(Some("x"), NO_VAL), None);
        assert_eq!(job_number(None, NO_VAL), None);
        assert_eq!(job_number(None, 0), None);
    }

    #[test]
    fn sentinels_are_not_given() {
        assert_eq!((given(NO_VAL), given(0), given(INFINITE)), (None, Some(0), Some(INFINITE)));
        assert_eq!((given16(NO_VAL16 as u16), given16(4)), (None, Some(4)));
        assert_eq!(time_limit(NO_VAL), None);
        assert_eq!(time_limit(INFINITE), Some(TimeLimit::Unlimited));
        assert_eq!(time_limit(90), Some(TimeLimit::Minutes(90)));
    }

    #[test]
    fn nice_values_and_site_factors_round_trip() {
        assert_eq!(nice(NO_VAL), None);
        assert_eq!(nice(NICE_OFFSET), Some(0));
        assert_eq!(nice(NICE_OFFSET - 100), Some(-100));
        assert_eq!(nice(NICE_OFFSET + 10_000), Some(10_000));
        assert_eq!((nice(0), nice(u32::MAX)), (Some(i32::MIN), Some(i32::MAX)), "every raw value fits");
        assert_eq!(offset(10_000), NICE_OFFSET + 10_000);
        assert_eq!(offset(-7000), NICE_OFFSET - 7000);
        assert_eq!((offset(i32::MIN), offset(i32::MAX)), (0, u32::MAX));
        for raw in [0, 1, NICE_OFFSET, NICE_OFFSET + 1, u32::MAX] {
            assert_eq!(nice(raw).map(offset), Some(raw));
        }
    }

    #[test]
    fn written_limits_stay_below_the_sentinels() {
        assert_eq!(minutes(u32::MAX), NO_VAL - 1, "a huge max_job_duration never becomes NO_VAL or INFINITE");
        assert_eq!(minutes(120), 120);
    }
}
