//! GPU jobs the plugin admitted since accountd last read the queue: the snapshot's commitments do
//! not include them yet, so without this a user could submit many jobs between two snapshots and
//! pass `max_gpus_per_user` or the estimate with each. An entry is dropped once a snapshot's queue
//! was read after it was admitted (or, when the snapshot has no queue, after an hour).

use gputokens::estimate::Commitment;

const KEEP_WITHOUT_QUEUE_SECS: i64 = 3600;

#[derive(Debug, Default)]
pub struct Tally {
    /// (uid, admitted at, what the job holds and can cost)
    entries: Vec<(u32, i64, Commitment)>,
}

impl Tally {
    /// Drops what a queue read at `queue_as_of` already counts.
    pub fn forget_before(&mut self, queue_as_of: Option<i64>, now: i64) {
        let cutoff = queue_as_of.unwrap_or(now - KEEP_WITHOUT_QUEUE_SECS);
        self.entries.retain(|(_, at, _)| *at >= cutoff);
    }

    pub fn of(&self, uid: u32) -> Commitment {
        let mut sum = Commitment::default();
        for (_, _, c) in self.entries.iter().filter(|(u, _, _)| *u == uid) {
            sum += *c;
        }
        sum
    }

    pub fn add(&mut self, uid: u32, at: i64, commitment: Commitment) {
        self.entries.push((uid, at, commitment));
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
        tally.add(1001, 100, c(1000, 4));
        tally.add(1001, 105, c(2000, 8));
        tally.add(1002, 105, c(1000, 1));
        assert_eq!(tally.of(1001), c(3000, 12));
        tally.forget_before(Some(101), 110);
        assert_eq!(tally.of(1001), c(2000, 8), "the queue read at 101 shows the job admitted at 100");
        assert_eq!(tally.of(1003), Commitment::default());
        tally.forget_before(None, 105 + 3600);
        assert_eq!(tally.of(1002), c(1000, 1), "no queue: kept for an hour");
        tally.forget_before(None, 106 + 3600);
        assert_eq!(tally.of(1002), Commitment::default());
    }
}
