//! Every unsafe operation of the plugin lives here: reading slurmctld's job description into the
//! typed `JobRequest` (the numbers through `sentinel`), writing the fields the plugin changes
//! (`nice`, `site_factor`, `qos`, `time_limit` and the message in `*err_msg`), allocating strings for
//! slurmctld with `slurm_xstrdup` (and freeing the one it replaces with `slurm_xfree`), and logging
//! through slurmctld's log.
//!
//! The functions come from libslurmfull, which slurmctld links; rustc links cdylibs with BIND_NOW,
//! so each one must exist there (`nm -D --defined-only .../libslurmfull.so`): `slurm_xstrdup`,
//! `slurm_xfree`, `slurm_info`, `slurm_verbose`, `slurm_error`. Unit tests link stand-ins instead
//! (`test_slurm`).

use std::ffi::{c_char, c_int, CStr, CString};

use gputokens::decision::{self, Verdict};
use gputokens::job_request::JobRequest;

use crate::bindings::{job_desc_msg_t, ESLURM_ACCOUNTING_POLICY, SLURM_SUCCESS};
use crate::sentinel;

#[cfg(not(test))]
mod slurm {
    use std::ffi::c_char;
    extern "C" {
        /// A copy slurmctld may `xfree()`: the only allocation it accepts for `*err_msg`.
        pub fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
        /// `xfree(p)`: frees `*p` (xmalloc'ed) and sets it to NULL (22.05 and later: one argument).
        pub fn slurm_xfree(p: *mut *mut std::ffi::c_void);
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

impl From<decision::Level> for Level {
    fn from(level: decision::Level) -> Level {
        match level {
            decision::Level::Info => Level::Info,
            decision::Level::Verbose => Level::Verbose,
        }
    }
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
        job_id: sentinel::job_number(string(d.job_id_str).as_deref(), d.job_id),
        user_id: sentinel::given(d.user_id),
        nice: sentinel::nice(d.nice),
        tres_per_job: string(d.tres_per_job),
        tres_per_node: string(d.tres_per_node),
        tres_per_task: string(d.tres_per_task),
        tres_per_socket: string(d.tres_per_socket),
        time_limit: sentinel::time_limit(d.time_limit),
        partition: string(d.partition),
        account: string(d.account),
        qos: string(d.qos),
        min_nodes: sentinel::given(d.min_nodes),
        num_tasks: sentinel::given(d.num_tasks),
        ntasks_per_node: sentinel::given16(d.ntasks_per_node),
        sockets_per_node: sentinel::given16(d.sockets_per_node),
        array_inx: string(d.array_inx),
        wants_estimate: spank_env(d).any(|v| v == ESTIMATE_VARIABLE),
    })
}

/// What `spank_job_control_setenv(sp, "GPUTOKENS_ESTIMATE", "1", 1)` in sbatch puts in the job
/// description's SPANK environment (sbatch adds no prefix there; prolog and epilog see the variable
/// as `SPANK_GPUTOKENS_ESTIMATE`, the job as `SLURM_SPANK_GPUTOKENS_ESTIMATE`).
pub const ESTIMATE_VARIABLE: &str = "GPUTOKENS_ESTIMATE=1";

/// The `NAME=value` entries of the job's SPANK environment.
unsafe fn spank_env(d: &job_desc_msg_t) -> impl Iterator<Item = String> + '_ {
    let list = d.spank_job_env;
    let n = if list.is_null() { 0 } else { d.spank_job_env_size as usize };
    (0..n).filter_map(move |i| string(*list.add(i)))
}

unsafe fn string(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// Writes a verdict back into the job description and `*err_msg`; returns the code for slurmctld (a
/// refusal is by accounting policy).
///
/// # Safety
/// `desc` as for [`read_job`] and writable; `err_msg` is NULL or points to a `char *` that is NULL
/// or was allocated by Slurm's xmalloc.
pub unsafe fn apply(desc: *mut job_desc_msg_t, err_msg: *mut *mut c_char, verdict: &Verdict) -> c_int {
    match verdict {
        Verdict::Accept { changes, message } => {
            if let Some(d) = desc.as_mut() {
                if let Some(nice) = changes.nice {
                    d.nice = sentinel::offset(nice);
                }
                if let Some(factor) = changes.site_factor {
                    d.site_factor = sentinel::offset(factor);
                }
                if let Some(minutes) = changes.time_limit {
                    d.time_limit = sentinel::minutes(minutes);
                }
                if let Some(qos) = &changes.qos {
                    replace_string(&mut d.qos, qos);
                }
            }
            if let Some(message) = message {
                give_message(err_msg, message, false);
            }
            SLURM_SUCCESS as c_int
        }
        Verdict::Reject { message } => {
            give_message(err_msg, message, true);
            ESLURM_ACCOUNTING_POLICY as c_int
        }
    }
}

/// Puts an xstrdup'ed `value` in a job description string field, xfree-ing what was there.
unsafe fn replace_string(field: &mut *mut c_char, value: &str) {
    if !field.is_null() {
        slurm::slurm_xfree((field as *mut *mut c_char).cast());
    }
    let text = c_string(value);
    *field = slurm::slurm_xstrdup(text.as_ptr());
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
/// log lines are collected, and this thread's `slurm_xstrdup`s and `slurm_xfree`s are counted (so a
/// test can tell that every allocation it saw made was freed).
#[cfg(test)]
pub mod test_slurm {
    use std::cell::Cell;
    use std::ffi::{c_char, CStr};
    use std::sync::Mutex;

    pub static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

    thread_local! {
        static ALLOCATED: Cell<usize> = const { Cell::new(0) };
        static FREED: Cell<usize> = const { Cell::new(0) };
    }

    /// (strings allocated, strings freed) on this thread so far.
    pub fn allocations() -> (usize, usize) {
        (ALLOCATED.get(), FREED.get())
    }

    fn push(level: &str, arg: *const c_char) {
        // SAFETY: the callers pass a valid NUL-terminated string.
        let text = unsafe { CStr::from_ptr(arg) }.to_string_lossy().into_owned();
        LOG.lock().unwrap().push(format!("{level}: {text}"));
    }

    pub unsafe fn slurm_xstrdup(s: *const c_char) -> *mut c_char {
        ALLOCATED.set(ALLOCATED.get() + 1);
        nix::libc::strdup(s)
    }
    pub unsafe fn slurm_xfree(p: *mut *mut std::ffi::c_void) {
        if !(*p).is_null() {
            FREED.set(FREED.get() + 1);
        }
        nix::libc::free(*p);
        *p = std::ptr::null_mut();
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
    use crate::bindings::{INFINITE, NICE_OFFSET, NO_VAL, NO_VAL16};
    use gputokens::decision::Changes;
    use gputokens::job_request::TimeLimit;

    #[test]
    fn reads_the_fields_of_a_job_description() {
        let node = CString::new("gres:gpu:a6000:1").unwrap();
        let job = CString::new("gres:gpu:2").unwrap();
        let part = CString::new("gpu").unwrap();
        let array = CString::new("0-9").unwrap();
        let env = [CString::new("SPANK_OTHER=x").unwrap(), CString::new(ESTIMATE_VARIABLE).unwrap()];
        let mut env_ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr().cast_mut()).collect();
        let desc = job_desc_msg_t {
            user_id: 1001,
            nice: NO_VAL,
            tres_per_node: node.as_ptr().cast_mut(),
            tres_per_job: job.as_ptr().cast_mut(),
            time_limit: 90,
            partition: part.as_ptr().cast_mut(),
            min_nodes: 2,
            num_tasks: NO_VAL,
            ntasks_per_node: 4,
            sockets_per_node: NO_VAL16 as u16,
            array_inx: array.as_ptr().cast_mut(),
            spank_job_env: env_ptrs.as_mut_ptr(),
            spank_job_env_size: 2,
            ..Default::default()
        };
        let got = unsafe { read_job(&desc) }.unwrap();
        assert_eq!(
            got,
            JobRequest {
                user_id: Some(1001),
                nice: None,
                tres_per_job: Some("gres:gpu:2".into()),
                tres_per_node: Some("gres:gpu:a6000:1".into()),
                time_limit: Some(TimeLimit::Minutes(90)),
                partition: Some("gpu".into()),
                min_nodes: Some(2),
                num_tasks: None,
                ntasks_per_node: Some(4),
                sockets_per_node: None,
                array_inx: Some("0-9".into()),
                wants_estimate: true,
                ..Default::default()
            }
        );
        let raw = job_desc_msg_t {
            user_id: NO_VAL,
            nice: NICE_OFFSET - 5,
            time_limit: INFINITE,
            job_id: NO_VAL,
            min_nodes: NO_VAL,
            num_tasks: 3,
            ntasks_per_node: NO_VAL16 as u16,
            sockets_per_node: 2,
            ..Default::default()
        };
        let got = unsafe { read_job(&raw) }.unwrap();
        assert_eq!((got.job_id, got.user_id, got.nice), (None, None, Some(-5)), "NO_VAL: not given");
        assert_eq!(got.time_limit, Some(TimeLimit::Unlimited));
        assert_eq!((got.min_nodes, got.num_tasks), (None, Some(3)));
        assert_eq!((got.ntasks_per_node, got.sockets_per_node), (None, Some(2)));
        let plain = job_desc_msg_t { spank_job_env_size: 3, ..Default::default() };
        assert!(!unsafe { read_job(&plain) }.unwrap().wants_estimate, "a NULL list with a size is not read");
        assert!(unsafe { read_job(std::ptr::null()) }.is_none());
    }

    #[test]
    fn applies_verdicts() {
        let mut desc = job_desc_msg_t { nice: NO_VAL, site_factor: NO_VAL, time_limit: NO_VAL, ..Default::default() };
        let mut err: *mut c_char = std::ptr::null_mut();
        let accept = unsafe { apply(&mut desc, &mut err, &Verdict::accept()) };
        assert_eq!((accept, desc.nice, err.is_null()), (0, NO_VAL, true));

        let changes = Changes { nice: Some(100), ..Default::default() };
        let lower = Verdict::Accept { changes, message: Some("info".into()) };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &lower) }, 0);
        assert_eq!(desc.nice, NICE_OFFSET + 100);
        assert_eq!(test_slurm::take(err).as_deref(), Some("info"));

        desc.qos = unsafe { test_slurm::slurm_xstrdup(c"normal".as_ptr()) };
        let changes = Changes {
            site_factor: Some(-5),
            qos: Some("overdraft".into()),
            time_limit: Some(60),
            ..Default::default()
        };
        let mut err: *mut c_char = std::ptr::null_mut();
        assert_eq!(unsafe { apply(&mut desc, &mut err, &Verdict::Accept { changes, message: None }) }, 0);
        assert_eq!((desc.site_factor, desc.time_limit, err.is_null()), (NICE_OFFSET - 5, 60, true));
        assert_eq!(test_slurm::take(desc.qos).as_deref(), Some("overdraft"), "the old QOS string was freed");
        let huge = Changes { time_limit: Some(u32::MAX), ..Default::default() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &Verdict::Accept { changes: huge, message: None }) }, 0);
        assert_eq!(desc.time_limit, NO_VAL - 1, "a limit, not NO_VAL or INFINITE");

        let mut err: *mut c_char = std::ptr::null_mut();
        let no = Verdict::Reject { message: "no\0pe".into() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &no) }, 2050);
        assert_eq!(test_slurm::take(err).as_deref(), Some("no pe"));
        assert_eq!(unsafe { apply(&mut desc, std::ptr::null_mut(), &no) }, 2050, "NULL err_msg is fine");
    }

    #[test]
    fn an_info_message_keeps_another_plugins_message() {
        let mut desc = job_desc_msg_t::default();
        let mut err = unsafe { test_slurm::slurm_xstrdup(c"from another plugin".as_ptr()) };
        let lower = Verdict::Accept { changes: Changes::default(), message: Some("ours".into()) };
        unsafe { apply(&mut desc, &mut err, &lower) };
        assert_eq!(test_slurm::take(err).as_deref(), Some("from another plugin"));
    }
}
