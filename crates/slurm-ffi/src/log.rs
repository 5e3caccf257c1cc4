//! Logging `gputokens: <message>` through Slurm's own log (`slurm_error`, `slurm_info`,
//! `slurm_verbose` from libslurmfull), so the lines land where Slurm's do: slurmctld's log, the user's
//! terminal in sbatch/srun, slurmd's log in slurmstepd.
//!
//! Why a macro declares the C functions: the plugins' unit tests run without a Slurm process to
//! resolve those symbols, so they must call [`crate::stand_ins`] instead, while the `.so` that
//! `cargo build` makes must call the real ones (rustc links cdylibs with BIND_NOW; slurmctld, sbatch,
//! srun and slurmstepd provide them). The switch has to be `cfg(test)` of the *plugin* crate: a
//! cargo feature turned on by dev-dependencies would be unified into the plugin's `cargo test` build
//! of the cdylib too, and silently replace target/debug/*.so with one that logs into a test buffer.
//! `cfg` in a macro expansion is evaluated in the crate that invokes the macro, so
//! [`log_shims!`](crate::log_shims), invoked once in each plugin's `ffi` module, gives the extern
//! block outside tests and the stand-ins in them;
//! everything else (the prefix, the `"%s"` format, the NUL handling) is ordinary code here.

use std::ffi::{c_char, CStr, CString};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Info,
    /// Shown with `-v` (sbatch/srun) or a verbose daemon log (`SlurmctldDebug=verbose`, ...).
    Verbose,
}

/// Slurm's three log functions as one plugin links them (see the module documentation); implemented
/// by [`log_shims!`](crate::log_shims).
pub trait Symbols {
    /// Calls Slurm's log function for `level` as `f(fmt, arg)`.
    ///
    /// # Safety
    /// `fmt` is `"%s"` and `arg` a NUL-terminated string, both valid for the call.
    unsafe fn call(level: Level, fmt: *const c_char, arg: *const c_char);
}

/// A printf format that prints its one string argument as it is (a message may hold `%`).
const PERCENT_S: &CStr = c"%s";

/// Logs `gputokens: <message>` at `level` through `S`.
pub fn log<S: Symbols>(level: Level, message: &str) {
    let text = line(message);
    // SAFETY: a "%s" format with one valid NUL-terminated string argument, both alive for the call.
    unsafe { S::call(level, PERCENT_S.as_ptr(), text.as_ptr()) }
}

/// `gputokens: <message>` as a C string (see [`c_string`]).
fn line(message: &str) -> CString {
    c_string(&format!("gputokens: {message}"))
}

/// `text` as a C string for Slurm; a NUL inside (which would cut it short) becomes a space.
pub fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

/// Declares, in the invoking module, Slurm's log functions and `log(Level, &str)`, `error(&str)`,
/// `info(&str)` and `verbose(&str)` over them: libslurmfull's symbols in the plugin, the recording
/// [`stand_ins`](crate::stand_ins) in its unit tests (`cfg(test)` of the invoking crate; see the
/// [module documentation](crate::log)).
#[macro_export]
macro_rules! log_shims {
    () => {
        /// Slurm's log functions: libslurmfull's in the plugin, `slurm_ffi::stand_ins` in unit tests.
        pub struct SlurmLog;

        /// From libslurmfull, which every process that loads a gputokens plugin links.
        #[cfg(not(test))]
        mod slurm_log {
            extern "C" {
                pub fn slurm_error(fmt: *const ::std::ffi::c_char, ...);
                pub fn slurm_info(fmt: *const ::std::ffi::c_char, ...);
                pub fn slurm_verbose(fmt: *const ::std::ffi::c_char, ...);
            }
        }

        #[cfg(test)]
        use $crate::stand_ins as slurm_log;

        impl $crate::log::Symbols for SlurmLog {
            unsafe fn call(level: $crate::log::Level, fmt: *const ::std::ffi::c_char, arg: *const ::std::ffi::c_char) {
                // SAFETY: `fmt` is "%s" and `arg` a NUL-terminated string (the caller's promise),
                // exactly one argument for the one conversion.
                unsafe {
                    match level {
                        $crate::log::Level::Error => slurm_log::slurm_error(fmt, arg),
                        $crate::log::Level::Info => slurm_log::slurm_info(fmt, arg),
                        $crate::log::Level::Verbose => slurm_log::slurm_verbose(fmt, arg),
                    }
                }
            }
        }

        /// Logs `gputokens: <message>` through Slurm's log at `level`.
        #[allow(dead_code)]
        pub fn log(level: $crate::log::Level, message: &str) {
            $crate::log::log::<SlurmLog>(level, message)
        }

        /// `gputokens: <message>` as an error.
        #[allow(dead_code)]
        pub fn error(message: &str) {
            log($crate::log::Level::Error, message)
        }

        /// `gputokens: <message>` at info level: on the user's terminal in sbatch/srun (hidden by
        /// `-Q`), in the daemon's log in slurmctld and slurmstepd.
        #[allow(dead_code)]
        pub fn info(message: &str) {
            log($crate::log::Level::Info, message)
        }

        /// Shown only with `-v` (sbatch/srun) or a verbose daemon log.
        #[allow(dead_code)]
        pub fn verbose(message: &str) {
            log($crate::log::Level::Verbose, message)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    // What the plugins get in their unit tests.
    crate::log_shims!();

    #[test]
    fn lines_carry_the_prefix_and_no_nul() {
        assert_eq!(line("a\0b %s").as_bytes(), b"gputokens: a b %s");
    }

    #[test]
    fn the_stand_ins_record_each_level() {
        error("slurm-ffi log test: e");
        info("slurm-ffi log test: i");
        verbose("slurm-ffi log test: v");
        let log = crate::stand_ins::LOG.lock().unwrap().join("\n");
        for want in [
            "error: gputokens: slurm-ffi log test: e",
            "info: gputokens: slurm-ffi log test: i",
            "verbose: gputokens: slurm-ffi log test: v",
        ] {
            assert!(log.contains(want), "{log}");
        }
    }
}
