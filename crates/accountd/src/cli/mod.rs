//! `accountd`'s command line.

pub mod admin;
pub mod backup;
pub mod backup_rotation;
pub mod expires_arg;
pub mod journal_check;
pub mod ledger_copy;
pub mod now_arg;
pub mod pools_output;
#[cfg(test)]
mod restore_tests;
pub mod sacct_file;
pub mod sbalance;
pub mod shadow_output;
pub mod statement_output;
pub mod stdout;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "accountd", version = crate::version(), about = "gputokens: GPU token accounting for Slurm")]
pub struct Cli {
    /// Configuration file.
    #[arg(long, global = true, env = "GPUTOKENS_CONF", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: the socket for sbalance and admin commands, and the periodic cycles.
    Serve,
    /// Run one full cycle (charge from sacct and squeue, replenish, snapshot) and exit; for cron and tests.
    Tick {
        #[command(flatten)]
        time: TimeArg,
        /// Replenish and write the snapshot only (e.g. while slurmdbd is down).
        #[arg(long)]
        skip_charge: bool,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Charge job records from a file of `sacct -X -D -P -o JobIDRaw,User,Account,AllocTRES,ElapsedRaw,Start,End,State,NodeList` (End, State and NodeList optional; without Account, pools pay for nothing).
    Charge {
        /// The sacct output ('-' reads standard input).
        #[arg(long, value_name = "FILE")]
        sacct_file: PathBuf,
        #[command(flatten)]
        time: TimeArg,
        #[command(flatten)]
        wait: WaitArg,
    },
    /// Check or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Change balances and read histories (root, the SlurmUser and configured admins only).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Before 0.2.0 the node agent: now `gputokens-agent` (its own package), which this runs with
    /// the same arguments, so that a unit or script of 0.1.0 keeps working through the upgrade.
    #[command(hide = true)]
    Agent {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Debug, Args)]
pub struct TimeArg {
    /// Act as if it were this time (a unix time, RFC 3339 or local YYYY-MM-DDTHH:MM:SS); for replays and tests.
    #[arg(long, value_name = "TIME")]
    pub now: Option<String>,
}

#[derive(Debug, Args)]
pub struct WaitArg {
    /// How long to wait for a cycle already running (of `accountd serve` or another tick) to end
    /// before giving up, naming it; cycles never run two at a time.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = humantime::parse_duration)]
    pub wait: std::time::Duration,
}

/// An amount of tokens, why, and an optional idempotency key.
#[derive(Debug, Clone, clap::Args)]
pub struct ChangeArgs {
    #[arg(allow_hyphen_values = true)]
    pub amount: String,
    #[arg(long)]
    pub reason: String,
    /// Idempotency key: repeating the command with the same key changes nothing.
    #[arg(long)]
    pub key: Option<String>,
}

/// A grant: an amount, why, an optional key, and optionally when what is left of it expires.
#[derive(Debug, Clone, clap::Args)]
pub struct GrantArgs {
    #[command(flatten)]
    pub change: ChangeArgs,
    /// When what is left of the grant expires (charges use it first): a duration (30d), a time
    /// (2026-12-31T18:00:00) or a day (2026-12-31: at its end).
    #[arg(long, value_name = "WHEN")]
    pub expires: Option<String>,
}

/// A pool's rules on the command line; unset ones keep theirs (a new pool: [accounts]' defaults).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PoolRuleArgs {
    #[arg(long, allow_hyphen_values = true)]
    pub daily: Option<String>,
    #[arg(long, allow_hyphen_values = true)]
    pub monthly: Option<String>,
    #[arg(long, allow_hyphen_values = true, conflicts_with = "no_cap")]
    pub cap: Option<String>,
    #[arg(long)]
    pub no_cap: bool,
    #[arg(long, allow_hyphen_values = true)]
    pub floor: Option<String>,
    /// What one member may spend of the pool per calendar month.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "no_user_limit")]
    pub user_limit: Option<String>,
    #[arg(long)]
    pub no_user_limit: bool,
    /// The account whose pool this one draws on: its charges count there too, and that pool's
    /// floor and per-user limit hold for its jobs.
    #[arg(long, conflicts_with = "no_parent")]
    pub parent: Option<String>,
    /// It draws on no pool any more.
    #[arg(long)]
    pub no_parent: bool,
    /// The pools drawing on this one may go below their own floor while it is above its own.
    #[arg(long, conflicts_with = "no_lends")]
    pub lends: bool,
    #[arg(long)]
    pub no_lends: bool,
}

#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Give a Slurm account a token pool (admins).
    Add {
        account: String,
        #[arg(long, allow_hyphen_values = true)]
        initial: Option<String>,
        #[command(flatten)]
        rules: PoolRuleArgs,
    },
    /// Change a pool's rules (admins); the change is an entry of the pool.
    Set {
        account: String,
        #[command(flatten)]
        rules: PoolRuleArgs,
        /// Idempotency key: a change under a key used before changes nothing (safe to retry).
        #[arg(long)]
        key: Option<String>,
    },
    /// Add tokens to a pool (admins, and the account's coordinators).
    Grant {
        account: String,
        #[command(flatten)]
        grant: GrantArgs,
    },
    /// Add or remove tokens of a pool (e.g. -5 or +2.5): admins.
    Adjust {
        account: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Make a dated sub-allocation inside a pool (admins, and that pool's coordinators): a pool of
    /// the Slurm account ACCOUNT (made under the pool's account with sacctmgr first) that draws on
    /// it, with AMOUNT tokens of its own, open from --from until --until. Jobs name it with -A.
    Allocate {
        account: String,
        /// The account whose pool it is made in.
        #[arg(long = "in", value_name = "ACCOUNT")]
        parent: String,
        #[arg(long)]
        amount: String,
        /// When it opens: a day (its start), a time, a duration from now, or "now".
        #[arg(long, default_value = "now")]
        from: String,
        /// When it closes: a day (its end), a time, or a duration from now.
        #[arg(long)]
        until: String,
    },
    /// Move tokens from one pool to another in one step (admins, and coordinators of both).
    Transfer {
        from: String,
        to: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Create many pools from a TOML file, a table per account with any of initial, daily, monthly,
    /// cap, floor, user_limit (e.g. `[lab]` `monthly = 30`); accounts that have a pool are left as
    /// they are. One transaction: all or none.
    Import { file: PathBuf },
    /// The pools you may see, or one account's, with its members.
    Show {
        account: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a configuration file: exit 0 when valid, 2 with the offending key otherwise.
    Check {
        /// File to check (default: --config, $GPUTOKENS_CONF or /etc/slurm/gputokens.toml).
        file: Option<PathBuf>,
        /// Also check the running Slurm's configuration against it (scontrol, sinfo, sacctmgr):
        /// the job_submit plugin, GPU accounting per type, prices, deprioritizing, SlurmUser, and this
        /// host's plugstack.conf (spank_gputokens.so and its jobs_dir).
        #[arg(long)]
        slurm: bool,
    },
    /// Print the commented example configuration.
    Default,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Copy every row of the ledger into an empty one, in one transaction, and show both hold the
    /// same (`admin verify --fingerprint` of each). TARGET is mysql://USER@HOST/DATABASE (its
    /// tables made there) or a new SQLite file. From a SQLite ledger, stop `accountd serve` first:
    /// what it wrote after the copy would stay behind. Then set [ledger] url and start it again.
    Copy {
        #[arg(long, value_name = "TARGET")]
        to: String,
        /// Copy this SQLite file instead of the configured ledger.
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// The MariaDB password, the file's first line (default: [ledger] password_file).
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Add tokens to a user's balance (AMOUNT positive, up to 6 decimals).
    Grant {
        user: String,
        #[command(flatten)]
        grant: GrantArgs,
    },
    /// Add or remove tokens (e.g. -5 or +2.5).
    Adjust {
        user: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Give back what a job was charged.
    Refund {
        job_id: String,
        #[arg(long)]
        reason: String,
    },
    /// Every ledger entry of a user.
    History {
        user: String,
        /// Only the newest N entries.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// What gputokens did to jobs and nodes: preemptions, requeues, drains (newest first).
    Actions {
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Import the original system's JSON state file ({"user": tokens, ...}) for users new to the ledger.
    Import { file: PathBuf },
    /// Check the ledger's invariants (each balance is the sum of its entries, every entry is on its
    /// user's history chain, charges agree with job_charges and usage_days, SQLite's integrity) and
    /// run the journal check: exit 2 naming each problem. Reads the ledger file itself, beside a
    /// running accountd, read-only: a missing ledger is refused, never created. With FILE, checks
    /// that copy (a backup) instead.
    Verify {
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// Also print each table's rows and a digest of them: two ledgers that print the same
        /// hold the same rows (after `admin ledger copy`).
        #[arg(long)]
        fingerprint: bool,
    },
    /// The ledger's database: copy it to another (SQLite to the site's MariaDB, or back to a file).
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// Copy the ledger, consistently, beside a running accountd (SQLite's online backup): written
    /// to a temporary file beside FILE, then renamed to FILE (mode 0600). A directory for FILE
    /// means `ledger-YYYY-MM-DDTHH-MM-SS.sqlite` in it (local time), as the nightly timer does.
    Backup {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
        /// With a directory: afterwards remove its `ledger-*.sqlite` backups older than N days.
        #[arg(long, value_name = "N")]
        keep_days: Option<u32>,
    },
    /// After a restore: list every admin change in the admin journal ([paths] admin_journal) that
    /// the ledger lacks, with the command that enters it again under its original key; exit 2
    /// while any is missing.
    JournalCheck {
        /// The journal to read (default: [paths] admin_journal).
        #[arg(long, value_name = "FILE")]
        journal: Option<PathBuf>,
    },
    /// Token pools of Slurm accounts ([accounts] mode): create, change, grant, transfer, show.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// Print NODE's agent token for `[agent] auth = "token"`: the HMAC of the node's name under the
    /// site secret in `[agent] token_file`. Put it in that node's token_file (mode 0600, root).
    NodeToken { node: String },
}
