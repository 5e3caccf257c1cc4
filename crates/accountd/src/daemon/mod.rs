//! Being a well-behaved daemon here: files it may trust (one instance at a time, signals, ports and
//! the caps on the connections it holds are `gputokens::daemon`'s, shared with the agent).

pub mod file_trust;
