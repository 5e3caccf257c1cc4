//! Plugstack arguments: `conf=PATH` (the gputokens TOML file; default `$GPUTOKENS_CONF`, else
//! /etc/slurm/gputokens.toml), `jobs_dir=PATH` (where slurmstepd records each job's GPUs; default
//! /run/gputokens/jobs) and `nvml_library=PATH` (the NVML library that names them by UUID; default
//! libnvidia-ml.so.1, found by the dynamic linker). An unknown or malformed argument is reported and
//! ignored: the plugin never stops a job.

use std::path::PathBuf;

/// The same default as the agent's `[agent] jobs_dir`.
pub const DEFAULT_JOBS_DIR: &str = gputokens::config::DEFAULT_JOBS_DIR;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub conf: Option<PathBuf>,
    pub jobs_dir: PathBuf,
    pub nvml_library: PathBuf,
}

impl Default for Args {
    fn default() -> Self {
        Args { conf: None, jobs_dir: DEFAULT_JOBS_DIR.into(), nvml_library: crate::nvml::DEFAULT_LIBRARY.into() }
    }
}

/// The arguments and one problem per argument that was not understood.
pub fn parse(args: &[String]) -> (Args, Vec<String>) {
    let mut out = Args::default();
    let mut problems = Vec::new();
    for arg in args {
        match arg.split_once('=') {
            Some(("conf", v)) if !v.is_empty() => out.conf = Some(v.into()),
            Some(("jobs_dir", v)) if !v.is_empty() => out.jobs_dir = v.into(),
            Some(("nvml_library", v)) if !v.is_empty() => out.nvml_library = v.into(),
            _ => problems.push(format!(
                "ignoring plugstack argument {arg:?} (known: conf=PATH, jobs_dir=PATH, nvml_library=PATH)"
            )),
        }
    }
    (out, problems)
}

impl Args {
    /// The gputokens config: `conf=`, else `$GPUTOKENS_CONF`, else /etc/slurm/gputokens.toml.
    pub fn config_path(&self) -> PathBuf {
        gputokens::Config::resolve_path(self.conf.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_arguments_and_reports_the_rest() {
        let (a, p) = parse(&["conf=/x.toml".into(), "jobs_dir=/tmp/j".into(), "nvml_library=/l/nvml.so".into()]);
        assert_eq!(
            a,
            Args { conf: Some("/x.toml".into()), jobs_dir: "/tmp/j".into(), nvml_library: "/l/nvml.so".into() }
        );
        assert!(p.is_empty());
        assert_eq!(a.config_path(), PathBuf::from("/x.toml"));
        let (a, p) = parse(&["bogus".into(), "jobs_dir=".into(), "nvml_library=".into()]);
        assert_eq!(a, Args::default());
        assert_eq!(a.nvml_library, PathBuf::from("libnvidia-ml.so.1"));
        assert_eq!(p.len(), 3);
    }
}
