//! `gputokens-agent`'s command line.

use std::path::PathBuf;

use clap::Parser;

/// gputokens' node agent: samples this node's GPUs through NVML every [agent] interval and posts
/// them to accountd ([agent] report_to). One per GPU node, as root.
#[derive(Debug, Parser)]
#[command(name = "gputokens-agent", version = crate::version())]
pub struct Cli {
    /// Configuration file (the same /etc/slurm/gputokens.toml accountd reads).
    #[arg(long, env = "GPUTOKENS_CONF", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The node's Slurm name (default: `hostname -s`).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Sample and post once, then exit (1 when the post failed).
    #[arg(long)]
    pub once: bool,
}
