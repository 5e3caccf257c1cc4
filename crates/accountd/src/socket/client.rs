//! The client side of accountd's socket, used by `sbalance` and `accountd admin`: plain blocking I/O,
//! no runtime to start, so a query costs a connect and a round trip.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gputokens::protocol::{self, ErrorKind, Reply, Request};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Asking accountd failed, or accountd answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach accountd at {}: {source} (is `accountd serve` running?)", socket.display())]
    Unreachable { socket: PathBuf, source: std::io::Error },
    #[error("accountd at {} closed the connection without a reply", .0.display())]
    NoReply(PathBuf),
    #[error("unreadable reply from accountd: {0}")]
    Unreadable(serde_json::Error),
    /// A reply that does not answer the request sent.
    #[error("unexpected reply from accountd: {0:?}")]
    Unexpected(Box<Reply>),
    /// accountd refused the request or found it invalid: the caller's to fix.
    #[error("{0}")]
    Refused(String),
    /// accountd failed to answer.
    #[error("{0}")]
    Internal(String),
}

/// Sends one request and returns accountd's reply; a `Reply::Error` becomes a [`ClientError`].
pub fn call(socket: &Path, request: &Request) -> Result<Reply, ClientError> {
    let unreachable = |source| ClientError::Unreachable { socket: socket.to_path_buf(), source };
    let mut stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(unreachable)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(unreachable)?;
    let reply = protocol::exchange(&mut stream, request).map_err(unreachable)?;
    if reply.is_empty() {
        return Err(ClientError::NoReply(socket.to_path_buf()));
    }
    match serde_json::from_str(&reply) {
        Ok(Reply::Error { kind: ErrorKind::Internal, message }) => Err(ClientError::Internal(message)),
        Ok(Reply::Error { message, .. }) => Err(ClientError::Refused(message)),
        Ok(reply) => Ok(reply),
        Err(e) => Err(ClientError::Unreadable(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;

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
        let request = Request::Balances { users: vec!["x".repeat(100_000)], all: false };
        for _ in 0..20 {
            match call(&socket, &request) {
                Err(ClientError::Refused(message)) => assert_eq!(message, "you hold 32 connections"),
                other => panic!("{other:?}"),
            }
        }
        server.join().unwrap();
    }
}
