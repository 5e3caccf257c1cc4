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
//! `gputokens::decision`'s.
//! The panic boundary and the log shims are slurm-ffi's, shared with the SPANK plugin.
#![deny(unsafe_op_in_unsafe_fn)]

mod bindings;
mod ffi;
mod plugin;
#[cfg(test)]
mod properties;
mod sentinel;
mod status_file;
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
        Some(job) => unsafe { ffi::apply(job_desc, err_msg, &plugin::modify(&job, submit_uid)) },
        None => SUCCESS,
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
        assert!(log.contains("info: gputokens: job_submit/gputokens 0.1.0 (built for Slurm"), "{log}");
        assert!(log.contains("info: gputokens: refused a GPU job of root (uid 0)"), "{log}");
    }

    /// The in-process decision time through the exported `job_submit` (2,000 users in the snapshot):
    /// a benchmark, not a test — `bash bench/decision.sh` runs it in a release build and prints the
    /// median and p99 (the design's budget is 10 µs; results in bench/README.md).
    #[test]
    #[ignore = "benchmark: bash bench/decision.sh"]
    fn bench_decision_time() {
        let _g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("balances.snapshot");
        let conf = dir.path().join("gputokens.toml");
        std::fs::write(&conf, format!("[paths]\nsnapshot = \"{}\"\n", snap.display())).unwrap();
        let mut users: Vec<(String, i64)> = (0..2000).map(|i| (format!("user{i}"), i * 1000)).collect();
        users.push(("root".into(), 5_000_000));
        let users: Vec<(&str, i64)> = users.iter().map(|(u, b)| (u.as_str(), *b)).collect();
        gputokens::snapshot::write_atomically(&snap, &snapshot(&users)).unwrap();
        plugin::start(&conf);
        let mut times: Vec<std::time::Duration> = (0..2000)
            .map(|_| {
                let started = std::time::Instant::now();
                assert_eq!(submit(0, Some("gres:gpu:a6000:1")).0, SUCCESS);
                started.elapsed()
            })
            .collect();
        plugin::stop();
        times.sort();
        let median = times[times.len() / 2];
        println!("job_submit median {median:?} (p99 {:?})", times[times.len() * 99 / 100]);
    }

    /// Submission latency while accountd rewrites a big snapshot under the plugin (`BENCH_USERS`,
    /// 100,000 users): the watcher thread parses each version and swaps it in, so a submission
    /// should never wait for a parse. A benchmark, not a test: `bash bench/scale.sh` runs it in a
    /// release build and prints p50/p99/max without and with reloads (bench/README.md).
    #[test]
    #[ignore = "benchmark: bash bench/scale.sh"]
    fn bench_submit_during_reload() {
        use std::time::{Duration, Instant};
        let _g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        let count: usize = std::env::var("BENCH_USERS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("balances.snapshot");
        let conf = dir.path().join("gputokens.toml");
        std::fs::write(&conf, format!("[paths]\nsnapshot = \"{}\"\n", snap.display())).unwrap();
        let version = |shift: i64| {
            let mut users: Vec<(String, i64)> =
                (0..count).map(|i| (format!("user{i}"), i as i64 * 1000 + shift)).collect();
            users.push(("root".into(), 5_000_000 + shift));
            let users: Vec<(&str, i64)> = users.iter().map(|(u, b)| (u.as_str(), *b)).collect();
            snapshot(&users)
        };
        let versions = [version(0), version(1)];
        gputokens::snapshot::write_atomically(&snap, &versions[0]).unwrap();
        plugin::start(&conf);
        let loads = || stand_ins::LOG.lock().unwrap().iter().filter(|l| l.contains("gputokens: loaded ")).count();
        let phase = |label: &str, until: Instant| {
            let loaded_before = loads();
            let mut times = Vec::new();
            while Instant::now() < until {
                let started = Instant::now();
                assert_eq!(submit(0, Some("gres:gpu:a6000:1")).0, SUCCESS);
                times.push(started.elapsed());
            }
            times.sort();
            let at = |q: usize| times[(times.len() - 1) * q / 100];
            println!(
                "job_submit {label}: {} submissions, p50 {:?}, p99 {:?}, max {:?}, {} snapshot loads",
                times.len(),
                at(50),
                at(99),
                times[times.len() - 1],
                loads() - loaded_before
            );
        };
        phase("quiet", Instant::now() + Duration::from_secs(3));
        let rewriting = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for n in 0.. {
                    if !rewriting.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    gputokens::snapshot::write_atomically(&snap, &versions[n % 2]).unwrap();
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
            phase("during reloads", Instant::now() + Duration::from_secs(10));
            rewriting.store(false, std::sync::atomic::Ordering::Relaxed);
        });
        plugin::stop();
    }

    /// The decision with pools (`[accounts] mode = "account"`): `BENCH_USERS` (100,000) users each
    /// in two of `BENCH_ACCOUNTS` (10,000) pools, what each member spent, root in five pools (one at
    /// its floor) with a default account. Times accepted submissions under `-A`, without `-A` (the
    /// default account's pool) and the refusal at a pool's floor, whose message names the user's other
    /// accounts. A benchmark: `bash bench/decision.sh` prints it (bench/README.md).
    #[test]
    #[ignore = "benchmark: bash bench/decision.sh"]
    fn bench_decision_with_pools() {
        let _g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
        let (users, accounts) = (env("BENCH_USERS", 100_000), env("BENCH_ACCOUNTS", 10_000));
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("balances.snapshot");
        let conf = dir.path().join("gputokens.toml");
        std::fs::write(&conf, format!("[paths]\nsnapshot = \"{}\"\n", snap.display())).unwrap();
        let mut list: Vec<(String, i64)> = (0..users).map(|i| (format!("u{i:06}"), i as i64 * 1000)).collect();
        list.push(("root".into(), 5_000_000));
        let list: Vec<(&str, i64)> = list.iter().map(|(u, b)| (u.as_str(), *b)).collect();
        let mut text = snapshot(&list);
        text.push_str("account root a00001\npool_mode account\n");
        for a in 0..accounts {
            let balance = if a == 3 { -10_000_000 } else { 50_000_000 + a as i64 };
            text.push_str(&format!(
                "pool a{a:05} {balance} -10000000 0 30000000 20000000\ncoordinators a{a:05} pi{a}\n"
            ));
        }
        let month = chrono::Local::now().format("%Y-%m");
        text.push_str(&format!("spent_month {month}\n"));
        for i in 0..users {
            let (first, second) = (i % accounts, (i + 1) % accounts);
            text.push_str(&format!("spent a{first:05} u{i:06} 1000000\nmember u{i:06} a{first:05},a{second:05}\n"));
        }
        text.push_str("member root a00001,a00002,a00003,a00004,a00005\nspent a00002 root 1000000\n");
        gputokens::snapshot::write_atomically(&snap, &text).unwrap();
        plugin::start(&conf);
        let time = |label: &str, account: Option<&str>, expect: c_int| {
            let account = account.map(|a| CString::new(a).unwrap());
            let tres = CString::new("gres:gpu:a6000:1").unwrap();
            let mut times: Vec<std::time::Duration> = (0..5000)
                .map(|_| {
                    let mut desc = job_desc_msg_t {
                        user_id: 0,
                        nice: NO_VAL,
                        tres_per_node: tres.as_ptr().cast_mut(),
                        account: account.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut()),
                        ..Default::default()
                    };
                    let mut err: *mut c_char = std::ptr::null_mut();
                    let started = std::time::Instant::now();
                    let code = unsafe { job_submit(&mut desc, 0, &mut err) };
                    let took = started.elapsed();
                    drop(unsafe { stand_ins::take(err) });
                    assert_eq!(code, expect, "{label}");
                    took
                })
                .collect();
            times.sort();
            let at = |q: usize| times[(times.len() - 1) * q / 100];
            println!("job_submit with pools, {label}: median {:?} (p99 {:?})", at(50), at(99));
        };
        println!("pools: {users} users, {accounts} accounts in the snapshot ({} bytes)", text.len());
        time("-A a00002", Some("a00002"), SUCCESS);
        time("no -A (default a00001)", None, SUCCESS);
        time("refused at a00003's floor", Some("a00003"), 2050);
        plugin::stop();
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
