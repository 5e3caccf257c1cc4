//! What answers requests (the socket's sbalance and admin requests, the HTTP API and status page)
//! keeps beside the shared resources: the Slurm view the cycles last published, from which a
//! snapshot is rewritten when a request changes a balance, and the status page's logins.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::logins::Logins;
use crate::resources::Resources;
use crate::slurm_view::SlurmView;

/// The answering state the socket and the HTTP listener share.
pub type Shared = Arc<Mutex<Answering>>;

pub struct Answering {
    pub res: Resources,
    /// As the last check cycle read it (`cycles::serve` hands it over).
    pub slurm_view: SlurmView,
    /// The status page's login links and sessions.
    pub logins: Logins,
    /// Where `accountd serve`'s HTTP listener listens, once bound (for login links).
    pub http_address: Option<SocketAddr>,
}

impl Answering {
    pub fn new(res: Resources) -> Answering {
        Answering { res, slurm_view: SlurmView::default(), logins: Logins::default(), http_address: None }
    }

    /// Rewrites the snapshot from the ledger and the last Slurm view.
    pub fn publish_snapshot(&self, now: i64) -> crate::error::AccountdResult<usize> {
        crate::snapshot::publish(&self.res, &self.slurm_view, now)
    }
}

/// Locks `shared`; a panic in another request does not stop this one (its state is the ledger's).
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Answering> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}
