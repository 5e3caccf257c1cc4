//! The one-node suite: each test against the real Slurm test cluster (tests/cluster/), as the
//! non-root users of a set of its own (`cluster::serial`), one at a time. Every test is ignored unless
//! asked for: tests/run.sh's `cluster` suite starts the cluster, installs the packages and runs them
//! (`--ignored`); `bash tests/run.sh up` leaves such a cluster up for one test at a time.

#[path = "../support/mod.rs"]
mod support;
use support::{by_hand, cluster, common, connection_flood, notify_capture, pki, slurm_release, status_page, wrappers};

mod accounts;
mod admission;
mod agent;
mod charging;
mod cluster_scripts;
mod config;
mod cycles;
mod energy;
mod first_day;
mod health;
mod holds;
mod idle;
mod ledger_mariadb;
mod lending;
mod other_hosts;
mod overload;
mod preemption;
mod quick_start;
mod records;
mod refunds;
mod security;
mod slurm_records;
mod spank;
