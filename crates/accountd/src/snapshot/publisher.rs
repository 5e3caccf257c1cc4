//! The one writer of the balance snapshot: its own ledger connection, and the one Slurm view the
//! check cycle last handed it (what answers requests reads that view from here too). The cycles
//! publish after their work, and a request that changed a balance asks for a publish once it has
//! let go of the answering lock: the ledger read, the SlurmUser's lookup and the fsync of a publish
//! never hold a lock that answers users. Publishes wait for each other on the publisher's own lock.

use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm_view::SlurmView;

/// Whether this accountd leads (asked before each write).
pub type Leading = Arc<dyn Fn() -> bool + Send + Sync>;

/// Cheap to clone: every clone is the same publisher.
#[derive(Clone)]
pub struct Publisher {
    /// Its own connection to the ledger, held while a snapshot is written.
    res: Arc<Mutex<Resources>>,
    view: Arc<RwLock<Arc<SlurmView>>>,
    /// Of a pair on one ledger, only the leader writes the snapshot: whether this accountd leads
    /// (`crate::leadership`), set once serve knows.
    leading: Arc<OnceLock<Leading>>,
}

impl Publisher {
    /// A publisher writing from `res` (a connection of its own: `Resources::reopen`).
    pub fn new(res: Resources) -> Publisher {
        Publisher { res: Arc::new(Mutex::new(res)), view: Arc::default(), leading: Arc::default() }
    }

    /// From now on writes only while `leading` is set: the leader writes what the other's
    /// requests changed too (`crate::leadership`'s keeper).
    pub fn only_while(&self, leading: Leading) {
        let _ = self.leading.set(leading);
    }

    /// The Slurm view the check cycle last handed over (empty before the first).
    pub fn view(&self) -> Arc<SlurmView> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes `view` as the one Slurm view, then writes the snapshot.
    pub fn publish_view(&self, view: &SlurmView, now: i64) -> AccountdResult<super::Published> {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(view.clone());
        self.publish(now)
    }

    /// Writes the snapshot from the ledger and the last Slurm view.
    pub fn publish(&self, now: i64) -> AccountdResult<super::Published> {
        if self.leading.get().is_some_and(|leading| !leading()) {
            tracing::debug!("following: the leading accountd writes the snapshot");
            return Ok(super::Published::default());
        }
        let res = self.res.lock().unwrap_or_else(|p| p.into_inner());
        super::publish(&res, &self.view(), now)
    }

    /// Sets the Slurm view without publishing (tests of what answers requests).
    #[cfg(test)]
    pub fn set_view(&self, view: SlurmView) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(view);
    }
}
