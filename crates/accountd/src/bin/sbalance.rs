#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match accountd::sbalance::run(accountd::sbalance::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report("sbalance"),
    }
}
