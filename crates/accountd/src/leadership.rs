//! Which accountd of a pair on one MariaDB ledger leads: it runs the cycles and writes the
//! snapshot, while both answer users, admins and agents from the database. A keeper thread with a
//! connection of its own renews the lease ([`ledger::Lease`]) every [`RENEW`]; when it lapses (its
//! holder's host lost, cut off or stopped) the other takes it. The leader also writes the snapshot
//! again when a balance changed through the other accountd. On a SQLite ledger this accountd
//! always leads and nothing runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{AccountdError, AccountdResult};
use crate::metrics::HolderLabels;
use crate::resources::Resources;
use crate::snapshot::publisher::Publisher;

/// How often the lease is renewed (and the other's changes looked for).
pub const RENEW: Duration = Duration::from_secs(2);
/// How long a lease runs unrenewed: the other accountd leads within this and one [`RENEW`].
pub const TTL: Duration = Duration::from_secs(10);

/// Cheap to clone: every clone is the same leadership.
#[derive(Clone)]
pub struct Leadership {
    me: Arc<str>,
    leading: Arc<AtomicBool>,
    /// Until when (ms after `epoch`) the lease last read runs, less a margin: a renewal that hangs
    /// (the database unreachable) ends this accountd's leading before the other's begins.
    until_ms: Arc<AtomicU64>,
    epoch: std::time::Instant,
    /// Wakes the keeper to give the lease up and end; its thread, to wait for that.
    stop: Arc<Mutex<Option<Keeper>>>,
}

/// The keeper's wake-up line and its thread.
type Keeper = (Sender<()>, std::thread::JoinHandle<()>);

impl Leadership {
    /// This accountd's name in the lease: `host:pid`.
    pub fn me() -> String {
        let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
        format!("{host}:{}", std::process::id())
    }

    /// For a ledger only this accountd writes (SQLite): leading, with no keeper.
    pub fn sole() -> Leadership {
        Leadership {
            me: Leadership::me().into(),
            leading: Arc::new(AtomicBool::new(true)),
            until_ms: Arc::new(AtomicU64::new(u64::MAX)),
            epoch: std::time::Instant::now(),
            stop: Arc::default(),
        }
    }

    /// Starts the keeper on `res` (a connection of its own); `on_lead` runs each time this
    /// accountd comes to lead (the cycles start at once rather than at their next turn).
    pub fn start(res: Resources, publisher: Publisher, on_lead: impl Fn() + Send + 'static) -> Leadership {
        Leadership::keeping(res, Some(publisher), on_lead)
    }

    /// For `accountd tick` and `accountd charge` on a MariaDB ledger: the lease, taken now and kept
    /// while the command runs, and `cycle`'s connection fenced by it; refused while another holds
    /// it (a serve leads: its cycles do this work). Given up by [`Leadership::stop`].
    pub fn for_command(mut keeper: Resources, cycle: &mut Resources, what: &str) -> AccountdResult<Leadership> {
        let me = Leadership::me();
        let lease = keeper.ledger.claim_lease(&me, TTL)?;
        if !lease.held_by(&me) {
            return Err(AccountdError::Refused(format!(
                "accountd {} leads this ledger (lease term {}): its cycles do what {what} would; run it when none leads",
                lease.holder, lease.term
            )));
        }
        cycle.ledger.fence_with_lease(&me);
        Ok(Leadership::keeping(keeper, None, || {}))
    }

    fn keeping(mut res: Resources, publisher: Option<Publisher>, on_lead: impl Fn() + Send + 'static) -> Leadership {
        let leadership = Leadership {
            me: Leadership::me().into(),
            leading: Arc::new(AtomicBool::new(false)),
            until_ms: Arc::new(AtomicU64::new(0)),
            epoch: std::time::Instant::now(),
            stop: Arc::default(),
        };
        let keeper = leadership.clone();
        let (wake, woken) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("lease".into())
            .spawn(move || keeper.keep(&mut res, publisher.as_ref(), on_lead, &woken))
            .expect("start the lease keeper");
        *leadership.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some((wake, thread));
        leadership
    }

    pub fn name(&self) -> &str {
        &self.me
    }

    /// Whether this accountd leads: it held the lease at the last renewal, and that lease has not
    /// run out since.
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst) && self.now_ms() < self.until_ms.load(Ordering::SeqCst)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Stops the keeper and waits for it to give the lease up: the other accountd leads at once.
    pub fn stop(&self) {
        let taken = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((wake, thread)) = taken {
            let _ = wake.send(());
            let _ = thread.join();
        }
    }

    fn keep(&self, res: &mut Resources, publisher: Option<&Publisher>, on_lead: impl Fn(), stop: &Receiver<()>) {
        let mut published: Option<i64> = None;
        let mut holder_shown = String::new();
        let mut failing = false;
        loop {
            let claimed_at = self.now_ms();
            match res.ledger.claim_lease(&self.me, TTL) {
                Ok(lease) => {
                    failing = false;
                    let now_leading = lease.held_by(&self.me);
                    // Counted from before the claim was sent, less one renewal: never past the
                    // lease the database holds.
                    let left = u64::try_from(lease.left_ms).unwrap_or(0).saturating_sub(RENEW.as_millis() as u64);
                    self.until_ms.store(claimed_at.saturating_add(left), Ordering::SeqCst);
                    let was_leading = self.leading.swap(now_leading, Ordering::SeqCst);
                    res.metrics.leading.set(i64::from(now_leading));
                    if lease.holder != holder_shown {
                        res.metrics.leader.clear();
                        res.metrics.leader.get_or_create(&HolderLabels { holder: lease.holder.clone() }).set(1);
                        holder_shown = lease.holder.clone();
                    }
                    match (was_leading, now_leading) {
                        (false, true) => {
                            tracing::info!("leading the ledger (lease term {}): running the cycles", lease.term);
                            published = None;
                            on_lead();
                        }
                        (true, false) => tracing::warn!("the ledger's lease went to {}: following", lease.holder),
                        (false, false) if published.is_none() => {
                            tracing::info!("following {} (lease term {})", lease.holder, lease.term);
                            published = Some(0);
                        }
                        _ => {}
                    }
                    if let (true, Some(publisher)) = (now_leading, publisher) {
                        published = self.publish_changes(res, publisher, published);
                    }
                }
                Err(e) => {
                    // Unable to renew is unable to lead: the other may take the lease any moment.
                    if self.leading.swap(false, Ordering::SeqCst) || !failing {
                        tracing::error!("cannot renew the ledger's lease: {e} (not leading until it can)");
                    }
                    res.metrics.leading.set(0);
                    failing = true;
                }
            }
            match stop.recv_timeout(RENEW) {
                Err(RecvTimeoutError::Timeout) => continue,
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.leading.store(false, Ordering::SeqCst);
        if let Err(e) = res.ledger.release_lease(&self.me) {
            tracing::warn!("cannot give the ledger's lease up: {e}");
        }
    }

    /// Writes the snapshot again if an entry was added since the last write this keeper saw (by
    /// the other accountd's requests too); returns the newest entry written for.
    fn publish_changes(&self, res: &Resources, publisher: &Publisher, published: Option<i64>) -> Option<i64> {
        let newest = match res.ledger.newest_entry() {
            Ok(newest) => newest,
            Err(e) => {
                tracing::warn!("cannot read the ledger's newest entry: {e}");
                return published;
            }
        };
        if published == Some(newest) {
            return published;
        }
        match publisher.publish(gputokens::time::now()) {
            Ok(_) => Some(newest),
            Err(e) => {
                tracing::error!("cannot write the balance snapshot: {e}");
                published
            }
        }
    }
}
