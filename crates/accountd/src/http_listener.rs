//! Serves the HTTP router under `[http]`'s caps: connections per address and in all (more are closed
//! at once and counted), a deadline for each request's headers (also on an idle keep-alive
//! connection, so connections that never speak are dropped) and for reading its body and answering.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use gputokens::config::HttpAccess;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::conn_caps::{ConnectionCaps, Full};
use crate::metrics::Metrics;

/// Serves `app` on `tcp` until `stopped` turns true; connections in flight then finish their request.
pub async fn serve(
    tcp: TcpListener,
    app: Router,
    limits: &HttpAccess,
    metrics: Arc<Metrics>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let caps = ConnectionCaps::<IpAddr>::new(limits.max_connections, limits.max_connections_per_address);
    let timeout = limits.request_timeout;
    let mut warned = std::collections::HashSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop_requested(&mut stopped) => break,
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: wait for connections to close rather than spin.
                    tracing::warn!("http accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let slot = match caps.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(full) => {
                let reason = match full {
                    Full::Total => "total",
                    Full::Client => "per_address",
                };
                metrics.connection_refused("http", reason);
                // Once per address (bounded), so a flood does not flood the log too.
                if warned.len() < 1024 && warned.insert(peer.ip()) {
                    tracing::warn!("http: closing connections from {} ({reason} cap reached)", peer.ip());
                }
                drop(stream);
                continue;
            }
        };
        let app = app.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, app, timeout, stopped).await;
        });
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    timeout: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        async move {
            match tokio::time::timeout(timeout, app.oneshot(request)).await {
                Ok(response) => response,
                Err(_) => Ok((StatusCode::REQUEST_TIMEOUT, "request not read and answered in time\n").into_response()),
            }
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop_requested(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("http connection from {peer}: {e}");
    }
}

/// Completes once `stopped` is true (or its sender is gone).
async fn stop_requested(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
