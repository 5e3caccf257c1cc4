//! What every part of accountd works with: the configuration, the ledger and the metrics. Each role
//! keeps its own state beside these (`answering::Answering` for the socket and HTTP, `cycles::CycleState`
//! for the periodic cycles, `http::reports::ReportState` for the agents' reports); this module imports
//! none of them.

use std::sync::Arc;

use gputokens::access::Caller;
use gputokens::Config;
use ledger::Ledger;

use crate::error::{AccountdError, AccountdResult};
use crate::metrics::Metrics;

pub struct Resources {
    pub config: Config,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
}

impl Resources {
    /// Opens the ledger for commands that read or write it directly (serve, tick, charge, verify);
    /// only admins may.
    pub fn open_as_admin(config: Config) -> AccountdResult<Resources> {
        require_admin(&config)?;
        let ledger = open_ledger(&config)?;
        Ok(Resources::new(config, ledger))
    }

    pub fn new(config: Config, ledger: Ledger) -> Resources {
        let metrics = Arc::new(Metrics::with_users(config.http.per_user_metrics));
        // From the start, not only after the first check cycle: a restarted site reads as it is.
        metrics.enforcing.set(i64::from(config.admission.enforce));
        Resources { config, ledger, metrics }
    }

    /// A second connection to the same ledger, reporting to the same metrics (the cycles' own, so a
    /// slow Slurm command never holds what answers requests).
    pub fn reopen(&self) -> AccountdResult<Resources> {
        let mut other = Resources::open_as_admin(self.config.clone())?;
        other.metrics = self.metrics.clone();
        Ok(other)
    }
}

/// The ledger the configuration names: the SQLite file at `paths.ledger`, or `[ledger] url`'s
/// MariaDB database.
fn open_ledger(config: &Config) -> AccountdResult<Ledger> {
    let rules = config.into();
    let mut ledger = match &config.ledger.url {
        None => Ledger::open(&config.paths.ledger, rules)?,
        Some(url) => Ledger::open_mariadb(
            &mariadb_target(url, config.ledger.password_file.as_deref(), &config.slurm_user)?,
            rules,
        )?,
    };
    ledger.set_pool_mode(config.accounts.mode);
    ledger.set_borrowing(config.borrowing);
    ledger.lead_for_cluster(config.clusters.lease_name());
    Ok(ledger)
}

/// Where a MariaDB URL points, with the password from a file only root, accountd's user and the
/// SlurmUser (whom the packaged unit runs accountd as) can read or change.
pub fn mariadb_target(
    url: &str,
    password_file: Option<&std::path::Path>,
    slurm_user: &str,
) -> AccountdResult<ledger::db::MariaTarget> {
    if let Some(path) = password_file {
        let what = "[ledger] password_file";
        let untrusted = gputokens::file_trust::untrusted_with(path, what, Some(slurm_user))
            .or_else(|| gputokens::file_trust::secret_readable_by_others(path, what, Some(slurm_user)));
        if let Some(why) = untrusted {
            return Err(AccountdError::Failed(why));
        }
    }
    ledger::db::MariaTarget::new(url, password_file).map_err(|e| AccountdError::Failed(e.to_string()))
}

/// Refuses anyone but root, the SlurmUser and gputokens admins.
fn require_admin(config: &Config) -> AccountdResult<()> {
    let caller = Caller::identify(nix::unistd::getuid().as_raw(), config);
    if !caller.admin {
        return Err(AccountdError::Refused(format!(
            "only root, the SlurmUser ({}) and gputokens admins may run this; you are {}",
            config.slurm_user, caller.name
        )));
    }
    Ok(())
}

/// The ledger in the SQLite file `path` (a copy), or the configured one where None, to read only:
/// never created, never changed (`admin verify`, `journal-check`, `ledger copy`); admins only.
/// `scratch` holds a migrated copy of an older SQLite ledger.
pub fn read_only_ledger(
    config: &Config,
    path: Option<&std::path::Path>,
    scratch: &std::path::Path,
) -> AccountdResult<Ledger> {
    require_admin(config)?;
    let mut ledger = match (path, &config.ledger.url) {
        (None, Some(url)) => Ledger::open_mariadb_existing(
            &mariadb_target(url, config.ledger.password_file.as_deref(), &config.slurm_user)?,
            config.into(),
        )?,
        (path, _) => Ledger::open_read_only(path.unwrap_or(&config.paths.ledger), config.into(), scratch)?,
    };
    ledger.set_pool_mode(config.accounts.mode);
    ledger.set_borrowing(config.borrowing);
    ledger.lead_for_cluster(config.clusters.lease_name());
    Ok(ledger)
}
