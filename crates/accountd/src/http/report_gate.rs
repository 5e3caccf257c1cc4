//! The gate every agent report passes before it changes anything: who sent it (a MUNGE credential of
//! root or the SlurmUser whose payload names this very body, or the node's own token), whether that
//! sender may speak for the node it names (one node Slurm knows; the credential's origin is one of
//! the node's addresses), whether its GPUs are no more than Slurm shows there, and whether every
//! job it names is a plain job ID that Slurm shows on that node. What Slurm said of the node and
//! its jobs ([`Authorized`]) bounds what the report is believed for. A refusal is an HTTP 4xx, a
//! metric and one log line per sender and reason.
//!
//! The credential is checked before the body is read as JSON, and nothing a refused sender claims is
//! kept: its log key is its address. The gate's caches have locks of their own, never held across a
//! MUNGE decode or a Slurm command, so a slow slurmctld stalls no other request.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gputokens::config::AgentAuth;
use gputokens::free_text::shown;
use gputokens::Config;

use super::slurm_bounds;
use crate::munge::{self, MungeErrorKind};
use crate::slurm::{job_id_arg, node_name_arg, Slurm};
use gputokens_node_report::auth::{self, Presented};
use gputokens_node_report::AgentReport;

/// How long what Slurm said about a node is believed.
const NODE_TTL: Duration = Duration::from_secs(300);
/// A name Slurm did not know is asked again after this long (a node added to slurm.conf).
const UNKNOWN_NODE_TTL: Duration = Duration::from_secs(30);
/// The node's jobs are read again when a report names one not seen there, at most this often.
const JOBS_REFRESH: Duration = Duration::from_secs(2);
/// A job Slurm showed on the node still counts this long after it left squeue (its processes and
/// records end a moment after it does).
const JOB_GRACE: Duration = Duration::from_secs(120);
/// Signed reports of one node remembered within the signing window (an agent at a 1 s interval
/// signs 600); past it, its reports are refused until older ones leave the window.
const SIGNED_KEPT_PER_NODE: usize = 2048;
/// How many node names one sender may have Slurm asked about a minute (its own, and a few for an
/// agent restarted under another name or a node renamed).
const NAMES_ASKED_PER_MINUTE: u32 = 8;
/// Nodes (and names Slurm did not know) whose answers are kept; past this, unknown names go first.
const NODES_KEPT: usize = 16_384;
/// Distinct (sender, reason) refusals remembered for logging once; past this the memory starts anew
/// (a flood of distinct senders costs a log line each, never memory).
const LOGGED_REFUSALS: usize = 1024;

/// Why a report was turned away: the HTTP status, a metric label and a message for the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn malformed(message: String) -> Refusal {
        Refusal::new(400, "malformed", message)
    }

    /// Not the sender's fault: not counted as a refusal.
    pub fn internal(message: String) -> Refusal {
        Refusal::new(500, "internal", message)
    }

    /// Too many reports under way: the sender tries again next interval.
    pub fn busy(message: String) -> Refusal {
        Refusal::new(503, "busy", message)
    }

    fn new(status: u16, reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { status, reason, message: message.into() }
    }
}

/// Who a report comes from, once its authentication has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    /// A MUNGE credential of an allowed uid; its origin address when munged knew it.
    Munge { uid: u32, origin: Option<IpAddr> },
    /// The per-node token of this node.
    Token { node: String },
}

/// What Slurm says of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// NodeAddr and NodeHostName, resolved.
    pub addresses: Vec<IpAddr>,
    /// The GPUs in its Gres (`slurm_bounds::node_gpus`).
    pub gpus: u32,
}

/// What Slurm says of a job on a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlurmJob {
    pub user: String,
    /// The GPUs it holds in all (`slurm_bounds::job_gpus`); None: Slurm does not count them.
    pub gpus: Option<u32>,
}

/// What the gate asks of Slurm (a trait so the rules are tested without a cluster).
pub trait NodeDirectory {
    /// The node's addresses and GPUs (`sinfo` knows both), or None when Slurm has no such node.
    fn node(&self, node: &str) -> Result<Option<SlurmNode>, String>;
    /// Jobs Slurm shows running, suspended, completing or configuring on the node.
    fn jobs_on(&self, node: &str) -> Result<BTreeMap<String, SlurmJob>, String>;
}

impl NodeDirectory for Slurm {
    fn node(&self, node: &str) -> Result<Option<SlurmNode>, String> {
        let node = node_name_arg(node).map_err(|e| e.to_string())?;
        // One line per partition the node is in; none when Slurm has no such node. The name was
        // validated above, so it cannot be read as an option.
        let text =
            self.run("sinfo", &["--all", "-h", "-N", "-n", node, "-o", "%N|%o|%n|%G"]).map_err(|e| e.to_string())?;
        let mut lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        lines.dedup();
        let [line] = lines.as_slice() else { return Ok(None) };
        let fields: Vec<&str> = line.splitn(4, '|').collect();
        let [name, addr, hostname, gres] = fields.as_slice() else { return Ok(None) };
        if *name != node {
            return Ok(None);
        }
        let mut addresses = Vec::new();
        for host in [addr, hostname] {
            if let Ok(resolved) = (*host, 0).to_socket_addrs() {
                addresses.extend(resolved.map(|a| a.ip()));
            }
        }
        addresses.sort();
        addresses.dedup();
        Ok(Some(SlurmNode { addresses, gpus: slurm_bounds::node_gpus(gres) }))
    }

    fn jobs_on(&self, node: &str) -> Result<BTreeMap<String, SlurmJob>, String> {
        let node = node_name_arg(node).map_err(|e| e.to_string())?;
        let text = self
            // CF too: squeue's `-t R` matches a job's whole state, so a running job still flagged
            // CONFIGURING (slurmctld has not yet heard that its prolog finished, while the prolog's
            // GPU record and the job's processes are already on the node) is shown only by CF.
            .run("squeue", &["--all", "-h", "-w", node, "-t", "R,S,CG,ST,CF", "-O", "JobID:|,UserName:|,tres-alloc:"])
            .map_err(|e| e.to_string())?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, '|').map(str::trim);
                let job = fields.next().filter(|j| !j.is_empty())?.to_string();
                let user = fields.next().unwrap_or_default().to_string();
                let gpus = slurm_bounds::job_gpus(fields.next().unwrap_or_default());
                Some((job, SlurmJob { user, gpus }))
            })
            .collect())
    }
}

struct NodeEntry {
    node: Option<SlurmNode>,
    read: Instant,
}

/// What Slurm said of each node asked about, and how many names each sender made it ask about.
#[derive(Default)]
struct NodeCache {
    entries: HashMap<String, NodeEntry>,
    /// Per credential origin (or node token): sinfo calls in the current minute.
    asked_by: HashMap<String, (Instant, u32)>,
}

impl NodeCache {
    fn insert(&mut self, node: &str, found: Option<SlurmNode>) {
        if self.entries.len() >= NODES_KEPT && !self.entries.contains_key(node) {
            // Names Slurm does not know go first; a site with more nodes than this asks again.
            self.entries.retain(|_, entry| entry.node.is_some());
            if self.entries.len() >= NODES_KEPT {
                self.entries.clear();
            }
        }
        self.entries.insert(node.to_string(), NodeEntry { node: found, read: Instant::now() });
    }

    /// Whether `sender` may have Slurm asked about one more node name now: at most
    /// [`NAMES_ASKED_PER_MINUTE`] a minute, so a node's root naming made-up nodes costs Slurm little.
    fn may_ask(&mut self, sender: &str) -> bool {
        if self.asked_by.len() >= NODES_KEPT {
            self.asked_by.clear();
        }
        let (since, asked) = self.asked_by.entry(sender.to_string()).or_insert((Instant::now(), 0));
        if since.elapsed() >= Duration::from_secs(60) {
            (*since, *asked) = (Instant::now(), 0);
        }
        *asked += 1;
        *asked <= NAMES_ASKED_PER_MINUTE
    }
}

#[derive(Default)]
struct NodeJobs {
    /// Job → when Slurm last showed it on the node, and what it said of it.
    seen: HashMap<String, (Instant, SlurmJob)>,
    read: Option<Instant>,
}

/// What the gate let through: what Slurm says bounds the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorized {
    /// The GPUs Slurm shows on the node.
    pub node_gpus: u32,
    /// Each job the report names, as Slurm showed it there.
    pub jobs: BTreeMap<String, SlurmJob>,
}

impl Authorized {
    /// The most GPUs `job` may hold on the node: its own count, never more than the node's.
    pub fn job_gpus(&self, job: &str) -> u32 {
        let own = self.jobs.get(job).and_then(|j| j.gpus).unwrap_or(self.node_gpus);
        own.min(self.node_gpus)
    }
}

pub struct ReportGate {
    auth: AgentAuth,
    munge_socket: Option<std::path::PathBuf>,
    /// The site secret (auth = "token").
    secret: Option<String>,
    /// uid 0 and the SlurmUser's.
    allowed_uids: BTreeSet<u32>,
    /// `[agent] accept_unchecked_origin`.
    accept_unchecked_origin: bool,
    /// `[agent] unscheduled_gpus`.
    unscheduled_gpus: u32,
    nodes: Mutex<NodeCache>,
    jobs: Mutex<HashMap<String, NodeJobs>>,
    /// (sender, reason) already logged; cleared for a node when it reports properly again.
    logged: Mutex<HashSet<(String, &'static str)>>,
    /// Signed reports taken within the window, per node (signed with its token): (time, signature).
    signed_seen: Mutex<HashMap<String, Vec<(i64, String)>>>,
    /// When this gate was made (unix seconds): reports signed before are refused.
    started: i64,
}

/// A short lock: a panic while holding one left plain data behind.
fn held<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReportGate {
    pub fn new(config: &Config) -> Result<ReportGate, String> {
        let secret = match config.agent.auth {
            AgentAuth::Token => {
                let path = config.agent.token_file.as_ref().ok_or("agent.auth = \"token\" needs agent.token_file")?;
                Some(auth::read_private_secret(path, "agent.token_file", None)?)
            }
            AgentAuth::Munge => None,
        };
        let mut allowed_uids = BTreeSet::from([0]);
        match nix::unistd::User::from_name(&config.slurm_user) {
            Ok(Some(user)) => {
                allowed_uids.insert(user.uid.as_raw());
            }
            _ => tracing::warn!(
                "slurm_user '{}' is not a user on this host: only root's agent reports are accepted",
                config.slurm_user
            ),
        }
        Ok(ReportGate {
            auth: config.agent.auth,
            munge_socket: config.agent.munge_socket.clone(),
            secret,
            allowed_uids,
            accept_unchecked_origin: config.agent.accept_unchecked_origin,
            unscheduled_gpus: config.agent.unscheduled_gpus,
            nodes: Mutex::default(),
            jobs: Mutex::default(),
            logged: Mutex::default(),
            signed_seen: Mutex::default(),
            started: gputokens::time::now(),
        })
    }

    /// Refuses a request that presents no credential of the site's kind, before anything else is
    /// done with it (its body is not even parsed).
    pub fn expects(&self, presented: Presented) -> Result<(), Refusal> {
        match (self.auth, presented) {
            (AgentAuth::Munge, Presented::Munge(_)) | (AgentAuth::Token, Presented::Signed { .. }) => Ok(()),
            (AgentAuth::Token, Presented::Bearer(_)) => Err(Refusal::new(
                401,
                "unsigned_token",
                "a node token sent as it is (an agent older than this accountd): agent reports are signed with \
                 it ('Authorization: GPUTOKENS-HMAC ...'); install this gputokens on the node",
            )),
            (AgentAuth::Munge, _) => Err(Refusal::new(
                401,
                "unauthenticated",
                "agent reports need 'Authorization: MUNGE <credential>' ([agent] auth = \"munge\")",
            )),
            (AgentAuth::Token, _) => Err(Refusal::new(
                401,
                "unauthenticated",
                "agent reports need 'Authorization: GPUTOKENS-HMAC node=.. at=.. sig=..', signed with the node's \
                 token ([agent] auth = \"token\")",
            )),
        }
    }

    /// Who sent `body`, and the report in it: a MUNGE credential is checked against the body before
    /// `parse` reads it; a node token is checked against the node the parsed report names.
    pub fn authenticate(
        &self,
        presented: Presented,
        body: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<AgentReport, Refusal>,
    ) -> Result<(Sender, AgentReport), Refusal> {
        self.expects(presented)?;
        match presented {
            Presented::Munge(cred) => {
                let cred = munge::decode(cred, self.munge_socket.as_deref()).map_err(|e| match e.kind {
                    MungeErrorKind::Unavailable => Refusal::new(503, "munge_unavailable", e.to_string()),
                    MungeErrorKind::Replayed => Refusal::new(401, "replayed", e.to_string()),
                    MungeErrorKind::Expired => Refusal::new(401, "expired", e.to_string()),
                    MungeErrorKind::Invalid => Refusal::new(401, "bad_credential", e.to_string()),
                })?;
                let sender = self.check_munge(cred, body)?;
                Ok((sender, parse(body)?))
            }
            Presented::Signed { node, at, sig } => {
                self.check_signed(node, at, sig, body, gputokens::time::now())?;
                Ok((Sender::Token { node: node.to_string() }, parse(body)?))
            }
            Presented::None | Presented::Unknown | Presented::Bearer(_) => unreachable!("refused by expects"),
        }
    }

    /// A signed report must be signed with `node`'s token, for this body, at a time within
    /// [`auth::SIGNED_WINDOW_SECS`] of `now`, and not have been received before (a report seen on
    /// the wire sent again).
    pub fn check_signed(&self, node: &str, at: i64, sig: &str, body: &[u8], now: i64) -> Result<(), Refusal> {
        let secret = self.secret.as_deref().unwrap_or_default();
        let token = auth::node_token(secret, node);
        if !auth::signature_matches(&token, node, at, body, sig) {
            return Err(Refusal::new(401, "bad_token", format!("not signed with the token of node '{}'", shown(node))));
        }
        let off = at.abs_diff(now);
        if off > auth::SIGNED_WINDOW_SECS.unsigned_abs() {
            return Err(Refusal::new(
                401,
                "expired",
                format!(
                    "a report of node '{node}' signed {off}s {} accountd's clock (at most {}s): check the node's clock (NTP)",
                    if at < now { "behind" } else { "ahead of" },
                    auth::SIGNED_WINDOW_SECS
                ),
            ));
        }
        // Signatures taken before a restart are not remembered: none from before it is taken.
        if at < self.started {
            return Err(Refusal::new(
                401,
                "replayed",
                format!("a report of node '{node}' signed before accountd started"),
            ));
        }
        // Within the window each signature is taken once; older ones are refused by their time.
        let mut seen = held(&self.signed_seen);
        let of_node = seen.entry(node.to_string()).or_default();
        of_node.retain(|(when, _)| *when >= now - auth::SIGNED_WINDOW_SECS);
        if of_node.iter().any(|(_, s)| s == sig) {
            return Err(Refusal::new(401, "replayed", format!("a report of node '{node}' received before")));
        }
        // An agent signs one report an interval: a node signing thousands within the window is
        // not one (memory and the scan above stay bounded).
        if of_node.len() >= SIGNED_KEPT_PER_NODE {
            return Err(Refusal::new(
                429,
                "rate",
                format!(
                    "node '{node}' signed over {SIGNED_KEPT_PER_NODE} reports within {}s",
                    auth::SIGNED_WINDOW_SECS
                ),
            ));
        }
        of_node.push((at, sig.to_string()));
        Ok(())
    }

    /// A decoded credential must come from root or the SlurmUser and name this body.
    pub fn check_munge(&self, cred: munge::Credential, body: &[u8]) -> Result<Sender, Refusal> {
        if !self.allowed_uids.contains(&cred.uid) {
            return Err(Refusal::new(
                403,
                "uid",
                format!("a MUNGE credential of uid {} may not report: only root and the SlurmUser", cred.uid),
            ));
        }
        if cred.payload != auth::report_payload(body) {
            return Err(Refusal::new(401, "bad_credential", "the MUNGE credential was made for another report"));
        }
        Ok(Sender::Munge { uid: cred.uid, origin: cred.origin.map(IpAddr::V4) })
    }

    /// Whether `sender` may speak for `report.node`, for the GPUs it names (no more than Slurm shows
    /// there, each once) and for every job it names; what Slurm said of them bounds the report.
    pub fn authorize(
        &self,
        sender: &Sender,
        report: &AgentReport,
        slurm: &dyn NodeDirectory,
    ) -> Result<Authorized, Refusal> {
        let node = node_name_arg(&report.node)
            .map_err(|_| Refusal::new(400, "node", format!("'{}' is not a Slurm node name", shown(&report.node))))?;
        if let Sender::Token { node: bound } = sender {
            if bound != node {
                return Err(Refusal::new(403, "node", format!("a token of node '{bound}' cannot report for '{node}'")));
            }
        }
        let Some(slurm_node) = self.slurm_node(node, sender, slurm)? else {
            return Err(Refusal::new(403, "node", format!("Slurm has no node '{node}'")));
        };
        let addresses = &slurm_node.addresses;
        if let Sender::Munge { origin, .. } = sender {
            match origin {
                Some(origin) if addresses.contains(origin) => {}
                Some(origin) if !addresses.is_empty() => {
                    return Err(Refusal::new(
                        403,
                        "address",
                        format!("the credential comes from {origin}, not from node '{node}' ({})", list(addresses)),
                    ));
                }
                // Nothing to compare: munged named no origin, or the node's addresses do not resolve.
                _ if self.accept_unchecked_origin => {}
                _ => {
                    return Err(Refusal::new(
                        403,
                        "address",
                        format!(
                            "cannot check that the credential comes from node '{node}' (origin {}, node addresses {}): \
                             refused unless [agent] accept_unchecked_origin = true",
                            origin.map_or("unknown".to_string(), |o| o.to_string()),
                            if addresses.is_empty() { "unresolved".to_string() } else { list(addresses) }
                        ),
                    ));
                }
            }
        }
        gpus_as_slurm_shows(report, node, slurm_node.gpus, self.unscheduled_gpus)?;
        let named = named_jobs(report);
        for job in &named {
            job_id_arg(job).map_err(|e| Refusal::new(400, "job", e.to_string()))?;
        }
        let (missing, shown_there) = self.jobs_not_on(node, &named, slurm)?;
        if !missing.is_empty() {
            let list: Vec<&str> = missing.iter().map(String::as_str).collect();
            // What Slurm did show there, so that an admin can tell a forged job from one Slurm
            // placed a moment ago.
            let there = match shown_there.is_empty() {
                true => "none".to_string(),
                false => shown_there.into_iter().take(20).collect::<Vec<_>>().join(","),
            };
            return Err(Refusal::new(
                403,
                "job",
                format!("Slurm shows no job {} on node '{node}' (it shows: {there})", list.join(",")),
            ));
        }
        Ok(Authorized { node_gpus: slurm_node.gpus, jobs: self.jobs_shown(node, &named) })
    }

    /// What Slurm says of `node`, from the cache or asked (within `sender`'s allowance).
    fn slurm_node(&self, node: &str, sender: &Sender, slurm: &dyn NodeDirectory) -> Result<Option<SlurmNode>, Refusal> {
        {
            let mut nodes = held(&self.nodes);
            if let Some(entry) = nodes.entries.get(node) {
                let ttl = if entry.node.is_some() { NODE_TTL } else { UNKNOWN_NODE_TTL };
                if entry.read.elapsed() < ttl {
                    return Ok(entry.node.clone());
                }
            }
            let asker = match sender {
                Sender::Munge { origin: Some(origin), .. } => origin.to_string(),
                Sender::Munge { origin: None, uid } => format!("uid {uid}"),
                Sender::Token { node } => node.clone(),
            };
            if !nodes.may_ask(&asker) {
                return Err(Refusal::new(
                    429,
                    "node_names",
                    format!(
                        "{asker} named more than {NAMES_ASKED_PER_MINUTE} nodes Slurm was asked about this minute \
                         ('{node}' too): a node reports for itself"
                    ),
                ));
            }
        }
        // Asked without the lock: other reports go on meanwhile.
        let found = slurm.node(node).map_err(|e| Refusal::new(503, "slurm", e))?;
        held(&self.nodes).insert(node, found.clone());
        Ok(found)
    }

    /// The jobs of `named` that Slurm does not show (nor showed lately) on `node`, and the jobs it
    /// does show (or showed lately) there.
    fn jobs_not_on(
        &self,
        node: &str,
        named: &BTreeSet<String>,
        slurm: &dyn NodeDirectory,
    ) -> Result<(BTreeSet<String>, BTreeSet<String>), Refusal> {
        let missing = |e: &NodeJobs| {
            let unseen: BTreeSet<String> = named.iter().filter(|j| !e.seen.contains_key(*j)).cloned().collect();
            let seen = match unseen.is_empty() {
                true => BTreeSet::new(),
                false => e.seen.keys().cloned().collect(),
            };
            (unseen, seen)
        };
        {
            let mut jobs = held(&self.jobs);
            let entry = jobs.entry(node.to_string()).or_default();
            entry.seen.retain(|_, (at, _)| at.elapsed() < JOB_GRACE);
            let unseen = missing(entry);
            if unseen.0.is_empty() || entry.read.is_some_and(|r| r.elapsed() < JOBS_REFRESH) {
                return Ok(unseen);
            }
            // Claimed before asking, so that reports arriving meanwhile do not ask too.
            entry.read = Some(Instant::now());
        }
        let shown_now = slurm.jobs_on(node).map_err(|e| Refusal::new(503, "slurm", e))?;
        let mut jobs = held(&self.jobs);
        let entry = jobs.entry(node.to_string()).or_default();
        let now = Instant::now();
        for (job, what) in shown_now {
            entry.seen.insert(job, (now, what));
        }
        Ok(missing(entry))
    }

    /// What Slurm said of each job of `named` on `node` (each was shown there: `jobs_not_on`).
    fn jobs_shown(&self, node: &str, named: &BTreeSet<String>) -> BTreeMap<String, SlurmJob> {
        let jobs = held(&self.jobs);
        let Some(entry) = jobs.get(node) else { return BTreeMap::new() };
        named.iter().filter_map(|job| Some((job.clone(), entry.seen.get(job)?.1.clone()))).collect()
    }

    /// Logs a refusal once per sender (an address, or a node name as shown) and reason; true when
    /// it was logged now.
    pub fn log_refusal(&self, from: &str, refusal: &Refusal) -> bool {
        let mut logged = held(&self.logged);
        if logged.len() >= LOGGED_REFUSALS {
            logged.clear();
        }
        let first = logged.insert((shown(from), refusal.reason));
        if first {
            tracing::warn!("agent report from {} refused ({}): {}", shown(from), refusal.reason, refusal.message);
        }
        first
    }

    /// A node that reports properly again has its refusals logged anew next time.
    pub fn accepted(&self, node: &str) {
        let node = shown(node);
        held(&self.logged).retain(|(from, _)| *from != node);
    }
}

/// Every job ID a report names: its processes' jobs and the jobs recorded as holding its GPUs and
/// their MIG devices.
fn named_jobs(report: &AgentReport) -> BTreeSet<String> {
    let processes = report.sample.processes.iter().filter_map(|p| p.job_id.clone());
    let holders = report.sample.gpus.iter().flat_map(|g| g.jobs.iter().cloned());
    let on_slices = report.sample.gpus.iter().flat_map(|g| g.mig.iter().flat_map(|m| m.jobs.iter().cloned()));
    processes.chain(holders).chain(on_slices).collect()
}

/// A report's GPUs must be at most the `gpus` Slurm shows on `node` (and the site's `unscheduled`
/// more), each index below that and named once, each UUID once: a node's root cannot make up GPUs
/// to charge jobs or fill accountd.
fn gpus_as_slurm_shows(report: &AgentReport, node: &str, gpus: u32, unscheduled: u32) -> Result<(), Refusal> {
    let most = gpus.saturating_add(unscheduled);
    let refused = |what: String| {
        let beyond = match unscheduled {
            0 => "; GPUs Slurm does not schedule there: [agent] unscheduled_gpus".to_string(),
            n => format!(", and [agent] unscheduled_gpus = {n} more"),
        };
        Err(Refusal::new(403, "gpus", format!("{what}: Slurm shows {gpus} GPUs on node '{node}' (its Gres){beyond}")))
    };
    let reported = &report.sample.gpus;
    if reported.len() > most as usize {
        return refused(format!("the report names {} GPUs", reported.len()));
    }
    let (mut indices, mut uuids) = (HashSet::new(), HashSet::new());
    for gpu in reported {
        if gpu.index >= most {
            return refused(format!("the report names GPU index {}", gpu.index));
        }
        if !indices.insert(gpu.index) {
            return Err(Refusal::malformed(format!("the report names GPU index {} twice", gpu.index)));
        }
        if let Some(uuid) = gpu.uuid.as_deref().filter(|u| !u.is_empty()) {
            if !uuids.insert(uuid) {
                return Err(Refusal::malformed(format!("the report names GPU {} twice", shown(uuid))));
            }
        }
    }
    Ok(())
}

fn list(addresses: &[IpAddr]) -> String {
    addresses.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens_node_report::{GpuSample, NodeSample, ProcessSample};
    use std::cell::Cell;

    struct FakeSlurm {
        jobs: BTreeMap<String, SlurmJob>,
        job_reads: Cell<usize>,
        node_reads: Cell<usize>,
    }

    impl NodeDirectory for FakeSlurm {
        fn node(&self, node: &str) -> Result<Option<SlurmNode>, String> {
            self.node_reads.set(self.node_reads.get() + 1);
            Ok(match node {
                "gpu01" => Some(SlurmNode { addresses: vec!["10.0.0.1".parse().unwrap()], gpus: 2 }),
                "gpu02" => Some(SlurmNode { addresses: vec!["10.0.0.2".parse().unwrap()], gpus: 2 }),
                _ => None,
            })
        }
        fn jobs_on(&self, node: &str) -> Result<BTreeMap<String, SlurmJob>, String> {
            self.job_reads.set(self.job_reads.get() + 1);
            Ok(if node == "gpu01" { self.jobs.clone() } else { BTreeMap::new() })
        }
    }

    fn gate() -> ReportGate {
        let mut config = Config::parse("", std::path::Path::new("/test.toml")).unwrap();
        config.slurm_user = "root".into();
        ReportGate::new(&config).unwrap()
    }

    fn report(node: &str, process_jobs: &[&str], holders: &[&str]) -> AgentReport {
        let mut gpu = GpuSample::empty(0);
        gpu.jobs = holders.iter().map(|j| j.to_string()).collect();
        let processes = process_jobs
            .iter()
            .enumerate()
            .map(|(i, j)| ProcessSample {
                pid: i as u32 + 100,
                gpu_index: 0,
                used_memory_bytes: None,
                sm_utilization_percent: None,
                job_id: Some(j.to_string()),
                mig_uuid: None,
            })
            .collect();
        let sample = NodeSample { time: chrono::Utc::now(), gpus: vec![gpu], processes };
        AgentReport { node: node.into(), sample, interval_secs: None }
    }

    fn slurm() -> FakeSlurm {
        let job = |user: &str, gpus| SlurmJob { user: user.into(), gpus };
        FakeSlurm {
            jobs: [("7".to_string(), job("alice", Some(1))), ("8".to_string(), job("bob", None))].into(),
            job_reads: Cell::new(0),
            node_reads: Cell::new(0),
        }
    }

    const FROM_NODE: Sender =
        Sender::Munge { uid: 0, origin: Some(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1))) };

    fn root_from(addr: &str) -> Sender {
        Sender::Munge { uid: 0, origin: Some(addr.parse().unwrap()) }
    }

    #[test]
    fn a_node_reports_its_own_jobs() {
        let (gate, slurm) = (gate(), slurm());
        gate.authorize(&root_from("10.0.0.1"), &report("gpu01", &["7"], &["8"]), &slurm).unwrap();
        gate.authorize(&FROM_NODE, &report("gpu01", &[], &[]), &slurm).unwrap();
    }

    /// A job named only as a MIG device's holder must run on the node too: else a node could give
    /// another node's job its slice's figures.
    #[test]
    fn a_foreign_job_on_a_mig_device_is_refused() {
        let (gate, slurm) = (gate(), slurm());
        let mut on_slice = report("gpu01", &[], &["7"]);
        on_slice.sample.gpus[0].mig = vec![gputokens_node_report::MigSample {
            uuid: "MIG-a".into(),
            profile: Some("3g.20gb".into()),
            memory_used_bytes: None,
            memory_total_bytes: None,
            sm_utilization_percent: None,
            jobs: vec!["7".into()],
        }];
        gate.authorize(&FROM_NODE, &on_slice, &slurm).unwrap();
        on_slice.sample.gpus[0].mig[0].jobs = vec!["99".into()];
        let r = gate.authorize(&FROM_NODE, &on_slice, &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "job"), "{r:?}");
    }

    #[test]
    fn names_that_are_not_one_known_node_are_refused() {
        let (gate, slurm) = (gate(), slurm());
        for node in ["gpu[01-02]", "gpu01,gpu02", "--all", "", "gpu01 gpu02"] {
            let r = gate.authorize(&FROM_NODE, &report(node, &[], &[]), &slurm).unwrap_err();
            assert_eq!((r.status, r.reason), (400, "node"), "{node:?}: {r:?}");
        }
        let r = gate.authorize(&FROM_NODE, &report("gpu99", &[], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "node"));
        assert!(r.message.contains("no node 'gpu99'"), "{r:?}");
    }

    #[test]
    fn a_credential_whose_origin_cannot_be_checked_is_refused_unless_allowed() {
        let (strict, slurm) = (gate(), slurm());
        let unknown = Sender::Munge { uid: 0, origin: None };
        let r = strict.authorize(&unknown, &report("gpu01", &[], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "address"), "{r:?}");
        assert!(r.message.contains("accept_unchecked_origin"), "{r:?}");
        let mut lenient = gate();
        lenient.accept_unchecked_origin = true;
        lenient.authorize(&unknown, &report("gpu01", &[], &[]), &slurm).unwrap();
    }

    #[test]
    fn a_credential_from_another_address_is_refused() {
        let (gate, slurm) = (gate(), slurm());
        let r = gate.authorize(&root_from("10.0.0.2"), &report("gpu01", &[], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "address"), "{r:?}");
        assert!(r.message.contains("10.0.0.2") && r.message.contains("10.0.0.1"), "{r:?}");
    }

    #[test]
    fn jobs_must_be_plain_ids_of_jobs_on_the_node() {
        let (gate, slurm) = (gate(), slurm());
        let r = gate.authorize(&FROM_NODE, &report("gpu01", &["--user=bob"], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (400, "job"), "{r:?}");
        let r = gate.authorize(&FROM_NODE, &report("gpu01", &[], &["7_1"]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (400, "job"), "{r:?}");
        let r = gate.authorize(&FROM_NODE, &report("gpu01", &["7", "9"], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "job"), "{r:?}");
        assert!(r.message.contains("no job 9 on node 'gpu01'"), "{r:?}");
        // What Slurm shows there is named beside, for the admin who reads the log.
        assert!(r.message.ends_with("(it shows: 7,8)"), "{r:?}");
    }

    #[test]
    fn the_queue_is_read_again_only_for_a_job_not_seen() {
        let (gate, slurm) = (gate(), slurm());
        for _ in 0..5 {
            gate.authorize(&FROM_NODE, &report("gpu01", &["7"], &["8"]), &slurm).unwrap();
        }
        assert_eq!(slurm.job_reads.get(), 1);
        // An unknown job within the refresh interval does not read squeue again (a flood of bad
        // reports costs Slurm nothing).
        for _ in 0..5 {
            gate.authorize(&FROM_NODE, &report("gpu01", &["9"], &[]), &slurm).unwrap_err();
        }
        assert_eq!(slurm.job_reads.get(), 1);
    }

    /// The audit's N1 and N4: a node's root makes up GPUs to charge a job for their energy or to
    /// fill accountd with series. A report speaks for no more GPUs than Slurm shows on its node.
    #[test]
    fn a_report_names_no_more_gpus_than_slurm_shows_on_its_node() {
        let (gate, slurm) = (gate(), slurm());
        let with_gpus = |gpus: Vec<(u32, &str)>| {
            let mut r = report("gpu01", &[], &["7"]);
            r.sample.gpus = gpus
                .into_iter()
                .map(|(index, uuid)| {
                    let mut g = GpuSample::empty(index);
                    g.uuid = Some(uuid.into());
                    g.jobs = vec!["7".into()];
                    g
                })
                .collect();
            r
        };
        let said = gate.authorize(&FROM_NODE, &with_gpus(vec![(0, "GPU-a"), (1, "GPU-b")]), &slurm).unwrap();
        assert_eq!(said.node_gpus, 2);
        assert_eq!(said.jobs["7"], SlurmJob { user: "alice".into(), gpus: Some(1) });
        assert_eq!(said.job_gpus("7"), 1, "alice's job holds one GPU whatever the node says");
        for (gpus, reason) in [
            (vec![(0, "GPU-a"), (1, "GPU-b"), (2, "GPU-c")], "gpus"),
            (vec![(0, "GPU-a"), (5, "GPU-b")], "gpus"),
            (vec![(1, "GPU-a"), (1, "GPU-b")], "malformed"),
            (vec![(0, "GPU-a"), (1, "GPU-a")], "malformed"),
        ] {
            let r = gate.authorize(&FROM_NODE, &with_gpus(gpus.clone()), &slurm).unwrap_err();
            assert_eq!(r.reason, reason, "{gpus:?}: {r:?}");
        }
        let many: Vec<(u32, &str)> = (0..100).map(|i| (i, "GPU-x")).collect();
        let r = gate.authorize(&FROM_NODE, &with_gpus(many), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "gpus"), "{r:?}");
        assert!(r.message.contains("names 100 GPUs: Slurm shows 2 GPUs on node 'gpu01'"), "{r:?}");
        assert!(r.message.contains("[agent] unscheduled_gpus"), "the setting for GPUs Slurm does not schedule: {r:?}");
        // A node with a GPU out of its Gres (one failing, out of gres.conf): the site says so.
        let mut lenient = self::gate();
        lenient.unscheduled_gpus = 1;
        lenient.authorize(&FROM_NODE, &with_gpus(vec![(0, "GPU-a"), (1, "GPU-b"), (2, "GPU-c")]), &slurm).unwrap();
        let r = lenient.authorize(&FROM_NODE, &with_gpus(vec![(0, "GPU-a"), (3, "GPU-b")]), &slurm).unwrap_err();
        assert!(r.message.contains("and [agent] unscheduled_gpus = 1 more"), "{r:?}");
        // bob's job: Slurm does not count its GPUs (no gres/gpu in its TRES): the node's count.
        assert_eq!(Authorized { node_gpus: 2, jobs: [("8".into(), SlurmJob::default())].into() }.job_gpus("8"), 2);
    }

    /// The audit's N4: a node's root (any holder of a root credential) naming made-up nodes, each a
    /// new name, costs Slurm a few commands a minute, not one each; names Slurm does not know take
    /// bounded memory.
    #[test]
    fn a_sender_naming_many_nodes_has_slurm_asked_a_few_times_a_minute() {
        let (gate, slurm) = (gate(), slurm());
        gate.authorize(&FROM_NODE, &report("gpu01", &[], &[]), &slurm).unwrap();
        for i in 0..1000 {
            let r = gate.authorize(&FROM_NODE, &report(&format!("fake{i}"), &[], &[]), &slurm).unwrap_err();
            assert!(matches!((r.status, r.reason), (403, "node") | (429, "node_names")), "{r:?}");
        }
        assert_eq!(slurm.node_reads.get(), NAMES_ASKED_PER_MINUTE as usize, "sinfo calls for 1001 names");
        // Its own name, cached, still goes through; another node from its own address is asked.
        gate.authorize(&FROM_NODE, &report("gpu01", &[], &[]), &slurm).unwrap();
        let other = root_from("10.0.0.2");
        gate.authorize(&other, &report("gpu02", &[], &[]), &slurm).unwrap();
        // From ever new addresses (any root): each unknown name asked once, kept in bounds.
        for i in 0..(NODES_KEPT + 10) {
            let from = std::net::Ipv4Addr::from(0x0a0a_0000 + i as u32).to_string();
            let _ = gate.authorize(&root_from(&from), &report(&format!("n{i}"), &[], &[]), &slurm);
        }
        let nodes = held(&gate.nodes);
        assert!(nodes.entries.len() <= NODES_KEPT && nodes.asked_by.len() <= NODES_KEPT);
    }

    /// The old audit's L4: a node's token never travels; each report is signed with it, for its
    /// body and time, and taken once.
    #[test]
    fn a_signed_report_is_taken_once_for_its_body_within_its_window() {
        use std::os::unix::fs::PermissionsExt;
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), "s3cret\n").unwrap();
        let mut config = Config::parse("", std::path::Path::new("/test.toml")).unwrap();
        config.slurm_user = "root".into();
        config.agent.auth = AgentAuth::Token;
        config.agent.token_file = Some(secret.path().to_path_buf());
        std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let Err(refused) = ReportGate::new(&config) else { panic!("a secret every user can read was taken") };
        assert!(refused.contains("readable by it alone (mode 0600; it is 644"), "{refused}");
        std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let gate = ReportGate::new(&config).unwrap();

        // Reports signed after this accountd started, whatever the day the test runs.
        let now = gate.started + 60;
        let token = auth::node_token("s3cret", "gpu01");
        let body = br#"{"node":"gpu01"}"#;
        let header = auth::signed_authorization(&token, "gpu01", now, body);
        let Presented::Signed { node, at, sig } = Presented::parse(Some(header.as_bytes())) else { panic!("{header}") };
        assert_eq!((node, at), ("gpu01", now));
        assert_eq!(gate.check_signed(node, at, sig, body, now + 2), Ok(()));
        let again = gate.check_signed(node, at, sig, body, now + 3).unwrap_err();
        assert_eq!((again.status, again.reason), (401, "replayed"));
        let changed = gate.check_signed(node, at, sig, br#"{"node":"gpu01","x":1}"#, now).unwrap_err();
        assert_eq!(changed.reason, "bad_token");
        let other_node = gate.check_signed("gpu02", at, sig, body, now).unwrap_err();
        assert_eq!(other_node.reason, "bad_token", "gpu01's signature does not speak for gpu02");
        let late = auth::signed_authorization(&token, "gpu01", now - 301, body);
        let Presented::Signed { node, at, sig } = Presented::parse(Some(late.as_bytes())) else { panic!() };
        let old = gate.check_signed(node, at, sig, body, now).unwrap_err();
        assert_eq!(old.reason, "expired");
        assert!(old.message.contains("signed 301s behind accountd's clock"), "{}", old.message);
        // The token itself, as agents before sent it, is refused before the body is read.
        let bearer = gate.expects(Presented::Bearer(&token)).unwrap_err();
        assert_eq!((bearer.status, bearer.reason), (401, "unsigned_token"));
        let (head, first_sig) = header.split_once("sig=").unwrap();
        let upper = format!("{head}sig={}", first_sig.to_uppercase());
        let plus = header.replace("sig=", "sig=+");
        for malformed in [
            "GPUTOKENS-HMAC node=gpu01 at=x sig=ab",
            "GPUTOKENS-HMAC node=gpu01 node=gpu02 at=1 sig=ab",
            upper.as_str(),
            plus.as_str(),
        ] {
            assert_eq!(Presented::parse(Some(malformed.as_bytes())), Presented::Unknown, "{malformed}");
        }
        // Signed before this accountd started (a report captured before a restart).
        let before = auth::signed_authorization(&token, "gpu01", gate.started - 1, body);
        let Presented::Signed { node, at, sig } = Presented::parse(Some(before.as_bytes())) else { panic!() };
        assert_eq!(gate.check_signed(node, at, sig, body, gate.started).unwrap_err().reason, "replayed");
        let extreme = auth::signed_authorization(&token, "gpu01", i64::MIN, body);
        let Presented::Signed { node, at, sig } = Presented::parse(Some(extreme.as_bytes())) else { panic!() };
        assert_eq!(gate.check_signed(node, at, sig, body, now).unwrap_err().reason, "expired", "no overflow");
    }

    #[test]
    fn a_token_speaks_for_its_node_only() {
        let (gate, slurm) = (gate(), slurm());
        let sender = Sender::Token { node: "gpu02".into() };
        let r = gate.authorize(&sender, &report("gpu01", &[], &[]), &slurm).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "node"));
    }

    #[test]
    fn only_root_and_the_slurm_user_may_report() {
        let gate = gate();
        let body = br#"{"node":"gpu01"}"#;
        let cred =
            |uid: u32, payload: Vec<u8>| munge::Credential { uid, gid: uid, origin: None, encoded_at: 0, payload };
        assert_eq!(
            gate.check_munge(cred(0, auth::report_payload(body)), body),
            Ok(Sender::Munge { uid: 0, origin: None })
        );
        let r = gate.check_munge(cred(1001, auth::report_payload(body)), body).unwrap_err();
        assert_eq!((r.status, r.reason), (403, "uid"));
        let r = gate.check_munge(cred(0, auth::report_payload(b"another")), body).unwrap_err();
        assert_eq!((r.status, r.reason), (401, "bad_credential"));
        let r = gate.check_munge(cred(0, Vec::new()), body).unwrap_err();
        assert_eq!(r.reason, "bad_credential");
    }

    #[test]
    fn refusals_are_logged_once_per_node_and_reason() {
        let gate = gate();
        let r = Refusal::new(403, "job", "x");
        assert!(gate.log_refusal("gpu01", &r));
        assert!(!gate.log_refusal("gpu01", &r));
        assert!(gate.log_refusal("gpu02", &r));
        gate.accepted("gpu01");
        assert!(gate.log_refusal("gpu01", &r));
    }

    #[test]
    fn what_refused_senders_claim_takes_bounded_memory_and_log() {
        let gate = gate();
        let r = Refusal::new(400, "node", "x");
        for i in 0..5 * LOGGED_REFUSALS {
            gate.log_refusal(&format!("{i}{}", "n".repeat(100_000)), &r);
        }
        let logged = held(&gate.logged);
        assert!(logged.len() <= LOGGED_REFUSALS);
        let most = 4 * gputokens::free_text::CLAIM_SHOWN + 3;
        assert!(logged.iter().all(|(from, _)| from.len() <= most), "names are cut");
    }

    #[test]
    fn no_credential_is_refused_before_the_body_is_read() {
        let gate = gate();
        for presented in [Presented::None, Presented::Unknown, Presented::Bearer("x")] {
            let r = gate.authenticate(presented, b"{not json", |_| panic!("the body was parsed")).unwrap_err();
            assert_eq!((r.status, r.reason), (401, "unauthenticated"), "{presented:?}");
        }
    }
}
