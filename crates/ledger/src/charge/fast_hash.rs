//! A quick hasher for a charge cycle's maps, whose keys are names and numbers from Slurm's own
//! output (users, jobs, amounts): the standard library's SipHash, made to withstand keys chosen
//! to collide, costs a large share of a record's charge. Words are folded in with a multiply, and
//! the sum is mixed with SplitMix64's finalizer so that every bit of the hash depends on every
//! byte: the table picks buckets by the low bits, which a multiply alone leaves alike for names
//! that differ only in their last bytes (`user17`, `user18`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[derive(Default, Clone, Copy)]
pub(super) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn mixed(self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_i64(&mut self, i: i64) {
        self.add(i as u64);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.mixed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_apart_hash_apart_and_equal_keys_alike() {
        let hash = |s: &str| {
            let mut h = FastHasher::default();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash("user12"), hash("user12"));
        // Names apart only in their last bytes spread over the low bits, which pick the bucket.
        let low: std::collections::HashSet<u64> = (0..2000).map(|i| hash(&format!("user{i}")) & 0xfff).collect();
        assert!(low.len() > 1000, "{} of 2000", low.len());
        let names = ["", "a", "user1", "user12", "user123456789", "user123456788", "start:1796025600"];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(hash(a), hash(b), "{a} {b}");
            }
        }
        let mut map: FastMap<&str, usize> = FastMap::default();
        for (i, name) in names.iter().enumerate() {
            map.insert(name, i);
        }
        assert!(names.iter().enumerate().all(|(i, name)| map[name] == i));
    }
}
