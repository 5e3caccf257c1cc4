//! `--gpu-tokens-estimate` (sbatch, salloc, srun): the user asks how many GPU tokens the job can cost
//! at most. The plugin only passes the request on: it sets `GPUTOKENS_ESTIMATE=1` in the job control
//! environment, which SPANK sends with the job as `GPUTOKENS_ESTIMATE=1` (the job description's
//! `spank_job_env`); the job_submit plugin in slurmctld, which knows the prices, answers in its
//! message at submission.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The option as users type it (`--gpu-tokens-estimate`, no argument).
pub const OPTION_NAME: &CStr = c"gpu-tokens-estimate";
pub const OPTION_USAGE: &CStr = c"Show the most GPU tokens this job can cost";

/// Name given to `spank_job_control_setenv`. SPANK prefixes it with `SPANK_` for slurmctld, the
/// prolog and the epilog, and with `SLURM_SPANK_` in the job's own environment.
pub const CONTROL_VAR: &str = "GPUTOKENS_ESTIMATE";

/// Whether this process's user gave the option (one job submission per sbatch/salloc/srun process).
static REQUESTED: AtomicBool = AtomicBool::new(false);

/// The option's callback: SPANK calls it when the user gives the option (`remote` = 0), and again in
/// slurmstepd when it passes the job's options on (`remote` = 1), where there is nothing to do.
pub fn on_option(remote: bool) {
    if !remote {
        REQUESTED.store(true, Ordering::Relaxed);
    }
}

/// The job control variable to set before the job is submitted, if the user asked.
pub fn control_env() -> Option<(&'static str, &'static str)> {
    REQUESTED.load(Ordering::Relaxed).then_some((CONTROL_VAR, "1"))
}

/// Set for `--test-only` (sbatch, salloc, srun): slurmctld runs the job_submit plugin for a job it
/// only tests, and the plugin answers with a quote instead of the estimate.
pub const QUOTE_VAR: &str = "GPUTOKENS_QUOTE";

/// The quote's job control variable when `argv` (the submitting command's own, from
/// `/proc/self/cmdline`: SPANK does not hand Slurm's own options to plugins) has `--test-only`, or
/// an abbreviation getopt takes for it (`--test`), among the options before the batch script
/// (`is_script`: the first argument naming a file); what follows it is the script's own.
pub fn quote_env(argv: &[String], is_script: impl Fn(&str) -> bool) -> Option<(&'static str, &'static str)> {
    let mut options = argv.iter().skip(1).take_while(|a| a.as_str() != "--" && !is_script(a));
    let test_only = |a: &str| a.len() >= "--test".len() && "--test-only".starts_with(a);
    options.any(|a| test_only(a)).then_some((QUOTE_VAR, "1"))
}

/// This process's arguments (`/proc/self/cmdline`); none where it cannot be read.
pub fn own_arguments() -> Vec<String> {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_name_is_one_valid_long_option() {
        let name = OPTION_NAME.to_str().unwrap();
        assert!(name.len() <= crate::bindings::SPANK_OPTION_MAXLEN as usize, "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{name}");
        assert!(!name.starts_with('-'), "SPANK adds the dashes");
        assert_eq!(OPTION_USAGE.to_str().unwrap(), "Show the most GPU tokens this job can cost");
    }

    #[test]
    fn test_only_asks_for_a_quote() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let script = |a: &str| a == "job.sh";
        let quote = Some(("GPUTOKENS_QUOTE", "1"));
        assert_eq!(quote_env(&args(&["sbatch", "--test-only", "--gres=gpu:1", "job.sh"]), script), quote);
        assert_eq!(quote_env(&args(&["sbatch", "--gres=gpu:1", "--test", "job.sh"]), script), quote, "abbreviated");
        assert_eq!(quote_env(&args(&["sbatch", "--gres=gpu:1", "job.sh"]), script), None);
        assert_eq!(quote_env(&args(&["sbatch", "job.sh", "--test-only"]), script), None, "the script's argument");
        assert_eq!(quote_env(&args(&["sbatch", "--wrap", "run --test-only"]), script), None, "a word inside another");
        assert_eq!(quote_env(&args(&["sbatch", "--te", "job.sh"]), script), None, "too short to be it");
        assert!(!own_arguments().is_empty(), "this test's own command line");
    }

    // One test: REQUESTED is per process, as in sbatch.
    #[test]
    fn only_the_users_option_sets_the_variable() {
        assert_eq!(control_env(), None, "not given");
        on_option(true);
        assert_eq!(control_env(), None, "slurmstepd passing it on is no request");
        on_option(false);
        assert_eq!(control_env(), Some(("GPUTOKENS_ESTIMATE", "1")));
    }
}
