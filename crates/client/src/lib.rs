//! How users' tools (sbalance, `accountd admin`, sbatch's balance line) reach accountd.
//!
//! On accountd's own host they use its Unix socket, where the kernel says who is asking. On every
//! other host of the site (login and compute nodes) they ask its HTTP listener at `[accountd] urls`,
//! and prove who is asking the way Slurm's own clients do: with a MUNGE credential, made for the one
//! request (its payload names the purpose and the request's SHA-256), which accountd's munged
//! decodes once. Blocking I/O with a bound on every step: no runtime to start.

mod errors;
mod munge_cli;
mod network;
mod socket;

use std::path::PathBuf;
use std::time::Duration;

use gputokens::config::Config;
use gputokens::protocol::{ErrorKind, Reply, Request};

pub use errors::ClientError;

/// Where accountd is asked from this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// accountd's socket, on its own host.
    Socket(PathBuf),
    /// accountd's listener(s) over the network, tried in order.
    Network { urls: Vec<String>, ca_file: Option<PathBuf> },
}

/// accountd as this host reaches it, with a bound on each request.
#[derive(Debug, Clone)]
pub struct Accountd {
    pub route: Route,
    timeout: Duration,
}

impl Accountd {
    /// The socket where it is on this host (or no `[accountd] urls` is set), else the network.
    pub fn of(config: &Config, timeout: Duration) -> Accountd {
        let socket = &config.paths.socket;
        let route = if socket.exists() || config.accountd.urls.is_empty() {
            Route::Socket(socket.clone())
        } else {
            Route::Network { urls: config.accountd.urls.clone(), ca_file: config.accountd.ca_file.clone() }
        };
        Accountd { route, timeout }
    }

    /// Sends one request and returns accountd's reply; a `Reply::Error` becomes a [`ClientError`].
    pub fn call(&self, request: &Request) -> Result<Reply, ClientError> {
        let reply = match &self.route {
            Route::Socket(path) => socket::exchange(path, request, self.timeout)?,
            Route::Network { urls, ca_file } => network::exchange(urls, ca_file.as_deref(), request, self.timeout)?,
        };
        match serde_json::from_str(&reply) {
            Ok(Reply::Error { kind: ErrorKind::Internal, message }) => Err(ClientError::Internal(message)),
            Ok(Reply::Error { message, .. }) => Err(ClientError::Refused(message)),
            Ok(reply) => Ok(reply),
            Err(e) => Err(ClientError::Unreadable(e)),
        }
    }

    /// Where requests go, for a message: the socket's path, or the URLs.
    pub fn describe(&self) -> String {
        match &self.route {
            Route::Socket(path) => format!("its socket {}", path.display()),
            Route::Network { urls, .. } => urls.join(" or "),
        }
    }

    /// How callers are proven on this route, for `config check`.
    pub fn proof(&self) -> String {
        match &self.route {
            Route::Socket(_) => "the kernel names the caller on accountd's Unix socket (SO_PEERCRED)".into(),
            Route::Network { urls, ca_file } => {
                let tls = match (urls.iter().all(|u| u.starts_with("https://")), ca_file) {
                    (true, Some(ca)) => format!("TLS, accountd's certificate checked against {}", ca.display()),
                    (true, None) => "TLS, accountd's certificate checked against the public CAs".into(),
                    (false, _) => "plain HTTP: requests and balances travel in clear (a private network only)".into(),
                };
                format!("a MUNGE credential made for each request; {tls}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::protocol::{ErrorKind, Reply};
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    /// accountd over its connection caps answers at once and closes without reading the request:
    /// the caller gets the refusal, even when writing the request failed (EPIPE) by then.
    #[test]
    fn a_refusal_sent_before_the_request_was_read_is_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("accountd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let refusal = Reply::Error { kind: ErrorKind::Refused, message: "you hold 32 connections".into() };
        let line = serde_json::to_string(&refusal).unwrap() + "\n";
        let server = std::thread::spawn(move || {
            for _ in 0..20 {
                let (mut stream, _) = listener.accept().unwrap();
                stream.write_all(line.as_bytes()).unwrap();
                // Closed unread: the client's request, if it arrived, is never read.
            }
        });
        let accountd = Accountd { route: Route::Socket(socket), timeout: Duration::from_secs(30) };
        let request = Request::Balances { users: vec!["x".repeat(100_000)], all: false };
        for _ in 0..20 {
            match accountd.call(&request) {
                Err(ClientError::Refused(message)) => assert_eq!(message, "you hold 32 connections"),
                other => panic!("{other:?}"),
            }
        }
        server.join().unwrap();
    }
}
