//! The line sbatch/salloc/srun show the user: their balance and status, asked from accountd over its
//! socket (accountd knows the caller from SO_PEERCRED). Plain blocking std I/O with 1 s timeouts:
//! no runtime in the plugin, and a missing or slow accountd costs at most about a second.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gputokens::config::Config;
use gputokens::policy::Status;
use gputokens::protocol::{self, BalanceRow, Reply, Request};

const TIMEOUT: Duration = Duration::from_secs(1);

/// `[paths] socket` of the gputokens config, read by gputokens' lenient loader as every plugin reads
/// it; the default when the file or the key is missing. A file that cannot be read or parsed, or a
/// bad socket path, is an error rather than the default: asking some other socket would only mislead.
pub fn socket_path(config: &Path) -> Result<PathBuf, String> {
    let (settings, problems) = Config::load_lenient(config);
    match problems.into_iter().find(|p| p.concerns("paths.socket") && !p.is_missing_file()) {
        Some(problem) => Err(problem.to_string()),
        None => Ok(settings.paths.socket),
    }
}

/// Whether the site enforces (`[admission] enforce`, true unless the file says false): in shadow mode
/// the balance line says that nothing is refused yet.
pub fn enforced(config: &Path) -> bool {
    Config::load_lenient(config).0.admission.enforce
}

/// What the balance line adds in shadow mode.
pub const SHADOW_NOTE: &str = " (gputokens is in shadow mode: no job is refused or held yet)";

/// The caller's own balance row.
pub fn own_balance(socket: &Path) -> Result<BalanceRow, String> {
    let io = |e: std::io::Error| format!("accountd at {}: {e}", socket.display());
    let mut stream = UnixStream::connect(socket).map_err(io)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let reply = protocol::exchange(&mut stream, &Request::Balances { users: Vec::new(), all: false }).map_err(io)?;
    match serde_json::from_str(&reply) {
        Ok(Reply::Balances { rows, .. }) => rows.into_iter().next().ok_or_else(|| "accountd sent no balance".into()),
        Ok(Reply::Error { message, .. }) => Err(message),
        Ok(_) => Err("unexpected reply from accountd".into()),
        Err(e) => Err(format!("unreadable reply from accountd: {e}")),
    }
}

/// The line for the user, e.g. `balance 46 tokens (ok); run 'sbalance' for details.`; in debt the
/// status is explained (gputokens' one wording of it), a healthy balance needs no words.
pub fn message(row: &BalanceRow) -> String {
    let state = match row.status {
        Status::Ok => "ok".to_string(),
        debt => format!("{}: {}", debt.as_str(), debt.explanation(row.floor)),
    };
    // A grant about to end: its tokens are used first, and what is left then expires.
    let expiring = match &row.expiring {
        Some(e) => format!("; {} tokens of a grant expire at {}", e.tokens, e.at),
        None => String::new(),
    };
    let Some(pool) = &row.default_pool else {
        return format!("balance {} tokens ({state}){expiring}; run 'sbalance' for details.", row.balance);
    };
    let pool_state = match pool.status {
        Status::Ok => "ok".to_string(),
        debt => format!("{}: {}", debt.as_str(), debt.explanation(pool.floor)),
    };
    format!(
        "GPU jobs without -A are charged to account {}: {} tokens ({pool_state}); your own balance {} tokens \
         ({state}){expiring}; run 'sbalance -l' for details.",
        pool.account, pool.balance, row.balance
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::Tokens;

    fn row(balance: i64, status: Status) -> BalanceRow {
        BalanceRow {
            user: "bob".into(),
            balance: Tokens::whole(balance),
            floor: Tokens::whole(-10),
            status,
            used_30d: Default::default(),
            next_grant: None,
            recovers: None,
            in_ledger: true,
            default_pool: None,
            expiring: None,
        }
    }

    #[test]
    fn messages() {
        assert_eq!(message(&row(46, Status::Ok)), "balance 46 tokens (ok); run 'sbalance' for details.");
        assert!(message(&row(-3, Status::Overdraft)).starts_with("balance -3 tokens (overdraft: "));
        assert_eq!(
            message(&row(-11, Status::Blocked)),
            "balance -11 tokens (blocked: GPU jobs are refused until the balance is above the floor -10 again); run \
             'sbalance' for details."
        );
    }

    #[test]
    fn a_grant_ending_soon_is_named() {
        let mut r = row(146, Status::Ok);
        r.expiring = Some(gputokens::protocol::Expiring {
            tokens: Tokens::whole(42),
            at: "2026-11-26T10:14:00".into(),
            ends: 0,
        });
        assert_eq!(
            message(&r),
            "balance 146 tokens (ok); 42 tokens of a grant expire at 2026-11-26T10:14:00; run 'sbalance' for details."
        );
    }

    #[test]
    fn with_pools_the_line_names_the_pool_jobs_without_a_flag_are_charged_to() {
        let mut r = row(46, Status::Ok);
        let pool = gputokens::protocol::PoolBalance {
            account: "lab".into(),
            balance: Tokens::whole(-10),
            floor: Tokens::whole(-10),
            status: Status::Blocked,
        };
        r.default_pool = Some(pool);
        assert_eq!(
            message(&r),
            "GPU jobs without -A are charged to account lab: -10 tokens (blocked: GPU jobs are refused until the \
             balance is above the floor -10 again); your own balance 46 tokens (ok); run 'sbalance -l' for details."
        );
    }

    #[test]
    fn socket_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("g.toml");
        let default = PathBuf::from("/run/gputokens/accountd.sock");
        assert_eq!(socket_path(&conf).unwrap(), default);
        std::fs::write(&conf, "[paths]\nsnapshot = \"/x\"\n").unwrap();
        assert_eq!(socket_path(&conf).unwrap(), default);
        std::fs::write(&conf, "[paths]\nsocket = \"/s.sock\"\n[admission]\nmode = \"guess\"\n").unwrap();
        assert_eq!(socket_path(&conf).unwrap(), PathBuf::from("/s.sock"), "other keys' problems do not matter");
        std::fs::write(&conf, "[paths\n").unwrap();
        assert!(socket_path(&conf).unwrap_err().contains("not valid TOML"));
        std::fs::write(&conf, "[paths]\nsocket = 5\n").unwrap();
        assert!(socket_path(&conf).unwrap_err().contains("paths.socket"));
        assert!(socket_path(dir.path()).unwrap_err().contains("cannot read"), "there, but unreadable");
    }

    #[test]
    fn no_accountd_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        assert!(own_balance(&dir.path().join("none.sock")).is_err());
    }
}
