//! Being a well-behaved daemon: one instance at a time, clean ends on signals, files it may trust,
//! caps on the connections it holds, and who holds a port it wanted.

pub mod conn_caps;
pub mod file_trust;
pub mod instance_lock;
pub mod port_owner;
pub mod signals;
