//! What answers requests (the socket's sbalance and admin requests, the HTTP API and status page)
//! keeps beside the shared resources: the snapshot's publisher (with the Slurm view the cycles last
//! handed it, which answers read too), and the status page's logins.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::error::AccountdResult;
use crate::logins::Logins;
use crate::resources::Resources;
use crate::slurm_view::SlurmView;
use crate::snapshot::publisher::Publisher;

/// The answering state the socket and the HTTP listener share.
pub type Shared = Arc<Mutex<Answering>>;

pub struct Answering {
    pub res: Resources,
    /// Writes the snapshot, on a connection of its own; holds the Slurm view as the last check
    /// cycle read it. A request that changed a balance asks it to publish once this lock is let go.
    pub publisher: Publisher,
    /// The status page's login links and sessions.
    pub logins: Logins,
    /// Where `accountd serve`'s HTTP listener listens, once bound (for login links).
    pub http_address: Option<SocketAddr>,
}

impl Answering {
    /// The answering state on `res`, its publisher on a second connection to the same ledger.
    pub fn new(res: Resources) -> AccountdResult<Answering> {
        let publisher = Publisher::new(res.reopen()?);
        Ok(Answering { res, publisher, logins: Logins::default(), http_address: None })
    }

    /// The Slurm view as the last check cycle read it.
    pub fn slurm_view(&self) -> Arc<SlurmView> {
        self.publisher.view()
    }
}

/// Locks `shared`; a panic in another request does not stop this one (its state is the ledger's).
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Answering> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}
