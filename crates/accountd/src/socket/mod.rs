//! `accountd serve`: answers sbalance and admin requests on a Unix socket and runs the periodic
//! cycles. `launch` takes a bound listener and a shutdown future so tests can run it in-process.

mod action_log;
pub mod handler;
pub(crate) mod pools;
mod record;
mod web_login;

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gputokens::access::Caller;
use gputokens::daemon::conn_caps::{ConnectionCaps, Full, Slot};
use gputokens::protocol::{ErrorKind, Reply, Request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::answering::{self, Shared};
use crate::balance_row::SystemUsers;
use crate::cycles::serve::{Cycles, Kind};

/// Largest request accepted from an admin (an import of a big site's state file fits easily).
const MAX_REQUEST: u64 = 16 << 20;
/// Largest request accepted from anyone else: a balance request for 1000 users fits.
const MAX_USER_REQUEST: u64 = 64 << 10;
/// A client that sends no whole request in this long is answered and dropped: connections that
/// never speak would otherwise hold a descriptor each until accountd runs out of them.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long the rest of a request too large is read, after its refusal, before the connection closes.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// Connections held at once, in all and by one user: one user's thousand idle connections get
/// that user a few, and everyone else is still answered.
pub const MAX_CONNECTIONS: usize = 1024;
pub const MAX_CONNECTIONS_PER_USER: usize = 32;

/// Binds `path` (replacing a stale socket) so that every local user can connect: who they are is
/// checked per request. Bound and listening under a temporary name first, then renamed into place:
/// the socket appears only once it accepts (a client that sees it is never refused), and a stale
/// one is replaced in one step.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    make_socket_dir(path)?;
    // Short, in the same directory: no longer than a socket path may be where `path` is.
    let temporary = path.with_file_name(format!(".{:x}", std::process::id()));
    match std::fs::remove_file(&temporary) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(&temporary)?;
    let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o666))
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    Ok(listener)
}

/// Creates the socket's directory when missing, open to every user (the daemon's umask would hide
/// the socket).
pub fn make_socket_dir(socket: &Path) -> std::io::Result<()> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Serves until `shutdown` completes; charges every `intervals.charge` and checks every
/// `intervals.check` (`cycles`: beside the answering, never in its way). Shutdown waits for the
/// cycles under way.
pub async fn launch(
    listener: UnixListener,
    answering: Shared,
    mut cycles: Cycles,
    lead: std::sync::Arc<tokio::sync::Notify>,
    shutdown: impl Future<Output = ()>,
) {
    let Ok((charge_every, check_every, metrics)) =
        answering.lock().map(|s| (s.res.config.intervals.charge, s.res.config.intervals.check, s.res.metrics.clone()))
    else {
        return tracing::error!("answering lock poisoned at start");
    };
    let caps = ConnectionCaps::<u32>::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_USER);
    metrics.listener_started("socket", &["total", "per_user"]);
    let mut charge_ticker = tokio::time::interval(charge_every);
    let mut check_ticker = tokio::time::interval(check_every);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = charge_ticker.tick() => cycles.start(Kind::Charge),
            _ = check_ticker.tick() => cycles.start(Kind::Check),
            // Come to lead the ledger: its cycles now, not at their next turn.
            _ = lead.notified() => {
                cycles.start(Kind::Check);
                cycles.start(Kind::Charge);
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    admit(stream, &caps, &metrics, &answering);
                    // Let the connections just accepted read their requests before more are
                    // accepted: a user's flood must not shed a prompt client's before it has spoken.
                    tokio::task::yield_now().await;
                }
                Err(e) => tracing::warn!("accept failed: {e}"),
            },
        }
    }
    tracing::info!("accountd stopping");
    cycles.finish().await;
}

/// Serves a connection; at the caps an idle connection (no whole request yet) is shed for it, and
/// only when every held one is busy is it told so and closed.
fn admit(stream: UnixStream, caps: &ConnectionCaps<u32>, metrics: &crate::metrics::Metrics, answering: &Shared) {
    let uid = match stream.peer_cred() {
        Ok(cred) => cred.uid(),
        Err(e) => return tracing::warn!("cannot identify a client: {e}"),
    };
    let reason = |full| match full {
        Full::Total => "total",
        Full::Client => "per_user",
    };
    match caps.admit(uid) {
        Ok(admitted) => {
            if let Some(full) = admitted.shed {
                metrics.connection_shed("socket", reason(full));
            }
            let answering = answering.clone();
            tokio::spawn(serve_connection(stream, uid, admitted.slot, answering));
        }
        Err(full) => {
            let message = match full {
                Full::Total => format!("accountd is busy: {MAX_CONNECTIONS} connections are open"),
                Full::Client => format!("you hold {MAX_CONNECTIONS_PER_USER} connections to accountd already"),
            };
            metrics.connection_refused("socket", reason(full));
            let (_, write) = stream.into_split();
            tokio::spawn(send_reply(write, Reply::Error { kind: ErrorKind::Internal, message }));
        }
    }
}

async fn serve_connection(stream: UnixStream, uid: u32, slot: Slot<u32>, answering: Shared) {
    let (read, write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_USER_REQUEST));
    let read = tokio::select! {
        read = tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut reader, &mut line, uid, &answering)) => read,
        // Shed for a newer connection of the same user before it said anything whole: closed.
        () = slot.shed() => return,
    };
    let _busy = slot.busy();
    if let Ok(Ok(0)) = read {
        return; // closed without a word
    }
    // Cut at the limit, not ended by the client: too long to be taken.
    if !line.ends_with('\n') && reader.get_ref().limit() == 0 {
        let message = format!("request too large: {} KiB at most (more for admins only)", MAX_USER_REQUEST >> 10);
        send_reply(write, Reply::Error { kind: ErrorKind::Invalid, message }).await;
        // The client may still be sending the rest: closing on unread bytes resets the connection,
        // and it would read the reset instead of the reply. Read and drop the rest, bounded.
        let mut rest = reader.into_inner().into_inner().take(MAX_REQUEST);
        let _ = tokio::time::timeout(LINGER, tokio::io::copy(&mut rest, &mut tokio::io::sink())).await;
        return;
    }
    let reply = match read {
        Ok(Ok(_)) => match serde_json::from_str::<Request>(&line) {
            Ok(request) => match request.free_text_problem() {
                Some(problem) => Reply::Error { kind: ErrorKind::Invalid, message: problem },
                None => answer(answering, uid, request.with_slurm_account_names()).await,
            },
            Err(e) => Reply::Error { kind: ErrorKind::Invalid, message: format!("malformed request: {e}") },
        },
        Ok(Err(e)) => Reply::Error { kind: ErrorKind::Invalid, message: format!("cannot read request: {e}") },
        Err(_) => Reply::Error {
            kind: ErrorKind::Invalid,
            message: format!("no request within {} s", REQUEST_TIMEOUT.as_secs()),
        },
    };
    send_reply(write, reply).await;
}

/// Reads one request line: at most MAX_USER_REQUEST bytes, MAX_REQUEST for an admin (asked only
/// when a request is that long, off the runtime: it looks up the caller's groups).
async fn read_request(
    reader: &mut BufReader<tokio::io::Take<tokio::net::unix::OwnedReadHalf>>,
    line: &mut String,
    uid: u32,
    answering: &Shared,
) -> std::io::Result<usize> {
    let first = reader.read_line(line).await?;
    if line.ends_with('\n') || reader.get_ref().limit() > 0 {
        return Ok(first);
    }
    let answering = answering.clone();
    let admin = tokio::task::spawn_blocking(move || {
        // Looked up (a directory server) with the lock released (the audit's L1).
        let config = answering::lock(&answering).res.config.clone();
        Caller::identify(uid, &config).admin
    })
    .await
    .unwrap_or(false);
    if !admin {
        return Ok(first);
    }
    reader.get_mut().set_limit(MAX_REQUEST - MAX_USER_REQUEST);
    Ok(first + reader.read_line(line).await?)
}

/// Writes the reply line; a client that does not read it in time is dropped.
async fn send_reply(mut write: tokio::net::unix::OwnedWriteHalf, reply: Reply) {
    let mut out = serde_json::to_string(&reply).unwrap_or_default();
    out.push('\n');
    match tokio::time::timeout(REQUEST_TIMEOUT, write.write_all(out.as_bytes())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("client went away: {e}"),
        Err(_) => tracing::debug!("client did not read its reply within {} s", REQUEST_TIMEOUT.as_secs()),
    }
}

/// How long an admin's change waits for its journal line before the reply goes out anyway.
const JOURNAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn answer(answering: Shared, uid: u32, request: Request) -> Reply {
    let work = tokio::task::spawn_blocking(move || {
        // Who asks is looked up (getpwuid, getgrouplist: a directory server) before the lock is
        // taken: a slow lookup holds this request alone (the audit's L1).
        let config = answering::lock(&answering).res.config.clone();
        let caller = Caller::identify(uid, &config);
        answer_blocking(&answering, &caller, &config, request)
    });
    work.await.unwrap_or_else(|e| Reply::Error { kind: ErrorKind::Internal, message: format!("accountd failed: {e}") })
}

/// Answers `request` from `caller`, proven already (by the kernel here, by MUNGE over HTTP), with
/// `config` as read before the lock was taken: takes the answering lock, so call it on a blocking
/// thread.
pub(crate) fn answer_blocking(
    answering: &Shared,
    caller: &Caller,
    config: &gputokens::Config,
    request: Request,
) -> Reply {
    // So are the users the request names (a directory server may take seconds).
    let system_users = SystemUsers::looked_up(handler::named_users(&request).into_iter().chain([&caller.name]));
    // A change on the writer's connection and lock: sbalance never waits behind it.
    let target = answering::Answering::for_request(answering, &request);
    let mut s = answering::lock(&target);
    let action = action_log::Action::of(&request);
    let now = gputokens::time::now();
    let (mut reply, changed) = handler::handle_with(&mut s, caller, request, now, &system_users);
    if changed {
        match &action {
            Some(action) => tracing::info!("{}", action.line(&caller.name, &reply)),
            None => tracing::info!("{} changed the ledger", caller.name),
        }
    } else if let Reply::Error { kind: ErrorKind::Refused, message } = &reply {
        tracing::warn!("{} was refused: {message}", caller.name);
    }
    let publisher = s.publisher.clone();
    drop(s);
    // Written with the answering lock let go (a ledger read, a name lookup, an fsync); the change's
    // reply waits for it, so slurmctld's plugin knows of the change once the command returns.
    if changed {
        if let Err(e) = publisher.publish(now) {
            tracing::error!("cannot write the balance snapshot: {e}");
        }
    }
    if let Reply::Balances { shadow, .. } = &mut reply {
        // Status files read and uids named with the lock released, like the caller above.
        let scope = match caller.admin {
            true => crate::shadow_view::Scope::Everyone,
            false => crate::shadow_view::Scope::User { name: &caller.name, uid: Some(caller.uid) },
        };
        *shadow = crate::shadow_view::view(config, scope, now);
    }
    // The change's journal line, appended by the exporter with the lock released: the admin's
    // command returns once it is written, or after 2 s (the journal's storage hung; it is
    // written when it can be).
    if changed && !crate::admin_journal::wait(crate::admin_journal::request(), JOURNAL_WAIT) {
        tracing::warn!("the admin journal was not written within {} s; its export goes on", JOURNAL_WAIT.as_secs());
    }
    reply
}

#[cfg(test)]
mod pool_tests;

#[cfg(test)]
mod bind_tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    /// The socket appears in place of a stale one already listening, open to every user, and no
    /// temporary name is left beside it.
    #[tokio::test]
    async fn the_socket_appears_listening_in_place_of_a_stale_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/accountd.sock");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "stale").unwrap();
        let _listener = bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);
        std::os::unix::net::UnixStream::connect(&path).expect("it accepts at once");
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["accountd.sock"]);
    }
}
