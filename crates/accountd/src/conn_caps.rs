//! Caps on the connections that one client, and all clients together, hold open on a listener. A
//! user who opens thousands of idle connections gets the first few; the rest are closed at once, so
//! sbalance, the job_submit plugin's users and Prometheus are still answered.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Which cap a refused connection hit (the `reason` label of `gputokens_connections_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// All clients together hold the most allowed.
    Total,
    /// This client (an address, a uid) holds the most allowed.
    Client,
}

/// Counts the connections held per client key (an IP address, a uid).
pub struct ConnectionCaps<K> {
    counts: Arc<Mutex<Counts<K>>>,
    max_total: usize,
    max_per_client: usize,
}

struct Counts<K> {
    total: usize,
    by_client: HashMap<K, usize>,
}

impl<K: Hash + Eq + Clone> ConnectionCaps<K> {
    pub fn new(max_total: usize, max_per_client: usize) -> ConnectionCaps<K> {
        ConnectionCaps {
            counts: Arc::new(Mutex::new(Counts { total: 0, by_client: HashMap::new() })),
            max_total,
            max_per_client,
        }
    }

    /// A slot for one more connection of `client`, held until the slot is dropped.
    pub fn admit(&self, client: K) -> Result<Slot<K>, Full> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.total >= self.max_total {
            return Err(Full::Total);
        }
        let held = counts.by_client.entry(client.clone()).or_default();
        if *held >= self.max_per_client {
            return Err(Full::Client);
        }
        *held += 1;
        counts.total += 1;
        Ok(Slot { counts: self.counts.clone(), client })
    }

    /// Connections held now (in all).
    pub fn held(&self) -> usize {
        self.counts.lock().map(|c| c.total).unwrap_or(0)
    }
}

/// One admitted connection; dropping it frees the slot.
pub struct Slot<K: Hash + Eq> {
    counts: Arc<Mutex<Counts<K>>>,
    client: K,
}

impl<K: Hash + Eq> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(held) = counts.by_client.get_mut(&self.client) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.by_client.remove(&self.client);
            }
        }
    }
}

/// Raises the soft limit on open files to the hard limit (the kernel's default soft limit, 1024, is
/// less than the listeners' caps together); says so when even the hard limit is below `wanted`.
pub fn raise_open_file_limit(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return };
    if soft < hard {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
        }
    }
    if hard < wanted {
        tracing::warn!(
            "the open-file limit ({hard}) is below what the connection caps allow ({wanted}): raise LimitNOFILE \
             in accountd's unit or lower [http] max_connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_gets_its_share_and_others_still_get_in() {
        let caps = ConnectionCaps::new(5, 2);
        let a1 = caps.admit("alice").unwrap();
        let _a2 = caps.admit("alice").unwrap();
        assert_eq!(caps.admit("alice").err(), Some(Full::Client));
        let _b1 = caps.admit("bob").unwrap();
        let _b2 = caps.admit("bob").unwrap();
        let _c1 = caps.admit("carol").unwrap();
        assert_eq!(caps.held(), 5);
        assert_eq!(caps.admit("dave").err(), Some(Full::Total));
        drop(a1);
        assert_eq!(caps.held(), 4);
        let _a3 = caps.admit("alice").unwrap();
        assert_eq!(caps.admit("alice").err(), Some(Full::Total));
    }

    #[test]
    fn a_client_that_closed_everything_is_forgotten() {
        let caps = ConnectionCaps::new(10, 1);
        let slot = caps.admit(7u32).unwrap();
        drop(slot);
        assert!(caps.counts.lock().unwrap().by_client.is_empty());
        assert_eq!(caps.held(), 0);
        let _again = caps.admit(7u32).unwrap();
    }
}
