//! The balance snapshot: a small text file accountd replaces atomically after every ledger change and
//! the job_submit plugin reads (and re-reads on change) without ever touching SQLite or Slurm.
//!
//! ```text
//! gputokens-snapshot 1
//! generated 1795430400
//! floor -10000000
//! daily 1000000
//! monthly 30000000
//! initial 100000000
//! user alice 46000000
//! sharing 1 100
//! price a6000 4000000
//! default_price 1000000
//! borrow_limit 10000000
//! stranded cpus memory
//! node_shape 64 512000 a6000=8000,rtx3090=2000
//! partition gpu default 14400 172800
//! account alice physics
//! queue 1795430395
//! queue_read_ms 1795430395250
//! queue_read_end_ms 1795430395730
//! recent 1001 1795430395 2000
//! free_gpus a6000=1 rtx2080=4
//! free_gpus_in gpu a6000=1 rtx2080=4
//! committed alice 2000 16000000
//! pending 41 1 1 1 3600 1000 4000000
//! pending_held 41 16 -
//! pending 42 2 8 1 86400
//! pool_mode account
//! pool course 5000000 -10000000 0 0 -
//! pool_parent course lab
//! pool_window course 1795000000 1796000000
//! pool lab 46000000 -10000000 0 30000000 10000000
//! coordinators lab carol
//! pool_lends lab
//! job_account 41 lab
//! spent_month 2026-11
//! spent lab alice 4000000
//! member alice lab,course
//! ```
//! Amounts are micro-tokens, times seconds. A user not listed has not been seen yet and stands at
//! `initial`. The lines after the users serve the admission limits: GPU sharing (shards and MPS units
//! per GPU), prices per GPU-hour, what a user may borrow against next month's grant, what a job's
//! share of a node is counted by where the site prices what a job strands (`stranded`) and each
//! shape of the nodes with GPUs (`node_shape`: CPUs, MB, milli-GPUs by type), partitions (`default` or `-`, DefaultTime and MaxTime, `-` = none),
//! default accounts, and what each user's running and pending GPU jobs held and could still cost
//! (milli-GPUs, micro-tokens) when squeue was read at `queue` (from `queue_read_ms` until
//! `queue_read_end_ms`; `recent`: the GPU jobs it showed submitted since the second before, by uid,
//! submit time and milli-GPUs, so the plugin counts a job it admitted meanwhile once; `free_gpus`: the
//! GPUs of each type no job held on nodes taking jobs, which a quote offers, and `free_gpus_in` those of
//! each partition's nodes); then every pending job that squeue
//! showed (job ID, nodes, tasks, array tasks, the seconds counted for it, and for a GPU job its
//! milli-GPUs and maximum cost; `pending_held`: where the site prices what a job strands, the CPUs
//! and MB it asked for, `-` where it did not say), so the plugin can judge an update of it: a job
//! not listed is unknown (e.g. submitted since the read) and treated as a possible GPU job. With pools
//! (`[accounts] mode` not "user"): each pool (balance, floor, daily, monthly, per-user limit or `-`),
//! its coordinators, the pool it draws on (`pool_parent`) and whether it lends to those drawing on
//! it (`pool_lends`), a dated sub-allocation's window (`pool_window`, unix seconds), what each
//! member spent of it in `spent_month`, and each user's accounts.
//! [`parse`] reads it back: the magic line first, every header key once, users once each; lines
//! with other keywords are skipped, so a later writer may add keys without breaking older readers.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::estimate::{Commitment, PendingJob, RecentJob};
use crate::policy::BucketRules;
use crate::pools::{PoolMode, PoolStanding};
use crate::pricing::PriceTable;
use crate::slurm::partitions::Partition;
use crate::stranding::{Held, NodeShape, Part};
use crate::tokens::Tokens;
use crate::tres::Sharing;

pub const MAGIC: &str = "gputokens-snapshot 1";

/// What squeue showed of the users' GPU jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSummary {
    /// Unix time squeue was read: jobs submitted later are not in `committed`.
    pub as_of: i64,
    /// When that read began, in unix milliseconds (`queue_read_ms`; None from an accountd before it):
    /// the plugin tells the jobs it admitted before the read (in `committed`) from those admitted
    /// after it, also within the same second.
    pub read_ms: Option<i64>,
    /// When squeue had answered (`queue_read_end_ms`): a job the plugin admitted between the two may
    /// or may not be in `committed`, and `recent` tells which.
    pub read_end_ms: Option<i64>,
    /// The GPU jobs squeue showed that were submitted from the second before the read began.
    pub recent: Vec<RecentJob>,
    pub committed: HashMap<String, Commitment>,
    /// With pools: what the running and pending GPU jobs each pool pays for hold and can cost, by
    /// account (`pool_committed`).
    pub pool_committed: HashMap<String, Commitment>,
    /// With pools: the same per pool and member (`pool_user_committed`), for a pool's per-user
    /// limit: what a member's jobs already hold counts beside what they spent.
    pub pool_user_committed: BTreeMap<(String, String), Commitment>,
    /// The pending jobs squeue showed, by job ID.
    pub pending: BTreeMap<u32, PendingJob>,
    /// With pools: the account of each pending or running GPU job (an update without `account=`
    /// stays in it).
    pub job_accounts: BTreeMap<u32, String>,
    /// GPUs of each type no job holds on nodes that take jobs (idle or mixed), when the queue was
    /// read (`free`); None from an accountd before it. What a quote (`sbatch --test-only`) offers.
    pub free_gpus: Option<BTreeMap<String, u64>>,
    /// The same, of each partition's nodes (`free_gpus_in`): what a quote offers a job in it.
    pub free_gpus_in: BTreeMap<String, BTreeMap<String, u64>>,
}

impl QueueSummary {
    /// The GPUs a quote may offer a job that can run in any of `partitions`: the most of each type
    /// free in one of them, or, where one of them is not listed (an older accountd, or its nodes
    /// not known), the cluster's.
    pub fn free_gpus_for(&self, partitions: &[&str]) -> Option<BTreeMap<String, u64>> {
        let listed: Option<Vec<&BTreeMap<String, u64>>> =
            partitions.iter().map(|p| self.free_gpus_in.get(*p)).collect();
        match listed.filter(|l| !l.is_empty()) {
            Some(listed) => {
                let mut most = BTreeMap::new();
                for (gpu_type, &n) in listed.into_iter().flatten() {
                    let at = most.entry(gpu_type.clone()).or_insert(0);
                    *at = n.max(*at);
                }
                Some(most)
            }
            None => self.free_gpus.clone(),
        }
    }
}

pub fn render(snap: &Snapshot) -> String {
    let mut out = String::with_capacity(256 + snap.balances.len() * 32);
    let rules = &snap.rules;
    out.push_str(MAGIC);
    out.push('\n');
    out.push_str(&format!(
        "generated {}\nfloor {}\ndaily {}\nmonthly {}\ninitial {}\n",
        snap.generated,
        rules.floor.micro(),
        rules.daily.micro(),
        rules.monthly.micro(),
        rules.initial.micro()
    ));
    let sorted = |m: &HashMap<String, Tokens>| m.iter().map(|(u, b)| (u.clone(), *b)).collect::<BTreeMap<_, _>>();
    for (user, balance) in sorted(&snap.balances) {
        out.push_str(&format!("user {user} {}\n", balance.micro()));
    }
    out.push_str(&format!("sharing {} {}\n", snap.sharing.shards_per_gpu, snap.sharing.mps_per_gpu));
    for (gpu_type, price) in snap.prices.types() {
        out.push_str(&format!("price {gpu_type} {}\n", price.micro()));
    }
    if let Some(price) = snap.prices.default_price() {
        out.push_str(&format!("default_price {}\n", price.micro()));
    }
    if snap.borrow_limit > Tokens::ZERO {
        out.push_str(&format!("borrow_limit {}\n", snap.borrow_limit.micro()));
    }
    if !snap.prices.stranded().is_empty() {
        let parts: Vec<&str> = snap.prices.stranded().iter().map(|p| p.name()).collect();
        out.push_str(&format!("stranded {}\n", parts.join(" ")));
    }
    for shape in &snap.node_shapes {
        let gpus: Vec<String> = shape.milli_gpus.iter().map(|(t, m)| format!("{t}={m}")).collect();
        out.push_str(&format!("node_shape {} {} {}\n", shape.cpus, shape.mem_mb, gpus.join(",")));
    }
    let secs = |t: Option<u64>| t.map_or("-".to_string(), |t| t.to_string());
    for p in &snap.partitions {
        let default = if p.default { "default" } else { "-" };
        out.push_str(&format!("partition {} {default} {} {}\n", p.name, secs(p.default_time), secs(p.max_time)));
    }
    for (user, account) in snap.default_accounts.iter().collect::<BTreeMap<_, _>>() {
        out.push_str(&format!("account {user} {account}\n"));
    }
    if let Some(queue) = &snap.queue {
        out.push_str(&format!("queue {}\n", queue.as_of));
        if let Some(ms) = queue.read_ms {
            out.push_str(&format!("queue_read_ms {ms}\n"));
        }
        if let Some(ms) = queue.read_end_ms {
            out.push_str(&format!("queue_read_end_ms {ms}\n"));
        }
        for r in &queue.recent {
            out.push_str(&format!("recent {} {} {}\n", r.uid, r.submitted, r.milli_gpus));
        }
        if let Some(free) = &queue.free_gpus {
            out.push_str("free_gpus");
            for (gpu_type, n) in free {
                out.push_str(&format!(" {gpu_type}={n}"));
            }
            out.push('\n');
        }
        for (partition, free) in &queue.free_gpus_in {
            out.push_str(&format!("free_gpus_in {partition}"));
            for (gpu_type, n) in free {
                out.push_str(&format!(" {gpu_type}={n}"));
            }
            out.push('\n');
        }
        for (user, c) in queue.committed.iter().collect::<BTreeMap<_, _>>() {
            out.push_str(&format!("committed {user} {} {}\n", c.milli_gpus, c.max_cost.micro()));
        }
        for (account, c) in queue.pool_committed.iter().collect::<BTreeMap<_, _>>() {
            out.push_str(&format!("pool_committed {account} {} {}\n", c.milli_gpus, c.max_cost.micro()));
        }
        for ((account, user), c) in &queue.pool_user_committed {
            out.push_str(&format!("pool_user_committed {account} {user} {} {}\n", c.milli_gpus, c.max_cost.micro()));
        }
        for (id, p) in &queue.pending {
            out.push_str(&format!("pending {id} {} {} {} {}", p.nodes, p.tasks, p.array_tasks, p.seconds));
            if let Some(g) = p.gpus {
                out.push_str(&format!(" {} {}", g.milli_gpus, g.max_cost.micro()));
            }
            out.push('\n');
            if p.held != Held::default() {
                let part = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
                out.push_str(&format!("pending_held {id} {} {}\n", part(p.held.cpus), part(p.held.mem_mb)));
            }
        }
    }
    render_pools(snap, &mut out);
    out
}

fn render_pools(snap: &Snapshot, out: &mut String) {
    if snap.pool_mode == PoolMode::User {
        return;
    }
    out.push_str(&format!("pool_mode {}\n", snap.pool_mode.as_str()));
    for (account, p) in snap.pools.iter().collect::<BTreeMap<_, _>>() {
        let limit = p.user_limit.map_or("-".to_string(), |l| l.micro().to_string());
        let r = &p.rules;
        out.push_str(&format!(
            "pool {account} {} {} {} {} {limit}\n",
            p.balance.micro(),
            r.floor.micro(),
            r.daily.micro(),
            r.monthly.micro()
        ));
        if !p.coordinators.is_empty() {
            out.push_str(&format!("coordinators {account} {}\n", p.coordinators.join(",")));
        }
        if let Some(parent) = &p.parent {
            out.push_str(&format!("pool_parent {account} {parent}\n"));
        }
        if p.lends {
            out.push_str(&format!("pool_lends {account}\n"));
        }
        if let Some((starts, ends)) = p.window {
            out.push_str(&format!("pool_window {account} {starts} {ends}\n"));
        }
    }
    for (id, account) in snap.queue.iter().flat_map(|q| &q.job_accounts) {
        out.push_str(&format!("job_account {id} {account}\n"));
    }
    if let Some(month) = &snap.spent_month {
        out.push_str(&format!("spent_month {month}\n"));
        for (account, pool) in snap.pools.iter().collect::<BTreeMap<_, _>>() {
            for (user, spent) in pool.spent.iter().collect::<BTreeMap<_, _>>() {
                out.push_str(&format!("spent {account} {user} {}\n", spent.micro()));
            }
        }
    }
    for (user, accounts) in snap.user_accounts.iter().collect::<BTreeMap<_, _>>() {
        out.push_str(&format!("member {user} {}\n", accounts.join(",")));
    }
}

/// Writes next to `path`, fsyncs, then renames over it: a reader sees the old or the new file, never
/// half of one. Mode 0640: slurmctld's group may read it, ordinary users may not.
pub fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    write_atomically_for(path, contents, None)
}

/// [`write_atomically`], the file given group `gid` before it is renamed into place (so it is never
/// visible with another group): root's accountd gives it slurmctld's group.
pub fn write_atomically_for(path: &Path, contents: &str, gid: Option<u32>) -> std::io::Result<()> {
    write_atomically_with(path, contents, gid, 0o640)
}

/// [`write_atomically_for`] with the file's `mode`.
pub fn write_atomically_with(path: &Path, contents: &str, gid: Option<u32>, mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let (tmp, mut file) = tempfile_in(dir, path)?;
    let written = (|| {
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        if gid.is_some() {
            std::os::unix::fs::fchown(&file, None, gid)?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        // A full disk or a failed chown leaves no temp file behind to fill the directory.
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // The rename itself survives a crash only once the directory is on disk. Some file systems
    // cannot sync a directory (EINVAL): the rename is done all the same.
    match std::fs::File::open(dir)?.sync_all() {
        Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => Ok(()),
        other => other,
    }
}

fn tempfile_in(dir: &Path, path: &Path) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    Ok((tmp.clone(), create_new_private(&tmp)?))
}

/// Creates `path` (mode 0600) only if nothing is there, never through a symbolic link: a temp file's
/// name can be guessed, and whatever stands there (a link to another file, a stale file of a crashed
/// run with this PID) is removed (the link itself, not its target) and the create tried once more.
pub fn create_new_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .mode(0o600)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// A parsed snapshot: what the job_submit plugin decides from.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Unix time accountd wrote it.
    pub generated: i64,
    /// The bucket rules accountd ran with; the snapshot carries no cap (`cap` is None).
    pub rules: BucketRules,
    pub balances: HashMap<String, Tokens>,
    pub sharing: Sharing,
    pub prices: PriceTable,
    pub partitions: Vec<Partition>,
    pub default_accounts: HashMap<String, String>,
    /// None until accountd has read squeue (or when it could not).
    pub queue: Option<QueueSummary>,
    /// What holds tokens; pools, what members spent and users' accounts only when not `User`.
    pub pool_mode: PoolMode,
    pub pools: HashMap<String, PoolStanding>,
    /// The local month (YYYY-MM) the pools' `spent` is of.
    pub spent_month: Option<String>,
    /// Each user's Slurm accounts (their associations), for "submit under another account".
    pub user_accounts: HashMap<String, Vec<String>>,
    /// What a user may borrow against next month's grant (`borrow_limit`, at most the grant).
    pub borrow_limit: Tokens,
    /// Each shape of the nodes with GPUs once (CPUs, memory, milli-GPUs by type), where the site
    /// prices what a job strands (`stranded`, in `prices`): what the estimate weighs a job against.
    pub node_shapes: Vec<NodeShape>,
}

impl Snapshot {
    /// A snapshot of `rules` with nothing else in it yet.
    pub fn new(generated: i64, rules: BucketRules) -> Snapshot {
        Snapshot {
            generated,
            rules: BucketRules { cap: None, ..rules },
            balances: HashMap::new(),
            sharing: Sharing::default(),
            prices: PriceTable::default(),
            partitions: Vec::new(),
            default_accounts: HashMap::new(),
            queue: None,
            pool_mode: PoolMode::User,
            pools: HashMap::new(),
            spent_month: None,
            user_accounts: HashMap::new(),
            borrow_limit: Tokens::ZERO,
            node_shapes: Vec::new(),
        }
    }

    /// The user's balance; a user not listed stands at `initial`.
    pub fn balance(&self, user: &str) -> Tokens {
        self.balances.get(user).copied().unwrap_or(self.rules.initial)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a gputokens snapshot (the first line is not '{MAGIC}')")]
    NotASnapshot,
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("'{0}' is missing")]
    Missing(&'static str),
}

/// The most CPUs, MB or milli-GPUs a node shape may say: sums over many nodes stay in range.
const MOST_PER_NODE: u64 = 1 << 40;

/// A `node_shape CPUS MB TYPE=MILLI,...` line's shape; None where it is not one (skipped).
fn node_shape(words: &mut Words<'_>) -> Option<NodeShape> {
    let count = |word: Option<&str>| word?.parse::<u64>().ok().filter(|&n| n <= MOST_PER_NODE);
    let cpus = count(words.words.next())?;
    let mem_mb = count(words.words.next())?;
    let mut milli_gpus = BTreeMap::new();
    for gpu in words.words.next()?.split(',').filter(|g| !g.is_empty()) {
        let (gpu_type, milli) = gpu.split_once('=')?;
        milli_gpus.insert(gpu_type.to_string(), count(Some(milli))?);
    }
    Some(NodeShape { cpus, mem_mb, milli_gpus })
}

/// A `pending_held ID CPUS MB` line (`-`: not said); None where it is not one (skipped).
fn pending_held(words: &mut Words<'_>) -> Option<(u32, Held)> {
    let id = words.words.next()?.parse().ok()?;
    let mut part = || match words.words.next()? {
        "-" => Some(None),
        n => n.parse::<u64>().ok().map(Some),
    };
    Some((id, Held { cpus: part()?, mem_mb: part()? }))
}

/// A `free_gpus_in PARTITION TYPE=N ...` line; None where it is not one (skipped).
fn free_in(words: &mut Words<'_>) -> Option<(String, BTreeMap<String, u64>)> {
    let partition = words.words.next()?.to_string();
    let free = words.gpu_counts().ok()?;
    // Counts stop at an empty word: one with more after it is not this writer's line.
    words.end().ok()?;
    Some((partition, free))
}

/// Parses what [`render`] writes.
pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_end() == MAGIC => {}
        _ => return Err(SnapshotError::NotASnapshot),
    }
    let mut header: [Option<i64>; 5] = [None; 5];
    const KEYS: [&str; 5] = ["generated", "floor", "daily", "monthly", "initial"];
    let mut snap = Snapshot::new(0, BucketRules::default());
    let (mut prices, mut default_price) = (BTreeMap::new(), None);
    let mut stranded = Vec::new();
    let mut committed = HashMap::new();
    let mut pool_committed = HashMap::new();
    let mut pool_user_committed = BTreeMap::new();
    let mut pending = BTreeMap::new();
    let mut job_accounts = BTreeMap::new();
    for (i, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let mut words = Words { words: line.split(' '), line: i + 1 };
        let key = words.next("keyword")?;
        match key {
            "user" => {
                let name = words.next("user name")?;
                let micro = words.number("balance")?;
                words.end()?;
                if snap.balances.insert(name.to_string(), Tokens::from_micro(micro)).is_some() {
                    return Err(words.bad(format!("user '{name}' is listed twice")));
                }
            }
            "sharing" => {
                let shards_per_gpu = words.number("shards per GPU")? as u64;
                let mps_per_gpu = words.number("MPS units per GPU")? as u64;
                words.end()?;
                snap.sharing = Sharing { shards_per_gpu, mps_per_gpu };
            }
            "price" => {
                let gpu_type = words.next("GPU type")?.to_string();
                let micro = words.number("price")?;
                words.end()?;
                prices.insert(gpu_type, Tokens::from_micro(micro));
            }
            "default_price" => {
                default_price = Some(Tokens::from_micro(words.number("default price")?));
                words.end()?;
            }
            "borrow_limit" => {
                snap.borrow_limit = Tokens::from_micro(words.number("borrow limit")?);
                words.end()?;
            }
            // What only the estimate's stranding reads: a part or shape this reader does not know
            // (a later writer's) is skipped, never the snapshot refused for it.
            "stranded" => stranded.extend(words.words.by_ref().filter_map(Part::parse)),
            "node_shape" => snap.node_shapes.extend(node_shape(&mut words)),
            "partition" => {
                let name = words.next("partition name")?.to_string();
                let default = words.next("default flag")? == "default";
                let default_time = words.seconds("DefaultTime")?;
                let max_time = words.seconds("MaxTime")?;
                words.end()?;
                snap.partitions.push(Partition { name, default, default_time, max_time });
            }
            "account" => {
                let user = words.next("user name")?.to_string();
                let account = words.next("account")?.to_string();
                words.end()?;
                snap.default_accounts.insert(user, account);
            }
            "pool_mode" => {
                let mode = words.next("mode")?;
                snap.pool_mode =
                    PoolMode::parse(mode).ok_or_else(|| words.bad(format!("unknown pool mode '{mode}'")))?;
                words.end()?;
            }
            "pool" => {
                let account = words.next("account")?.to_string();
                let t = |n| Tokens::from_micro(n);
                let (balance, floor) = (t(words.number("balance")?), t(words.number("floor")?));
                let (daily, monthly) = (t(words.number("daily")?), t(words.number("monthly")?));
                let user_limit = match words.next("per-user limit")? {
                    "-" => None,
                    n => Some(t(n.parse().map_err(|_| words.bad(format!("per-user limit '{n}' is not a number")))?)),
                };
                words.end()?;
                let rules = BucketRules { initial: Tokens::ZERO, daily, monthly, cap: None, floor };
                let standing = PoolStanding {
                    balance,
                    rules,
                    user_limit,
                    coordinators: Vec::new(),
                    spent: HashMap::new(),
                    parent: None,
                    lends: false,
                    window: None,
                };
                if snap.pools.insert(account.clone(), standing).is_some() {
                    return Err(words.bad(format!("pool '{account}' is listed twice")));
                }
            }
            "coordinators" => {
                let account = words.next("account")?;
                let names = words.next("coordinators")?.split(',').map(str::to_string).collect();
                words.end()?;
                match snap.pools.get_mut(account) {
                    Some(pool) => pool.coordinators = names,
                    None => {
                        return Err(words.bad(format!("coordinators of '{account}', which has no pool line before")))
                    }
                }
            }
            "pool_parent" => {
                let account = words.next("account")?;
                let parent = words.next("parent account")?.to_string();
                words.end()?;
                match snap.pools.get_mut(account) {
                    Some(pool) => pool.parent = Some(parent),
                    None => return Err(words.bad(format!("parent of '{account}', which has no pool line before"))),
                }
            }
            "pool_lends" => {
                let account = words.next("account")?;
                words.end()?;
                match snap.pools.get_mut(account) {
                    Some(pool) => pool.lends = true,
                    None => return Err(words.bad(format!("lending of '{account}', which has no pool line before"))),
                }
            }
            "pool_window" => {
                let account = words.next("account")?;
                let (starts, ends) = (words.number("start")?, words.number("end")?);
                words.end()?;
                match snap.pools.get_mut(account) {
                    Some(pool) => pool.window = Some((starts, ends)),
                    None => return Err(words.bad(format!("window of '{account}', which has no pool line before"))),
                }
            }
            "spent_month" => {
                snap.spent_month = Some(words.next("month")?.to_string());
                words.end()?;
            }
            "spent" => {
                let account = words.next("account")?.to_string();
                let user = words.next("user name")?.to_string();
                let spent = Tokens::from_micro(words.number("spent")?);
                words.end()?;
                match snap.pools.get_mut(&account) {
                    Some(pool) => pool.spent.insert(user, spent),
                    None => return Err(words.bad(format!("spent of '{account}', which has no pool line before"))),
                };
            }
            "job_account" => {
                let id = words.number("job ID")?;
                let id = u32::try_from(id).map_err(|_| words.bad(format!("job ID {id} is out of range")))?;
                let account = words.next("account")?.to_string();
                words.end()?;
                job_accounts.insert(id, account);
            }
            "member" => {
                let user = words.next("user name")?.to_string();
                let accounts = words.next("accounts")?.split(',').map(str::to_string).collect();
                words.end()?;
                snap.user_accounts.insert(user, accounts);
            }
            "queue" => {
                let as_of = words.number("queue time")?;
                words.end()?;
                snap.queue = Some(QueueSummary { as_of, ..Default::default() });
            }
            // After `queue`, as written; a plugin from before it skips the line.
            "queue_read_ms" => {
                let ms = words.number("queue read time")?;
                words.end()?;
                if let Some(queue) = &mut snap.queue {
                    queue.read_ms = Some(ms);
                }
            }
            "queue_read_end_ms" => {
                let ms = words.number("queue read end time")?;
                words.end()?;
                if let Some(queue) = &mut snap.queue {
                    queue.read_end_ms = Some(ms);
                }
            }
            // After `queue`; a plugin from before it skips the line.
            "free_gpus" => {
                let free = words.gpu_counts()?;
                if let Some(queue) = &mut snap.queue {
                    queue.free_gpus = Some(free);
                }
            }
            // What only a quote reads: an unreadable line (a later writer's) is skipped.
            "free_gpus_in" => {
                if let (Some(queue), Some((partition, free))) = (&mut snap.queue, free_in(&mut words)) {
                    queue.free_gpus_in.insert(partition, free);
                }
            }
            "recent" => {
                let uid = words.number("uid")?;
                let uid = u32::try_from(uid).map_err(|_| words.bad(format!("uid {uid} is out of range")))?;
                let submitted = words.number("submit time")?;
                let milli_gpus = words.number("milli-GPUs")?.max(0) as u64;
                words.end()?;
                if let Some(queue) = &mut snap.queue {
                    queue.recent.push(RecentJob { uid, submitted, milli_gpus });
                }
            }
            "committed" => {
                let user = words.next("user name")?.to_string();
                let milli_gpus = words.number("milli-GPUs")? as u64;
                let max_cost = Tokens::from_micro(words.number("maximum cost")?);
                words.end()?;
                committed.insert(user, Commitment { milli_gpus, max_cost });
            }
            // A plugin from before it skips the line.
            "pool_committed" => {
                let account = words.next("account")?.to_string();
                let milli_gpus = words.number("milli-GPUs")?.max(0) as u64;
                let max_cost = Tokens::from_micro(words.number("maximum cost")?);
                words.end()?;
                pool_committed.insert(account, Commitment { milli_gpus, max_cost });
            }
            "pool_user_committed" => {
                let account = words.next("account")?.to_string();
                let user = words.next("user name")?.to_string();
                let milli_gpus = words.number("milli-GPUs")?.max(0) as u64;
                let max_cost = Tokens::from_micro(words.number("maximum cost")?);
                words.end()?;
                pool_user_committed.insert((account, user), Commitment { milli_gpus, max_cost });
            }
            "pending" => {
                let id = words.number("job ID")?;
                let id = u32::try_from(id).map_err(|_| words.bad(format!("job ID {id} is out of range")))?;
                let mut count = |what| words.number(what).map(|n| n.max(0) as u64);
                let (nodes, tasks, array_tasks, seconds) =
                    (count("nodes")?, count("tasks")?, count("array tasks")?, count("seconds")?);
                let gpus = match words.words.next() {
                    None => None,
                    Some(milli) => {
                        let milli_gpus =
                            milli.parse().map_err(|_| words.bad(format!("milli-GPUs '{milli}' is not a number")))?;
                        let max_cost = Tokens::from_micro(words.number("maximum cost")?);
                        words.end()?;
                        Some(Commitment { milli_gpus, max_cost })
                    }
                };
                pending.insert(id, PendingJob { nodes, tasks, array_tasks, seconds, gpus, ..Default::default() });
            }
            // What only the estimate's stranding reads: an unreadable line is skipped.
            "pending_held" => {
                if let Some((id, held)) = pending_held(&mut words) {
                    if let Some(job) = pending.get_mut(&id) {
                        job.held = held;
                    }
                }
            }
            _ => {
                if let Some(slot) = KEYS.iter().position(|k| *k == key) {
                    let value = words.number(key)?;
                    words.end()?;
                    if header[slot].replace(value).is_some() {
                        return Err(words.bad(format!("'{key}' is given twice")));
                    }
                }
                // Any other keyword: a later addition to the format, skipped.
            }
        }
    }
    let mut values = [0i64; 5];
    for (slot, value) in values.iter_mut().enumerate() {
        *value = header[slot].ok_or(SnapshotError::Missing(KEYS[slot]))?;
    }
    let [generated, floor, daily, monthly, initial] = values;
    let t = Tokens::from_micro;
    snap.generated = generated;
    snap.rules = BucketRules { initial: t(initial), daily: t(daily), monthly: t(monthly), cap: None, floor: t(floor) };
    snap.prices = PriceTable::new(prices, default_price).with_stranded(stranded);
    if let Some(queue) = &mut snap.queue {
        queue.committed = committed;
        queue.pool_committed = pool_committed;
        queue.pool_user_committed = pool_user_committed;
        queue.pending = pending;
        queue.job_accounts = job_accounts;
    }
    Ok(snap)
}

/// The words of one line, with errors that name the line.
struct Words<'a> {
    words: std::str::Split<'a, char>,
    line: usize,
}

impl<'a> Words<'a> {
    fn bad(&self, reason: String) -> SnapshotError {
        SnapshotError::Line { line: self.line, reason }
    }

    fn next(&mut self, what: &str) -> Result<&'a str, SnapshotError> {
        self.words.next().filter(|w| !w.is_empty()).ok_or_else(|| self.bad(format!("{what} is missing")))
    }

    /// A whole number; negative only where balances and prices may be.
    fn number(&mut self, what: &str) -> Result<i64, SnapshotError> {
        let word = self.next(what)?;
        word.parse().map_err(|_| self.bad(format!("{what} '{word}' is not a whole number")))
    }

    /// Seconds, or `-` for none.
    fn seconds(&mut self, what: &str) -> Result<Option<u64>, SnapshotError> {
        match self.next(what)? {
            "-" => Ok(None),
            word => word.parse().map(Some).map_err(|_| self.bad(format!("{what} '{word}' is not a number of seconds"))),
        }
    }

    /// The rest of the line: `TYPE=N` words, GPUs of each type.
    fn gpu_counts(&mut self) -> Result<BTreeMap<String, u64>, SnapshotError> {
        let mut counts = BTreeMap::new();
        while let Ok(word) = self.next("GPU type=count") {
            let (gpu_type, n) = word.split_once('=').ok_or_else(|| self.bad(format!("'{word}' is not TYPE=N")))?;
            let n = n.parse::<u64>().map_err(|_| self.bad(format!("'{word}': {n} is not a count")))?;
            counts.insert(gpu_type.to_string(), n);
        }
        Ok(counts)
    }

    fn end(&mut self) -> Result<(), SnapshotError> {
        match self.words.next() {
            None => Ok(()),
            Some(extra) => Err(self.bad(format!("unexpected text '{extra}' at the end"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BucketRules {
        BucketRules { cap: Some(Tokens::whole(200)), ..BucketRules::default() }
    }

    fn full() -> Snapshot {
        let mut snap = Snapshot::new(1_795_430_400, rules());
        snap.balances.insert("alice".into(), Tokens::whole(46));
        snap.balances.insert("bob".into(), Tokens::from_micro(-10_400_000));
        snap.sharing = Sharing { shards_per_gpu: 4, mps_per_gpu: 100 };
        let prices = [("a6000".to_string(), Tokens::whole(4)), ("rtx2080".to_string(), Tokens::from_micro(500_000))];
        snap.prices = PriceTable::new(prices.into(), Some(Tokens::whole(1))).with_stranded(vec![Part::Cpus]);
        snap.borrow_limit = Tokens::whole(10);
        let gpus = BTreeMap::from([("a6000".to_string(), 2000), ("rtx2080".to_string(), 4000)]);
        snap.node_shapes = vec![NodeShape { cpus: 16, mem_mb: 8000, milli_gpus: gpus }];
        snap.partitions = vec![
            Partition { name: "gpu".into(), default: true, default_time: Some(14400), max_time: Some(172800) },
            Partition { name: "long".into(), default: false, default_time: None, max_time: None },
        ];
        snap.default_accounts.insert("alice".into(), "physics".into());
        let committed =
            HashMap::from([("alice".to_string(), Commitment { milli_gpus: 2000, max_cost: Tokens::whole(16) })]);
        let gpus = Some(Commitment { milli_gpus: 1000, max_cost: Tokens::whole(4) });
        let pending = BTreeMap::from([
            (41, PendingJob { nodes: 1, tasks: 1, array_tasks: 1, seconds: 3600, gpus, ..Default::default() }),
            (42, PendingJob { nodes: 2, tasks: 8, array_tasks: 1, seconds: 86400, gpus: None, ..Default::default() }),
        ]);
        let job_accounts = BTreeMap::from([(41, "lab".to_string())]);
        snap.queue = Some(QueueSummary {
            as_of: 1_795_430_395,
            read_ms: Some(1_795_430_395_250),
            read_end_ms: Some(1_795_430_395_730),
            recent: vec![RecentJob { uid: 1001, submitted: 1_795_430_395, milli_gpus: 2000 }],
            committed,
            pool_committed: HashMap::from([(
                "lab".to_string(),
                Commitment { milli_gpus: 3000, max_cost: Tokens::whole(20) },
            )]),
            pool_user_committed: BTreeMap::from([(
                ("lab".to_string(), "alice".to_string()),
                Commitment { milli_gpus: 1000, max_cost: Tokens::whole(12) },
            )]),
            pending,
            job_accounts,
            free_gpus: Some(BTreeMap::from([("a6000".to_string(), 0), ("rtx2080".to_string(), 4)])),
            free_gpus_in: BTreeMap::from([
                ("gpu".to_string(), BTreeMap::from([("rtx2080".to_string(), 4)])),
                ("long".to_string(), BTreeMap::new()),
            ]),
        });
        snap.pool_mode = PoolMode::Both;
        let lab = PoolStanding {
            balance: Tokens::whole(46),
            rules: BucketRules {
                initial: Tokens::ZERO,
                daily: Tokens::ZERO,
                monthly: Tokens::whole(30),
                cap: None,
                floor: Tokens::whole(-10),
            },
            user_limit: Some(Tokens::whole(10)),
            coordinators: vec!["carol".into(), "dave".into()],
            spent: HashMap::from([("alice".to_string(), Tokens::from_micro(10_500_000))]),
            parent: None,
            lends: true,
            window: None,
        };
        snap.pools.insert("lab".into(), lab.clone());
        let course = PoolStanding {
            user_limit: None,
            coordinators: vec![],
            spent: HashMap::new(),
            parent: Some("lab".into()),
            lends: false,
            window: Some((1_795_000_000, 1_796_000_000)),
            ..lab
        };
        snap.pools.insert("course".into(), course);
        snap.spent_month = Some("2026-11".into());
        snap.user_accounts.insert("bob".into(), vec!["lab".into(), "course".into()]);
        snap
    }

    #[test]
    fn parses_what_render_writes() {
        let text = render(&full());
        let snap = parse(&text).unwrap();
        assert_eq!(snap.generated, 1_795_430_400);
        assert_eq!(snap.rules, BucketRules { cap: None, ..rules() });
        assert_eq!(snap.balance("alice"), Tokens::whole(46));
        assert_eq!(snap.balance("bob"), Tokens::from_micro(-10_400_000));
        assert_eq!(snap.balance("carol"), Tokens::whole(100), "unlisted users stand at initial");
        assert_eq!(snap.balances.len(), 2);
        assert_eq!(snap.sharing, full().sharing);
        assert_eq!(snap.prices.applied("a6000").per_gpu_hour, Tokens::whole(4));
        assert_eq!(snap.prices.applied("h100").per_gpu_hour, Tokens::whole(1), "default_price");
        assert_eq!(snap.partitions, full().partitions);
        assert_eq!((snap.prices.stranded(), &snap.node_shapes), (&[Part::Cpus][..], &full().node_shapes));
        assert_eq!(snap.default_accounts, full().default_accounts);
        assert_eq!(snap.queue, full().queue);
        assert_eq!((snap.pool_mode, &snap.pools), (PoolMode::Both, &full().pools));
        assert_eq!(snap.user_accounts, full().user_accounts);
        assert_eq!(render(&snap), text, "nothing lost");
    }

    #[test]
    fn the_documented_example() {
        let doc = include_str!("snapshot.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| *l != "//! ```text")
            .skip(1)
            .take_while(|l| *l != "//! ```")
            .map(|l| format!("{}\n", l.trim_start_matches("//! ")))
            .collect();
        let snap = parse(&example).unwrap();
        assert_eq!(snap.rules.floor, Tokens::whole(-10));
        assert_eq!(snap.balance("alice"), Tokens::whole(46));
        assert_eq!(snap.partitions[0].limit_for_untimed(), Some(14400));
        assert_eq!(snap.prices.stranded(), [Part::Cpus, Part::Memory]);
        assert_eq!((snap.node_shapes[0].cpus, snap.node_shapes[0].gpus()), (64, 10));
        let queue = snap.queue.unwrap();
        assert_eq!(queue.committed["alice"].max_cost, Tokens::whole(16));
        assert_eq!(queue.pending[&41].gpus.unwrap().milli_gpus, 1000);
        assert_eq!(queue.pending[&42].gpus, None);
        assert_eq!(queue.pending[&41].held, Held { cpus: Some(16), mem_mb: None });
        assert_eq!(queue.free_gpus, Some(BTreeMap::from([("a6000".to_string(), 1), ("rtx2080".to_string(), 4)])));
        assert_eq!(queue.free_gpus_in["gpu"]["a6000"], 1);
        assert_eq!(render(&parse(&example).unwrap()), example);
    }

    /// A quote offers what is free in the partitions a job may run in: the most of each type in
    /// one of them; the cluster's where a partition is not listed.
    #[test]
    fn a_jobs_free_gpus_are_those_of_its_partitions() {
        let text = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\nqueue 5\n\
                    free_gpus a6000=3 rtx2080=4\nfree_gpus_in gpu a6000=1 rtx2080=4\nfree_gpus_in big a6000=3\n\
                    free_gpus_in none\nfree_gpus_in bad a6000=x\nfree_gpus_in gap a6000=1  a6000=9\n\
                    pending 5 1 1 1 60\npending_held 5 x 1\n\
                    pending_held 6 1 1\n";
        let queue = parse(text).unwrap().queue.unwrap();
        assert_eq!(queue.pending[&5].held, Held::default(), "an unreadable pending_held is skipped");
        let free = |types: &[(&str, u64)]| Some(types.iter().map(|(t, n)| (t.to_string(), *n)).collect());
        assert_eq!(queue.free_gpus_for(&["gpu"]), free(&[("a6000", 1), ("rtx2080", 4)]));
        assert_eq!(queue.free_gpus_for(&["gpu", "big"]), free(&[("a6000", 3), ("rtx2080", 4)]));
        assert_eq!(queue.free_gpus_for(&["none"]), free(&[]));
        // An unreadable line is skipped: its partition is not listed.
        assert_eq!(queue.free_gpus_for(&["bad"]), free(&[("a6000", 3), ("rtx2080", 4)]));
        assert_eq!(queue.free_gpus_for(&["gap"]), free(&[("a6000", 3), ("rtx2080", 4)]), "an empty word, then more");
        assert_eq!(queue.free_gpus_for(&["gpu", "elsewhere"]), free(&[("a6000", 3), ("rtx2080", 4)]));
    }

    /// A later writer's stranding parts and shapes, or a shape this reader cannot read, are
    /// skipped: the balances still count.
    #[test]
    fn unknown_stranding_parts_and_unreadable_shapes_are_skipped() {
        let text = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\nuser alice 3\n\
                    stranded cpus disk\nnode_shape 16 8000 a6000=2000 racks=2\nnode_shape 16 x a6000=1000\n\
                    node_shape 16 8000 a6000=99999999999999999999\nnode_shape 8\n";
        let snap = parse(text).unwrap();
        assert_eq!(snap.balance("alice"), Tokens::from_micro(3));
        assert_eq!(snap.prices.stranded(), [Part::Cpus]);
        assert_eq!(snap.node_shapes.len(), 1, "{:?}", snap.node_shapes);
        assert_eq!((snap.node_shapes[0].cpus, snap.node_shapes[0].gpus()), (16, 2));
    }

    #[test]
    fn empty_ledger_and_unknown_keywords() {
        let text = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\ncap 9\nfuture x y\n\n";
        let snap = parse(text).unwrap();
        assert!(snap.balances.is_empty());
        assert_eq!(snap.balance("anyone"), Tokens::from_micro(7));
        assert_eq!(snap.queue, None);
        assert!(snap.partitions.is_empty());
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(parse("").unwrap_err(), SnapshotError::NotASnapshot);
        assert_eq!(parse("\u{0}\u{1}garbage\n").unwrap_err(), SnapshotError::NotASnapshot);
        assert_eq!(parse("gputokens-snapshot 2\n").unwrap_err(), SnapshotError::NotASnapshot);
        assert_eq!(parse("gputokens-snapshot 1\n").unwrap_err(), SnapshotError::Missing("generated"));
        let head = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\n";
        let cases = [
            ("user alice\n", "line 7: balance is missing"),
            ("user alice 1.5\n", "line 7: balance '1.5' is not a whole number"),
            ("user alice 1 2\n", "line 7: unexpected text '2' at the end"),
            ("user alice 1\nuser alice 2\n", "line 8: user 'alice' is listed twice"),
            ("floor 3\n", "line 7: 'floor' is given twice"),
            ("user\n", "line 7: user name is missing"),
            ("partition gpu default soon -\n", "line 7: DefaultTime 'soon' is not a number of seconds"),
            ("committed alice 1000\n", "line 7: maximum cost is missing"),
            ("price a6000\n", "line 7: price is missing"),
            ("pending 41 1 1 1\n", "line 7: seconds is missing"),
            ("pending 41 1 1 1 60 1000\n", "line 7: maximum cost is missing"),
            ("pending -1 1 1 1 60\n", "line 7: job ID -1 is out of range"),
        ];
        for (tail, want) in cases {
            assert_eq!(parse(&format!("{head}{tail}")).unwrap_err().to_string(), want, "{tail:?}");
        }
        let truncated = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\n";
        assert_eq!(parse(truncated).unwrap_err(), SnapshotError::Missing("initial"));
    }

    #[test]
    fn a_temp_file_never_writes_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let snapshot = dir.path().join("balances.snapshot");
        let planted = dir.path().join(format!(".balances.snapshot.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomically(&snapshot, "fresh").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&snapshot).unwrap(), "fresh");
        assert!(!planted.exists() && std::fs::symlink_metadata(&planted).is_err(), "the link is gone");
    }

    /// The audit's L8: a write that fails leaves no temp file behind (one per failed cycle filled
    /// the snapshot's directory).
    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("balances.snapshot");
        // A directory in the file's place: the rename fails.
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "x").unwrap();
        assert!(write_atomically(&target, "fresh").is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("balances.snapshot")], "temp files left: {left:?}");
    }
}
