//! `sbalance`: GPU token balances, shaped like `sshare` (-u, -a, -P, -n, -o, plus --json); a user's
//! newest entries (`--history`) and monthly statements (`--statement`).

use std::path::PathBuf;

use clap::Parser;
use gputokens::policy::Status;
use gputokens::protocol::{BalanceRow, Reply, Request};
use gputokens::statement::Month;
use gputokens::Config;

use crate::cli::statement_output;
use crate::error::{AccountdError, AccountdResult};
use gputokens_client::{Accountd, ClientError};

#[derive(Debug, Parser)]
#[command(name = "sbalance", version = crate::version(), about = "Show GPU token balances (like sshare)")]
pub struct Args {
    /// Users to show, comma separated (default: yourself).
    #[arg(short = 'u', long = "users", value_delimiter = ',', value_name = "USER[,USER]")]
    pub users: Vec<String>,
    /// Every user you may see.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Output '|'-separated without padding or trailing '|'.
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    /// Output '|'-separated, with a trailing '|'.
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// No header line.
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Columns to show, comma separated: User,Balance,Floor,Status,Used30d,NextGrant,Recovers.
    #[arg(short = 'o', long = "format", value_delimiter = ',', value_name = "FIELDS")]
    pub format: Vec<String>,
    /// Your newest ledger entries instead of balances: charges with their job, grants,
    /// replenishments (N, default 20; with -u, one user, yours unless you are an admin).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "20")]
    pub history: Option<usize>,
    /// Your monthly statement instead of balances: opening balance, grants, replenishment, refunds,
    /// charges per GPU type, closing balance (the current month: so far). Admins may add -u USER or -a.
    #[arg(long, value_name = "YYYY-MM", conflicts_with_all = ["history", "format"])]
    pub statement: Option<Month>,
    /// A login link to your status page in a browser (balance, history, forecast): it works once,
    /// within minutes; accountd makes it for you, as the kernel names you on its socket.
    #[arg(long, conflicts_with_all = ["history", "statement", "format", "users", "all", "json", "parsable2", "parsable"])]
    pub web: bool,
    /// With --statement: CSV (one row per user and line item) instead of a text statement.
    #[arg(long, requires = "statement", conflicts_with_all = ["json", "parsable2", "parsable"])]
    pub csv: bool,
    /// An account's token pool ([accounts] mode), with its members and what each spent this month.
    /// With --statement: the pool's statement, a line per member (admins and its coordinators).
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT", conflicts_with_all = ["history", "web", "users", "all"])]
    pub account: Option<String>,
    /// Every pool you may see (your accounts', those you coordinate), members indented, like `sshare -l`.
    #[arg(short = 'l', long = "long", conflicts_with_all = ["history", "statement", "web", "users", "all"])]
    pub long: bool,
    /// Borrow TOKENS against your next monthly grant, where the site allows it (`borrow_limit`):
    /// added now, taken back from that grant on the 1st.
    #[arg(long, value_name = "TOKENS", conflicts_with_all = ["history", "statement", "web", "users", "all", "account", "long"])]
    pub borrow: Option<String>,
    /// Configuration file (only the socket path is used).
    #[arg(long, env = "GPUTOKENS_CONF", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    User,
    Balance,
    Floor,
    Status,
    Used30d,
    NextGrant,
    Recovers,
}

/// The default columns, in order.
const DEFAULT_FIELDS: [Field; 6] =
    [Field::User, Field::Balance, Field::Floor, Field::Status, Field::Used30d, Field::NextGrant];
/// Every column `-o` accepts.
const ALL_FIELDS: [Field; 7] =
    [Field::User, Field::Balance, Field::Floor, Field::Status, Field::Used30d, Field::NextGrant, Field::Recovers];

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::User => "User",
            Field::Balance => "Balance",
            Field::Floor => "Floor",
            Field::Status => "Status",
            Field::Used30d => "Used30d",
            Field::NextGrant => "NextGrant",
            Field::Recovers => "Recovers",
        }
    }

    fn parse(text: &str) -> AccountdResult<Field> {
        ALL_FIELDS.into_iter().find(|f| f.name().eq_ignore_ascii_case(text.trim())).ok_or_else(|| {
            let valid: Vec<&str> = ALL_FIELDS.iter().map(|f| f.name()).collect();
            AccountdError::Refused(format!("unknown field '{text}' in --format; valid fields: {}", valid.join(",")))
        })
    }

    fn value(self, row: &BalanceRow) -> String {
        match self {
            Field::User => row.user.clone(),
            Field::Balance => row.balance.to_string(),
            Field::Floor => row.floor.to_string(),
            Field::Status => row.status.as_str().to_string(),
            Field::Used30d => row.used_30d.iter().map(|(t, v)| format!("{t}={v}")).collect::<Vec<_>>().join(","),
            Field::NextGrant => row.next_grant.as_ref().map(|(d, a)| format!("{d} +{a}")).unwrap_or_default(),
            Field::Recovers => row.recovers.clone().unwrap_or_default(),
        }
    }
}

/// The config as sbalance needs it: only where accountd answers, `[paths] socket` and `[accountd]`
/// (the rest is accountd's and the plugins'), so an admin's mistake elsewhere in the file never stops
/// every user's sbalance. A file that cannot be read, or whose socket path or `[accountd]` is wrong,
/// is still an error.
fn socket_config(path: &std::path::Path) -> AccountdResult<Config> {
    let (config, problems) = Config::load_lenient(path);
    let where_accountd_is = |key: &str| matches!(key, "" | "paths" | "paths.socket") || key.starts_with("accountd");
    let fatal = problems.into_iter().find(|p| where_accountd_is(&p.key));
    match fatal {
        Some(problem) => Err(problem.into_error().into()),
        None => Ok(config),
    }
}

/// accountd as this host reaches it: its socket here, else its listener over the network.
fn accountd(config: &Config) -> Accountd {
    Accountd::of(config, crate::CLIENT_TIMEOUT)
}

pub fn run(args: Args) -> AccountdResult {
    let fields = if args.format.is_empty() {
        DEFAULT_FIELDS.to_vec()
    } else {
        args.format.iter().map(|f| Field::parse(f)).collect::<AccountdResult<Vec<_>>>()?
    };
    let config = socket_config(&Config::resolve_path(args.config.as_deref()))?;
    if let Some(limit) = args.history {
        return history(&config, &args, limit);
    }
    if let Some(month) = args.statement {
        return statement(&config, &args, month);
    }
    if args.web {
        return web_link(&config);
    }
    if let Some(amount) = &args.borrow {
        return borrow(&config, amount);
    }
    if args.account.is_some() || args.long {
        return pools(&config, &args);
    }
    let request = Request::Balances { users: args.users.clone(), all: args.all };
    let (rows, shadow) = match accountd(&config).call(&request)? {
        Reply::Balances { rows, shadow } => (rows, shadow),
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    let out = if args.json {
        json(&rows)
    } else if args.parsable2 || args.parsable {
        let header: Vec<&str> = fields.iter().map(|f| f.name()).collect();
        let cells: Vec<Vec<String>> = rows.iter().map(|r| fields.iter().map(|f| f.value(r)).collect()).collect();
        delimited(&header, &cells, !args.noheader, args.parsable)
    } else {
        table(&rows, &fields, !args.noheader)
    };
    crate::out!("{out}");
    // Under the table a person reads (-n, -P and --json are for scripts): what a status in debt
    // means, when it ends and whom to ask; shadow mode.
    let for_a_person = !args.noheader && !args.json && !args.parsable2 && !args.parsable;
    if for_a_person {
        for line in rows.iter().filter_map(|row| in_debt(row, config.admission.contact.as_deref())) {
            crate::outln!("{line}");
        }
        for line in rows.iter().flat_map(borrowed_lines) {
            crate::outln!("{line}");
        }
    }
    if let Some(shadow) = shadow.filter(|_| for_a_person) {
        crate::out!("\n{}", crate::cli::shadow_output::text(&shadow));
    }
    Ok(())
}

/// A sentence for each of the row's borrowed runs (`[lending]`).
fn borrowed_lines(row: &BalanceRow) -> impl Iterator<Item = String> + '_ {
    row.borrowed.iter().map(move |run| match &run.reclaimed_for {
        Some(waiting) => format!(
            "{}: job {} borrowed idle GPUs from {}; reclaimed for job {waiting} (requeued): that run is not charged.",
            row.user, run.job_id, run.started
        ),
        None => format!(
            "{}: job {} borrowed idle GPUs from {}: requeued if a user in credit waits for them (that run then not \
             charged); charged, less the site's discount, if it finishes.",
            row.user, run.job_id, run.started
        ),
    })
}

/// One sentence for a row in debt: what the status means, when it recovers (with the replenishment
/// it has), what still runs and whom to ask; None for a row that is ok.
fn in_debt(row: &BalanceRow, contact: Option<&str>) -> Option<String> {
    let ask = gputokens::decision::rules::ask_for_tokens(contact);
    let recovers = match (row.status, &row.recovers) {
        (Status::Ok, _) => return None,
        (_, Some(day)) => format!("recovers on {day}"),
        (_, None) => "no replenishment brings it back: only a grant does".to_string(),
    };
    let runs = match row.status {
        Status::Blocked => "CPU-only jobs still run",
        _ => "CPU-only jobs are not affected",
    };
    Some(format!(
        "{}: {}: {} ({recovers}). {runs}; {ask}.",
        row.user,
        row.status.as_str(),
        row.status.explanation(row.floor)
    ))
}

/// `-A ACCOUNT` / `-l`: pools as a tree of account rows with their members (`-A` alone: the row).
fn pools(config: &Config, args: &Args) -> AccountdResult {
    let request = Request::Pools { account: args.account.clone() };
    let (mode, rows) = match accountd(config).call(&request)? {
        Reply::Pools { mode, rows } => (mode, rows),
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    if args.json {
        crate::outln!("{}", crate::cli::pools_output::json(mode, &rows));
        return Ok(());
    }
    let parsable = args.parsable2 || args.parsable;
    for line in crate::cli::pools_output::lines(&rows, true, parsable, !args.noheader) {
        let end = if args.parsable { "|" } else { "" };
        crate::outln!("{line}{end}");
    }
    Ok(())
}

/// `--history`: one user's newest entries, oldest first, in the same table or `-P` shapes.
fn history(config: &Config, args: &Args, limit: usize) -> AccountdResult {
    let user = match args.users.as_slice() {
        [] => None,
        [user] => Some(user.clone()),
        _ => return Err(AccountdError::Refused("--history shows one user: give at most one -u".into())),
    };
    let (user, entries) = match accountd(config).call(&Request::History { user, limit: Some(limit) })? {
        Reply::History { user, entries } => (user, entries),
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    if args.json {
        crate::out!("{}", crate::balance_json::pretty(&crate::balance_json::History::of(&user, &entries)));
        return Ok(());
    }
    const HEADER: [&str; 6] = ["Time", "Kind", "Amount", "Balance", "JobID", "Reason"];
    let cells: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                gputokens::time::format_local(e.at),
                e.kind.as_str().to_string(),
                crate::cli::admin::signed(e.amount),
                e.balance_after.to_string(),
                e.job_id.as_deref().map(|job| config.clusters.job_shown(job)).unwrap_or_default(),
                gputokens::free_text::printable(&e.reason).into_owned(),
            ]
        })
        .collect();
    let out = if args.parsable2 || args.parsable {
        delimited(&HEADER, &cells, !args.noheader, args.parsable)
    } else {
        // Left-aligned text, right-aligned numbers, as wide as the widest value.
        let width = |i: usize| cells.iter().map(|c| c[i].chars().count()).chain([HEADER[i].len()]).max().unwrap_or(0);
        let widths: Vec<usize> = (0..HEADER.len()).map(width).collect();
        let line = |values: [&str; 6]| -> String {
            let [time, kind, amount, balance, job, reason] = values;
            let (w0, w1, w2, w3, w4) = (widths[0], widths[1], widths[2], widths[3], widths[4]);
            format!("{time:<w0$} {kind:<w1$} {amount:>w2$} {balance:>w3$} {job:<w4$} {reason}").trim_end().to_string()
                + "\n"
        };
        let mut out = String::new();
        if !args.noheader {
            out += &line(HEADER);
        }
        for c in &cells {
            out += &line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]]);
        }
        out
    };
    crate::out!("{out}");
    Ok(())
}

/// `--borrow`: borrows against the caller's next monthly grant and says what it did.
fn borrow(config: &Config, amount: &str) -> AccountdResult {
    let amount: gputokens::Tokens =
        amount.parse().map_err(|e| AccountdError::Refused(format!("--borrow {amount}: {e}")))?;
    let entries = match accountd(config).call(&Request::Borrow { amount })? {
        Reply::Recorded { entries, .. } => entries,
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    for e in &entries {
        crate::outln!("{}: balance now {}", e.reason, e.balance_after);
    }
    Ok(())
}

/// `--web`: asks accountd for a login link and prints it.
fn web_link(config: &Config) -> AccountdResult {
    let (url, expires) = match accountd(config).call(&Request::WebLogin)? {
        Reply::WebLink { url, expires } => (url, expires),
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    let minutes = ((expires - gputokens::time::now()).max(0) + 59) / 60;
    crate::outln!("Open this link in your browser within {minutes} min (it works once, and only for you):\n  {url}");
    Ok(())
}

/// `--statement`: one user's (yours by default) or, with -a, every user's statement of `month`.
fn statement(config: &Config, args: &Args, month: Month) -> AccountdResult {
    let user = match args.users.as_slice() {
        [] => None,
        [user] => Some(user.clone()),
        _ => return Err(AccountdError::Refused("--statement shows one user (-u USER) or all (-a)".into())),
    };
    let request = Request::Statement { month, user, all: args.all, account: args.account.clone() };
    let mut statements = match accountd(config).call(&request)? {
        Reply::Statements { statements } => statements,
        other => return Err(ClientError::Unexpected(Box::new(other)).into()),
    };
    // A ledger of several clusters: each job with its cluster (`old:41`), as the history shows it.
    for statement in &mut statements {
        statement_output::show_jobs(statement, &config.clusters);
    }
    let out = if args.json {
        statement_output::json(&statements)
    } else if args.csv {
        let mut out =
            if args.noheader { String::new() } else { statement_output::csv_record(&statement_output::ROW_HEADER) };
        for row in statements.iter().flat_map(statement_output::rows) {
            out += &statement_output::csv_record(&row);
        }
        out
    } else if args.parsable2 || args.parsable {
        let cells: Vec<Vec<String>> = statements.iter().flat_map(statement_output::parsable_cells).collect();
        delimited(&statement_output::ROW_HEADER, &cells, !args.noheader, args.parsable)
    } else {
        let texts: Vec<String> = statements.iter().map(|s| statement_output::text(s, !args.noheader)).collect();
        texts.join("\n")
    };
    crate::out!("{out}");
    Ok(())
}

/// `-P` (and `-p`, with a trailing `|`): '|'-separated lines, the header first unless `-n`.
fn delimited(header: &[&str], cells: &[Vec<String>], show_header: bool, trailing: bool) -> String {
    let end = if trailing { "|\n" } else { "\n" };
    let mut out = String::new();
    if show_header {
        out += &header.join("|");
        out += end;
    }
    for row in cells {
        out += &row.join("|");
        out += end;
    }
    out
}

/// sshare's look: right-aligned columns under a dashed rule, as wide as their widest value.
fn table(rows: &[BalanceRow], fields: &[Field], header: bool) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|r| fields.iter().map(|f| f.value(r)).collect()).collect();
    let widths: Vec<usize> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| cells.iter().map(|c| c[i].len()).chain([f.name().len(), 10]).max().unwrap_or(10))
        .collect();
    let line = |values: Vec<String>| -> String {
        let padded: Vec<String> = values.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect();
        padded.join(" ") + "\n"
    };
    let mut out = String::new();
    if header {
        out += &line(fields.iter().map(|f| f.name().to_string()).collect());
        out += &line(widths.iter().map(|w| "-".repeat(*w)).collect());
    }
    for c in cells {
        out += &line(c);
    }
    out
}

fn json(rows: &[BalanceRow]) -> String {
    crate::balance_json::pretty(&crate::balance_json::Balances::of(rows))
}
