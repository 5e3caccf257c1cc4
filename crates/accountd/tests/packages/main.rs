//! The packages as an admin installs them: tests/run.sh's `packages` suite builds the .deb packages,
//! installs them with `dpkg -i` and runs these (`--ignored`) on every Slurm release.

#[path = "../support/mod.rs"]
mod support;
use support::common;

mod debs;
mod sbalance;
