//! GPU jobs the plugin admitted since accountd last read the queue: the snapshot's commitments do
//! not include them yet, so without this a user could submit many jobs between two snapshots and
//! pass `max_gpus_per_user` or the estimate with each. An entry is dropped once a snapshot's queue
//! was read after it was admitted (or, when the snapshot has no queue, after an hour). Times are
//! milliseconds: a job admitted in the second squeue ran, before it, is in the queue's commitments
//! already, and counted twice it would be refused a job that fits.

use gputokens::estimate::Commitment;

const KEEP_WITHOUT_QUEUE_MS: i64 = 3_600_000;

#[derive(Debug, Default)]
pub struct Tally {
    /// (uid, admitted at in unix ms, what the job holds and can cost)
    entries: Vec<(u32, i64, Commitment)>,
}

impl Tally {
    /// Drops what a queue read that began at `queue_read_ms` already counts.
    pub fn forget_before(&mut self, queue_read_ms: Option<i64>, now_ms: i64) {
        let cutoff = queue_read_ms.unwrap_or(now_ms - KEEP_WITHOUT_QUEUE_MS);
        self.entries.retain(|(_, at, _)| *at >= cutoff);
    }

    pub fn of(&self, uid: u32) -> Commitment {
        let mut sum = Commitment::default();
        for (_, _, c) in self.entries.iter().filter(|(u, _, _)| *u == uid) {
            sum += *c;
        }
        sum
    }

    pub fn add(&mut self, uid: u32, at_ms: i64, commitment: Commitment) {
        self.entries.push((uid, at_ms, commitment));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::Tokens;

    #[test]
    fn sums_per_user_until_the_queue_catches_up() {
        let c = |g: u64, t: i64| Commitment { milli_gpus: g, max_cost: Tokens::whole(t) };
        let mut tally = Tally::default();
        tally.add(1001, 100_000, c(1000, 4));
        tally.add(1001, 105_000, c(2000, 8));
        tally.add(1002, 105_000, c(1000, 1));
        assert_eq!(tally.of(1001), c(3000, 12));
        tally.forget_before(Some(101_000), 110_000);
        assert_eq!(tally.of(1001), c(2000, 8), "the queue read at 101 s shows the job admitted at 100 s");
        assert_eq!(tally.of(1003), Commitment::default());
        tally.forget_before(None, 105_000 + 3_600_000);
        assert_eq!(tally.of(1002), c(1000, 1), "no queue: kept for an hour");
        tally.forget_before(None, 106_000 + 3_600_000);
        assert_eq!(tally.of(1002), Commitment::default());
    }

    /// The race a 26.05 cluster test lost under load: admitted at 200.3 s, squeue read from 200.7 s
    /// (the job in its commitments), both in second 200. Counted once, not twice; a job admitted
    /// after the read began, in the same second, is still counted by the plugin.
    #[test]
    fn a_job_admitted_in_the_second_of_the_queue_read_counts_once() {
        let c = |g: u64, t: i64| Commitment { milli_gpus: g, max_cost: Tokens::whole(t) };
        let mut tally = Tally::default();
        tally.add(1001, 200_300, c(2000, 16));
        tally.add(1001, 200_900, c(1000, 4));
        tally.forget_before(Some(200_700), 201_000);
        assert_eq!(tally.of(1001), c(1000, 4));
    }
}
