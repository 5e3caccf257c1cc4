//! accountd's Unix socket, on its own host: one line of JSON each way.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gputokens::protocol::{self, Request};

use crate::errors::ClientError;

/// Sends `request` over the socket at `path` and returns the reply line.
pub(crate) fn exchange(path: &Path, request: &Request, timeout: Duration) -> Result<String, ClientError> {
    let at = path.display().to_string();
    let unreachable = |e: std::io::Error| ClientError::Unreachable {
        at: at.clone(),
        reason: format!("{e} (is `accountd serve` running?)"),
    };
    let mut stream = UnixStream::connect(path).map_err(unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    stream.set_write_timeout(Some(timeout)).map_err(unreachable)?;
    let reply = protocol::exchange(&mut stream, request).map_err(unreachable)?;
    if reply.is_empty() {
        return Err(ClientError::NoReply(at));
    }
    Ok(reply)
}
