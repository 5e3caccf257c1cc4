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
    /// What answers requests that change balances, on a ledger connection and a lock of their own:
    /// a change waiting on SQLite for a cycle's write (its busy timeout) holds no `sbalance`.
    /// None in the writer itself.
    pub writes: Option<Shared>,
}

impl Answering {
    /// The answering state on `res`, its publisher and its writer each on a connection of their
    /// own to the same ledger.
    pub fn new(res: Resources) -> AccountdResult<Answering> {
        let publisher = Publisher::new(res.reopen()?);
        let writer = Answering {
            res: res.reopen()?,
            publisher: publisher.clone(),
            logins: Logins::default(),
            http_address: None,
            writes: None,
        };
        let writes = Some(Arc::new(Mutex::new(writer)));
        Ok(Answering { res, publisher, logins: Logins::default(), http_address: None, writes })
    }

    /// Where `request` is answered: changes by the writer, the rest here.
    pub fn for_request(shared: &Shared, request: &gputokens::protocol::Request) -> Shared {
        match request.changes_balances() {
            true => lock(shared).writes.clone().unwrap_or_else(|| shared.clone()),
            false => shared.clone(),
        }
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
