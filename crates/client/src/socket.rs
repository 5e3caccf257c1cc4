//! accountd's Unix socket, on its own host: one line of JSON each way.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gputokens::protocol::{self, Request};

use crate::ClientError;

/// Sends `request` over the socket at `path` and returns the reply line.
pub(crate) fn exchange(path: &Path, request: &Request, timeout: Duration) -> Result<String, ClientError> {
    let at = path.display().to_string();
    let unreachable = |e: std::io::Error| ClientError::Unreachable { at: at.clone(), reason: e.to_string() };
    let mut stream = UnixStream::connect(path).map_err(unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    stream.set_write_timeout(Some(timeout)).map_err(unreachable)?;
    let reply = protocol::exchange(&mut stream, request).map_err(unreachable)?;
    if reply.is_empty() {
        return Err(ClientError::NoReply(at));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Accountd, Route};
    use gputokens::protocol::{ErrorKind, Reply};
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
