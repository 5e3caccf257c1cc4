//! The agent's `/metrics` listener, under caps (the audit's N3). Every local user can reach it
//! (127.0.0.1:9818 by default), and each connection it holds is a descriptor that the sampling loop
//! then lacks for NVML, /proc, `jobs_dir`, munged and accountd: a user holding a thousand idle
//! connections used to silence the node's reports. So it holds at most [`MAX_CONNECTIONS`] in all and
//! [`MAX_CONNECTIONS_PER_ADDRESS`] from one address (every local user is 127.0.0.1); at a cap the
//! oldest connection is shed for the new one (`gputokens::daemon::conn_caps`, as accountd's
//! listeners do), and a client has [`HEADER_TIMEOUT`] to send a request's headers, also between
//! requests on a kept-alive connection. No connection is ever marked busy: a `/metrics` answer is
//! made at once on this one thread, and one whose client does not read it must not hold its
//! descriptor either.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use gputokens::daemon::conn_caps::{ConnectionCaps, Slot};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Connections held at once, in all: a node's scrapers are a few, and the agent's open-file limit
/// (1024 where the unit sets none) must keep room for the sampling loop.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections held at once from one address.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;
/// The most a client may take to send a request's headers, on a new connection or an idle kept-alive
/// one: a scraper sends them at once.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a listener that keeps shedding connections says so.
const SHED_LOG_EVERY: Duration = Duration::from_secs(60);

/// Serves `app` on `tcp` under the caps until `stopped` turns true.
pub async fn serve(tcp: TcpListener, app: axum::Router, mut stopped: watch::Receiver<bool>) {
    let caps = ConnectionCaps::<IpAddr>::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS);
    let mut shed = ShedLog::default();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop_requested(&mut stopped) => break,
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to close rather than spin.
                    tracing::warn!("agent metrics listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let slot = match caps.admit(peer.ip()) {
            Ok(admitted) => {
                if admitted.shed.is_some() {
                    shed.one(peer);
                }
                admitted.slot
            }
            // Only were some connection busy, which none is; closed at once all the same.
            Err(_) => {
                drop(stream);
                continue;
            }
        };
        tokio::spawn(serve_connection(stream, peer, slot, app.clone(), stopped.clone()));
        // Let the connection just accepted read its request before more are accepted: a flood of
        // new connections must not shed a prompt client's before it has spoken.
        tokio::task::yield_now().await;
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot<IpAddr>,
    app: axum::Router,
    mut stopped: watch::Receiver<bool>,
) {
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        // Shed for a newer connection: closed at once, which frees its descriptor.
        () = slot.shed() => return,
        () = stop_requested(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("agent metrics connection from {peer}: {e}");
    }
}

/// Says at most once a minute how many connections were shed, so a flood does not flood the log too.
#[derive(Default)]
struct ShedLog {
    since: usize,
    last: Option<Instant>,
}

impl ShedLog {
    fn one(&mut self, peer: SocketAddr) {
        self.since += 1;
        if self.last.is_some_and(|last| last.elapsed() < SHED_LOG_EVERY) {
            return;
        }
        tracing::warn!(
            "agent metrics listener: at its cap of {MAX_CONNECTIONS} connections ({MAX_CONNECTIONS_PER_ADDRESS} \
             per address), shed {} connection(s) for new ones (the latest from {})",
            self.since,
            peer.ip()
        );
        self.since = 0;
        self.last = Some(Instant::now());
    }
}

/// Completes once `stopped` is true (or its sender is gone).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
