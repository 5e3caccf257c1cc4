//! Serves the HTTP router under `[http]`'s caps: connections per address and in all (at a cap the
//! address's oldest idle connection is shed for the new one, and counted; only when all are busy is
//! the new one closed), a short deadline for each request's headers (also on an idle keep-alive
//! connection, so connections that never speak are dropped), the same for its body, and
//! `request_timeout` for answering. A connection is busy (never shed) only once its whole request
//! has arrived: one sending its body slowly is as sheddable as an idle one, so a job's trickling
//! POSTs can never keep its node's agent out (the audit's M3).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use gputokens::config::HttpAccess;
use gputokens::daemon::conn_caps::{Busy, ConnectionCaps, Full, Slot};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// The most a client may take to send a request's headers, on a new connection or an idle
/// keep-alive one (`request_timeout` when that is shorter): a real client sends them at once.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The most a client may take to send a request's body after its headers (256 KiB at most, from
/// the same site): a real agent sends it at once.
const BODY_TIMEOUT: Duration = Duration::from_secs(5);

fn reason(full: Full) -> &'static str {
    match full {
        Full::Total => "total",
        Full::Client => "per_address",
    }
}

/// Serves `app` on `tcp` until `stopped` turns true; connections in flight then finish their request.
pub async fn serve(
    tcp: TcpListener,
    app: Router,
    limits: &HttpAccess,
    metrics: Arc<Metrics>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let caps = ConnectionCaps::<IpAddr>::new(limits.max_connections, limits.max_connections_per_address);
    metrics.listener_started("http", &[reason(Full::Total), reason(Full::Client)]);
    let rate = Arc::new(crate::http::rate_limit::RateLimit::default());
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
            Ok(admitted) => {
                if let Some(full) = admitted.shed {
                    metrics.connection_shed("http", reason(full));
                }
                admitted.slot
            }
            Err(full) => {
                metrics.connection_refused("http", reason(full));
                // Once per address (bounded), so a flood does not flood the log too.
                if warned.len() < 1024 && warned.insert(peer.ip()) {
                    tracing::warn!("http: closing connections from {} ({} cap reached)", peer.ip(), reason(full));
                }
                drop(stream);
                continue;
            }
        };
        let app = app.clone();
        let stopped = stopped.clone();
        let limited = Limited { rate: rate.clone(), metrics: metrics.clone() };
        match tls.clone() {
            None => tokio::spawn(serve_connection(stream, peer, slot, app, limited, timeout, stopped)),
            Some(tls) => tokio::spawn(async move {
                // The handshake within the headers' deadline, like a client that never speaks, and
                // as sheddable as an idle connection: a flood of handshakes holds no more sockets.
                let mut stopped = stopped;
                let handshake = tokio::time::timeout(timeout.min(HEADER_TIMEOUT), tls.accept(stream));
                let stream = tokio::select! {
                    done = handshake => match done {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => return tracing::debug!("https connection from {peer}: {e}"),
                        Err(_) => return tracing::debug!("https connection from {peer}: no TLS handshake in time"),
                    },
                    () = slot.shed() => return,
                    () = stop_requested(&mut stopped) => return,
                };
                serve_connection(stream, peer, slot, app, limited, timeout, stopped).await
            }),
        };
        // Let the connections just accepted read their requests before more are accepted: a flood
        // of new connections from one address must not shed a prompt client's before it has spoken.
        tokio::task::yield_now().await;
    }
}

async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    slot: Slot<IpAddr>,
    app: Router,
    limited: Limited,
    timeout: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = Arc::new(slot);
    let requests = slot.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        // Busy once the whole request has arrived and is being answered (without a body: when hyper
        // first polls its answer, which it does only once the replies before it are written; with
        // one: when its body ends) until its response's body is written: not shed meanwhile. A
        // pipelined request behind replies its client never reads stays sheddable.
        let busy: Arc<std::sync::Mutex<Option<Busy<IpAddr>>>> = Arc::default();
        let whole = request.body().is_end_stream();
        let answering = (whole, requests.clone(), busy.clone());
        let request = if whole {
            request.map(axum::body::Body::new)
        } else {
            let (slot, arrived) = (requests.clone(), busy.clone());
            request.map(|body| {
                let deadline = Box::pin(tokio::time::sleep(BODY_TIMEOUT));
                axum::body::Body::new(ArrivingBody {
                    body,
                    deadline,
                    on_end: Some(Box::new(move || {
                        *arrived.lock().unwrap_or_else(|p| p.into_inner()) = slot.busy();
                    })),
                })
            })
        };
        let mut request = request;
        request.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        let allowed = limited.rate.allow(peer.ip().to_canonical(), std::time::Instant::now());
        if !allowed {
            limited.metrics.connection_refused("http", "rate");
        }
        async move {
            let (whole, slot, arrived) = answering;
            if whole {
                *arrived.lock().unwrap_or_else(|p| p.into_inner()) = slot.busy();
            }
            if !allowed {
                let slow_down = [(axum::http::header::RETRY_AFTER, "1")];
                let response = (StatusCode::TOO_MANY_REQUESTS, slow_down, "too many requests from this address\n");
                return Ok::<_, std::convert::Infallible>(response.into_response());
            }
            let response = match tokio::time::timeout(timeout, app.oneshot(request)).await {
                Ok(response) => response?,
                Err(_) => (StatusCode::REQUEST_TIMEOUT, "request not read and answered in time\n").into_response(),
            };
            let busy = busy.lock().unwrap_or_else(|p| p.into_inner()).take();
            Ok::<_, std::convert::Infallible>(
                response.map(|body| axum::body::Body::new(BusyBody { body, _busy: busy })),
            )
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout.min(HEADER_TIMEOUT))
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        // Shed for a newer connection of its address while idle: closed at once.
        () = slot.shed() => return,
        () = stop_requested(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("http connection from {peer}: {e}");
    }
}

/// The per-address request rate, and where to count what it refuses.
#[derive(Clone)]
struct Limited {
    rate: Arc<crate::http::rate_limit::RateLimit>,
    metrics: Arc<Metrics>,
}

/// A response body that keeps its connection marked busy until hyper has written it and drops it.
struct BusyBody {
    body: axum::body::Body,
    _busy: Option<Busy<IpAddr>>,
}

impl http_body::Body for BusyBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body as it arrives: an error once it has taken longer than its deadline, and `on_end`
/// called when its last frame is in (the request is then whole: its connection turns busy).
struct ArrivingBody {
    body: Incoming,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
}

impl http_body::Body for ArrivingBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            if let Some(on_end) = self.on_end.take() {
                on_end();
            }
        }
        match polled {
            Poll::Pending if std::future::Future::poll(self.deadline.as_mut(), cx).is_ready() => Poll::Ready(Some(
                Err(axum::Error::new(format!("the request's body did not arrive within {} s", BODY_TIMEOUT.as_secs()))),
            )),
            Poll::Pending => Poll::Pending,
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(axum::Error::new))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Completes once `stopped` is true (or its sender is gone).
async fn stop_requested(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
