//! Every unsafe operation of the plugin lives here: reading slurmctld's job description into the
//! typed `JobRequest` (the numbers through `sentinel`), writing the fields the plugin changes
//! (`nice`, `site_factor`, `qos`, `time_limit` and the message in `*err_msg`), allocating strings for
//! slurmctld with `slurm_xstrdup` (and freeing the one it replaces with `slurm_xfree`), logging
//! through slurmctld's log (`slurm_ffi::log_shims!`), and, for the benchmarks, calling the exported
//! `job_submit` as slurmctld does ([`BenchJob`]).
//!
//! The functions come from libslurmfull, which slurmctld links; rustc links cdylibs with BIND_NOW,
//! so each one must exist there (`nm -D --defined-only .../libslurmfull.so`): `slurm_xstrdup`,
//! `slurm_xfree`, `slurm_info`, `slurm_verbose`, `slurm_error`. Unit tests call stand-ins instead
//! (`slurm_ffi::stand_ins`), chosen by this crate's `cfg(test)` so that `cargo test` never changes the
//! `.so` that `cargo build` makes.

use slurm_ffi::log::c_string;
use std::ffi::{c_char, c_int, CStr, CString};
use std::time::{Duration, Instant};

use gputokens::decision::{self, Verdict};
use gputokens::job_request::{CpuRequest, JobRequest};

use crate::bindings::{job_desc_msg_t, ESLURM_ACCOUNTING_POLICY, NO_VAL, SLURM_SUCCESS};
use crate::sentinel;

pub use slurm_ffi::log::Level;

// `log(Level, &str)` (and `error`, `info`, `verbose`) through slurmctld's log.
slurm_ffi::log_shims!();

#[cfg(not(test))]
mod slurm {
    use std::ffi::c_char;
    extern "C" {
        /// A copy slurmctld may `xfree()`: the only allocation it accepts for `*err_msg`.
        pub fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
        /// `xfree(p)`: frees `*p` (xmalloc'ed) and sets it to NULL (22.05 and later: one argument).
        pub fn slurm_xfree(p: *mut *mut std::ffi::c_void);
    }
}

#[cfg(test)]
use slurm_ffi::stand_ins as slurm;

/// The log level of a decision's line.
pub fn decision_level(level: decision::Level) -> Level {
    match level {
        decision::Level::Info => Level::Info,
        decision::Level::Verbose => Level::Verbose,
    }
}

/// Copies what the policy needs out of a job description; None for NULL.
///
/// # Safety
/// `desc` is NULL or points to a job description that stays valid for the call (as slurmctld
/// guarantees during `job_submit`/`job_modify`); its strings are NULL or NUL-terminated.
pub unsafe fn read_job(desc: *const job_desc_msg_t) -> Option<JobRequest> {
    // SAFETY: the caller's promise: `desc` is NULL or valid for the call, and so are the strings
    // and the SPANK environment list it points to.
    unsafe {
        let d = desc.as_ref()?;
        Some(JobRequest {
            job_id: sentinel::job_number(string(d.job_id_str).as_deref(), numeric_job_id(d)),
            user_id: sentinel::given(d.user_id),
            nice: sentinel::nice(d.nice),
            tres_per_job: string(d.tres_per_job),
            tres_per_node: string(d.tres_per_node),
            tres_per_task: string(d.tres_per_task),
            tres_per_socket: string(d.tres_per_socket),
            time_limit: sentinel::time_limit(d.time_limit),
            partition: string(d.partition),
            // As slurmctld will store it: it lower-cases -A only after the plugins ran (H1).
            account: string(d.account).map(|a| gputokens::pools::slurm_account_name(&a)),
            qos: string(d.qos),
            min_nodes: sentinel::given(d.min_nodes),
            num_tasks: sentinel::given(d.num_tasks),
            ntasks_per_node: sentinel::given16(d.ntasks_per_node),
            sockets_per_node: sentinel::given16(d.sockets_per_node),
            array_inx: string(d.array_inx),
            wants_estimate: spank_env(d).any(|v| v == ESTIMATE_VARIABLE),
            wants_quote: spank_env(d).any(|v| v == QUOTE_VARIABLE),
            // job_submit sees submissions only; a batch one carries its script.
            batch: Some(batch_submission(!d.script.is_null(), d.het_job_offset)),
            cpus: CpuRequest {
                // 0 is no count (sbatch fills min_cpus with its tasks × CPUs per task itself).
                min_cpus: sentinel::given(d.min_cpus).filter(|&n| n > 0),
                cpus_per_task: sentinel::given16(d.cpus_per_task).filter(|&n| n > 0),
                cpus_per_node: sentinel::given16(d.pn_min_cpus).filter(|&n| n > 0),
                cpus_per_tres: string(d.cpus_per_tres),
                memory: sentinel::memory(d.pn_min_memory),
                mem_per_tres: string(d.mem_per_tres),
                exclusive: sentinel::exclusive(d.shared),
            },
        })
    }
}

thread_local! {
    /// Whether the first component of the heterogeneous job being submitted on this thread carried
    /// a script: slurmctld hands job_submit each component in turn, in one RPC on one thread, and
    /// only the first has it.
    static HET_LEADER_IS_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a submission (with a script or not; `het_job_offset`: its place in a heterogeneous
/// job, NO_VAL for a job of one component) is a batch job: a later component is if the first was.
pub fn batch_submission(has_script: bool, het_job_offset: u32) -> bool {
    match het_job_offset {
        NO_VAL => has_script,
        0 => {
            HET_LEADER_IS_BATCH.set(has_script);
            has_script
        }
        _ => has_script || HET_LEADER_IS_BATCH.get(),
    }
}

/// What `spank_job_control_setenv(sp, "GPUTOKENS_ESTIMATE", "1", 1)` in sbatch puts in the job
/// description's SPANK environment (sbatch adds no prefix there; prolog and epilog see the variable
/// as `SPANK_GPUTOKENS_ESTIMATE`, the job as `SLURM_SPANK_GPUTOKENS_ESTIMATE`).
pub const ESTIMATE_VARIABLE: &str = "GPUTOKENS_ESTIMATE=1";
/// What the SPANK plugin puts there for `sbatch --test-only`: a quote.
pub const QUOTE_VARIABLE: &str = "GPUTOKENS_QUOTE=1";

/// The `NAME=value` entries of the job's SPANK environment.
///
/// # Safety
/// `d.spank_job_env` is NULL or holds `d.spank_job_env_size` pointers, each NULL or a NUL-terminated
/// string, valid while the iterator is used.
unsafe fn spank_env(d: &job_desc_msg_t) -> impl Iterator<Item = String> + '_ {
    let list = d.spank_job_env;
    let n = if list.is_null() { 0 } else { d.spank_job_env_size as usize };
    // SAFETY: the caller's promise; `i` stays below the list's length.
    (0..n).filter_map(move |i| unsafe { string(*list.add(i)) })
}

/// A copy of a C string; None for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
/// The description's numeric job ID: `job_id` up to 24.11, `step_id.job_id` where the headers made it
/// a step ID (26.05; cfg from plugins/job-submit/build.rs).
#[cfg(not(slurm_job_desc_step_id))]
pub fn numeric_job_id(d: &job_desc_msg_t) -> u32 {
    d.job_id
}

#[cfg(slurm_job_desc_step_id)]
pub fn numeric_job_id(d: &job_desc_msg_t) -> u32 {
    d.step_id.job_id
}

/// Sets what [`numeric_job_id`] reads (unit tests build descriptions as slurmctld would).
#[cfg(all(test, not(slurm_job_desc_step_id)))]
pub fn set_numeric_job_id(d: &mut job_desc_msg_t, id: u32) {
    d.job_id = id;
}

#[cfg(all(test, slurm_job_desc_step_id))]
pub fn set_numeric_job_id(d: &mut job_desc_msg_t, id: u32) {
    d.step_id.job_id = id;
}

unsafe fn string(p: *const c_char) -> Option<String> {
    // SAFETY: the caller's promise.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
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
            // SAFETY: the caller's promise: `desc` is NULL or valid and writable.
            if let Some(d) = unsafe { desc.as_mut() } {
                if let Some(nice) = changes.nice {
                    d.nice = sentinel::offset(nice);
                }
                if let Some(factor) = changes.site_factor {
                    d.site_factor = sentinel::offset(factor);
                }
                if let Some(minutes) = changes.time_limit {
                    d.time_limit = sentinel::minutes(minutes);
                }
                if changes.requeue {
                    d.requeue = 1;
                }
                if let Some(qos) = &changes.qos {
                    // SAFETY: a job description's strings are NULL or xmalloc'ed by slurmctld.
                    unsafe { replace_string(&mut d.qos, qos) };
                }
            }
            if let Some(message) = message {
                // SAFETY: the caller's promise about `err_msg`.
                unsafe { give_message(err_msg, message, false) };
            }
            SLURM_SUCCESS as c_int
        }
        Verdict::Reject { message } => {
            // SAFETY: as above.
            unsafe { give_message(err_msg, message, true) };
            ESLURM_ACCOUNTING_POLICY as c_int
        }
    }
}

/// Puts an xstrdup'ed `value` in a job description string field, xfree-ing what was there.
///
/// # Safety
/// `*field` is NULL or was allocated by Slurm's xmalloc.
unsafe fn replace_string(field: &mut *mut c_char, value: &str) {
    if !field.is_null() {
        // SAFETY: the caller's promise; xfree sets the field to NULL, and it is replaced below.
        unsafe { slurm::slurm_xfree((field as *mut *mut c_char).cast()) };
    }
    let text = c_string(value);
    // SAFETY: `text` is a valid NUL-terminated string; the copy is slurmctld's to xfree.
    *field = unsafe { slurm::slurm_xstrdup(text.as_ptr()) };
}

/// Stores an xstrdup'ed copy of `message` in `*err_msg` (slurmctld frees it with xfree and shows it:
/// as an error with a refusal, as information on success). An information message leaves one that
/// another job_submit plugin put there; a refusal replaces it, leaking the other copy: freeing it
/// would need `slurm_xfree`, whose signature differs between Slurm releases.
///
/// # Safety
/// `err_msg` is NULL or points to a `char *` that is NULL or was allocated by Slurm's xmalloc.
unsafe fn give_message(err_msg: *mut *mut c_char, message: &str, replace: bool) {
    // SAFETY: the caller's promise: non-NULL `err_msg` is readable and writable.
    if err_msg.is_null() || (!unsafe { *err_msg }.is_null() && !replace) {
        return;
    }
    let text = c_string(message);
    // SAFETY: as above; `text` is a valid NUL-terminated string, the copy is slurmctld's to xfree.
    unsafe { *err_msg = slurm::slurm_xstrdup(text.as_ptr()) };
}

/// The exported `job_submit`'s signature: what [`BenchJob::submit`] calls (given by `crate::bench`,
/// so this module does not name the crate's entry points).
pub type JobSubmit = unsafe extern "C" fn(*mut job_desc_msg_t, u32, *mut *mut c_char) -> c_int;

/// A GPU job as slurmctld hands it to `job_submit`, for the benchmarks (`crate::bench`).
pub struct BenchJob {
    uid: u32,
    tres_per_node: CString,
    account: Option<CString>,
}

/// What one call of the exported `job_submit` did.
pub struct BenchSubmitted {
    pub code: c_int,
    /// The call alone, without making the job description or freeing the message.
    pub took: Duration,
    /// The message it left for the user, if any.
    pub message: Option<String>,
}

impl BenchJob {
    pub fn new(uid: u32, tres_per_node: &str, account: Option<&str>) -> BenchJob {
        BenchJob { uid, tres_per_node: c_string(tres_per_node), account: account.map(c_string) }
    }

    /// Makes a fresh job description of this job (nice unset) and calls the exported `job_submit`
    /// with it, as slurmctld does; frees what the plugin allocated (the message, a replaced QOS) as
    /// slurmctld would.
    pub fn submit(&self, job_submit: JobSubmit) -> BenchSubmitted {
        let mut desc = job_desc_msg_t {
            user_id: self.uid,
            nice: NO_VAL,
            tres_per_node: self.tres_per_node.as_ptr().cast_mut(),
            account: self.account.as_ref().map_or(std::ptr::null_mut(), |a| a.as_ptr().cast_mut()),
            ..Default::default()
        };
        let mut err: *mut c_char = std::ptr::null_mut();
        let started = Instant::now();
        // SAFETY: a valid job description whose strings (ours, NUL-terminated) outlive the call, and
        // a NULL message, as slurmctld passes them.
        let code = unsafe { job_submit(&mut desc, self.uid, &mut err) };
        let took = started.elapsed();
        // SAFETY: the plugin leaves `err` NULL or an xstrdup'ed string, and `desc.qos` (NULL before
        // the call) NULL or an xstrdup'ed one: each is read, then freed once.
        let message = unsafe {
            let message = (!err.is_null()).then(|| CStr::from_ptr(err).to_string_lossy().into_owned());
            slurm::slurm_xfree((&mut err as *mut *mut c_char).cast());
            if !desc.qos.is_null() {
                slurm::slurm_xfree((&mut desc.qos as *mut *mut c_char).cast());
            }
            message
        };
        BenchSubmitted { code, took, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::{INFINITE, NICE_OFFSET, NO_VAL, NO_VAL16};
    use gputokens::decision::Changes;
    use gputokens::job_request::{Memory, TimeLimit};
    use slurm_ffi::stand_ins;
    use std::ffi::CString;

    /// A later component of a heterogeneous batch job has no script of its own, but is a batch
    /// job's; one of an interactive heterogeneous job (salloc) is not.
    #[test]
    fn a_heterogeneous_jobs_components_are_batch_where_the_first_is() {
        assert!(batch_submission(true, NO_VAL) && !batch_submission(false, NO_VAL));
        assert!(batch_submission(true, 0));
        assert!(batch_submission(false, 1) && batch_submission(false, 2), "the first had a script");
        assert!(!batch_submission(false, 0));
        assert!(!batch_submission(false, 1), "the first had none");
    }

    #[test]
    fn reads_the_fields_of_a_job_description() {
        let node = CString::new("gres:gpu:a6000:1").unwrap();
        let job = CString::new("gres:gpu:2").unwrap();
        let part = CString::new("gpu").unwrap();
        let array = CString::new("0-9").unwrap();
        let account = CString::new("LAB").unwrap();
        let cpus_per_gpu = CString::new("gres/gpu:4").unwrap();
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
            account: account.as_ptr().cast_mut(),
            spank_job_env: env_ptrs.as_mut_ptr(),
            spank_job_env_size: 2,
            min_cpus: NO_VAL,
            cpus_per_task: 8,
            cpus_per_tres: cpus_per_gpu.as_ptr().cast_mut(),
            // --mem-per-cpu=1024: MEM_PER_CPU | 1024.
            pn_min_memory: 0x8000_0000_0000_0400,
            shared: NO_VAL16 as u16,
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
                account: Some("lab".into()),
                wants_estimate: true,
                // No script: not a batch submission.
                batch: Some(false),
                cpus: CpuRequest {
                    cpus_per_task: Some(8),
                    cpus_per_tres: Some("gres/gpu:4".into()),
                    memory: Some(Memory::PerCpu(1024)),
                    ..Default::default()
                },
                ..Default::default()
            }
        );
        let mut raw = job_desc_msg_t {
            user_id: NO_VAL,
            nice: NICE_OFFSET - 5,
            time_limit: INFINITE,
            min_nodes: NO_VAL,
            num_tasks: 3,
            ntasks_per_node: NO_VAL16 as u16,
            sockets_per_node: 2,
            ..Default::default()
        };
        set_numeric_job_id(&mut raw, NO_VAL);
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
        assert_eq!(unsafe { stand_ins::take(err) }.as_deref(), Some("info"));

        desc.qos = unsafe { stand_ins::slurm_xstrdup(c"normal".as_ptr()) };
        let changes = Changes {
            site_factor: Some(-5),
            qos: Some("overdraft".into()),
            time_limit: Some(60),
            ..Default::default()
        };
        let mut err: *mut c_char = std::ptr::null_mut();
        assert_eq!(unsafe { apply(&mut desc, &mut err, &Verdict::Accept { changes, message: None }) }, 0);
        assert_eq!((desc.site_factor, desc.time_limit, err.is_null()), (NICE_OFFSET - 5, 60, true));
        assert_eq!(unsafe { stand_ins::take(desc.qos) }.as_deref(), Some("overdraft"), "the old QOS string was freed");
        let huge = Changes { time_limit: Some(u32::MAX), ..Default::default() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &Verdict::Accept { changes: huge, message: None }) }, 0);
        assert_eq!(desc.time_limit, NO_VAL - 1, "a limit, not NO_VAL or INFINITE");

        let mut err: *mut c_char = std::ptr::null_mut();
        let no = Verdict::Reject { message: "no\0pe".into() };
        assert_eq!(unsafe { apply(&mut desc, &mut err, &no) }, 2050);
        assert_eq!(unsafe { stand_ins::take(err) }.as_deref(), Some("no pe"));
        assert_eq!(unsafe { apply(&mut desc, std::ptr::null_mut(), &no) }, 2050, "NULL err_msg is fine");
    }

    #[test]
    fn an_info_message_keeps_another_plugins_message() {
        let mut desc = job_desc_msg_t::default();
        let mut err = unsafe { stand_ins::slurm_xstrdup(c"from another plugin".as_ptr()) };
        let lower = Verdict::Accept { changes: Changes::default(), message: Some("ours".into()) };
        unsafe { apply(&mut desc, &mut err, &lower) };
        assert_eq!(unsafe { stand_ins::take(err) }.as_deref(), Some("from another plugin"));
    }
}
