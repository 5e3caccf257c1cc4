//! Standard output of the commands (`accountd admin`, `tick`, `config`, `sbalance`), written as Unix
//! tools write it: a reader that went away (`accountd admin history alice | head -1`) ends the
//! command quietly with 141, the status a shell gives a command killed by SIGPIPE, instead of the
//! panic `println!` makes of it. (The daemon keeps ignoring SIGPIPE: a client that hangs up must
//! never end it, so no signal disposition changes here.)

use std::io::Write;

/// The exit status of a command whose output pipe was closed (128 + SIGPIPE).
pub const CLOSED_PIPE_STATUS: i32 = 141;

/// Writes formatted text to stdout; see the module's doc for a closed pipe.
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_PIPE_STATUS);
        }
        // A full disk or a closed descriptor: the output is incomplete, say so once and fail.
        let _ = writeln!(std::io::stderr(), "cannot write the output: {e}");
        std::process::exit(74); // EX_IOERR
    }
}

/// `print!` for commands: text to stdout, a closed pipe ends the command quietly.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::stdout::write(format_args!($($arg)*)) };
}

/// `println!` for commands: a line to stdout, a closed pipe ends the command quietly.
#[macro_export]
macro_rules! outln {
    () => { $crate::cli::stdout::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::stdout::write(format_args!("{}\n", format_args!($($arg)*))) };
}
