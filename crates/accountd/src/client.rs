//! The client side of accountd's socket, used by `sbalance` and `accountd admin`: plain blocking I/O,
//! no runtime to start, so a query costs a connect and a round trip.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gputokens::protocol::{ErrorKind, Reply, Request};

use crate::error::{CliError, CliResult};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one request and returns accountd's reply; a `Reply::Error` becomes a `CliError`.
pub fn call(socket: &Path, request: &Request) -> CliResult<Reply> {
    let unreachable = |e: std::io::Error| {
        CliError::failed(format!("cannot reach accountd at {}: {e} (is `accountd serve` running?)", socket.display()))
    };
    let mut stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(unreachable)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(unreachable)?;
    let mut line = serde_json::to_string(request).map_err(|e| CliError::failed(e.to_string()))?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).map_err(unreachable)?;
    if reply.is_empty() {
        return Err(CliError::failed(format!(
            "accountd at {} closed the connection without a reply",
            socket.display()
        )));
    }
    match serde_json::from_str(&reply) {
        Ok(Reply::Error { kind: ErrorKind::Internal, message }) => Err(CliError::failed(message)),
        Ok(Reply::Error { message, .. }) => Err(CliError::refused(message)),
        Ok(reply) => Ok(reply),
        Err(e) => Err(CliError::failed(format!("unreadable reply from accountd: {e}"))),
    }
}
