//! Caps on the connections that one client, and all clients together, hold open on a listener. When a
//! client (an address, a uid) is at its cap, its oldest connection that is idle (no request yet, or
//! between requests) is shed to make room: a flood of idle connections from an address that a real
//! client shares (a GPU node's agent and its users' jobs) holds nothing that client needs, and a
//! client that sends its request promptly is served. Only when every held connection is busy with a
//! request is a new one refused.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Which cap a refused connection hit (the `reason` label of `gputokens_connections_refused_total`
/// and `gputokens_connections_shed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// All clients together hold the most allowed.
    Total,
    /// This client (an address, a uid) holds the most allowed.
    Client,
}

/// Counts the connections held per client key (an IP address, a uid).
pub struct ConnectionCaps<K> {
    held: Arc<Mutex<Held<K>>>,
    max_total: usize,
    max_per_client: usize,
}

struct Held<K> {
    total: usize,
    /// Each client's connections, oldest first.
    by_client: HashMap<K, Vec<Connection>>,
    next_id: u64,
}

struct Connection {
    id: u64,
    /// No request under way: may be shed.
    idle: bool,
    shed: Arc<Notify>,
}

/// A new connection's slot, and whether an idle connection was shed to make room for it.
pub struct Admitted<K: Hash + Eq + Clone> {
    pub slot: Slot<K>,
    pub shed: Option<Full>,
}

impl<K: Hash + Eq + Clone> ConnectionCaps<K> {
    pub fn new(max_total: usize, max_per_client: usize) -> ConnectionCaps<K> {
        ConnectionCaps {
            held: Arc::new(Mutex::new(Held { total: 0, by_client: HashMap::new(), next_id: 0 })),
            max_total,
            max_per_client,
        }
    }

    /// A slot for one more connection of `client`, held until the slot is dropped or shed. At a cap,
    /// the oldest idle connection (of this client; of anyone for the total) is shed for it.
    pub fn admit(&self, client: K) -> Result<Admitted<K>, Full> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut shed = None;
        if held.by_client.get(&client).map_or(0, Vec::len) >= self.max_per_client {
            if !held.shed_oldest_idle(Some(&client)) {
                return Err(Full::Client);
            }
            shed = Some(Full::Client);
        }
        if held.total >= self.max_total {
            if !held.shed_oldest_idle(None) {
                return Err(Full::Total);
            }
            shed = shed.or(Some(Full::Total));
        }
        let id = held.next_id;
        held.next_id += 1;
        let signal = Arc::new(Notify::new());
        held.by_client.entry(client.clone()).or_default().push(Connection { id, idle: true, shed: signal.clone() });
        held.total += 1;
        Ok(Admitted { slot: Slot { held: self.held.clone(), client, id, shed: signal }, shed })
    }

    /// Connections held now (in all).
    pub fn held(&self) -> usize {
        self.held.lock().map(|c| c.total).unwrap_or(0)
    }
}

impl<K: Hash + Eq + Clone> Held<K> {
    /// Sheds the oldest idle connection of `client` (of anyone when None); false when there is none.
    fn shed_oldest_idle(&mut self, client: Option<&K>) -> bool {
        let oldest = match client {
            Some(client) => self
                .by_client
                .get(client)
                .and_then(|conns| conns.iter().find(|c| c.idle))
                .map(|c| (client.clone(), c.id)),
            None => self
                .by_client
                .iter()
                .filter_map(|(k, conns)| conns.iter().find(|c| c.idle).map(|c| (k.clone(), c.id)))
                .min_by_key(|(_, id)| *id),
        };
        let Some((client, id)) = oldest else { return false };
        if let Some(connection) = self.remove(&client, id) {
            // A permit is stored if the connection is not waiting yet: it sees it at its next await.
            connection.shed.notify_one();
        }
        true
    }

    fn remove(&mut self, client: &K, id: u64) -> Option<Connection> {
        let conns = self.by_client.get_mut(client)?;
        let at = conns.iter().position(|c| c.id == id)?;
        let connection = conns.remove(at);
        if conns.is_empty() {
            self.by_client.remove(client);
        }
        self.total = self.total.saturating_sub(1);
        Some(connection)
    }

    fn set_idle(&mut self, client: &K, id: u64, idle: bool) -> bool {
        let found = self.by_client.get_mut(client).and_then(|conns| conns.iter_mut().find(|c| c.id == id));
        found.map(|c| c.idle = idle).is_some()
    }
}

/// One admitted connection; dropping it frees the slot.
pub struct Slot<K: Hash + Eq + Clone> {
    held: Arc<Mutex<Held<K>>>,
    client: K,
    id: u64,
    shed: Arc<Notify>,
}

impl<K: Hash + Eq + Clone> Slot<K> {
    /// Marks the connection busy with a request (never shed) until the guard is dropped; None when it
    /// was shed already.
    pub fn busy(&self) -> Option<Busy<K>> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.set_idle(&self.client, self.id, false).then(|| Busy {
            held: self.held.clone(),
            client: self.client.clone(),
            id: self.id,
        })
    }

    /// Completes once the connection has been shed for a newer one: its task then closes it.
    pub async fn shed(&self) {
        self.shed.notified().await
    }
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.remove(&self.client, self.id);
    }
}

/// A request under way on a connection: while held, the connection is not shed.
pub struct Busy<K: Hash + Eq + Clone> {
    held: Arc<Mutex<Held<K>>>,
    client: K,
    id: u64,
}

impl<K: Hash + Eq + Clone> Drop for Busy<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.set_idle(&self.client, self.id, true);
    }
}

/// Raises the soft limit on open files to the hard limit (the kernel's default soft limit, 1024, is
/// less than the listeners' caps together); says so when even the hard limit is below `wanted`,
/// with `advice` (what the site can change).
pub fn raise_open_file_limit(wanted: u64, advice: &str) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return };
    if soft < hard {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
        }
    }
    if hard < wanted {
        tracing::warn!("the open-file limit ({hard}) is below what the connection caps allow ({wanted}): {advice}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit<K: Hash + Eq + Clone>(caps: &ConnectionCaps<K>, client: K) -> Slot<K> {
        caps.admit(client).unwrap().slot
    }

    #[test]
    fn busy_connections_are_kept_and_the_cap_refuses_beyond_them() {
        let caps = ConnectionCaps::new(5, 2);
        let a1 = admit(&caps, "alice");
        let a2 = admit(&caps, "alice");
        let (_b1, _b2) = (a1.busy().unwrap(), a2.busy().unwrap());
        assert_eq!(caps.admit("alice").err(), Some(Full::Client));
        let b1 = admit(&caps, "bob");
        let b2 = admit(&caps, "bob");
        let c1 = admit(&caps, "carol");
        let _busy = [b1.busy().unwrap(), b2.busy().unwrap(), c1.busy().unwrap()];
        assert_eq!(caps.held(), 5);
        assert_eq!(caps.admit("dave").err(), Some(Full::Total));
        drop(a1);
        assert_eq!(caps.held(), 4);
        let _a3 = admit(&caps, "alice");
    }

    #[test]
    fn at_its_cap_a_client_sheds_its_oldest_idle_connection() {
        let caps = ConnectionCaps::new(100, 3);
        let first = admit(&caps, "node1");
        let second = admit(&caps, "node1");
        let _third = admit(&caps, "node1");
        let _second_busy = second.busy().unwrap();
        let fourth = caps.admit("node1").unwrap();
        assert_eq!(fourth.shed, Some(Full::Client));
        assert!(first.busy().is_none(), "the oldest idle one was shed");
        assert_eq!(caps.held(), 3);
        // The shed connection's task hears of it, even though it was not waiting yet.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), first.shed()).await.expect("told it was shed");
        });
        drop(first);
        assert_eq!(caps.held(), 3, "dropping a shed slot frees nothing twice");
        // The newest, idle, is shed last: the third (older) goes before the fourth.
        let fifth = caps.admit("node1").unwrap();
        assert_eq!(fifth.shed, Some(Full::Client));
        assert!(fourth.slot.busy().is_some(), "the newest is kept");
    }

    #[test]
    fn at_the_total_cap_the_oldest_idle_connection_of_anyone_is_shed() {
        let caps = ConnectionCaps::new(2, 2);
        let old = admit(&caps, 1u32);
        let newer = admit(&caps, 2u32);
        let admitted = caps.admit(3u32).unwrap();
        assert_eq!(admitted.shed, Some(Full::Total));
        assert!(old.busy().is_none());
        assert!(newer.busy().is_some());
    }

    #[test]
    fn a_client_that_closed_everything_is_forgotten() {
        let caps = ConnectionCaps::new(10, 1);
        let slot = admit(&caps, 7u32);
        drop(slot);
        assert!(caps.held.lock().unwrap().by_client.is_empty());
        assert_eq!(caps.held(), 0);
        let _again = admit(&caps, 7u32);
    }
}
