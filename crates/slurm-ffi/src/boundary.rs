//! The panic boundary around each exported entry point: a panic must not unwind into C (that is
//! undefined behaviour, and would take slurmctld or the user's sbatch down with it), so it is caught,
//! logged, and replaced by the value that leaves Slurm's work undisturbed.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body`; if it panics, calls `log_panic(entry)` and returns `fallback` instead.
///
/// `body` is treated as unwind safe: after a panic the entry point returns `fallback` at once,
/// without touching what `body` captured.
pub fn boundary<T>(entry: &str, fallback: T, log_panic: impl FnOnce(&str), body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            log_panic(entry);
            fallback
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_fallback_and_is_logged() {
        let mut logged = None;
        let got = boundary("job_submit", -1, |entry| logged = Some(entry.to_owned()), || -> i32 { panic!("boom") });
        assert_eq!((got, logged.as_deref()), (-1, Some("job_submit")));
    }

    #[test]
    fn a_value_passes_through_without_a_log_line() {
        let got = boundary("init", -1, |entry| panic!("{entry} logged without a panic"), || 0);
        assert_eq!(got, 0);
    }
}
