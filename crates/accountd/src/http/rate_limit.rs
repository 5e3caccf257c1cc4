//! Requests per client address on the HTTP listener: a token bucket each (a burst, then a steady
//! rate), so one address's stream of requests (each refused report still costs a parse, a MUNGE
//! decode, a log check) cannot take the listener's time from the others. Far above what an agent,
//! Prometheus or a browser sends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Requests one address may send at once, and per second after that.
pub const BURST: f64 = 1000.0;
pub const PER_SECOND: f64 = 200.0;
/// Addresses remembered at most; past this the fullest buckets (idle ones) are forgotten.
const ADDRESSES: usize = 10_000;

#[derive(Default)]
pub struct RateLimit {
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimit {
    /// Whether `client` may send one more request now (taking a token if so).
    pub fn allow(&self, client: IpAddr, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= ADDRESSES && !buckets.contains_key(&client) {
            // A full bucket is an address that has been quiet: nothing is lost forgetting it.
            buckets.retain(|_, (tokens, at)| refill(*tokens, *at, now) < BURST);
            if buckets.len() >= ADDRESSES {
                buckets.clear();
            }
        }
        let (tokens, at) = buckets.entry(client).or_insert((BURST, now));
        let available = refill(*tokens, *at, now);
        let allowed = available >= 1.0;
        *tokens = if allowed { available - 1.0 } else { available };
        *at = now;
        allowed
    }
}

fn refill(tokens: f64, at: Instant, now: Instant) -> f64 {
    (tokens + now.saturating_duration_since(at).as_secs_f64() * PER_SECOND).min(BURST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_steady_rate_and_others_unaffected() {
        let limit = RateLimit::default();
        let (flooder, other): (IpAddr, IpAddr) = ("10.0.0.9".parse().unwrap(), "10.0.0.1".parse().unwrap());
        let t0 = Instant::now();
        let allowed = (0..1000).filter(|_| limit.allow(flooder, t0)).count();
        assert_eq!(allowed, BURST as usize);
        assert!(limit.allow(other, t0), "another address has its own bucket");
        // One second later: PER_SECOND more.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..1000).filter(|_| limit.allow(flooder, t1)).count(), PER_SECOND as usize);
    }
}
