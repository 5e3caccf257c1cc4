//! Every unsafe operation of the plugin lives here: reading slurmctld's job description, writing the
//! two fields the plugin changes (`nice` and the message in `*err_msg`), allocating strings for
//! slurmctld with `slurm_xstrdup`, and logging through slurmctld's log.
//!
//! The functions come from libslurmfull, which slurmctld links; rustc links cdylibs with BIND_NOW,
//! so each one must exist there (`nm -D --defined-only .../libslurmfull.so`): `slurm_xstrdup`,
//! `slurm_info`, `slurm_verbose`, `slurm_error`. Unit tests link stand-ins instead (`test_slurm`).

use std::ffi::{c_char, c_int, CStr, CString};

use crate::admit::{JobRequest, Verdict};
use crate::bindings::{job_desc_msg_t, SLURM_SUCCESS};

#[cfg(not(test))]
mod slurm {
    use std::ffi::c_char;
    extern "C" {
        /// A copy slurmctld may `xfree()`: the only allocation it accepts for `*err_msg`.
        pub fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
        pub fn slurm_error(fmt: *const c_char, ...);
        pub fn slurm_info(fmt: *const c_char, ...);
        pub fn slurm_verbose(fmt: *const c_char, ...);
    }
}

#[cfg(test)]
use test_slurm as slurm;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Info,
    /// Shown with `SlurmctldDebug=verbose` or higher.
    Verbose,
}

const PERCENT_S: &CStr = c"%s";

/// Logs `gputokens: <message>` through slurmctld's log.
pub fn log(level: Level, message: &str) {
    let text = c_string(&format!("gputokens: {message}"));
    // SAFETY: a "%s" format with one valid NUL-terminated string argument, both alive for the call.
    unsafe {
        match level {
            Level::Error => slurm::slurm_error(PERCENT_S.as_ptr(), text.as_ptr()),
            Level::Info => slurm::slurm_info(PERCENT_S.as_ptr(), text.as_ptr()),
            Level::Verbose => slurm::slurm_verbose(PERCENT_S.as_ptr(), text.as_ptr()),
        }
    }
}

/// Copies what the policy needs out of a job description; None for NULL.
///
/// # Safety
/// `desc` is NULL or points to a job description that stays valid for the call (as slurmctld
/// guarantees during `job_submit`/`job_modify`); its strings are NULL or NUL-terminated.
pub unsafe fn read_job(desc: *const job_desc_msg_t) -> Option<JobRequest> {
    let d = desc.as_ref()?;
    Some(JobRequest {
        user_id: d.user_id,
        nice: d.nice,
        tres_per_job: string(d.tres_per_job),
        tres_per_node: string(d.tres_per_node),
        tres_per_task: string(d.tres_per_task),
        tres_per_socket: string(d.tres_per_socket),
    })
}

unsafe fn string(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// Writes a verdict back into the job description and `*err_msg`; returns the code for slurmctld.
///
/// # Safety
/// `desc` as for [`read_job`] and writable; `err_msg` is NULL or points to a `char *` that is NULL
/// or was allocated by Slurm's xmalloc.
pub unsafe fn apply(desc: *mut job_desc_msg_t, err_msg: *mut *mut c_char, verdict: &Verdict) -> c_int {
    match verdict {
        Verdict::Accept => SLURM_SUCCESS as c_int,
        Verdict::Deprioritize { nice, message } => {
            if let Some(d) = desc.as_mut() {
                d.nice = *nice;
            }
            give_message(err_msg, message, false);
            SLURM_SUCCESS as c_int
        }
        Verdict::Reject { code, message } => {
            give_message(err_msg, message, true);
            *code
        }
    }
}

/// Stores an xstrdup'ed copy of `message` in `*err_msg` (slurmctld frees it with xfree and shows it:
/// as an error with a refusal, as information on success). An information message leaves one that
/// another job_submit plugin put there; a refusal replaces it, leaking the other copy: freeing it
/// would need `slurm_xfree`, whose signature differs between Slurm releases.
unsafe fn give_message(err_msg: *mut *mut c_char, message: &str, replace: bool) {
    if err_msg.is_null() || (!(*err_msg).is_null() && !replace) {
        return;
    }
    let text = c_string(message);
    *err_msg = slurm::slurm_xstrdup(text.as_ptr());
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

/// Stand-ins for libslurmfull in unit tests: `slurm_xstrdup` is `strdup` (free with `libc::free`),
/// log lines are collected.
#[cfg(test)]
pub mod test_slurm {
    use std::ffi::{c_char, CStr};
    use std::sync::Mutex;

    pub static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn push(level: &str, arg: *const c_char) {
        // SAFETY: the callers pass a valid NUL-terminated string.
        let text = unsafe { CStr::from_ptr(arg) }.to_string_lossy().into_owned();
        LOG.lock().unwrap().push(format!("{level}: {text}"));
    }

    pub unsafe fn slurm_xstrdup(s: *const c_char) -> *mut c_char {
        nix::libc::strdup(s)
    }
    pub unsafe fn slurm_error(_fmt: *const c_char, arg: *const c_char) {
        push("error", arg)
    }
    pub unsafe fn slurm_info(_fmt: *const c_char, arg: *const c_char) {
        push("info", arg)
    }
    pub unsafe fn slurm_verbose(_fmt: *const c_char, arg: *const c_char) {
        push("verbose", arg)
    }

    /// Takes the C string a test got back and frees it.
    pub fn take(p: *mut c_char) -> Option<String> {
        if p.is_null() {
            return None;
        }
        // SAFETY: allocated by slurm_xstrdup above (strdup), not used after this.
        unsafe {
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            nix::libc::free(p.cast());
            Some(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::{ESLURM_ACCOUNTING_POLICY, NICE_OFFSET, NO_VAL};

    #[test]
    fn reads_the_fields_of_a_job_description() {
        let node = CString::new("gres:gpu:a6000:1").unwrap();
        let job = CString::new("gres:gpu:2").unwrap();
        let desc = job_desc_msg_t {
            user_id: 1001,
            nice: NO_VAL,
            tres_per_node: node.as_ptr().cast_mut(),
            tres_per_job: job.as_ptr().cast_mut(),
            ..Default::default()
        };
        let got = unsafe { read_job(&desc) }.unwrap();
        assert_eq!(
            got,
            JobRequest {
                user_id: 1001,
                nice: NO_VAL,
                tres_per_job: Some("gres:gpu:2".into()),
                tres_per_node: Some("gres:gpu:a6000:1".into()),
                tres_per_task: None,
                tres_per_socket: None,
            }
        );
        assert!(unsafe { read_job(std::ptr::null()) }.is_none());
    }

    #[test]
    fn applies_verdicts() {
        let mut desc = job_desc_msg_t { nice: NO_VAL, ..Default::default() };
        let mut err: *mut c_char = std::ptr::null_mut();
        let accept = unsafe { apply(&mut desc, &mut err, &Verdict::Accept) };
        assert_eq!((accept, desc.nice, err.is_null()), (0, NO_VAL, true));

        let lower = Verdict::Deprioritize { nice: NICE_OFFSET + 100, message: "info".into() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &lower) }, 0);
        assert_eq!(desc.nice, NICE_OFFSET + 100);
        assert_eq!(test_slurm::take(err).as_deref(), Some("info"));

        let mut err: *mut c_char = std::ptr::null_mut();
        let no = Verdict::Reject { code: ESLURM_ACCOUNTING_POLICY as c_int, message: "no\0pe".into() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &no) }, 2050);
        assert_eq!(test_slurm::take(err).as_deref(), Some("no pe"));
        assert_eq!(unsafe { apply(&mut desc, std::ptr::null_mut(), &no) }, 2050, "NULL err_msg is fine");
    }

    #[test]
    fn an_info_message_keeps_another_plugins_message() {
        let mut desc = job_desc_msg_t::default();
        let mut err = unsafe { test_slurm::slurm_xstrdup(c"from another plugin".as_ptr()) };
        let lower = Verdict::Deprioritize { nice: NICE_OFFSET + 1, message: "ours".into() };
        unsafe { apply(&mut desc, &mut err, &lower) };
        assert_eq!(test_slurm::take(err).as_deref(), Some("from another plugin"));
    }
}
