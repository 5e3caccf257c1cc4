//! The running plugin: the settings and the balances view the watcher thread publishes, the tally of
//! GPU jobs admitted since the last queue read, and the watcher itself (stopped and joined in `fini`,
//! which slurmctld follows with dlclose; a watcher stuck on a hung file system is waited for
//! [`STOP_WAIT`] at most). The watcher re-reads the config file when it changes, so
//! an edited `[admission]` applies within a second, without restarting slurmctld.
//!
//! `job_submit` may run on several slurmctld threads at once (23.02+); it takes uncontended read
//! locks to clone two `Arc`s and never waits for the watcher, which holds the write locks only to
//! swap a pointer. The tally's mutex is held for one decision (no I/O under it).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{Datelike, NaiveDate};

use gputokens::controller_status::Shadow;
use gputokens::decision::{self, decide_modify, decide_submit, shadow, Inputs, Log, Outcome, Verdict};
use gputokens::job_request::JobRequest;

use crate::ffi::{self, Level};
use crate::status_file::StatusFile;
use crate::status_thread::{StatusFeed, StatusUpdate};
use crate::tally::{QueueRead, Tally};
use crate::watch::{self, Monitor, Stamp, View};
use gputokens::config::describe;
use gputokens::Config;

struct Plugin {
    config: RwLock<Arc<Config>>,
    view: RwLock<Arc<View>>,
    /// uid → name of the `[exempt]` users (the watcher looks them up).
    exempt_names: RwLock<Arc<HashMap<u32, String>>>,
    tally: Mutex<Tally>,
    /// Local date as days since 0001-01-01, kept by the watcher (reading the time zone is file I/O).
    today: AtomicI32,
    /// slurmctld's effective uid, the SlurmUser (read once: a system call, not per decision).
    slurm_uid: u32,
    /// In shadow mode, what enforcement would have done (None while enforcing).
    shadow: Mutex<Option<Shadow>>,
    stop: Mutex<bool>,
    wake: Condvar,
    watcher: Mutex<Option<JoinHandle<()>>>,
    /// The controller status file's writer (`status_thread`): it ends once the watcher has.
    status_writer: Mutex<Option<JoinHandle<()>>>,
}

static PLUGIN: RwLock<Option<Arc<Plugin>>> = RwLock::new(None);

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or_default()
}

fn unix_now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

fn local_days(now: i64) -> i32 {
    gputokens::time::local_date(now).num_days_from_ce()
}

fn slurm_log(level: Level, message: String) {
    ffi::log(level, &message)
}

fn decision_log(level: decision::Level, message: String) {
    ffi::log(ffi::decision_level(level), &message)
}

/// How long `init` waits for the watcher's first read of the snapshot (its users' names mapped to
/// uids): a name service slower than this holds the watcher, never slurmctld's start; GPU jobs
/// meanwhile go by `on_error` (the balances are not loaded yet).
const FIRST_READ_WAIT: Duration = Duration::from_secs(2);

/// `init`: reads the config at `config_path` leniently (problems are logged, defaults used), starts
/// the watcher and waits up to [`FIRST_READ_WAIT`] for its first read of the snapshot. Never fails.
pub fn start(config_path: &Path) {
    start_with(config_path, watch::system_resolver)
}

/// [`start`], with the name service `resolver` makes (tests: a slow one).
fn start_with(config_path: &Path, resolver: fn() -> watch::Resolver) {
    stop();
    let mut settings = Settings::new(config_path.to_path_buf());
    let config = settings.load().unwrap_or_else(|| Config::defaults(config_path));
    let monitor = monitor_for(&config, resolver);
    let status = StatusFile::new(
        config.paths.controller_status.clone(),
        config.paths.snapshot.clone(),
        host_name(),
        std::process::id(),
    );
    let now = unix_now();
    let shadow = (!config.admission.enforce).then(|| Shadow { since: now, ..Shadow::default() });
    let plugin = Arc::new(Plugin {
        config: RwLock::new(Arc::new(config)),
        view: RwLock::new(monitor.view()),
        exempt_names: RwLock::new(Arc::default()),
        tally: Mutex::new(Tally::default()),
        today: AtomicI32::new(local_days(now)),
        shadow: Mutex::new(shadow),
        slurm_uid: nix::unistd::geteuid().as_raw(),
        stop: Mutex::new(false),
        wake: Condvar::new(),
        watcher: Mutex::new(None),
        status_writer: Mutex::new(None),
    });
    let (feed, status_writer) = crate::status_thread::spawn(status, |level, message| ffi::log(level, &message))
        .inspect_err(|e| {
            ffi::log(Level::Error, &format!("cannot start the controller status writer ({e}): no status file"))
        })
        .ok()
        .unzip();
    *plugin.status_writer.lock().unwrap_or_else(PoisonError::into_inner) = status_writer;
    let for_thread = plugin.clone();
    let (first_read, first_read_done) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("gputokens".into())
        .spawn(move || watch_loop(&for_thread, (settings, resolver), monitor, feed, first_read));
    match spawned {
        Ok(handle) => {
            *plugin.watcher.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
            if first_read_done.recv_timeout(FIRST_READ_WAIT).is_err() {
                ffi::log(
                    Level::Info,
                    &format!(
                        "gputokens: the balance snapshot is still being read (its users' names looked up) after {}s: \
                         GPU jobs follow on_error until it is",
                        FIRST_READ_WAIT.as_secs()
                    ),
                );
            }
        }
        Err(e) => ffi::log(
            Level::Error,
            &format!("cannot start the snapshot watcher ({e}): GPU jobs follow on_error until slurmctld restarts"),
        ),
    }
    *PLUGIN.write().unwrap_or_else(PoisonError::into_inner) = Some(plugin);
}

/// This host's name, as SlurmctldHost names it (slurmctld matches it against gethostname).
fn host_name() -> String {
    match nix::unistd::gethostname() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(e) => {
            ffi::log(
                Level::Error,
                &format!("gethostname failed ({e}): the controller status file is named unknown.json"),
            );
            "unknown".into()
        }
    }
}

fn monitor_for(config: &Config, resolver: fn() -> watch::Resolver) -> Monitor {
    Monitor::new(
        config.paths.snapshot.clone(),
        config.admission.max_snapshot_age,
        config.admission.on_error,
        resolver(),
        config.exempt.users.clone(),
    )
}

/// The config file and the identity of the version last read.
struct Settings {
    path: std::path::PathBuf,
    stamp: Option<Stamp>,
    /// A changed identity seen at the last poll, not read yet: the file is read once it has stayed
    /// the same for a poll, so a file being written in place (an editor, `cp`) is not caught half
    /// way; an empty file would mean the defaults.
    settling: Option<Option<Stamp>>,
    /// Whether the file was last left unread because others could change it: read once they cannot.
    refused: bool,
    /// `[admission] enforce` as last read: a reload that cannot read it keeps it (a typo of a site in
    /// shadow mode must not start refusing its users).
    enforce: Option<bool>,
}

impl Settings {
    fn new(path: std::path::PathBuf) -> Settings {
        Settings { path, stamp: None, settling: None, refused: false, enforce: None }
    }

    fn current_stamp(&self) -> Option<Stamp> {
        Stamp::read(&self.path).ok()
    }

    /// Reads the file, logging its problems and the settings in effect; None (logged) when users
    /// other than root and slurmctld's could change it: its exemptions and limits would be theirs.
    fn load(&mut self) -> Option<Config> {
        self.stamp = self.current_stamp();
        self.refused = false;
        if let Some(why) = gputokens::file_trust::untrusted(&self.path, "the gputokens config") {
            ffi::log(Level::Error, &format!("{why}; not read: the plugin keeps its settings (at start, the defaults)"));
            self.refused = true;
            return None;
        }
        let (mut config, problems) = Config::load_lenient(&self.path);
        // A file that cannot be read or parsed as a whole, after one was: the settings stay as they are.
        if self.enforce.is_some() && problems.iter().any(|p| p.key.is_empty()) {
            for problem in &problems {
                ffi::log(Level::Error, &format!("{problem}; the plugin keeps its settings"));
            }
            return None;
        }
        for problem in &problems {
            ffi::log(Level::Error, &problem.to_string());
        }
        if let Some(before) = self.enforce.filter(|_| problems.iter().any(|p| p.concerns("admission.enforce"))) {
            config.admission.enforce = before;
        }
        self.enforce = Some(config.admission.enforce);
        ffi::log(
            Level::Info,
            &format!(
                "job_submit/gputokens {} (built for Slurm {}), config {}: {}",
                env!("CARGO_PKG_VERSION"),
                env!("GPUTOKENS_PLUGIN_SLURM"),
                self.path.display(),
                describe(&config)
            ),
        );
        Some(config)
    }

    /// The new settings when the file changed since it was read and has since stayed the same for
    /// one poll.
    fn reload_if_changed(&mut self) -> Option<Config> {
        if self.refused && gputokens::file_trust::untrusted(&self.path, "").is_none() {
            return self.load();
        }
        let current = self.current_stamp();
        if current == self.stamp {
            self.settling = None;
            return None;
        }
        if self.settling != Some(current) {
            self.settling = Some(current);
            return None;
        }
        self.settling = None;
        self.load()
    }
}

/// `fini`: stops the watcher and waits for it.
pub fn stop() {
    let plugin = PLUGIN.write().unwrap_or_else(PoisonError::into_inner).take();
    let Some(plugin) = plugin else { return };
    *plugin.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
    plugin.wake.notify_all();
    let deadline = std::time::Instant::now() + STOP_WAIT;
    let threads = [("snapshot watcher", &plugin.watcher), ("controller status writer", &plugin.status_writer)];
    for (name, slot) in threads {
        let Some(handle) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() else { continue };
        match join_by(handle, deadline) {
            Some(Ok(())) => {}
            Some(Err(_)) => ffi::log(Level::Error, &format!("the {name} ended with a panic")),
            // A read on a hung shared file system: slurmctld's shutdown or reconfigure must not
            // hang with it. The thread is left to the process.
            None => ffi::log(
                Level::Error,
                &format!(
                    "gputokens: the {name} did not stop within {}s (a hung file system?): not waited for",
                    STOP_WAIT.as_secs()
                ),
            ),
        }
    }
}

/// How long `fini` waits for the plugin's threads in all.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Joins `handle` if it ends by `deadline`; None when it has not (it is left running).
fn join_by(handle: JoinHandle<()>, deadline: std::time::Instant) -> Option<std::thread::Result<()>> {
    while !handle.is_finished() {
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Some(handle.join())
}

/// The watcher: every [`watch::POLL`] (the first time at once) re-reads the config and the snapshot
/// when they change, and hands the status file's thread what to write; `first_read` is told when
/// the first read is done.
fn watch_loop(
    plugin: &Plugin,
    (mut settings, resolver): (Settings, fn() -> watch::Resolver),
    mut monitor: Monitor,
    status: Option<StatusFeed>,
    first_read: std::sync::mpsc::SyncSender<()>,
) {
    let mut first_read = Some(first_read);
    let mut panicked = false;
    // What the status file's thread is handed each poll (it writes when due).
    let paths = |c: &Config| (c.paths.controller_status.clone(), c.paths.snapshot.clone());
    let mut status_paths = paths(&plugin.config.read().unwrap_or_else(PoisonError::into_inner));
    let mut view_changed = true;
    // Views replaced but maybe still in a decision's hands: freed here once no decision holds them,
    // so a big snapshot's maps are never freed on slurmctld's RPC thread or under the view's lock.
    let mut retired: Vec<Arc<View>> = Vec::new();
    loop {
        retired.retain(|view| Arc::strong_count(view) > 1);
        let stopped = plugin.stop.lock().unwrap_or_else(PoisonError::into_inner);
        let wait = if first_read.is_some() { Duration::ZERO } else { watch::POLL };
        let (stopped, _) =
            plugin.wake.wait_timeout_while(stopped, wait, |s| !*s).unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return;
        }
        drop(stopped);
        let tick = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let now = unix_now();
            plugin.today.store(local_days(now), Ordering::Relaxed);
            if let Some(config) = settings.reload_if_changed() {
                let old = plugin.config.read().unwrap_or_else(PoisonError::into_inner).clone();
                let watched = |c: &Config| {
                    let a = &c.admission;
                    (c.paths.snapshot.clone(), a.max_snapshot_age, a.on_error, c.exempt.users.clone())
                };
                if watched(&old) != watched(&config) {
                    monitor = monitor_for(&config, resolver);
                    view_changed = true;
                    // Before the config that names them: a user it exempts is known as soon as it rules.
                    publish_exempt_names(plugin, &mut monitor, now);
                }
                status_paths = paths(&config);
                shadow_mode(plugin, &config, now);
                *plugin.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
            }
            publish_exempt_names(plugin, &mut monitor, now);
            if let Some(view) = monitor.tick(now, &mut slurm_log) {
                // When its queue read began and ended and what it showed (an older accountd's
                // snapshot: the second, as it wrote it).
                let shown = view.clone();
                let read = match &*shown {
                    View::Ready(b) => b.snapshot.queue.as_ref().map(|q| QueueRead {
                        began_ms: q.read_ms.unwrap_or(q.as_of * 1000),
                        ended_ms: q.read_end_ms,
                        recent: &q.recent,
                    }),
                    View::Unavailable(_) => None,
                };
                // The view and the tally change together, under the tally's lock, which a decision
                // holds while it reads both: else a decision between the two steps counted a job
                // twice (the new view's queue and the tally) or not at all (the old view, the
                // forgotten tally).
                let mut tally = plugin.tally.lock().unwrap_or_else(PoisonError::into_inner);
                let old = std::mem::replace(&mut *plugin.view.write().unwrap_or_else(PoisonError::into_inner), view);
                tally.forget_counted(read, unix_now_ms());
                drop(tally);
                retired.push(old);
                view_changed = true;
            }
            if let Some(status) = &status {
                let (dir, snapshot) = status_paths.clone();
                let shadow = plugin.shadow.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let update = StatusUpdate { now, view: monitor.view(), dir, snapshot, changed: view_changed, shadow };
                if status.send(update) {
                    view_changed = false;
                }
            }
        }));
        if let Some(done) = first_read.take() {
            let _ = done.try_send(());
        }
        if tick.is_err() && !panicked {
            ffi::log(Level::Error, "the snapshot watcher panicked; it keeps trying (logged once)");
        }
        panicked |= tick.is_err();
    }
}

fn publish_exempt_names(plugin: &Plugin, monitor: &mut Monitor, now: i64) {
    if let Some(names) = monitor.exempt_users(now) {
        *plugin.exempt_names.write().unwrap_or_else(PoisonError::into_inner) = names;
    }
}

fn current() -> Option<Arc<Plugin>> {
    PLUGIN.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// The settings, the view and the date, as one decision sees them.
struct State {
    plugin: Arc<Plugin>,
    config: Arc<Config>,
    view: Arc<View>,
    exempt_names: Arc<HashMap<u32, String>>,
    today: NaiveDate,
}

fn state_of(plugin: Arc<Plugin>) -> State {
    let config = plugin.config.read().unwrap_or_else(PoisonError::into_inner).clone();
    let view = plugin.view.read().unwrap_or_else(PoisonError::into_inner).clone();
    let exempt_names = plugin.exempt_names.read().unwrap_or_else(PoisonError::into_inner).clone();
    let today = NaiveDate::from_num_days_from_ce_opt(plugin.today.load(Ordering::Relaxed)).unwrap_or_default();
    State { plugin, config, view, exempt_names, today }
}

/// `job_submit`'s verdict on `job`.
pub fn submit(job: &JobRequest, submit_uid: u32) -> Verdict {
    decide(decide_submit, job, submit_uid, true)
}

/// `job_modify`'s verdict on the update `job`.
pub fn modify(job: &JobRequest, submit_uid: u32) -> Verdict {
    decide(decide_modify, job, submit_uid, false)
}

/// Runs `decision` on the current settings and balances, and tallies what it admitted.
/// In shadow mode a submission's `would` is counted (`submission`); an update's only logged.
fn decide(
    decision: fn(&JobRequest, &Inputs, &mut Log) -> Outcome,
    job: &JobRequest,
    submit_uid: u32,
    submission: bool,
) -> Verdict {
    // Not initialised: nothing to decide from, accept.
    let Some(running) = current() else { return Verdict::accept() };
    // The view is read under the tally's lock: the watcher changes both under it.
    let mut tally = running.tally.lock().unwrap_or_else(PoisonError::into_inner);
    let State { plugin, config, view, exempt_names, today } = state_of(running.clone());
    let now = unix_now();
    let judged = |tally: &Tally, log: &mut Log| {
        let admitted_since = |uid| tally.of(uid);
        let standing = view.usable(now, config.admission.max_snapshot_age);
        let parent_of = |pool: &str| standing?.snapshot.pools.get(pool)?.parent.as_deref();
        let admitted_to_pool = |account: &str| tally.of_pool(account, parent_of);
        let inputs = Inputs {
            config: &config.admission,
            exempt: &config.exempt,
            standing,
            identity: view.identity(),
            exempt_names: &exempt_names,
            today,
            now,
            check_interval: config.intervals.check.as_secs(),
            submit_uid,
            slurm_uid: plugin.slurm_uid,
            admitted_since: &admitted_since,
            admitted_to_pool: &admitted_to_pool,
            lending: config.lending,
        };
        decision(job, &inputs, log)
    };
    let outcome = match config.admission.enforce {
        true => {
            let mut lines = Vec::new();
            let mut outcome = judged(&tally, &mut |level, line| lines.push((level, line)));
            // Refused after a quote of it (`sbatch --test-only`, then the job): judged again with
            // the quote taken out, and where that admits the very job it quoted, the job takes the
            // quote's place in the tally rather than counting beside it.
            let owner = job.user_id.unwrap_or(submit_uid);
            if submission && !job.wants_quote && matches!(outcome.verdict, Verdict::Reject { .. }) {
                if let Some((quoted, without)) = tally.without_latest_quote(owner, unix_now_ms()) {
                    let mut again = Vec::new();
                    let second = judged(&without, &mut |level, line| again.push((level, line)));
                    if second.admitted.is_some_and(|(_, c)| c == quoted) {
                        (*tally, outcome, lines) = (without, second, again);
                    }
                }
            }
            lines.into_iter().for_each(|(level, line)| decision_log(level, line));
            outcome
        }
        false => {
            let (outcome, would) = shadow::decide(|log| judged(&tally, log), &mut decision_log);
            if submission {
                count_shadowed(&plugin, job.user_id, &would);
            }
            outcome
        }
    };
    if let Some((uid, commitment)) = outcome.admitted {
        match job.wants_quote {
            true => tally.add_quote(uid, outcome.pool.clone(), unix_now_ms(), commitment),
            false => tally.add_paid_by(uid, outcome.pool.clone(), unix_now_ms(), commitment),
        }
    }
    outcome.verdict
}

/// Starts the shadow tally when `config` turns enforcement off (the status file then says so), and
/// drops it when it turns it on.
fn shadow_mode(plugin: &Plugin, config: &Config, now: i64) {
    let mut tally = plugin.shadow.lock().unwrap_or_else(PoisonError::into_inner);
    match config.admission.enforce {
        true => *tally = None,
        false => {
            tally.get_or_insert_with(|| Shadow { since: now, ..Shadow::default() });
        }
    }
}

/// Counts what enforcement would have done to a job (shadow mode).
fn count_shadowed(plugin: &Plugin, uid: Option<u32>, would: &[shadow::Would]) {
    let mut tally = plugin.shadow.lock().unwrap_or_else(PoisonError::into_inner);
    // None: enforcement was turned on while this decision ran on the settings before.
    let Some(tally) = tally.as_mut() else { return };
    for what in would {
        *tally.would.entry(what.as_str().to_string()).or_default() += 1;
        if let (shadow::Would::Refuse, Some(uid)) = (what, uid) {
            // Bounded: a status file of a few hundred lines at most.
            if tally.refused_by_uid.len() < 1000 || tally.refused_by_uid.contains_key(&uid) {
                *tally.refused_by_uid.entry(uid).or_default() += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::config::admission::Deprioritize;

    #[test]
    fn a_changed_config_is_read_once_it_has_settled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gputokens.toml");
        std::fs::write(&path, "[admission]\nnice_increment = 1\n").unwrap();
        let mut settings = Settings::new(path.clone());
        assert_eq!(settings.load().unwrap().admission.deprioritize, Deprioritize::Nice(1));
        assert!(settings.reload_if_changed().is_none(), "unchanged");

        std::fs::write(&path, "").unwrap(); // an editor truncating the file, about to write it
        assert!(settings.reload_if_changed().is_none(), "just changed: not read yet");
        std::fs::write(&path, "[admission]\nnice_increment = 2\n").unwrap();
        assert!(settings.reload_if_changed().is_none(), "changed again: still settling");
        let read = settings.reload_if_changed().expect("settled: read");
        assert_eq!(read.admission.deprioritize, Deprioritize::Nice(2));
        assert!(settings.reload_if_changed().is_none());
    }

    /// The audit's old finding: `init` looked up every user of the snapshot, so a slow directory
    /// server held slurmctld's start. It waits for the watcher's first read a bounded time; the
    /// balances are in place once the names are looked up.
    #[test]
    fn init_never_waits_long_for_a_slow_name_service() {
        fn slow() -> watch::Resolver {
            Box::new(|name| {
                std::thread::sleep(Duration::from_secs(4));
                match name {
                    "alice" => watch::Lookup::Found(1001),
                    _ => watch::Lookup::NotFound,
                }
            })
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let config = dir.path().join("gputokens.toml");
        std::fs::write(
            &config,
            format!("[paths]\nsnapshot = \"{d}/balances.snapshot\"\ncontroller_status = \"{d}\"\n"),
        )
        .unwrap();
        let mut snapshot = gputokens::snapshot::Snapshot::new(unix_now(), gputokens::policy::BucketRules::default());
        snapshot.balances.insert("alice".into(), gputokens::Tokens::whole(-20));
        gputokens::snapshot::write_atomically(
            &dir.path().join("balances.snapshot"),
            &gputokens::snapshot::render(&snapshot),
        )
        .unwrap();

        // The plugin is one per process, as in slurmctld: the tests that start it take turns.
        let _g = crate::tests::GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        let began = std::time::Instant::now();
        start_with(&config, slow);
        let waited = began.elapsed();
        assert!(waited < Duration::from_secs(3), "init waited {waited:?} for the name service");
        let plugin = current().expect("started");
        assert!(matches!(**plugin.view.read().unwrap(), View::Unavailable(_)), "not read yet");
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let View::Ready(balances) = &**plugin.view.read().unwrap() {
                assert_eq!(balances.names.get(&1001).map(String::as_str), Some("alice"));
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the watcher never read the snapshot");
            std::thread::sleep(Duration::from_millis(50));
        }
        stop();
    }

    /// A site in shadow mode that saves a broken file, or a bad `enforce`, must not start refusing its
    /// users: the settings stay, and so does `enforce`.
    #[test]
    fn a_broken_reload_never_turns_enforcement_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gputokens.toml");
        std::fs::write(&path, "[admission]\nenforce = false\n").unwrap();
        let mut settings = Settings::new(path.clone());
        assert!(!settings.load().unwrap().admission.enforce);
        std::fs::write(&path, "[admission\nenforce = false\n").unwrap();
        assert!(settings.load().is_none(), "not TOML: the settings stay");
        std::fs::write(&path, "[admission]\nenforce = \"no\"\nnice_increment = 5\n").unwrap();
        let read = settings.load().expect("the rest of the file is read");
        assert!(!read.admission.enforce, "a bad enforce keeps the one before");
        assert_eq!(read.admission.deprioritize, Deprioritize::Nice(5));
        std::fs::write(&path, "[admission]\nenforce = true\n").unwrap();
        assert!(settings.load().unwrap().admission.enforce, "said plainly: on");
    }

    /// A config others can change is not read (their exemptions and limits would rule), at start
    /// or on a change, and is read as soon as they no longer can.
    #[test]
    fn a_config_others_can_write_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gputokens.toml");
        let mode = |m| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
        std::fs::write(&path, "[admission]\nnice_increment = 1\n").unwrap();
        mode(0o666);
        let mut settings = Settings::new(path.clone());
        assert!(settings.load().is_none(), "writable by every user");
        mode(0o644);
        let read = settings.reload_if_changed().expect("read once only root can write it");
        assert_eq!(read.admission.deprioritize, Deprioritize::Nice(1));

        mode(0o666);
        std::fs::write(&path, "[exempt]\nusers = [\"mallory\"]\n").unwrap();
        assert!(settings.reload_if_changed().is_none(), "settling");
        assert!(settings.reload_if_changed().is_none(), "changed by anyone: not read");
        assert!(settings.reload_if_changed().is_none(), "and not again while it stays so");
    }

    /// The audit's L10: a thread stuck in a read (a hung NFS server) no longer holds `fini`.
    #[test]
    fn a_stuck_thread_is_waited_for_until_the_deadline_only() {
        let (_keep, stuck) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _ = stuck.recv();
        });
        let started = std::time::Instant::now();
        assert!(join_by(handle, started + std::time::Duration::from_millis(200)).is_none());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let done = std::thread::spawn(|| ());
        assert!(matches!(join_by(done, std::time::Instant::now() + std::time::Duration::from_secs(5)), Some(Ok(()))));
    }
}
