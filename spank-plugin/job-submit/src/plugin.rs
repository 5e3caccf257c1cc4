//! The running plugin: settings read once in `init`, the balances view the watcher thread publishes,
//! and the watcher itself (stopped and joined in `fini`, which slurmctld follows with dlclose).
//!
//! `job_submit` may run on several slurmctld threads at once (23.02+); it takes two uncontended
//! read locks to clone two `Arc`s and never waits for the watcher, which holds the write lock
//! only to swap a pointer.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{Datelike, NaiveDate};

use crate::admit::{self, Context, JobRequest, Verdict};
use crate::ffi::{self, Level};
use crate::watch::{self, Monitor, View};
use gputokens::plugin_config::{self as config, PluginConfig};

struct Plugin {
    config: PluginConfig,
    view: RwLock<Arc<View>>,
    /// Local date as days since 0001-01-01, kept by the watcher (reading the time zone is file I/O).
    today: AtomicI32,
    stop: Mutex<bool>,
    wake: Condvar,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

static PLUGIN: RwLock<Option<Arc<Plugin>>> = RwLock::new(None);

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or_default()
}

fn local_days(now: i64) -> i32 {
    gputokens::time::local_date(now).num_days_from_ce()
}

fn slurm_log(level: Level, message: String) {
    ffi::log(level, &message)
}

/// `init`: reads the config at `config_path` (problems are logged, defaults used), loads the
/// snapshot once, starts the watcher. Never fails.
pub fn start(config_path: &Path) {
    stop();
    let (config, problems) = config::load(config_path);
    for problem in problems {
        ffi::log(Level::Error, &problem);
    }
    ffi::log(
        Level::Info,
        &format!(
            "job_submit/gputokens {} (built for Slurm {}), config {}: {}",
            env!("CARGO_PKG_VERSION"),
            env!("GPUTOKENS_PLUGIN_SLURM"),
            config_path.display(),
            config.describe()
        ),
    );
    let mut monitor =
        Monitor::new(config.snapshot.clone(), config.max_snapshot_age, config.on_error, watch::system_resolver());
    let now = unix_now();
    monitor.tick(now, &mut slurm_log);
    let plugin = Arc::new(Plugin {
        config,
        view: RwLock::new(monitor.view()),
        today: AtomicI32::new(local_days(now)),
        stop: Mutex::new(false),
        wake: Condvar::new(),
        watcher: Mutex::new(None),
    });
    let for_thread = plugin.clone();
    match std::thread::Builder::new().name("gputokens".into()).spawn(move || watch_loop(&for_thread, monitor)) {
        Ok(handle) => *plugin.watcher.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle),
        Err(e) => ffi::log(
            Level::Error,
            &format!("cannot start the snapshot watcher ({e}): balances stay as loaded now until slurmctld restarts"),
        ),
    }
    *PLUGIN.write().unwrap_or_else(PoisonError::into_inner) = Some(plugin);
}

/// `fini`: stops the watcher and waits for it.
pub fn stop() {
    let plugin = PLUGIN.write().unwrap_or_else(PoisonError::into_inner).take();
    let Some(plugin) = plugin else { return };
    *plugin.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
    plugin.wake.notify_all();
    let handle = plugin.watcher.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(handle) = handle {
        if handle.join().is_err() {
            ffi::log(Level::Error, "the snapshot watcher ended with a panic");
        }
    }
}

fn watch_loop(plugin: &Plugin, mut monitor: Monitor) {
    let mut panicked = false;
    loop {
        let stopped = plugin.stop.lock().unwrap_or_else(PoisonError::into_inner);
        let (stopped, _) =
            plugin.wake.wait_timeout_while(stopped, watch::POLL, |s| !*s).unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return;
        }
        drop(stopped);
        let tick = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let now = unix_now();
            plugin.today.store(local_days(now), Ordering::Relaxed);
            if let Some(view) = monitor.tick(now, &mut slurm_log) {
                *plugin.view.write().unwrap_or_else(PoisonError::into_inner) = view;
            }
        }));
        if tick.is_err() && !panicked {
            ffi::log(Level::Error, "the snapshot watcher panicked; it keeps trying (logged once)");
        }
        panicked |= tick.is_err();
    }
}

fn current() -> Option<Arc<Plugin>> {
    PLUGIN.read().unwrap_or_else(PoisonError::into_inner).clone()
}

fn decide_with(f: impl FnOnce(&Context, &mut dyn FnMut(Level, String)) -> Verdict) -> Verdict {
    // Not initialised (init panicked): nothing to decide from, accept.
    let Some(plugin) = current() else { return Verdict::Accept };
    let view = plugin.view.read().unwrap_or_else(PoisonError::into_inner).clone();
    let today = NaiveDate::from_num_days_from_ce_opt(plugin.today.load(Ordering::Relaxed)).unwrap_or_default();
    let ctx = Context {
        view: &view,
        on_error: plugin.config.on_error,
        nice_increment: plugin.config.nice_increment,
        max_snapshot_age_secs: plugin.config.max_snapshot_age.map(|d| d.as_secs() as i64),
        now: unix_now(),
        today,
    };
    f(&ctx, &mut slurm_log)
}

pub fn submit(job: &JobRequest, submit_uid: u32) -> Verdict {
    decide_with(|ctx, log| admit::on_submit(ctx, job, submit_uid, log))
}

pub fn modify(job: &JobRequest, submit_uid: u32) -> Verdict {
    decide_with(|ctx, log| admit::on_modify(ctx, job, submit_uid, log))
}
