//! Keeps the balances in memory: a background thread calls [`Monitor::tick`] every 200 ms; a tick
//! stats the snapshot and, when it changed, reads and parses it and maps user names to uids, then
//! publishes a new immutable [`View`]. `job_submit` only ever reads the published view: no file
//! I/O, no name-service lookups, no waiting on accountd.
//!
//! Problems (missing, unreadable, corrupt, stale) are logged when they begin and when they end,
//! never per job and never per tick.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gputokens::config::admission::OnError;
use gputokens::decision::Standing;
pub use gputokens::file_stamp::Stamp;
use gputokens::snapshot::{self, Snapshot};

use crate::ffi::Level;

/// The largest snapshot read: a site of a million users writes far less; anything larger is not
/// accountd's, and slurmctld's memory is not spent on it.
pub const SNAPSHOT_MAX_BYTES: u64 = 256 << 20;

/// The snapshot's bytes, if root and the SlurmUser alone can change it (the balances slurmctld
/// enforces must be accountd's) and it is not larger than [`SNAPSHOT_MAX_BYTES`].
fn read_trusted(path: &std::path::Path) -> Result<Vec<u8>, Problem> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => Problem::Missing,
        _ => Problem::Unreadable(e.to_string()),
    };
    if let Some(why) = gputokens::file_trust::untrusted(path, "the balance snapshot") {
        return Err(Problem::Unreadable(why));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(SNAPSHOT_MAX_BYTES + 1).read_to_end(&mut bytes).map_err(unreadable)?;
    if bytes.len() as u64 > SNAPSHOT_MAX_BYTES {
        return Err(Problem::Unreadable(format!("it is larger than {} MiB", SNAPSHOT_MAX_BYTES >> 20)));
    }
    Ok(bytes)
}

/// How often the thread looks at the snapshot.
pub const POLL: Duration = Duration::from_millis(200);
/// How often user names that could not be looked up (a name-service error) are tried again.
const RETRY_LOOKUPS_SECS: i64 = 60;
/// How long a name → uid mapping is trusted before it is looked up again.
const UID_TTL_SECS: i64 = 3600;
/// How long "no such user" is trusted: without it every reload looked up every ledger user with no
/// account on this host again (58 µs each with nss files; 100,000 users made each reload ~6 s of
/// slurmctld's CPU, bench/scale.sh). A user created since is mapped within this time.
const NO_USER_TTL_SECS: i64 = 600;

/// What the plugin decides from.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per snapshot, shared in an Arc: never moved around
pub enum View {
    Ready(Balances),
    Unavailable(Problem),
}

/// The parsed snapshot, with the uids of the user names it mentions.
#[derive(Debug)]
pub struct Balances {
    /// Shared with the monitor, which keeps it to retry failed name lookups.
    pub snapshot: Arc<Snapshot>,
    /// uid → user name, for the names the snapshot mentions and the exempt users.
    pub names: HashMap<u32, String>,
    /// Users with a balance in the snapshot and an account on this machine.
    pub mapped: usize,
    /// Some names could not be looked up (retried later): see `Standing::lookups_failed`.
    pub lookups_failed: bool,
    /// When the file read was last modified (ns since the epoch), as it was seen before reading it.
    pub modified_ns: Option<i128>,
}

impl Balances {
    /// What the decision reads of these balances.
    pub fn standing(&self) -> Standing<'_> {
        Standing { snapshot: &self.snapshot, names: &self.names, lookups_failed: self.lookups_failed }
    }
}

impl View {
    /// The balances when a decision may use them: ready, and not older than `max_age` (else
    /// `on_error` decides).
    pub fn usable(&self, now: i64, max_age: Option<Duration>) -> Option<Standing<'_>> {
        match self {
            View::Ready(b) => b.standing().fresh(now, max_age),
            View::Unavailable(_) => None,
        }
    }

    /// Who users are and their accounts, from the last snapshot read however old.
    pub fn identity(&self) -> Option<Standing<'_>> {
        match self {
            View::Ready(b) => Some(b.standing()),
            View::Unavailable(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Before the first look (only while `init` runs).
    NotLoaded,
    Missing,
    Unreadable(String),
    Corrupt(String),
}

/// What the plugin's status file says of it (`status_file`).
impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NotLoaded => write!(f, "the snapshot has not been read yet"),
            Problem::Missing => write!(f, "the snapshot is missing"),
            Problem::Unreadable(e) => write!(f, "cannot read the snapshot: {e}"),
            Problem::Corrupt(e) => write!(f, "the snapshot is corrupt: {e}"),
        }
    }
}

/// A user name looked up in the name service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(u32),
    /// No such user (e.g. an account removed since it was charged).
    NotFound,
    /// The lookup failed (e.g. the directory server is unreachable): try again later.
    Failed(String),
}

pub type Resolver = Box<dyn Fn(&str) -> Lookup + Send>;

/// The condition that is logged when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    Fine,
    Stale,
    Broken(Problem),
}

pub struct Monitor {
    path: PathBuf,
    max_age: Option<Duration>,
    on_error: OnError,
    resolve: Resolver,
    /// Names to map beside the snapshot's (the exempt users).
    extra_names: Vec<String>,
    /// uid → name of the exempt users, looked up whether or not the snapshot can be read.
    exempt_names: Arc<HashMap<u32, String>>,
    /// When to look them up (again): None before the first look.
    exempt_due: Option<i64>,
    stamp: Option<Stamp>,
    view: Arc<View>,
    /// The parsed snapshot behind a Ready view, kept to retry failed lookups.
    snapshot: Option<Arc<Snapshot>>,
    retry_lookups_at: Option<i64>,
    /// name → (uid, looked up at)
    /// Name → uid (None: no such user) and when it was looked up.
    uids: HashMap<String, (Option<u32>, i64)>,
    logged: Option<Condition>,
}

impl Monitor {
    pub fn new(
        path: PathBuf,
        max_age: Option<Duration>,
        on_error: OnError,
        resolve: Resolver,
        extra_names: Vec<String>,
    ) -> Monitor {
        Monitor {
            path,
            max_age,
            on_error,
            resolve,
            extra_names,
            exempt_names: Arc::default(),
            exempt_due: None,
            stamp: None,
            view: Arc::new(View::Unavailable(Problem::NotLoaded)),
            snapshot: None,
            retry_lookups_at: None,
            uids: HashMap::new(),
            logged: None,
        }
    }

    pub fn view(&self) -> Arc<View> {
        self.view.clone()
    }

    /// Looks at the file; returns the new view when it changed. `now` is unix time.
    pub fn tick(&mut self, now: i64, log: &mut dyn FnMut(Level, String)) -> Option<Arc<View>> {
        let changed = match Stamp::read(&self.path) {
            Ok(stamp) => {
                if self.stamp == Some(stamp) {
                    self.retry_lookups(now, log)
                } else {
                    self.stamp = Some(stamp);
                    Some(self.load(now, log))
                }
            }
            Err(e) => {
                self.stamp = None;
                self.snapshot = None;
                let problem = if e.kind() == std::io::ErrorKind::NotFound {
                    Problem::Missing
                } else {
                    Problem::Unreadable(e.to_string())
                };
                match &*self.view {
                    View::Unavailable(p) if *p == problem => None,
                    _ => Some(View::Unavailable(problem)),
                }
            }
        };
        let published = changed.map(|view| {
            self.view = Arc::new(view);
            self.view.clone()
        });
        self.log_condition(now, log);
        published
    }

    fn load(&mut self, now: i64, log: &mut dyn FnMut(Level, String)) -> View {
        let text = match read_trusted(&self.path) {
            Ok(bytes) => bytes,
            Err(problem) => {
                self.snapshot = None;
                return View::Unavailable(problem);
            }
        };
        let parsed = String::from_utf8(text)
            .map_err(|_| "not UTF-8 text".to_string())
            .and_then(|t| snapshot::parse(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(snap) => {
                let snap = Arc::new(snap);
                let balances = self.balances(&snap, now);
                log(
                    Level::Verbose,
                    format!(
                        "loaded {}: {}, written {}",
                        self.path.display(),
                        users(balances.snapshot.balances.len(), balances.mapped),
                        ago(now - snap.generated)
                    ),
                );
                self.snapshot = Some(snap);
                View::Ready(balances)
            }
            Err(reason) => {
                self.snapshot = None;
                View::Unavailable(Problem::Corrupt(reason))
            }
        }
    }

    /// Maps the user names of the snapshot (and the exempt users) to uids (cached; failed lookups
    /// are retried later).
    fn balances(&mut self, snap: &Arc<Snapshot>, now: i64) -> Balances {
        let queue = snap.queue.iter().flat_map(|q| q.committed.keys());
        let extra = self.extra_names.clone();
        let wanted: std::collections::BTreeSet<&String> =
            snap.balances.keys().chain(snap.default_accounts.keys()).chain(queue).chain(&extra).collect();
        let mut names = HashMap::with_capacity(wanted.len());
        let mut failed = false;
        for name in wanted {
            match self.uid_of(name, now) {
                Ok(Some(uid)) => {
                    names.insert(uid, name.clone());
                }
                Ok(None) => {}
                Err(()) => failed = true,
            }
        }
        self.retry_lookups_at = failed.then_some(now + RETRY_LOOKUPS_SECS);
        let mapped = names.values().filter(|n| snap.balances.contains_key(*n)).count();
        let modified_ns = self.stamp.map(|s| s.mtime_ns());
        Balances { snapshot: Arc::clone(snap), names, mapped, lookups_failed: failed, modified_ns }
    }

    /// The uid of `name` (None: no such user), from the cache while it is trusted; Err when the
    /// name service failed (not cached: tried again later).
    fn uid_of(&mut self, name: &str, now: i64) -> Result<Option<u32>, ()> {
        match self.uids.get(name) {
            Some(&(Some(uid), at)) if now - at < UID_TTL_SECS => return Ok(Some(uid)),
            Some(&(None, at)) if now - at < NO_USER_TTL_SECS => return Ok(None),
            _ => {}
        }
        let uid = match (self.resolve)(name) {
            Lookup::Found(uid) => Some(uid),
            Lookup::NotFound => None,
            // A uid does not change: the last one found stands while the directory is away (an
            // exempt user keeps their exemption), looked up again at the next chance.
            Lookup::Failed(_) => match self.uids.get(name) {
                Some(&(Some(uid), _)) => return Ok(Some(uid)),
                _ => return Err(()),
            },
        };
        self.uids.insert(name.to_string(), (uid, now));
        Ok(uid)
    }

    /// The exempt users' uids → names when they are first looked up or have changed since (looked
    /// up again when a lookup failed, and when "no such user" may have become a user). Kept apart
    /// from the snapshot: an exempt user's jobs pass while it is missing, stale or corrupt.
    pub fn exempt_users(&mut self, now: i64) -> Option<Arc<HashMap<u32, String>>> {
        let first = self.exempt_due.is_none();
        if self.exempt_due.is_some_and(|due| now < due) {
            return None;
        }
        let mut names = HashMap::new();
        let mut failed = false;
        for name in self.extra_names.clone() {
            match self.uid_of(&name, now) {
                Ok(Some(uid)) => {
                    names.insert(uid, name);
                }
                Ok(None) => {}
                Err(()) => failed = true,
            }
        }
        self.exempt_due = Some(now + if failed { RETRY_LOOKUPS_SECS } else { NO_USER_TTL_SECS });
        if !first && names == *self.exempt_names {
            return None;
        }
        self.exempt_names = Arc::new(names);
        Some(self.exempt_names.clone())
    }

    fn retry_lookups(&mut self, now: i64, log: &mut dyn FnMut(Level, String)) -> Option<View> {
        if !matches!(self.retry_lookups_at, Some(at) if now >= at) {
            return None;
        }
        let snap = self.snapshot.take()?;
        let balances = self.balances(&snap, now);
        log(
            Level::Verbose,
            format!("looked up user names again: {}", users(balances.snapshot.balances.len(), balances.mapped)),
        );
        self.snapshot = Some(snap);
        Some(View::Ready(balances))
    }

    fn log_condition(&mut self, now: i64, log: &mut dyn FnMut(Level, String)) {
        let condition = match &*self.view {
            View::Ready(b) if b.standing().fresh(now, self.max_age).is_none() => Condition::Stale,
            View::Ready(_) => Condition::Fine,
            View::Unavailable(p) => Condition::Broken(p.clone()),
        };
        if self.logged.as_ref() == Some(&condition) {
            return;
        }
        let path = self.path.display();
        let consequence = match self.on_error {
            OnError::Accept => "GPU jobs are accepted without a balance check (on_error = \"accept\")",
            OnError::Reject => "GPU jobs are refused (on_error = \"reject\")",
        };
        let (level, message) = match &condition {
            Condition::Fine => {
                let View::Ready(b) = &*self.view else { return };
                let again = if self.logged.is_none() { "" } else { " is usable again" };
                let users = users(b.snapshot.balances.len(), b.mapped);
                (
                    Level::Info,
                    format!("balance snapshot {path}{again}: {users}, written {}", ago(b.standing().age(now))),
                )
            }
            Condition::Stale => {
                let View::Ready(b) = &*self.view else { return };
                let max = humantime::format_duration(self.max_age.unwrap_or_default());
                (
                    Level::Error,
                    format!(
                        "balance snapshot {path} is stale: written {}, longer than max_snapshot_age ({max}); is accountd \
                         running? {consequence} until it is rewritten",
                        ago(b.standing().age(now))
                    ),
                )
            }
            Condition::Broken(Problem::NotLoaded) => return,
            Condition::Broken(Problem::Missing) => {
                (Level::Error, format!("balance snapshot {path} is missing; {consequence} until it appears"))
            }
            Condition::Broken(Problem::Unreadable(e)) => (
                Level::Error,
                format!("cannot read the balance snapshot {path} ({e}); {consequence} until it can be read"),
            ),
            Condition::Broken(Problem::Corrupt(e)) => (
                Level::Error,
                format!("balance snapshot {path} is corrupt ({e}); {consequence} until accountd rewrites it"),
            ),
        };
        log(level, message);
        self.logged = Some(condition);
    }
}

/// `42 users`, `1 user`, `3 users (2 with an account here)`.
fn users(listed: usize, mapped: usize) -> String {
    let n = if listed == 1 { "1 user".to_string() } else { format!("{listed} users") };
    if mapped == listed {
        n
    } else {
        format!("{n} ({mapped} with an account here)")
    }
}

/// `5 s ago`, `2h 3m ago`.
fn ago(seconds: i64) -> String {
    if seconds < 0 {
        return format!("{}s in the future", -seconds);
    }
    format!("{} ago", gputokens::time::span(seconds))
}

/// The name service (getpwnam_r through nix).
pub fn system_resolver() -> Resolver {
    Box::new(|name| match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Lookup::Found(user.uid.as_raw()),
        Ok(None) => Lookup::NotFound,
        Err(e) => Lookup::Failed(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::Tokens;
    use std::sync::atomic::{AtomicBool, Ordering};

    const NOW: i64 = 1_795_430_400;

    fn text(generated: i64, users: &[(&str, i64)]) -> String {
        let mut t = format!(
            "gputokens-snapshot 1\ngenerated {generated}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n"
        );
        for (u, b) in users {
            t.push_str(&format!("user {u} {b}\n"));
        }
        t
    }

    fn users() -> Resolver {
        Box::new(|name| match name {
            "alice" => Lookup::Found(1001),
            "bob" => Lookup::Found(1002),
            _ => Lookup::NotFound,
        })
    }

    struct Fixture {
        dir: tempfile::TempDir,
        monitor: Monitor,
        log: Vec<(Level, String)>,
    }

    impl Fixture {
        fn new(on_error: OnError, resolve: Resolver) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("balances.snapshot");
            let monitor = Monitor::new(path, Some(Duration::from_secs(7200)), on_error, resolve, vec!["ops".into()]);
            Fixture { dir, monitor, log: Vec::new() }
        }
        fn write(&self, contents: &str) {
            let path = self.dir.path().join("balances.snapshot");
            gputokens::snapshot::write_atomically(&path, contents).unwrap();
        }
        fn tick(&mut self, now: i64) -> Option<Arc<View>> {
            let log = &mut self.log;
            self.monitor.tick(now, &mut |level, m| log.push((level, m)))
        }
        fn logged(&mut self) -> Vec<String> {
            self.log.drain(..).filter(|(l, _)| *l != Level::Verbose).map(|(l, m)| format!("{l:?}: {m}")).collect()
        }
        fn balance(&self, uid: u32) -> Option<Tokens> {
            match &*self.monitor.view() {
                View::Ready(b) => Some(b.standing().balance(uid)),
                View::Unavailable(_) => None,
            }
        }
    }

    #[test]
    fn loads_reloads_on_change_and_maps_uids() {
        let mut f = Fixture::new(OnError::Accept, users());
        f.write(&text(NOW, &[("alice", -10_400_000), ("bob", 50_000_000), ("gone", 1)]));
        assert!(f.tick(NOW).is_some());
        assert_eq!(f.balance(1001), Some(Tokens::from_micro(-10_400_000)));
        assert_eq!(f.balance(1002), Some(Tokens::whole(50)));
        assert_eq!(f.balance(4242), Some(Tokens::whole(100)), "not in the snapshot: initial");
        let logged = f.logged();
        assert_eq!(logged.len(), 1);
        assert!(
            logged[0].starts_with("Info: balance snapshot /")
                && logged[0].contains(": 3 users (2 with an account here), written 0s ago")
        );

        assert!(f.tick(NOW + 1).is_none(), "unchanged file: nothing new");
        f.write(&text(NOW + 2, &[("alice", 5_000_000)]));
        assert!(f.tick(NOW + 2).is_some());
        assert_eq!(f.balance(1001), Some(Tokens::whole(5)));
        assert!(f.logged().is_empty(), "a routine reload is not an info/error line");
    }

    /// Each name is asked of the name service once per TTL, found or not, however often the
    /// snapshot changes; a name not found is asked again after NO_USER_TTL_SECS.
    #[test]
    fn names_are_looked_up_once_per_ttl_found_or_not() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let record = asked.clone();
        let resolve: Resolver = Box::new(move |name| {
            record.lock().unwrap().push(name.to_string());
            if name == "alice" {
                Lookup::Found(1001)
            } else {
                Lookup::NotFound
            }
        });
        let mut f = Fixture::new(OnError::Accept, resolve);
        let times = |name: &str| asked.lock().unwrap().iter().filter(|n| *n == name).count();
        for n in 0..3 {
            f.write(&text(NOW + n, &[("alice", n), ("nobody-here", n)]));
            assert!(f.tick(NOW + n).is_some());
        }
        assert_eq!((times("alice"), times("nobody-here")), (1, 1));
        f.write(&text(NOW + NO_USER_TTL_SECS, &[("alice", 7), ("nobody-here", 7)]));
        f.tick(NOW + NO_USER_TTL_SECS);
        assert_eq!((times("alice"), times("nobody-here")), (1, 2));
        assert_eq!(f.balance(1001), Some(Tokens::from_micro(7)));
    }

    /// The audit's L8: a snapshot another user could have written is not enforced, nor one larger
    /// than any accountd writes (slurmctld's memory).
    #[test]
    fn a_snapshot_others_may_write_or_too_large_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let mut f = Fixture::new(OnError::Accept, users());
        let path = f.dir.path().join("balances.snapshot");
        f.write(&text(NOW, &[("alice", 5_000_000)]));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o646)).unwrap();
        f.tick(NOW);
        assert_eq!(f.balance(1001), None);
        let View::Unavailable(Problem::Unreadable(why)) = &*f.monitor.view() else { panic!("{:?}", f.monitor.view()) };
        assert!(why.contains("the balance snapshot") && why.contains(&path.display().to_string()), "{why}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        f.write(&text(NOW + 1, &[("alice", 6_000_000)]));
        f.tick(NOW + 1);
        assert_eq!(f.balance(1001), Some(Tokens::whole(6)));
        let big = std::fs::File::options().append(true).open(&path).unwrap();
        big.set_len(SNAPSHOT_MAX_BYTES + 1).unwrap();
        f.tick(NOW + 2);
        let View::Unavailable(Problem::Unreadable(why)) = &*f.monitor.view() else { panic!("{:?}", f.monitor.view()) };
        assert!(why.contains("larger than 256 MiB"), "{why}");
    }

    #[test]
    fn missing_then_garbage_then_fixed_is_logged_once_each() {
        let mut f = Fixture::new(OnError::Reject, users());
        f.tick(NOW);
        f.tick(NOW + 1);
        let logged = f.logged();
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains("is missing; GPU jobs are refused (on_error = \"reject\") until it appears"));
        assert!(f.balance(1001).is_none());

        f.write("\u{1}\u{2} garbage");
        f.tick(NOW + 2);
        f.tick(NOW + 3);
        let logged = f.logged();
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains("is corrupt (not a gputokens snapshot"), "{logged:?}");

        std::fs::write(f.dir.path().join("balances.snapshot"), [0xff, 0xfe, 0]).unwrap();
        f.tick(NOW + 4);
        assert!(f.logged()[0].contains("is corrupt (not UTF-8 text)"));

        f.write(&text(NOW + 5, &[("alice", 1)]));
        f.tick(NOW + 5);
        f.tick(NOW + 6);
        let logged = f.logged();
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains("balances.snapshot is usable again: 1 user, written 0s ago"), "{logged:?}");
        assert_eq!(f.balance(1001), Some(Tokens::from_micro(1)));

        std::fs::remove_file(f.dir.path().join("balances.snapshot")).unwrap();
        f.tick(NOW + 7);
        f.tick(NOW + 8);
        assert_eq!(f.logged().len(), 1);
        assert!(f.balance(1001).is_none());
    }

    #[test]
    fn stale_is_logged_when_it_begins_and_ends() {
        let mut f = Fixture::new(OnError::Accept, users());
        f.write(&text(NOW, &[("alice", 1)]));
        f.tick(NOW);
        f.logged();
        f.tick(NOW + 7200);
        assert!(f.logged().is_empty());
        f.tick(NOW + 7201);
        f.tick(NOW + 9000);
        let logged = f.logged();
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains("is stale: written 2h ago, longer than max_snapshot_age (2h)"), "{logged:?}");
        assert!(logged[0].contains("accepted without a balance check"), "{logged:?}");
        f.write(&text(NOW + 9001, &[("alice", 1)]));
        f.tick(NOW + 9001);
        assert!(f.logged()[0].contains("usable again"));
    }

    #[test]
    fn failed_lookups_are_retried() {
        let up = Arc::new(AtomicBool::new(false));
        let flag = up.clone();
        let resolver: Resolver = Box::new(move |name| match (name, flag.load(Ordering::SeqCst)) {
            ("alice", true) => Lookup::Found(1001),
            ("alice", false) => Lookup::Failed("directory unreachable".into()),
            _ => Lookup::NotFound,
        });
        let mut f = Fixture::new(OnError::Accept, resolver);
        f.write(&text(NOW, &[("alice", -20_000_000)]));
        f.tick(NOW);
        assert_eq!(f.balance(1001), Some(Tokens::whole(100)), "not mapped yet");
        up.store(true, Ordering::SeqCst);
        assert!(f.tick(NOW + 30).is_none(), "not retried before a minute");
        assert!(f.tick(NOW + 61).is_some());
        assert_eq!(f.balance(1001), Some(Tokens::whole(-20)));
        assert!(f.tick(NOW + 200).is_none(), "nothing left to retry");
    }

    /// Exempt users are looked up without a snapshot, published when first looked up and when
    /// they change, and a failed lookup is tried again a minute later.
    #[test]
    fn exempt_users_are_known_without_a_snapshot() {
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        let resolver: Resolver = Box::new(move |name| match (name, flag.load(Ordering::SeqCst)) {
            ("alice", _) => Lookup::Found(1001),
            ("ops", true) => Lookup::Found(1500),
            ("ops", false) => Lookup::Failed("directory unreachable".into()),
            _ => Lookup::NotFound,
        });
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["alice".to_string(), "ops".to_string(), "ghost".to_string()];
        let mut monitor = Monitor::new(dir.path().join("missing"), None, OnError::Reject, resolver, names);
        up.store(false, Ordering::SeqCst);
        let first = monitor.exempt_users(NOW).expect("published at the first look");
        assert_eq!(*first, HashMap::from([(1001, "alice".to_string())]));
        up.store(true, Ordering::SeqCst);
        assert!(monitor.exempt_users(NOW + 30).is_none(), "not retried before a minute");
        let retried = monitor.exempt_users(NOW + 61).expect("ops found on the retry");
        assert_eq!(retried.get(&1500).map(String::as_str), Some("ops"));
        assert!(monitor.exempt_users(NOW + 61 + NO_USER_TTL_SECS).is_none(), "looked up again, unchanged");
        up.store(false, Ordering::SeqCst);
        let later = NOW + 61 + UID_TTL_SECS + NO_USER_TTL_SECS;
        assert!(monitor.exempt_users(later).is_none(), "the directory away after the TTL: ops keeps their uid");
        assert!(monitor.exempt_names.contains_key(&1500));
        let mut none = Monitor::new(dir.path().join("missing"), None, OnError::Reject, users(), Vec::new());
        assert!(none.exempt_users(NOW).expect("published once").is_empty());
        assert!(none.exempt_users(NOW + NO_USER_TTL_SECS).is_none());
    }

    #[test]
    fn decisions_use_ready_balances_that_are_not_stale() {
        let mut f = Fixture::new(OnError::Accept, users());
        f.write(&text(NOW, &[("alice", -10_400_000)]));
        f.tick(NOW);
        let view = f.monitor.view();
        let max = Some(Duration::from_secs(7200));
        let usable = view.usable(NOW + 7200, max).expect("2 h old: usable");
        assert_eq!(usable.balance(1001), Tokens::from_micro(-10_400_000));
        assert!(view.usable(NOW + 7201, max).is_none(), "stale");
        assert!(view.usable(NOW + 1_000_000, None).is_some(), "no max_snapshot_age: never stale");
        for problem in [Problem::Missing, Problem::Corrupt("x".into()), Problem::Unreadable("y".into())] {
            assert!(View::Unavailable(problem).usable(NOW, max).is_none());
        }
    }

    #[test]
    fn the_system_resolver_knows_root() {
        assert_eq!(system_resolver()("root"), Lookup::Found(0));
        assert_eq!(system_resolver()("no-such-user-gputokens"), Lookup::NotFound);
    }

    #[test]
    fn ages() {
        assert_eq!(ago(5), "5s ago");
        assert_eq!(ago(7321), "2h 2m ago");
        assert_eq!(ago(-3), "3s in the future");
    }
}
