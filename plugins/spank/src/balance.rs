//! The line sbatch/salloc/srun show the user: their balance and status, asked from accountd over its
//! socket on its own host (accountd knows the caller from SO_PEERCRED), else over the network at
//! `[accountd] urls` with a MUNGE credential (gputokens-client). Blocking I/O bounded at a second in
//! all: no runtime in the plugin, and a missing or slow accountd costs at most about a second.

use std::path::Path;
use std::time::Duration;

use gputokens::config::Config;
use gputokens::policy::Status;
use gputokens::protocol::{BalanceRow, Reply, Request};
use gputokens_client::{Accountd, ClientError};

const TIMEOUT: Duration = Duration::from_secs(1);

/// accountd as this host reaches it, from `[paths] socket` and `[accountd]` of the gputokens config,
/// read by gputokens' lenient loader as every plugin reads it; the defaults when the file or the keys
/// are missing. A file that cannot be read or parsed, or a bad socket path or `[accountd]`, is an
/// error rather than the default: asking somewhere else would only mislead.
pub fn accountd(config: &Path) -> Result<Accountd, String> {
    let (settings, problems) = Config::load_lenient(config);
    let where_accountd_is = |p: &gputokens::config::Problem| {
        ["paths.socket", "accountd.urls", "accountd.ca_file"].iter().any(|k| p.concerns(k))
    };
    match problems.into_iter().find(|p| where_accountd_is(p) && !p.is_missing_file()) {
        Some(problem) => Err(problem.to_string()),
        None => Ok(Accountd::of(&settings, TIMEOUT)),
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
pub fn own_balance(accountd: &Accountd) -> Result<BalanceRow, String> {
    match accountd.call(&Request::Balances { users: Vec::new(), all: false }) {
        Ok(Reply::Balances { rows, .. }) => rows.into_iter().next().ok_or_else(|| "accountd sent no balance".into()),
        Ok(other) => Err(ClientError::Unexpected(Box::new(other)).to_string()),
        Err(e) => Err(e.to_string()),
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
            borrowed: Vec::new(),
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
    fn where_accountd_is_comes_from_the_config() {
        use gputokens_client::Route;
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("g.toml");
        let socket = |route| match route {
            Route::Socket(path) => path,
            other => panic!("{other:?}"),
        };
        let default = std::path::PathBuf::from("/run/gputokens/accountd.sock");
        assert_eq!(socket(accountd(&conf).unwrap().route), default);
        std::fs::write(&conf, "[paths]\nsnapshot = \"/x\"\n").unwrap();
        assert_eq!(socket(accountd(&conf).unwrap().route), default);
        std::fs::write(&conf, "[paths]\nsocket = \"/s.sock\"\n[admission]\nmode = \"guess\"\n").unwrap();
        assert_eq!(
            socket(accountd(&conf).unwrap().route),
            std::path::PathBuf::from("/s.sock"),
            "other keys' problems do not matter"
        );
        // No socket here, and where accountd answers over the network: asked there.
        std::fs::write(&conf, "[paths]\nsocket = \"/s.sock\"\n[accountd]\nurls = [\"https://acct:9817\"]\n").unwrap();
        let route = accountd(&conf).unwrap().route;
        assert_eq!(route, Route::Network { urls: vec!["https://acct:9817".into()], ca_file: None });
        std::fs::write(&conf, "[paths\n").unwrap();
        assert!(accountd(&conf).unwrap_err().contains("not valid TOML"));
        std::fs::write(&conf, "[paths]\nsocket = 5\n").unwrap();
        assert!(accountd(&conf).unwrap_err().contains("paths.socket"));
        std::fs::write(&conf, "[accountd]\nurls = [\"acct:9817\"]\n").unwrap();
        assert!(accountd(&conf).unwrap_err().contains("accountd.urls"));
        assert!(accountd(dir.path()).unwrap_err().contains("cannot read"), "there, but unreadable");
    }

    #[test]
    fn no_accountd_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("g.toml"),
            format!("[paths]\nsocket = \"{}/none.sock\"\n", dir.path().display()),
        )
        .unwrap();
        let started = std::time::Instant::now();
        assert!(own_balance(&accountd(&dir.path().join("g.toml")).unwrap()).is_err());
        // Nothing listens on port 9 here: refused at once, well within the line's bound.
        let conf = dir.path().join("net.toml");
        std::fs::write(
            &conf,
            format!(
                "[paths]\nsocket = \"{}/none.sock\"\n[accountd]\nurls = [\"http://127.0.0.1:9\"]\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let failed = own_balance(&accountd(&conf).unwrap()).unwrap_err();
        assert!(failed.contains("127.0.0.1:9"), "{failed}");
        assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
    }
}
