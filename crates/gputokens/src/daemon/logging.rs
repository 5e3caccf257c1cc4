//! A daemon's log on stderr (accountd's, the agent's), written for admins: `GPUTOKENS_LOG` chooses what is logged (`info`
//! by default; `debug`, or a tracing filter such as `accountd::http=debug`); module paths only at
//! a more verbose level than info, where they help find the code; colour only on a terminal, and
//! never with `NO_COLOR` set (to anything but empty, as no-color.org says) or `TERM=dumb`.

use std::ffi::OsStr;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// The variable that chooses what is logged.
pub const FILTER_VARIABLE: &str = "GPUTOKENS_LOG";

/// Installs the logger of every command of accountd and the agent.
pub fn init() {
    let filter = EnvFilter::try_from_env(FILTER_VARIABLE).unwrap_or_else(|_| "info".into());
    let verbose = filter.max_level_hint().is_some_and(|level| level > LevelFilter::INFO);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let colour = colour(std::env::var_os("NO_COLOR").as_deref(), std::env::var_os("TERM").as_deref(), terminal);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_target(verbose)
        .with_writer(std::io::stderr)
        .init();
}

/// Whether log lines may carry colour: on a terminal that is not `dumb`, unless `NO_COLOR` is set
/// to anything but the empty string.
pub fn colour(no_color: Option<&OsStr>, term: Option<&OsStr>, terminal: bool) -> bool {
    let refused = no_color.is_some_and(|v| !v.is_empty());
    let dumb = term.is_some_and(|t| t == "dumb");
    terminal && !refused && !dumb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_that_wants_it() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert!(colour(None, os("xterm-256color"), true));
        assert!(colour(None, None, true));
        assert!(!colour(None, os("xterm"), false), "not a terminal");
        assert!(!colour(os("1"), os("xterm"), true), "NO_COLOR=1");
        assert!(!colour(os("0"), os("xterm"), true), "any value counts, 0 too");
        assert!(colour(os(""), os("xterm"), true), "an empty NO_COLOR is unset");
        assert!(!colour(None, os("dumb"), true), "TERM=dumb");
    }
}
