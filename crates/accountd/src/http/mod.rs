//! accountd's HTTP listener: `/metrics` for Prometheus, the JSON API and the node agents' reports.
//! Whatever arrives here is authenticated the way Slurm authenticates its daemons (MUNGE), or with
//! a secret from a root-only file: agent reports pass the [`ReportGate`]; balances follow
//! `sbalance`'s rules (a user sees their own row unless `balances_public`; admins see all).

pub mod host_names;
pub mod listener;
pub mod rate_limit;
pub mod refusal;
pub mod remote_request;
pub mod report_gate;
pub mod reports;
pub mod slurm_bounds;
pub mod state;
pub mod tls;
pub mod web;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gputokens::access::Caller;
use gputokens::protocol::{BalanceRow, ErrorKind, Reply};

use crate::answering;
use gputokens_node_report::{AgentReport, REPORT_PATH};

use crate::metrics::ReasonLabels;
use gputokens_node_report::auth::{self, Presented};
use refusal::json_refusal;
use report_gate::Refusal;
pub use state::AppState;
use state::REPORTS_AT_ONCE;

/// The largest agent report accepted: a node of 16 GPUs and a thousand GPU processes sends far less.
pub const REPORT_MAX_BYTES: usize = 256 << 10;
/// The largest body of any other request (a login form).
pub const SMALL_BODY_MAX_BYTES: usize = 4096;

pub fn router(state: AppState) -> Router {
    let state = Arc::new(state);
    // Everything a browser could be made to read answers only to accountd's own names.
    let read_by_name = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/health", get(|| async { Json(serde_json::json!({ "ok": true })) }))
        .route("/v1/balances", get(balances))
        .route("/v1/balances/{user}", get(balance))
        .merge(crate::http::web::routes())
        // The login form and the API read a few hundred bytes at most: nobody unauthenticated
        // makes accountd hold more (axum's default is 2 MB a request).
        .layer(axum::extract::DefaultBodyLimit::max(SMALL_BODY_MAX_BYTES))
        .layer(axum::middleware::from_fn_with_state(state.clone(), only_our_names));
    Router::new()
        .route(REPORT_PATH, post(agent_report).layer(axum::extract::DefaultBodyLimit::max(REPORT_MAX_BYTES)))
        // Like an agent's report, it carries a MUNGE credential: no page can forge one, whatever name
        // it used. Its body is read only once the credential holds, up to the caller's limit.
        .route(gputokens::protocol::REQUEST_PATH, post(remote_request::remote_request))
        .merge(read_by_name)
        .with_state(state)
}

/// Refuses a request sent to a name that is not accountd's ([`host_names`]) before anything is read
/// for it: the status page with a page saying so, the rest with a line of text.
async fn only_our_names(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(host) = host.filter(|h| !state.host_names.answers_to(h)) {
        let path = request.uri().path();
        state.host_names.refused(&host, path);
        if path == "/web" || path.starts_with("/web/") {
            let message = format!("this status page does not answer to '{host}'; open [web] url");
            return web::refused_page(StatusCode::MISDIRECTED_REQUEST, &message);
        }
        let message = format!(
            "accountd does not answer to '{}': add the name to [http] server_names if it is one of this host's\n",
            gputokens::free_text::printable(&host)
        );
        return (StatusCode::MISDIRECTED_REQUEST, message).into_response();
    }
    next.run(request).await
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let answering = state.answering.clone();
    // Balances are read at scrape time: `accountd tick` or an admin may have changed the ledger.
    // Without per-user metrics nothing is read: a cycle holding the answering lock never holds a
    // scrape (the old audit's L7).
    let (metrics, per_user) = (state.metrics.clone(), state.per_user_metrics);
    let work = tokio::task::spawn_blocking(move || {
        if per_user {
            let s = answering::lock(&answering);
            s.res.ledger.accounts().map(|accounts| s.res.metrics.set_balances(&accounts)).map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(metrics.encode())
    });
    match work.await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn authorization(headers: &HeaderMap) -> Option<Vec<u8>> {
    headers.get(header::AUTHORIZATION).map(|v| v.as_bytes().to_vec())
}

async fn agent_report(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let presented = authorization(&headers);
    // No credential of the site's kind: refused at once, the body unread; the sender is its address.
    if let Err(refusal) = state.gate.expects(Presented::parse(presented.as_deref())) {
        return refused_report(&state, &peer.ip().to_string(), refusal);
    }
    let Ok(slot) = state.report_slots.clone().try_acquire_owned() else {
        let busy = format!("{REPORTS_AT_ONCE} agent reports are being checked; send it again");
        return refused_report(&state, &peer.ip().to_string(), Refusal::busy(busy));
    };
    let shared = state.clone();
    // When it came, not when its turn at the lock came: the energy bound counts real time.
    let received = gputokens::time::now();
    let work = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let state = shared;
        let parse = |body: &[u8]| {
            serde_json::from_slice::<AgentReport>(body)
                .map_err(|e| Refusal::malformed(format!("malformed agent report: {e}")))
        };
        // Until the credential holds, the sender is its address, not the node it claims.
        let (sender, report) = state
            .gate
            .authenticate(Presented::parse(presented.as_deref()), &body, parse)
            .map_err(|r| (peer.ip().to_string(), r))?;
        let slurm_says = state.gate.authorize(&sender, &report, &state.slurm).map_err(|r| (report.node.clone(), r))?;
        state.gate.accepted(&report.node);
        let (report, slurm_says) = reports::keyed(&state.slurm, report, slurm_says);
        let (drain, summary) = {
            let mut reports = state.reports.lock().unwrap_or_else(|p| p.into_inner());
            let reports = &mut *reports;
            reports::ingest(&mut reports.res, &mut reports.state, &report, &slurm_says, received)
        };
        // Slurm's commands run with the lock let go: other nodes' reports go on meanwhile. A drain
        // decided is carried out even when a later step of the report failed.
        if let Some(drain) = drain {
            crate::health::carry_out(&drain, &state.slurm, &mut state::LockedRecord(&state.reports));
        }
        summary.map_err(|e| (report.node.clone(), Refusal::internal(e.to_string())))
    });
    let outcome = match work.await {
        Ok(outcome) => outcome,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    };
    match outcome {
        Ok(summary) => {
            tracing::debug!("agent report: {summary}");
            (StatusCode::OK, "ok\n").into_response()
        }
        Err((from, refusal)) => refused_report(&state, &from, refusal),
    }
}

fn refused_report(state: &AppState, from: &str, refusal: Refusal) -> Response {
    if refusal.status < 500 {
        state.metrics.agent_reports_refused.get_or_create(&ReasonLabels { reason: refusal.reason.into() }).inc();
    }
    state.gate.log_refusal(from, &refusal);
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_refusal(status, &refusal.message)
}

/// How to make a credential for the JSON API.
const API_CREDENTIAL_HELP: &str =
    "authenticate with a MUNGE credential made for the gputokens API, sent on curl's standard input rather than its \
     command line: munge -s 'gputokens api v1' | sed 's/^/Authorization: MUNGE /' | curl -H @- URL";

/// Who is asking the JSON API, as proven: a MUNGE credential's uid, or the admin token.
enum ApiIdentity {
    Uid(u32),
    AdminToken,
}

impl ApiIdentity {
    fn caller(self, config: &gputokens::Config) -> Caller {
        match self {
            ApiIdentity::Uid(uid) => Caller::identify(uid, config),
            ApiIdentity::AdminToken => Caller { uid: 0, name: "admin token".into(), admin: true },
        }
    }
}

/// Checks the credential (munged is asked outside the answering lock).
fn api_identity(state: &AppState, peer: SocketAddr, presented: Presented) -> Result<ApiIdentity, (StatusCode, String)> {
    match presented {
        Presented::Munge(cred) => {
            let cred = crate::munge::decode(cred, state.munge_socket.as_deref()).map_err(|e| match e.kind {
                crate::munge::MungeErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                _ => (StatusCode::UNAUTHORIZED, e.to_string()),
            })?;
            // Only a credential made for this API: one captured from elsewhere (a job step's, which
            // the SlurmUser encodes) must not make its bearer the SlurmUser here.
            if cred.payload != auth::API_PAYLOAD {
                return Err((StatusCode::UNAUTHORIZED, API_CREDENTIAL_HELP.into()));
            }
            Ok(ApiIdentity::Uid(cred.uid))
        }
        // The listener speaks plain HTTP: over a network the token would travel in clear. From this
        // host, or through a trusted (TLS) proxy, only.
        Presented::Bearer(_) if !token_may_come_from(peer, &state.trusted_proxies) => Err((
            StatusCode::FORBIDDEN,
            "the admin token is taken only from this host or a [web] trusted_proxies address: it would travel \
             in clear"
                .into(),
        )),
        Presented::Bearer(token) => match &state.admin_token {
            Some(expected) if auth::same_secret(token, expected) => Ok(ApiIdentity::AdminToken),
            _ => Err((StatusCode::UNAUTHORIZED, "not the token of [http] admin_token_file".into())),
        },
        Presented::None | Presented::Unknown | Presented::Signed { .. } => {
            Err((StatusCode::UNAUTHORIZED, format!("{API_CREDENTIAL_HELP}, or an admin bearer token")))
        }
    }
}

async fn balances(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    rows(state, peer, authorization(&headers), None).await
}

async fn balance(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(user): Path<String>,
) -> Response {
    rows(state, peer, authorization(&headers), Some(user)).await
}

/// Whether a bearer token may come from `peer`: this host, or a trusted proxy.
fn token_may_come_from(peer: SocketAddr, trusted_proxies: &[std::net::IpAddr]) -> bool {
    let address = peer.ip().to_canonical();
    address.is_loopback() || trusted_proxies.contains(&address)
}

/// Balance rows the caller may see: `user`'s (when allowed), else all (admins, `balances_public`)
/// or the caller's own.
async fn rows(state: Arc<AppState>, peer: SocketAddr, presented: Option<Vec<u8>>, user: Option<String>) -> Response {
    // Each asks munged (and may wait on the answering lock): a bounded number at once.
    let Ok(slot) = state.api_slots.clone().try_acquire_owned() else {
        let busy = format!("{REPORTS_AT_ONCE} API requests are being answered; try again");
        return json_refusal(StatusCode::SERVICE_UNAVAILABLE, &busy);
    };
    let work = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let identity = api_identity(&state, peer, Presented::parse(presented.as_deref()))?;
        // Who asks is looked up (a directory server) before the lock is taken (the audit's L1).
        let config = answering::lock(&state.answering).res.config.clone();
        let caller = identity.caller(&config);
        // So are the users named (only one may be: the path's).
        let system_users = crate::balance_row::SystemUsers::looked_up(user.iter().chain([&caller.name]));
        let s = answering::lock(&state.answering);
        let names: Vec<String> = match user {
            Some(u) if caller.may_view(&u, &s.res.config) => vec![u],
            Some(u) => {
                return Err((StatusCode::FORBIDDEN, format!("{} may not see the balance of '{u}'", caller.name)));
            }
            None if caller.admin || s.res.config.balances_public => s
                .res
                .ledger
                .accounts()
                .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .into_iter()
                .map(|a| a.user)
                .collect(),
            None => vec![caller.name.clone()],
        };
        let row = |name: &String| {
            crate::balance_row::balance_row(&s.res, name, gputokens::time::now(), &system_users).map_err(|reply| {
                match reply {
                    // The ledger failed (LedgerError::is_callers_fault): ours, not a user that is missing.
                    Reply::Error { kind: ErrorKind::Internal, message } => (StatusCode::INTERNAL_SERVER_ERROR, message),
                    Reply::Error { message, .. } => (StatusCode::NOT_FOUND, message),
                    other => (StatusCode::INTERNAL_SERVER_ERROR, format!("{other:?}")),
                }
            })
        };
        names.iter().map(row).collect::<Result<Vec<BalanceRow>, _>>()
    });
    match work.await {
        Ok(Ok(rows)) => Json(crate::balance_json::Balances::of(&rows)).into_response(),
        Ok(Err((status, message))) => json_refusal(status, &message),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_token_comes_only_from_this_host_or_a_trusted_proxy() {
        let trusted = ["10.0.0.5".parse().unwrap()];
        for (peer, may) in [
            ("127.0.0.1:1", true),
            ("[::1]:1", true),
            ("[::ffff:127.0.0.1]:1", true),
            ("10.0.0.5:1", true),
            ("[::ffff:10.0.0.5]:1", true),
            ("10.0.0.6:1", false),
            ("[2001:db8::1]:1", false),
        ] {
            assert_eq!(token_may_come_from(peer.parse().unwrap(), &trusted), may, "{peer}");
        }
    }
}
