#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use gputokens::file_trust::untrusted_with;
use gputokens::Config;
use gputokens_agent::cli::Cli;
use gputokens_agent::error::{AgentError, AgentResult};

fn main() -> ExitCode {
    let cli = Cli::parse();
    gputokens::daemon::logging::init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputokens-agent: {e}");
            e.exit_code()
        }
    }
}

fn run(cli: Cli) -> AgentResult {
    let path = Config::resolve_path(cli.config.as_deref());
    // What the agent takes orders from must be root's (or the SlurmUser's, for the jobs directory
    // the SPANK plugin writes): a config anyone can edit points the reports elsewhere, a jobs
    // directory anyone can write tells the agent which GPUs a job holds.
    refuse(untrusted_with(&path, "the config file", None))?;
    let config = Config::load(&path).map_err(|e| match path.exists() {
        true => AgentError::from(e),
        false => AgentError::Refused(format!(
            "{e}: a GPU node needs the site's gputokens.toml (as it needs slurm.conf): copy it from the \
             accountd host, or name it with --config"
        )),
    })?;
    refuse(untrusted_with(&config.agent.jobs_dir, "agent.jobs_dir", Some(&config.slurm_user)))?;
    gputokens_agent::run::run(&config, cli.node, cli.once)
}

fn refuse(why: Option<String>) -> AgentResult {
    why.map_or(Ok(()), |why| Err(AgentError::Refused(why)))
}
