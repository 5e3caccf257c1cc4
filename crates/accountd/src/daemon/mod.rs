//! Being a well-behaved daemon here: files it may trust and caps on the connections it holds (one
//! instance at a time, signals and ports are `gputokens::daemon`'s, shared with the agent).

pub mod conn_caps;
pub mod file_trust;
