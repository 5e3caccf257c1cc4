//! The submit decision, for `job_submit` and for `job_modify`, on a typed [`JobRequest`]: which rules
//! apply, in which order, and what slurmctld is told ([`Verdict`]). The job_submit plugin converts
//! Slurm's job description into the request, hands over what it knows ([`Inputs`]: its settings,
//! the published balances, what it admitted since the last queue read) and applies the verdict. The
//! rules themselves, each with the message that tells the user why, are in `rules`. No I/O here.
//!
//! A submission and an update run one skeleton (`decide`), each step done the way `Steps` says
//! for that kind: which jobs are checked at all (CPU-only jobs, exempt users, accounts and QOS,
//! administrators' updates are not), `max_job_duration`, `on_error` while the balances are
//! unavailable, the floor, `max_gpus_per_user` and the estimate (`mode = "estimate"`), the overdraft
//! penalty, and what `--gpu-tokens-estimate` asked to be told. See `submit.rs` and `modify.rs`.

pub mod codes;
mod lending;
#[cfg(test)]
mod lending_tests;
mod modify;
#[cfg(test)]
mod pool_decisions;
pub mod pool_rules;
mod quote;
pub mod rules;
pub mod shadow;
mod submit;

#[cfg(test)]
mod fixtures;

use std::collections::HashMap;
use std::time::Duration;

use chrono::NaiveDate;

use crate::config::admission::{Deprioritize, OnError, MAX_NICE};
use crate::config::{Admission, Exempt, JobIdentity};
use crate::estimate::{Commitment, PendingJob};
use crate::gpu_request::GpuRequest;
use crate::job_request::JobRequest;
use crate::policy::BucketRules;
use crate::policy::Status;
use crate::pools::{self, payers, PoolMode, PoolStanding};
use crate::snapshot::Snapshot;
use crate::tokens::Tokens;
use crate::tres::MILLI;
use codes::{seconds_until_replenished, Code, Tail};
use rules::{Decision, JobEstimate};

pub use modify::decide_modify;
pub use submit::decide_submit;

/// How a line the decision logs shows in slurmctld's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    /// Shown with `SlurmctldDebug=verbose` or higher.
    Verbose,
}

/// Where the decision's log lines go.
pub type Log<'a> = dyn FnMut(Level, String) + 'a;

/// Changes made to an accepted job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The job's new nice value, signed (within ±`MAX_NICE`).
    pub nice: Option<i32>,
    /// The job's site factor, signed (within ±`MAX_NICE`).
    pub site_factor: Option<i32>,
    pub qos: Option<String>,
    /// A finite time limit in minutes (`u32::MAX` for one longer than that).
    pub time_limit: Option<u32>,
    /// Make the job requeueable (a borrowed run is requeued when a user in credit needs its GPUs).
    pub requeue: bool,
}

/// What slurmctld is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept with `changes`, telling the submitter `message` if any.
    Accept { changes: Changes, message: Option<String> },
    /// Refuse (by accounting policy) with a message for the submitter.
    Reject { message: String },
}

impl Verdict {
    /// Accept untouched, saying nothing.
    pub fn accept() -> Verdict {
        Verdict::Accept { changes: Changes::default(), message: None }
    }
}

/// A submission's or an update's verdict, and what the admitted GPU job (or the accepted update) adds
/// to its owner's commitments until the next snapshot's queue includes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    /// (owner's uid, what the job adds)
    pub admitted: Option<(u32, Commitment)>,
    /// The account whose pool pays for the admitted job: it adds to the pool's commitments too.
    pub pool: Option<String>,
}

impl Outcome {
    fn pass() -> Outcome {
        Outcome::of(Verdict::accept())
    }

    fn of(verdict: Verdict) -> Outcome {
        Outcome { verdict, admitted: None, pool: None }
    }
}

/// The published balances as a decision reads them: the snapshot, and the uids of the user names it
/// mentions (the plugin's watcher maps them; the decision does no name-service lookups).
#[derive(Debug, Clone, Copy)]
pub struct Standing<'a> {
    pub snapshot: &'a Snapshot,
    /// uid → user name.
    pub names: &'a HashMap<u32, String>,
    /// Some of the snapshot's names could not be looked up (a directory server failing): a uid
    /// not among `names` may be one of theirs, so its balance is not known to be `initial`.
    pub lookups_failed: bool,
}

impl<'a> Standing<'a> {
    pub fn user_name(&self, uid: u32) -> Option<&'a str> {
        self.names.get(&uid).map(String::as_str)
    }

    /// Whether this uid's balance is known: it has a name, or every name was looked up (a uid none
    /// of them has is a user the snapshot does not list, at `initial`).
    pub fn knows(&self, uid: u32) -> bool {
        !self.lookups_failed || self.names.contains_key(&uid)
    }

    /// The user's balance: a uid not in the snapshot stands at `initial`.
    pub fn balance(&self, uid: u32) -> Tokens {
        match self.user_name(uid) {
            Some(name) => self.snapshot.balance(name),
            None => self.snapshot.rules.initial,
        }
    }

    /// What the user's running and pending GPU jobs held and could cost when squeue was read.
    pub fn committed(&self, uid: u32) -> Commitment {
        let queue = self.snapshot.queue.as_ref();
        self.user_name(uid).and_then(|n| queue?.committed.get(n)).copied().unwrap_or_default()
    }

    /// What the running and pending GPU jobs the pool of `account` pays for held and could cost
    /// when squeue was read, whoever's they are; None when the snapshot does not say (an accountd
    /// from before it lists every pool's).
    pub fn pool_committed(&self, account: &str) -> Option<Commitment> {
        self.snapshot.queue.as_ref()?.pool_committed.get(account).copied()
    }

    /// A job that was pending when squeue was read; None for any other (e.g. submitted since).
    pub fn pending_job(&self, job_id: u32) -> Option<&'a PendingJob> {
        self.snapshot.queue.as_ref()?.pending.get(&job_id)
    }

    /// The user's default account in slurmdbd.
    pub fn default_account(&self, uid: u32) -> Option<&'a str> {
        self.user_name(uid).and_then(|n| self.snapshot.default_accounts.get(n)).map(String::as_str)
    }

    /// The account a job of `uid` that names `account` (-A) runs under: that one where the user has
    /// an association with it (or the snapshot lists none of the user's), else their default
    /// account (None: unknown), which slurmctld without `AccountingStorageEnforce=associations`
    /// quietly runs it under (and with it refuses the job anyway).
    pub fn account_run_under<'j>(&self, uid: u32, account: &'j str) -> Option<&'j str>
    where
        'a: 'j,
    {
        let listed = self.user_name(uid).and_then(|n| self.snapshot.user_accounts.get(n));
        match listed {
            Some(accounts) if !accounts.iter().any(|a| a == account) => self.default_account(uid),
            _ => Some(account),
        }
    }

    /// Seconds since accountd wrote the snapshot.
    pub fn age(&self, now: i64) -> i64 {
        now - self.snapshot.generated
    }

    /// These balances when they are fresh enough to decide from (`max_snapshot_age`; None = never stale).
    pub fn fresh(self, now: i64, max_age: Option<Duration>) -> Option<Standing<'a>> {
        max_age.is_none_or(|max| self.age(now) <= max.as_secs() as i64).then_some(self)
    }
}

/// What a decision reads besides the job: plain data from the plugin's live state.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub config: &'a Admission,
    /// `[exempt]`: users, accounts and QOS whose jobs are not checked.
    pub exempt: &'a Exempt,
    /// The balances when usable; None when missing, unreadable, corrupt or stale (`on_error` decides).
    pub standing: Option<Standing<'a>>,
    /// The last snapshot read, however old: who users are and which accounts they belong to do not
    /// go stale the way balances do, so exemptions hold while accountd is down.
    pub identity: Option<Standing<'a>>,
    /// uid → name of the `[exempt]` users, looked up by the plugin whether or not there is a
    /// snapshot: their jobs pass when it is missing too.
    pub exempt_names: &'a HashMap<u32, String>,
    /// The local date (for "about N days").
    pub today: NaiveDate,
    /// Unix seconds now (for `retry_after`).
    pub now: i64,
    /// accountd's check interval in seconds: how soon a new day's replenishment, or a job just
    /// submitted, is in the snapshot.
    pub check_interval: u64,
    /// Who asks (slurmctld's `submit_uid`).
    pub submit_uid: u32,
    /// slurmctld's own uid (the SlurmUser): its updates, like root's, are an administrator's.
    pub slurm_uid: u32,
    /// What the plugin admitted for a uid since the snapshot's queue was read.
    pub admitted_since: &'a dyn Fn(u32) -> Commitment,
    /// What the plugin admitted since the queue was read for the pool of an account to pay.
    pub admitted_to_pool: &'a dyn Fn(&str) -> Commitment,
    /// `[lending]`: a job of a payer in debt runs as a borrowed run of idle GPUs.
    pub lending: crate::config::Lending,
}

/// The job's owner as the rules see them.
struct Owner {
    uid: u32,
    /// `alice (uid 1001)`, or `uid 1001` when the name is not known, for the log.
    who: String,
    exempt: bool,
}

impl Owner {
    /// The owner is the request's `user_id`, else (as in most updates) the submitter.
    fn of(job: &JobRequest, inputs: &Inputs) -> Owner {
        let uid = job.user_id.unwrap_or(inputs.submit_uid);
        let identity = inputs.identity;
        let name =
            identity.and_then(|s| s.user_name(uid)).or_else(|| inputs.exempt_names.get(&uid).map(String::as_str));
        let who = name.map_or(format!("uid {uid}"), |n| format!("{n} (uid {uid})"));
        let exempt = inputs.exempt.covers(&JobIdentity {
            user: name,
            // `-A ops` of a user not in ops runs under (and is exempt as) their default account;
            // with no snapshot ever read, membership is unknown and `-A` exempts nothing.
            account: job.account.as_deref().and_then(|a| identity?.account_run_under(uid, a)),
            default_account: identity.and_then(|s| s.default_account(uid)),
            qos: job.qos.as_deref(),
        });
        Owner { uid, who, exempt }
    }
}

/// The GPU request when the job asks for GPUs. A GPU entry that cannot be read counts as a request
/// of nothing countable (Slurm will judge the syntax; the balance rule must not be skipped because
/// of it).
fn gpu_request(job: &JobRequest, log: &mut Log) -> Option<GpuRequest> {
    match job.gpus() {
        Ok(request) => request.has_gpus().then_some(request),
        Err(e) => {
            log(Level::Verbose, format!("{e}; treated as a GPU job"));
            Some(GpuRequest::default())
        }
    }
}

/// A job being judged: the request, its owner and what the decision reads.
struct Case<'j, 'a> {
    job: &'j JobRequest,
    inputs: &'j Inputs<'a>,
    owner: Owner,
}

/// The balance that pays for the job (the owner's own, or with pools the pool of the job's account)
/// and what its rules make of it, once the balances are known usable.
struct Account<'a> {
    standing: Standing<'a>,
    balance: Tokens,
    rules: BucketRules,
    decision: Decision,
    /// The account whose pool pays, if one does.
    pool: Option<&'a str>,
    /// Mode "both": the other balance that pays too (the user's own or the pool), whose estimate
    /// must hold as well.
    other: Option<Box<Account<'a>>>,
    /// The job's own pool and the pools it draws on, other than this one: their floors, limits and
    /// estimates hold too.
    chain: Vec<Account<'a>>,
    /// The account whose pool pays for the job itself (its own, not one it draws on): what the
    /// plugin tallies the job against.
    payer: Option<&'a str>,
    /// A dated sub-allocation outside its window: the tail of its refusal.
    closed: Option<Tail>,
    /// A pool whose parent lends to it: its own floor does not hold, in the estimate either.
    lent: bool,
    /// `[lending]`: the job runs as a borrowed run (set by `lending::lend`).
    borrowed: bool,
}

impl<'a> Account<'a> {
    /// The balance that pays for the job. Its account is the job's -A (an update's account=), else
    /// that of the job being updated as the last queue read showed it, else the user's default
    /// (Slurm's for a job without -A). An update of a job that read did not show (submitted since)
    /// may be in any of the user's accounts: the worst of their decisions applies.
    fn of(standing: Standing<'a>, case: &Case) -> Account<'a> {
        let snapshot = standing.snapshot;
        let default = standing.default_account(case.owner.uid);
        let named = case.job.account.as_deref().and_then(|a| standing.account_run_under(case.owner.uid, a));
        let queued = case.job.job_id.and_then(|id| snapshot.queue.as_ref()?.job_accounts.get(&id)).map(String::as_str);
        let unknown_update = named.is_none() && queued.is_none() && case.job.job_id.is_some();
        if !unknown_update || snapshot.pool_mode == PoolMode::User {
            return Account::paying(standing, case, named.or(queued).or(default));
        }
        let user = standing.user_name(case.owner.uid);
        let accounts = user.and_then(|u| snapshot.user_accounts.get(u)).into_iter().flatten().map(String::as_str);
        let mut worst = Account::paying(standing, case, default);
        for account in accounts {
            let other = Account::paying(standing, case, Some(account));
            if pool_rules::is_worse(&other.decision, &worst.decision) {
                worst = other;
            }
        }
        worst
    }

    /// Who pays for a job of `account`, and what their rules make of it.
    fn paying(standing: Standing<'a>, case: &Case, account: Option<&str>) -> Account<'a> {
        let uid = case.owner.uid;
        let snapshot = standing.snapshot;
        let (today, how) = (case.inputs.today, &case.inputs.config.deprioritize);
        let contact = case.inputs.config.contact.as_deref();
        let case_now = case.inputs.now;
        // The user's own bucket, decided only where it pays: a user in debt gets a worded
        // message, which a job their pool alone pays for does not need.
        let own = || {
            let balance = standing.balance(uid);
            let decision =
                rules::with_borrowing(rules::decide(balance, &snapshot.rules, today, how, contact), snapshot);
            Account {
                standing,
                balance,
                rules: snapshot.rules,
                decision,
                pool: None,
                other: None,
                chain: Vec::new(),
                payer: None,
                closed: None,
                lent: false,
                borrowed: false,
            }
        };
        let payers = payers(snapshot.pool_mode, account, |a| snapshot.pools.contains_key(a));
        let Some((name, pool)) = payers.pool.and_then(|a| snapshot.pools.get_key_value(a)) else { return own() };
        let user = standing.user_name(uid);
        let of = |account: &'a str, pool: &'a PoolStanding, lent: bool| {
            let drawn_by = (account != name.as_str()).then_some(name.as_str());
            let now = case_now;
            let case = pool_rules::PoolCase { account, pool, user, snapshot, today, contact, drawn_by, now };
            let decision = if lent { case.decide_lent() } else { case.decide(how) };
            let payer = Some(name.as_str());
            let closed = case.closed().map(|c| {
                let opens_in = c.opens_in.map(|s| s.max(codes::UNAVAILABLE_RETRY));
                Tail::any_type_after(Code::AllocationClosed, opens_in)
            });
            Account {
                standing,
                balance: pool.balance,
                rules: pool.rules,
                decision,
                pool: Some(account),
                other: None,
                chain: Vec::new(),
                payer,
                closed,
                lent,
                borrowed: false,
            }
        };
        // The pools it draws on decide too, and the worst rules. A parent that lends and is above
        // its floor lets its child's jobs run below the child's own floor.
        let above: Vec<(&'a String, &'a PoolStanding)> =
            pools::ancestors(name, |a| snapshot.pools.get(a)?.parent.as_deref())
                .into_iter()
                .filter_map(|a| snapshot.pools.get_key_value(a))
                .collect();
        let lent = above
            .first()
            .is_some_and(|(_, parent)| parent.lends && parent.rules.status(parent.balance) != Status::Blocked);
        let mut chain: Vec<Account<'a>> =
            std::iter::once(of(name, pool, lent)).chain(above.iter().map(|(a, p)| of(a, p, false))).collect();
        let mut worst = 0;
        for (i, account) in chain.iter().enumerate() {
            if pool_rules::is_worse(&account.decision, &chain[worst].decision) {
                worst = i;
            }
        }
        let mut of_pool = chain.remove(worst);
        of_pool.chain = chain;
        if !payers.user {
            return of_pool;
        }
        // Mode "both": the user's own bucket must have tokens too; the worse decides, the pool on a tie.
        let own = own();
        if pool_rules::is_worse(&own.decision, &of_pool.decision) {
            Account { other: Some(Box::new(of_pool)), ..own }
        } else {
            Account { other: Some(Box::new(own)), ..of_pool }
        }
    }

    /// When replenishment alone ends what its decision is about (above the floor when refused,
    /// at 0 when deprioritized), in seconds from now; None when it never does.
    fn retry_after(&self, case: &Case) -> Option<u64> {
        let inputs = case.inputs;
        let day = self.rules.recovers_on(self.replenished_through(case), self.balance)?;
        Some(seconds_until_replenished(day, inputs.now, codes::replenished_within(inputs.check_interval)))
    }

    /// The last day whose replenishment the balances hold: the snapshot's (written before today's
    /// first cycle, it lacks today's grant), never after today.
    fn replenished_through(&self, case: &Case) -> NaiveDate {
        let written = crate::time::local_date(self.standing.snapshot.generated);
        written.min(case.inputs.today)
    }

    /// Why its decision refuses the job: its floor (the user's or the pool's), or the member's
    /// limit in the pool (`PoolLimit`: it begins again on the 1st of next month), and when that
    /// ends.
    fn refusal_tail(&self, case: &Case) -> Tail {
        let tail = self.own_refusal_tail(case);
        // Mode "both": where the other balance refuses too, the job passes once both recovered.
        match &self.other {
            Some(other) if matches!(other.decision, Decision::Reject { .. }) => {
                tail.waiting_also_for(&other.own_refusal_tail(case))
            }
            _ => tail,
        }
    }

    /// [`Account::refusal_tail`] of this balance alone.
    fn own_refusal_tail(&self, case: &Case) -> Tail {
        if let Some(tail) = &self.closed {
            return tail.clone();
        }
        match self.pool {
            Some(_) if self.balance > self.rules.floor => {
                let next_month = pool_rules::first_of_next_month(case.inputs.today);
                let within = codes::replenished_within(case.inputs.check_interval);
                let seconds = seconds_until_replenished(next_month, case.inputs.now, within);
                Tail::any_type_after(Code::PoolLimit, Some(seconds))
            }
            Some(_) => Tail::any_type_after(Code::PoolFloor, self.retry_after(case)),
            None => Tail::any_type_after(Code::Floor, self.retry_after(case)),
        }
    }

    /// What the owner's GPU jobs hold, and what the jobs this balance pays for can cost: the last
    /// queue read and what was admitted since. A pool's members all draw on its one balance, so
    /// with a pool paying the cost is that of every member's jobs it pays for (the audit's L5).
    fn held(&self, case: &Case) -> Commitment {
        let mut held = self.standing.committed(case.owner.uid);
        held += (case.inputs.admitted_since)(case.owner.uid);
        if let Some(pool) = self.pool {
            let admitted = (case.inputs.admitted_to_pool)(pool).max_cost;
            held.max_cost = match self.standing.pool_committed(pool) {
                Some(read) => read.max_cost + admitted,
                // An accountd from before pool commitments: the owner's own, at least.
                None => held.max_cost.max(admitted),
            };
        }
        held
    }
}

/// A refusal: the message for the submitter, the reason slurmctld's log gives (None: not logged,
/// e.g. unavailable balances, which the watcher logs when it begins), and its code and
/// `retry_after` for programs (`codes`), put after the message.
struct Refusal {
    reason: Option<String>,
    message: String,
    tail: Tail,
}

impl Refusal {
    fn logged(reason: impl Into<String>, message: String, tail: Tail) -> Refusal {
        Refusal { reason: Some(reason.into()), message, tail }
    }

    fn silent(message: String, tail: Tail) -> Refusal {
        Refusal { reason: None, message, tail }
    }
}

/// An accepted job's changes and messages, gathered step by step.
#[derive(Default)]
struct Draft {
    changes: Changes,
    messages: Vec<String>,
}

impl Draft {
    fn verdict(self) -> Verdict {
        let message = (!self.messages.is_empty()).then(|| self.messages.join("\n"));
        Verdict::Accept { changes: self.changes, message }
    }
}

/// One kind of decision: what each step of `decide` does for it. Steps run in the order declared.
trait Steps {
    /// What the log says was refused: `a GPU job of alice (uid 1001)`.
    fn subject(&self, case: &Case) -> String;

    /// `max_job_duration`.
    fn check_time(&mut self, case: &Case, draft: &mut Draft) -> Result<(), Refusal>;

    /// The balances are unavailable: `on_error` decides.
    fn check_unavailable(&self, on_error: OnError) -> Result<(), Refusal>;

    /// The floor (and what overdraft keeps).
    fn check_balance(&self, case: &Case, account: &Account) -> Result<(), Refusal>;

    /// `max_gpus_per_user` and the estimate; Ok: what the accepted job adds to its owner's commitments.
    fn check_limits(&mut self, case: &Case, account: &Account) -> Result<Option<Commitment>, Refusal>;

    /// In overdraft: the penalty `how`, and the `message` telling the user.
    fn deprioritize(
        &self,
        case: &Case,
        account: &Account,
        how: &Deprioritize,
        message: &str,
        draft: &mut Draft,
        log: &mut Log,
    );

    /// What the submitter asked to be told, last.
    fn note(&self, account: &Account) -> Option<String>;
}

/// The skeleton both decisions run: `screened` is None when the job is not checked at all, else its
/// owner and the steps for its kind.
fn decide<S: Steps>(screened: Option<(Owner, S)>, job: &JobRequest, inputs: &Inputs, log: &mut Log) -> Outcome {
    let Some((owner, mut steps)) = screened else { return Outcome::pass() };
    let case = Case { job, inputs, owner };
    match judge(&mut steps, &case, log) {
        Ok(outcome) => outcome,
        Err(Refusal { reason, message, tail }) => {
            if let Some(reason) = reason {
                log(Level::Info, format!("refused {}: {reason}", steps.subject(&case)));
            }
            Outcome::of(Verdict::Reject { message: tail.appended_to(&message) })
        }
    }
}

fn judge<S: Steps>(steps: &mut S, case: &Case, log: &mut Log) -> Result<Outcome, Refusal> {
    let mut draft = Draft::default();
    steps.check_time(case, &mut draft)?;
    // A uid whose name lookup may have failed is judged as if the balances were unavailable
    // (`on_error`), never as a new user at `initial` (the old audit's finding).
    let Some(standing) = case.inputs.standing.filter(|s| s.knows(case.owner.uid)) else {
        steps.check_unavailable(case.inputs.config.on_error)?;
        return Ok(Outcome::of(draft.verdict()));
    };
    let mut account = Account::of(standing, case);
    // A borrowed run uses GPUs no one in credit waits for and gives them back when one does: the
    // estimate does not hold it back (its payer is in debt already); max_gpus_per_user does, and
    // it is tallied like any job, since it may start as an ordinary run once its payer recovers.
    let refusal = account.refusal_tail(case).code;
    let at_floor = account.closed.is_none() && matches!(refusal, Code::Floor | Code::PoolFloor);
    let payer = account.pool.map_or("your balance".to_string(), |pool| format!("account {pool}"));
    let how = &case.inputs.config.deprioritize;
    match lending::lend(&account.decision, case.inputs.lending, case.job.batch, (at_floor, &payer), how) {
        lending::Lent::No => {}
        lending::Lent::Borrowed(decision) => (account.decision, account.borrowed) = (decision, true),
        lending::Lent::Refused(message) => {
            let why = "an interactive GPU job of a payer in debt (lending)";
            return Err(Refusal::logged(why, message, Tail::of(Code::Borrowed)));
        }
    }
    draft.changes.requeue = account.borrowed;
    steps.check_balance(case, &account)?;
    let admitted = steps.check_limits(case, &account)?;
    if let Decision::AcceptDeprioritized { how, message } = &account.decision {
        let tail = Tail::any_type_after(Code::Overdraft, account.retry_after(case));
        steps.deprioritize(case, &account, how, &tail.appended_to(message), &mut draft, log);
    }
    draft.messages.extend(steps.note(&account));
    // Tallied against the pool that pays, also where (mode "both") the user's decision ruled.
    let pool = admitted.and(account.payer.or(account.other.as_ref().and_then(|o| o.payer))).map(str::to_string);
    Ok(Outcome { verdict: draft.verdict(), admitted: admitted.map(|grown| (case.owner.uid, grown)), pool })
}

/// `max_gpus_per_user`: `held` milli-GPUs in the owner's jobs, `asked` by this one.
fn within_gpu_limit(max: u32, held: u64, asked: u64) -> Result<(), Refusal> {
    if held.saturating_add(asked) > max as u64 * MILLI {
        return Err(Refusal::logged(
            format!("above max_gpus_per_user ({max})"),
            rules::gpu_limit_message(max, held, asked),
            Tail::of(Code::GpuLimit),
        ));
    }
    Ok(())
}

/// The estimate: the job's maximum cost with what the owner's jobs can still cost (`held`) must not
/// take the balance below the floor.
/// The estimate rule for the balance that pays and, in mode "both", the other that pays too (its
/// own commitments: `held_by_other`).
fn within_estimates(
    case: &Case,
    account: &Account,
    held: Tokens,
    estimate: &JobEstimate,
    held_by_other: impl Fn(&Account) -> Tokens,
) -> Result<(), Refusal> {
    within_estimate(case, account, held, estimate)?;
    // The pools the job's pool draws on (and it, where one of them ruled) hold every job below them.
    for drawn in &account.chain {
        within_estimate(case, drawn, drawn.held(case).max_cost, estimate)?;
    }
    let Some(other) = &account.other else { return Ok(()) };
    within_estimate(case, other, held_by_other(other), estimate)?;
    for drawn in &other.chain {
        within_estimate(case, drawn, drawn.held(case).max_cost, estimate)?;
    }
    Ok(())
}

fn within_estimate(case: &Case, account: &Account, held: Tokens, estimate: &JobEstimate) -> Result<(), Refusal> {
    if account.lent {
        return Ok(());
    }
    match rules::check_estimate(account.balance, held, estimate, &account.rules, account.pool) {
        Some(message) => Err(Refusal::logged(
            format!("its maximum cost {} would take {} below the floor", estimate.cost, account.balance),
            message,
            Tail { code: Code::Estimate, retry_after: estimate_retry(case, account, held, estimate) },
        )),
        None => Ok(()),
    }
}

/// When the same job would pass the estimate on each priced GPU type, by replenishment alone (0:
/// that type passes now); types it never would on are left out.
fn estimate_retry(case: &Case, account: &Account, held: Tokens, estimate: &JobEstimate) -> Vec<(String, u64)> {
    let prices = &account.standing.snapshot.prices;
    let floor = account.rules.floor;
    let within = codes::replenished_within(case.inputs.check_interval);
    let from = account.replenished_through(case);
    // Every priced type, and the job's own (a MIG slice or a type without a line of its own).
    let asked = estimate.gpus.keys().flatten().map(String::as_str);
    let types: std::collections::BTreeSet<&str> = prices.listed_types().chain(asked).collect();
    let mut out = Vec::new();
    for gpu_type in types {
        let Some(cost) = estimate.cost_on(gpu_type, prices) else { continue };
        let passes = |balance: Tokens| rules::stays_above_floor(balance, held, cost, floor);
        let seconds = match passes(account.balance) {
            true => Some(0),
            false => account
                .rules
                .day_reaching(from, account.balance, passes)
                .map(|day| seconds_until_replenished(day, case.inputs.now, within)),
        };
        out.extend(seconds.map(|s| (gpu_type.to_string(), s)));
    }
    out
}

/// The tail of a refusal while the balances cannot be read: try again in a minute.
fn unavailable_tail() -> Tail {
    Tail::any_type_after(Code::Unavailable, Some(codes::UNAVAILABLE_RETRY))
}

/// The refusal of a request too large to count.
fn uncountable(message: String) -> Refusal {
    Refusal::logged("its request is more than can be counted", message, Tail::of(Code::TooLarge))
}

/// The nice value after adding `increment` to what the job asked for (not given = 0), within
/// Slurm's range.
pub fn raised_nice(nice: Option<i32>, increment: u32) -> i32 {
    let wanted = nice.unwrap_or(0) as i64 + increment as i64;
    wanted.clamp(-(MAX_NICE as i64), MAX_NICE as i64) as i32
}

/// A configured site factor within Slurm's range.
pub fn site_factor(factor: i64) -> i32 {
    factor.clamp(-(MAX_NICE as i64), MAX_NICE as i64) as i32
}

/// `seconds` as a time limit in minutes.
pub fn limit_minutes(seconds: u64) -> u32 {
    u32::try_from(seconds / 60).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::fixtures::{world, NOW};
    use super::*;

    #[test]
    fn nice_and_site_factor_arithmetic() {
        assert_eq!(raised_nice(None, 10_000), 10_000);
        assert_eq!(raised_nice(Some(0), 0), 0);
        assert_eq!(raised_nice(Some(-100), 50), -50, "a negative nice (operators) is kept");
        assert_eq!(raised_nice(Some(MAX_NICE as i32 - 1), 10), MAX_NICE as i32, "capped");
        assert_eq!(raised_nice(Some(i32::MIN), 0), -(MAX_NICE as i32), "within Slurm's range");
        assert_eq!(site_factor(-10_000), -10_000);
        assert_eq!(site_factor(i64::MIN), -(MAX_NICE as i32));
    }

    #[test]
    fn limits_in_minutes_never_wrap() {
        assert_eq!(limit_minutes(u64::MAX), u32::MAX, "a huge max_job_duration never wraps to a short limit");
        assert_eq!(limit_minutes(7200), 120);
    }

    #[test]
    fn balances_older_than_max_snapshot_age_are_not_used() {
        let w = world();
        let hours = |h: u64| Some(Duration::from_secs(h * 3600));
        assert!(w.standing().fresh(NOW, hours(1)).is_some());
        assert!(w.standing().fresh(NOW + 3590, hours(1)).is_some(), "written 10 s before NOW");
        assert!(w.standing().fresh(NOW + 3600, hours(1)).is_none());
        assert!(w.standing().fresh(NOW + 1_000_000, None).is_some(), "never stale");
    }

    #[test]
    fn what_the_standing_says_of_a_user() {
        let w = world();
        let s = w.standing();
        assert_eq!(s.balance(1002), Tokens::whole(50));
        assert_eq!(s.balance(4242), Tokens::whole(100), "not mapped: initial");
        assert_eq!(s.default_account(1002), Some("physics"));
        assert_eq!(s.committed(1002).milli_gpus, 2000);
        assert_eq!(s.committed(1001), Commitment::default());
    }
}
