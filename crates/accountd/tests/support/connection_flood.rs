//! A hostile user's connections: tests/support/hold_connections.pl, run as the user, holds idle or
//! half-sent connections to accountd until dropped; and the counters accountd keeps of them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// tests/support/hold_connections.pl run as `user`, once it holds its connections (closing its stdin,
/// as dropping the child does, lets it go).
pub struct Holder(Child);

impl Holder {
    pub fn start(user: &str, args: &[&str]) -> Holder {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/hold_connections.pl");
        let mut child = Command::new("runuser")
            .args(["-u", user, "--", "perl", script])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("runuser perl");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("held "), "{args:?}: {line:?}");
        Holder(child)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// The value of a metric line such as `gputokens_connections_refused_total{...} 936`.
pub fn metric(metrics: &str, series: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}
