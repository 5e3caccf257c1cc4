#![forbid(unsafe_code)]

use std::process::ExitCode;

use accountd::error::{AccountdError, Fault};
use clap::Parser;

fn main() -> ExitCode {
    match accountd::sbalance::run(accountd::sbalance::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbalance: {e}");
            exit_code(&e)
        }
    }
}

/// Exit 2 when the caller can fix it (refused or invalid, as sshare's usage errors), 1 when something
/// failed that the caller did not cause (accountd down).
fn exit_code(e: &AccountdError) -> ExitCode {
    match e.fault() {
        Fault::Caller => ExitCode::from(2),
        Fault::System => ExitCode::from(1),
    }
}
