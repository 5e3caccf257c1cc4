//! `job_submit_gputokens.so`: the gputokens admission check inside slurmctld.
//!
//! Install as `<PluginDir>/job_submit_gputokens.so` and set `JobSubmitPlugins=gputokens`. GPU jobs of
//! a user at or below the floor are refused with a message saying why and when it recovers; in
//! overdraft they are accepted with a raised nice value and the user is told; CPU-only jobs are
//! never touched. Balances come from the snapshot accountd writes, kept in memory and reloaded
//! within 200 ms of a change (see `watch`).
//!
//! Layout: this file holds the symbols slurmctld looks up, each a few lines inside a panic
//! boundary with a fallback; `ffi` holds every unsafe operation and reads the job description into
//! a typed `gputokens::job_request::JobRequest` (Slurm's sentinel numbers converted in `sentinel`);
//! `plugin`, `watch` and `tally` are safe code keeping the live state; `status_file` tells admins
//! which balances this controller holds. The decision itself is
//! `gputokens::decision`'s. `bench` is what the benchmarks under benches/ drive.
//! The panic boundary and the log shims are slurm-ffi's, shared with the SPANK plugin.
#![deny(unsafe_op_in_unsafe_fn)]

mod bindings;
mod ffi;
mod plugin;
#[cfg(test)]
mod properties;
mod sentinel;
mod status_file;
mod status_thread;
mod tally;
mod watch;

use gputokens::Config;

use std::ffi::{c_char, c_int, c_void};

use bindings::{job_desc_msg_t, SLURM_SUCCESS, SLURM_VERSION_NUMBER};
use ffi::Level;
use slurm_ffi::boundary;

const SUCCESS: c_int = SLURM_SUCCESS as c_int;

/// What a panic in an entry point leaves (inside `slurm_ffi::boundary`, which returns SUCCESS then):
/// a line in slurmctld's log, and the job accepted unchecked.
fn log_panic(entry: &str) {
    ffi::log(Level::Error, &format!("{entry} panicked; the job is accepted unchecked"));
}

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_name: [u8; 30] = *b"gputokens GPU token admission\0";

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_type: [u8; 21] = *b"job_submit/gputokens\0";

/// Must equal the running slurmctld's SLURM_VERSION_NUMBER exactly, or slurmctld refuses the plugin.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

/// Reads the config (`$GPUTOKENS_CONF` or /etc/slurm/gputokens.toml), loads the snapshot, starts the
/// watcher. Always succeeds: a problem is logged and the defaults and `on_error` apply.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    boundary("init", SUCCESS, log_panic, || {
        plugin::start(&Config::resolve_path(None));
        SUCCESS
    })
}

/// Stops and joins the watcher (slurmctld unloads the plugin next).
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    boundary("fini", SUCCESS, log_panic, || {
        plugin::stop();
        SUCCESS
    })
}

/// # Safety
/// Called by slurmctld with a valid job description, and `err_msg` NULL or pointing to a `char *`
/// that is NULL or xmalloc'ed.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    boundary("job_submit", SUCCESS, log_panic, || {
        // SAFETY: as promised by slurmctld (above).
        match unsafe { ffi::read_job(job_desc) } {
            Some(job) => unsafe { ffi::apply(job_desc, err_msg, &plugin::submit(&job, submit_uid)) },
            None => SUCCESS,
        }
    })
}

/// Slurm 22.05: `job_modify(job_desc, job_ptr, submit_uid)`, without a message for the user.
///
/// # Safety
/// As for [`job_submit`]; `job_ptr` is not used.
#[cfg(not(slurm_job_modify_err_msg))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(job_desc: *mut job_desc_msg_t, _job_ptr: *mut c_void, submit_uid: u32) -> c_int {
    // SAFETY: as promised by slurmctld (see `job_submit`).
    boundary("job_modify", SUCCESS, log_panic, || unsafe { modify(job_desc, submit_uid, std::ptr::null_mut()) })
}

/// Slurm 23.02 and later: `job_modify(job_desc, job_ptr, submit_uid, err_msg)`.
///
/// # Safety
/// As for [`job_submit`]; `job_ptr` is not used.
#[cfg(slurm_job_modify_err_msg)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    // SAFETY: as promised by slurmctld (see `job_submit`).
    boundary("job_modify", SUCCESS, log_panic, || unsafe { modify(job_desc, submit_uid, err_msg) })
}

/// # Safety
/// As for [`job_submit`].
unsafe fn modify(job_desc: *mut job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    // SAFETY: the caller passes slurmctld's promise on (see `job_submit`).
    match unsafe { ffi::read_job(job_desc) } {
        // An update carries no script, whatever kind of job it changes.
        Some(job) => {
            let job = gputokens::job_request::JobRequest { batch: None, ..job };
            unsafe { ffi::apply(job_desc, err_msg, &plugin::modify(&job, submit_uid)) }
        }
        None => SUCCESS,
    }
}

/// What the benchmarks (`cargo bench -p job-submit-gputokens`, benches/) drive: the plugin started
/// and stopped as `init` and `fini` do, and jobs submitted through the exported `job_submit` as
/// slurmctld submits them. Not the plugin's interface to Slurm, which is the C symbols above; the
/// benchmark binaries link this library as it ships and define Slurm's functions with
/// `slurm_ffi::stand_in_symbols!`.
#[doc(hidden)]
pub mod bench {
    pub use crate::ffi::BenchSubmitted as Submitted;

    /// A GPU job of `uid` submitted through the exported `job_submit`.
    pub struct Job(crate::ffi::BenchJob);

    impl Job {
        pub fn new(uid: u32, tres_per_node: &str, account: Option<&str>) -> Job {
            Job(crate::ffi::BenchJob::new(uid, tres_per_node, account))
        }

        /// One submission, as slurmctld makes it (see `ffi::BenchJob::submit`).
        pub fn submit(&self) -> Submitted {
            self.0.submit(crate::job_submit)
        }
    }

    /// `init` with the config at `config_path`.
    pub fn start(config_path: &std::path::Path) {
        crate::plugin::start(config_path)
    }

    /// `fini`.
    pub fn stop() {
        crate::plugin::stop()
    }
}

#[cfg(test)]
mod tests {
    //! The exported entry points, called the way slurmctld calls them (with the libslurmfull
    //! stand-ins of `slurm_ffi::stand_ins`).
    use super::*;
    use crate::bindings::{NICE_OFFSET, NO_VAL};
    use slurm_ffi::stand_ins;
    use std::ffi::CString;
    use std::sync::Mutex;

    /// The plugin state is global: tests that init it run one at a time.
    pub(crate) static GLOBAL: Mutex<()> = Mutex::new(());

    fn snapshot(users: &[(&str, i64)]) -> String {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let mut t = format!(
            "gputokens-snapshot 1\ngenerated {now}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n"
        );
        for (u, b) in users {
            t.push_str(&format!("user {u} {b}\n"));
        }
        t
    }

    fn submit(user_id: u32, tres_per_node: Option<&str>) -> (c_int, u32, Option<String>) {
        let node = tres_per_node.map(|t| CString::new(t).unwrap());
        let mut desc = job_desc_msg_t {
            user_id,
            nice: NO_VAL,
            tres_per_node: node.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut()),
            ..Default::default()
        };
        let mut err: *mut c_char = std::ptr::null_mut();
        let code = unsafe { job_submit(&mut desc, user_id, &mut err) };
        (code, desc.nice, unsafe { stand_ins::take(err) })
    }

    #[cfg(not(slurm_job_modify_err_msg))]
    fn modify_as(desc: &mut job_desc_msg_t, uid: u32) -> c_int {
        unsafe { job_modify(desc, std::ptr::null_mut(), uid) }
    }

    #[cfg(slurm_job_modify_err_msg)]
    fn modify_as(desc: &mut job_desc_msg_t, uid: u32) -> c_int {
        unsafe { job_modify(desc, std::ptr::null_mut(), uid, std::ptr::null_mut()) }
    }

    #[test]
    fn symbols_slurmctld_checks() {
        assert_eq!(&plugin_type[..], b"job_submit/gputokens\0");
        assert_eq!(plugin_name.last(), Some(&0));
        let header = std::fs::read_to_string("/usr/include/slurm/slurm_version.h").unwrap_or_default();
        if let Some(v) = header.lines().find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER")) {
            assert_eq!(plugin_version, u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).unwrap());
        }
    }

    #[test]
    fn init_submit_reload_fini() {
        let _g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("balances.snapshot");
        let conf = dir.path().join("gputokens.toml");
        std::fs::write(&conf, format!("[paths]\nsnapshot = \"{}\"\n", snap.display())).unwrap();
        // root (uid 0) is the one user every machine has.
        gputokens::snapshot::write_atomically(&snap, &snapshot(&[("root", -10_400_000)])).unwrap();
        plugin::start(&conf);

        let (code, nice, msg) = submit(0, Some("gres:gpu:a6000:1"));
        assert_eq!(code, 2050);
        assert_eq!(nice, NO_VAL);
        assert!(msg.unwrap().starts_with("gputokens: your GPU token balance is -10.4 (floor -10)"));
        assert_eq!(submit(0, None), (SUCCESS, NO_VAL, None), "CPU-only");
        assert_eq!(submit(4242, Some("gres:gpu:1")), (SUCCESS, NO_VAL, None), "not in the snapshot");

        gputokens::snapshot::write_atomically(&snap, &snapshot(&[("root", -2_000_000)])).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let (code, nice, msg) = loop {
            let got = submit(0, Some("gres/gpu:1"));
            if got.0 == SUCCESS || std::time::Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!((code, nice), (SUCCESS, NICE_OFFSET + 10_000), "the change is seen within a second");
        assert!(msg.unwrap().contains("balance is -2 (below 0)"));

        let modify_desc = |tres: &str| {
            let t = CString::new(tres).unwrap();
            let mut desc = job_desc_msg_t {
                user_id: NO_VAL,
                nice: NO_VAL,
                tres_per_job: t.as_ptr().cast_mut(),
                ..Default::default()
            };
            modify_as(&mut desc, 0)
        };
        assert_eq!(modify_desc("gres:gpu:2"), SUCCESS, "root may change jobs");

        assert_eq!(fini(), SUCCESS);
        assert_eq!(submit(0, Some("gres:gpu:1")).0, SUCCESS, "after fini: nothing to decide from");
        let log = stand_ins::LOG.lock().unwrap().join("\n");
        let started = format!("info: gputokens: job_submit/gputokens {} (built for Slurm", env!("CARGO_PKG_VERSION"));
        assert!(log.contains(&started), "{log}");
        assert!(log.contains("info: gputokens: refused a GPU job of root (uid 0)"), "{log}");
    }

    #[test]
    fn a_missing_config_still_loads() {
        let _g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        plugin::start(std::path::Path::new("/nonexistent/gputokens.toml"));
        assert_eq!(submit(0, Some("gres:gpu:1")).0, SUCCESS);
        plugin::stop();
        let log = stand_ins::LOG.lock().unwrap().join("\n");
        assert!(log.contains("error: gputokens: /nonexistent/gputokens.toml: cannot read: "), "{log}");
    }

    #[test]
    fn a_null_description_is_accepted() {
        let mut err: *mut c_char = std::ptr::null_mut();
        assert_eq!(unsafe { job_submit(std::ptr::null_mut(), 0, &mut err) }, SUCCESS);
        assert!(err.is_null());
    }
}
