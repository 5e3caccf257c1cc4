//! What accountd and the node agent share as daemons (cargo feature `daemon`): one instance at a
//! time, clean ends on signals, who holds a port it wanted, caps on the connections a listener holds,
//! and a log written for admins.

pub mod conn_caps;
pub mod instance_lock;
pub mod logging;
pub mod port_owner;
pub mod signals;

/// Why a daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another process holds what it needs (its lock, its port): the site's to resolve.
    #[error("{0}")]
    Refused(String),
    /// The system failed it (a file that cannot be opened or written, a socket).
    #[error("{0}")]
    Failed(String),
}
