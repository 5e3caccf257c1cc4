//! GPU jobs the plugin admitted since accountd last read the queue: the snapshot's commitments do
//! not include them yet, so without this a user could submit many jobs between two snapshots and
//! pass `max_gpus_per_user` or the estimate with each. An entry is dropped once a snapshot's queue
//! shows it (or, when the snapshot has no queue, after an hour): a job counted twice would be
//! refused a job that fits, one counted by neither would let a user past the limits.
//!
//! A job admitted well before squeue began to run is in the queue; one admitted after squeue
//! answered is not. Between the two it may be either: squeue takes a while to start, and slurmctld
//! creates a job a moment after the plugin admits it (after taking its job lock, which a flood of
//! submissions or a loaded machine can delay by seconds). Such an admission is dropped only if the
//! queue shows a GPU job of its user, of its size, submitted in or after its admission's second,
//! that no admission before it has claimed (jobs are created in the order they were admitted, and
//! none the read shows was submitted after it ended). Each read is applied once: a snapshot
//! rewritten with the same read changes nothing.

use gputokens::estimate::{Commitment, RecentJob, RECENT_SLACK_SECS};

const KEEP_WITHOUT_QUEUE_MS: i64 = 3_600_000;

/// What a snapshot says of its queue read: when it began and ended (unix ms) and the GPU jobs
/// submitted near it.
#[derive(Debug, Clone, Copy)]
pub struct QueueRead<'a> {
    pub began_ms: i64,
    pub ended_ms: Option<i64>,
    pub recent: &'a [RecentJob],
}

/// A GPU job the plugin admitted.
#[derive(Debug)]
struct Admitted {
    uid: u32,
    /// The account whose pool pays for it, if one does.
    pool: Option<String>,
    /// Unix ms.
    at: i64,
    /// What it holds and can cost.
    commitment: Commitment,
    /// Quoted (`sbatch --test-only`): counted like any admission, since nothing proves a job is
    /// only tested, but the same user's next job of the same size may take its place.
    quote: bool,
}

/// How long a quote may be taken over by the job it quoted.
pub const QUOTE_TAKEN_OVER_WITHIN_MS: i64 = 600_000;

#[derive(Debug, Default)]
pub struct Tally {
    entries: Vec<Admitted>,
    /// The read applied last (began, ended): a snapshot rewritten from it is not applied again.
    applied: Option<(i64, i64)>,
}

impl Tally {
    /// Drops what a snapshot's queue read already counts (None: the snapshot has no queue).
    pub fn forget_counted(&mut self, read: Option<QueueRead<'_>>, now_ms: i64) {
        let Some(read) = read else {
            let cutoff = now_ms - KEEP_WITHOUT_QUEUE_MS;
            self.entries.retain(|e| e.at >= cutoff);
            return;
        };
        // An accountd before `queue_read_end_ms` wrote only when the read began.
        let ended_ms = read.ended_ms.unwrap_or(read.began_ms).max(read.began_ms);
        if self.applied == Some((read.began_ms, ended_ms)) {
            return;
        }
        self.applied = Some((read.began_ms, ended_ms));
        let surely_in = read.began_ms - RECENT_SLACK_SECS * 1000;
        let mut claimed = vec![false; read.recent.len()];
        self.entries.sort_by_key(|e| e.at);
        self.entries.retain(|Admitted { uid, at, commitment, .. }| {
            if *at > ended_ms {
                return true;
            }
            let second = at.div_euclid(1000);
            let shown = read.recent.iter().enumerate().position(|(i, r)| {
                !claimed[i] && r.uid == *uid && r.milli_gpus == commitment.milli_gpus && r.submitted >= second
            });
            if let Some(i) = shown {
                claimed[i] = true;
            }
            // Admitted well before the read began: in the queue, its line claimed or not.
            *at >= surely_in && shown.is_none()
        });
    }

    /// What the user's jobs admitted since the last read hold and can cost.
    pub fn of(&self, uid: u32) -> Commitment {
        Self::sum(self.entries.iter().filter(|e| e.uid == uid))
    }

    /// What the jobs admitted since the last read that the pool of `account` pays for hold and can
    /// cost, whoever submitted them: those of the pools drawing on it too (`parent_of` says whose
    /// pool each one draws on).
    pub fn of_pool<'s>(&self, account: &str, parent_of: impl Fn(&str) -> Option<&'s str> + Copy) -> Commitment {
        Self::sum(self.entries.iter().filter(|e| match e.pool.as_deref() {
            Some(pool) => pool == account || gputokens::pools::ancestors(pool, parent_of).contains(&account),
            None => false,
        }))
    }

    fn sum<'a>(entries: impl Iterator<Item = &'a Admitted>) -> Commitment {
        let mut sum = Commitment::default();
        for e in entries {
            sum += e.commitment;
        }
        sum
    }

    /// `add_paid_by` for a job of the user's own balance.
    #[cfg(test)]
    pub fn add(&mut self, uid: u32, at_ms: i64, commitment: Commitment) {
        self.add_paid_by(uid, None, at_ms, commitment);
    }

    /// `add` for a job the pool of `pool` pays for.
    pub fn add_paid_by(&mut self, uid: u32, pool: Option<String>, at_ms: i64, commitment: Commitment) {
        self.entries.push(Admitted { uid, pool, at: at_ms, commitment, quote: false });
    }

    /// `add_paid_by` for a quote.
    pub fn add_quote(&mut self, uid: u32, pool: Option<String>, at_ms: i64, commitment: Commitment) {
        self.entries.push(Admitted { uid, pool, at: at_ms, commitment, quote: true });
    }

    /// The user's latest quote of [`QUOTE_TAKEN_OVER_WITHIN_MS`] before `now_ms`: what it holds and
    /// can cost, and the tally without it.
    pub fn without_latest_quote(&self, uid: u32, now_ms: i64) -> Option<(Commitment, Tally)> {
        let latest = (self.entries.iter().enumerate())
            .filter(|(_, e)| e.uid == uid && e.quote && e.at >= now_ms - QUOTE_TAKEN_OVER_WITHIN_MS)
            .max_by_key(|(_, e)| e.at)?
            .0;
        let entries = (self.entries.iter().enumerate())
            .filter(|(i, _)| *i != latest)
            .map(|(_, e)| Admitted { pool: e.pool.clone(), ..*e })
            .collect();
        Some((self.entries[latest].commitment, Tally { entries, applied: self.applied }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::Tokens;

    fn c(g: u64, t: i64) -> Commitment {
        Commitment { milli_gpus: g, max_cost: Tokens::whole(t) }
    }

    fn read(began_ms: i64, ended_ms: Option<i64>, recent: &[RecentJob]) -> Option<QueueRead<'_>> {
        Some(QueueRead { began_ms, ended_ms, recent })
    }

    fn recent(uid: u32, submitted: i64, milli_gpus: u64) -> RecentJob {
        RecentJob { uid, submitted, milli_gpus }
    }

    /// Jobs two members admitted for one pool count against it together, and leave its tally as
    /// they leave their owners' once a read shows them.
    #[test]
    fn a_pools_tally_sums_its_members_admissions() {
        let mut tally = Tally::default();
        tally.add_paid_by(1001, Some("lab".into()), 100_000, c(1000, 4));
        tally.add_paid_by(1002, Some("lab".into()), 100_500, c(2000, 8));
        tally.add_paid_by(1002, Some("course".into()), 100_700, c(1000, 1));
        tally.add(1002, 100_800, c(1000, 2));
        assert_eq!(tally.of_pool("lab", no_parent), c(3000, 12));
        assert_eq!(tally.of_pool("course", no_parent), c(1000, 1));
        assert_eq!(tally.of(1002), c(4000, 11), "the owner's count is every job of theirs");
        let shown = [recent(1001, 100, 1000), recent(1002, 100, 2000)];
        tally.forget_counted(read(100_600, Some(100_650), &shown), 101_000);
        assert_eq!(tally.of_pool("lab", no_parent), c(0, 0), "both in the read");
        assert_eq!(tally.of_pool("course", no_parent), c(1000, 1), "admitted after the read ended");
    }

    fn no_parent(_: &str) -> Option<&'static str> {
        None
    }

    /// A pool's tally counts the jobs of the pools drawing on it: the parent's estimate sees what
    /// its children's members were admitted for since the read.
    #[test]
    fn a_parents_tally_counts_the_pools_drawing_on_it() {
        let mut tally = Tally::default();
        tally.add_paid_by(1001, Some("course".into()), 100_000, c(1000, 4));
        tally.add_paid_by(1002, Some("dept".into()), 100_100, c(2000, 8));
        tally.add_paid_by(1003, Some("other".into()), 100_200, c(1000, 1));
        let parent_of = |p: &str| match p {
            "course" => Some("dept"),
            "dept" => Some("school"),
            _ => None,
        };
        assert_eq!(tally.of_pool("course", parent_of), c(1000, 4));
        assert_eq!(tally.of_pool("dept", parent_of), c(3000, 12));
        assert_eq!(tally.of_pool("school", parent_of), c(3000, 12));
        assert_eq!(tally.of_pool("dept", no_parent), c(2000, 8));
    }

    #[test]
    fn sums_per_user_until_the_queue_catches_up() {
        let mut tally = Tally::default();
        tally.add(1001, 90_000, c(1000, 4));
        tally.add(1001, 105_000, c(2000, 8));
        tally.add(1002, 105_000, c(1000, 1));
        assert_eq!(tally.of(1001), c(3000, 12));
        tally.forget_counted(read(101_000, Some(101_400), &[]), 110_000);
        assert_eq!(tally.of(1001), c(2000, 8), "the queue read at 101 s shows the job admitted at 90 s");
        assert_eq!(tally.of(1003), Commitment::default());
        tally.forget_counted(None, 105_000 + 3_600_000);
        assert_eq!(tally.of(1002), c(1000, 1), "no queue: kept for an hour");
        tally.forget_counted(None, 106_000 + 3_600_000);
        assert_eq!(tally.of(1002), Commitment::default());
    }

    /// The race a 26.05 cluster test lost under load: admitted at 200.3 s, squeue read from 200.7 s
    /// (the job in its commitments), both in second 200. Counted once, not twice; a job admitted
    /// after the read ended, in the same second, is still counted by the plugin.
    #[test]
    fn a_job_admitted_in_the_second_of_the_queue_read_counts_once() {
        let mut tally = Tally::default();
        tally.add(1001, 200_300, c(2000, 16));
        tally.add(1001, 200_900, c(1000, 4));
        let shown = [recent(1001, 200, 2000)];
        tally.forget_counted(read(200_700, Some(200_800), &shown), 201_000);
        assert_eq!(tally.of(1001), c(1000, 4));
    }

    /// The race a 24.11 cluster test lost under load: squeue began at 300.1 s, the plugin admitted
    /// a job at 300.4 s and squeue, answering at 300.9 s, showed it. Counted by the queue only.
    #[test]
    fn a_job_admitted_while_squeue_ran_and_shown_by_it_counts_once() {
        let mut tally = Tally::default();
        tally.add(1001, 300_400, c(2000, 16));
        let shown = [recent(1001, 300, 2000)];
        tally.forget_counted(read(300_100, Some(300_900), &shown), 301_000);
        assert_eq!(tally.of(1001), Commitment::default());
    }

    /// One admitted while squeue ran that it did not show (slurmctld answered first) stays counted,
    /// and so does one a job of another user, another size or an earlier second would have matched.
    #[test]
    fn a_job_admitted_while_squeue_ran_and_not_shown_stays_counted() {
        let mut tally = Tally::default();
        tally.add(1001, 300_400, c(2000, 16));
        tally.add(1002, 300_500, c(1000, 4));
        let others = [recent(1002, 300, 2000), recent(1001, 299, 2000), recent(1003, 300, 2000)];
        tally.forget_counted(read(300_100, Some(300_900), &others), 301_000);
        assert_eq!(tally.of(1001), c(2000, 16));
        assert_eq!(tally.of(1002), c(1000, 4));
    }

    /// Two jobs of one size and second: one admitted before the read began claims the queue's first
    /// line, so the one admitted while squeue ran is dropped only if a second line shows it.
    #[test]
    fn each_shown_job_is_claimed_once() {
        let mut tally = Tally::default();
        tally.add(1001, 300_050, c(1000, 4));
        tally.add(1001, 300_400, c(1000, 4));
        let one = [recent(1001, 300, 1000)];
        tally.forget_counted(read(300_100, Some(300_900), &one), 301_000);
        assert_eq!(tally.of(1001), c(1000, 4), "the queue shows only the first");

        let mut tally = Tally::default();
        tally.add(1001, 300_050, c(1000, 4));
        tally.add(1001, 300_400, c(1000, 4));
        let both = [recent(1001, 300, 1000), recent(1001, 300, 1000)];
        tally.forget_counted(read(300_100, Some(300_900), &both), 301_000);
        assert_eq!(tally.of(1001), Commitment::default());
    }

    /// A snapshot of an accountd that wrote no end of the read: the read's start is its end.
    #[test]
    fn without_an_end_the_start_of_the_read_decides() {
        let mut tally = Tally::default();
        tally.add(1001, 290_050, c(1000, 4));
        tally.add(1001, 300_400, c(2000, 8));
        tally.forget_counted(read(300_100, None, &[]), 301_000);
        assert_eq!(tally.of(1001), c(2000, 8));
    }

    /// The same read applied twice (accountd rewrites the snapshot after each charge cycle and
    /// balance change, with the queue it read last): the second changes nothing. Were it applied
    /// again, the job kept the first time would claim the line of the job dropped then.
    #[test]
    fn a_read_is_applied_once() {
        let mut tally = Tally::default();
        tally.add(1001, 300_050, c(1000, 4));
        tally.add(1001, 300_400, c(1000, 4));
        let one = [recent(1001, 300, 1000)];
        tally.forget_counted(read(300_100, Some(300_900), &one), 301_000);
        assert_eq!(tally.of(1001), c(1000, 4));
        tally.forget_counted(read(300_100, Some(300_900), &one), 305_000);
        assert_eq!(tally.of(1001), c(1000, 4), "still counted: the queue did not show it");
        tally.forget_counted(read(305_000, Some(305_500), &[]), 306_000);
        assert_eq!(tally.of(1001), c(1000, 4), "admitted within seconds of the next read: kept unless shown");
        tally.forget_counted(read(320_000, Some(320_500), &[]), 321_000);
        assert_eq!(tally.of(1001), Commitment::default(), "a read well after it counts it");
    }

    /// slurmctld may create a job a moment after the plugin admitted it (behind a flood of
    /// submissions): one admitted just before the read began that the read did not show stays
    /// counted; one it showed, with a submit time two seconds late, is dropped.
    #[test]
    fn an_admission_just_before_the_read_counts_until_a_read_shows_it() {
        let mut tally = Tally::default();
        tally.add(1001, 297_500, c(1000, 4));
        tally.add(1002, 297_500, c(1000, 4));
        tally.forget_counted(read(300_100, Some(300_900), &[recent(1002, 299, 1000)]), 301_000);
        assert_eq!(tally.of(1001), c(1000, 4), "not shown");
        assert_eq!(tally.of(1002), Commitment::default(), "shown");
    }

    /// On a loaded machine slurmctld created a job seconds after the plugin admitted it, and the read
    /// that began just after showed it (the cluster test of a pool's members, with the unit tests
    /// beside it on two cores): counted once, by the queue; the user's next admission, which the
    /// read did not show, stays counted.
    #[test]
    fn a_job_created_seconds_after_its_admission_counts_once() {
        let mut tally = Tally::default();
        tally.add(1001, 400_200, c(2000, 16));
        tally.add(1001, 404_600, c(2000, 16));
        tally.forget_counted(read(403_000, Some(404_500), &[recent(1001, 404, 2000)]), 405_000);
        assert_eq!(tally.of(1001), c(2000, 16), "the first is the queue's; the second, after the read, the plugin's");
    }

    /// A quote counts like an admission; the user's latest one (of the last ten minutes) can be
    /// taken out for the job it quoted to take its place.
    #[test]
    fn the_latest_recent_quote_can_be_taken_out() {
        let mut tally = Tally::default();
        tally.add(1001, 100_000, c(1000, 4));
        tally.add_quote(1001, None, 200_000, c(1000, 40));
        tally.add_quote(1001, None, 300_000, c(2000, 8));
        tally.add_quote(1002, None, 300_000, c(1000, 1));
        assert_eq!(tally.of(1001), c(4000, 52), "quotes count");
        let (quoted, without) = tally.without_latest_quote(1001, 310_000).unwrap();
        assert_eq!(quoted, c(2000, 8));
        assert_eq!((without.of(1001), without.of(1002)), (c(2000, 44), c(1000, 1)));
        assert!(tally.without_latest_quote(1001, 300_000 + QUOTE_TAKEN_OVER_WITHIN_MS + 1).is_none(), "too old");
        assert!(tally.without_latest_quote(1003, 310_000).is_none());
    }
}
