//! The client side of accountd's socket, used by `sbalance` and `accountd admin`: plain blocking I/O,
//! no runtime to start, so a query costs a connect and a round trip.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gputokens::protocol::{ErrorKind, Reply, Request};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Asking accountd failed, or accountd answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach accountd at {}: {source} (is `accountd serve` running?)", socket.display())]
    Unreachable { socket: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Encode(serde_json::Error),
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
    let mut line = serde_json::to_string(request).map_err(ClientError::Encode)?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).map_err(unreachable)?;
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
