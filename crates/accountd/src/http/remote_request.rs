//! `POST /v1/request`: the socket's requests from the other hosts of the site (sbalance and sbatch's
//! balance line on login and compute nodes). The caller is proven as Slurm's own clients are, by a
//! MUNGE credential: made for this purpose and this one request (its payload carries the request's
//! SHA-256), at most a minute old, and decoded once (munged refuses a replay). The request is then
//! answered exactly as over the socket, as that user, except that changes to balances are taken
//! only where the site allows them (`[http] remote_writes`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gputokens::access::Caller;
use gputokens::protocol::{request_credential_payload, ErrorKind, Reply, Request};
use gputokens_node_report::auth::Presented;
use sha2::{Digest, Sha256};

use super::refusal::json_refusal;
use super::state::{AppState, REPORTS_AT_ONCE};
use crate::answering;
use crate::munge::{self, MungeErrorKind};

/// A user's request is small (sbalance -u with many names is well under this).
const MAX_USER_BODY: usize = 64 << 10;
/// An admin's may import a site's balances (where remote writes are allowed).
const MAX_ADMIN_BODY: usize = 16 << 20;
/// How old a credential may be: it is made the moment before it is sent.
const MAX_CREDENTIAL_AGE_SECS: i64 = 60;

/// Why a request is not answered: its status and message.
type Refusal = (StatusCode, String);

pub(super) async fn remote_request(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let credential = match Presented::parse(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes())) {
        Presented::Munge(credential) => credential.to_string(),
        _ => return refused((StatusCode::UNAUTHORIZED, HELP.into())),
    };
    // Each asks munged (and may wait on the answering lock): a bounded number at once.
    let Ok(slot) = state.api_slots.clone().try_acquire_owned() else {
        let busy = format!("{REPORTS_AT_ONCE} API requests are being answered; try again");
        return refused((StatusCode::SERVICE_UNAVAILABLE, busy));
    };
    // Who asks, and that the credential was made for a request, before a byte of the body is read:
    // a stranger's body is never buffered. The slot goes with the work (a blocking thread that
    // waits on munged or the answering lock holds it until it is done).
    let shared = state.clone();
    let proven = tokio::task::spawn_blocking(move || (prove(&shared, &credential), slot)).await;
    let ((caller, config, payload), slot) = match proven {
        Ok((Ok(proven), slot)) => (proven, slot),
        Ok((Err(refusal), _)) => return refused(refusal),
        Err(e) => return refused((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    };
    // Only an admin's write (an import) is large, and only where the site takes writes from here.
    let limit = if caller.admin && config.http.remote_writes { MAX_ADMIN_BODY } else { MAX_USER_BODY };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return refused((StatusCode::PAYLOAD_TOO_LARGE, format!("request too large: {} KiB at most", limit >> 10)));
    }
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(body) => body,
        Err(e) => {
            let what =
                format!("the request's body did not arrive whole within its time, or is over {} KiB: {e}", limit >> 10);
            return refused((StatusCode::BAD_REQUEST, what));
        }
    };
    if payload != request_credential_payload(&format!("{:x}", Sha256::digest(&body))).as_bytes() {
        let wrong = "the MUNGE credential was made for another request (or another purpose)";
        return refused((StatusCode::UNAUTHORIZED, wrong.into()));
    }
    let request = match serde_json::from_slice::<Request>(&body) {
        Ok(request) => request.with_slurm_account_names(),
        Err(e) => {
            return answered(Reply::Error { kind: ErrorKind::Invalid, message: format!("malformed request: {e}") })
        }
    };
    if let Some(problem) = request.free_text_problem() {
        return answered(Reply::Error { kind: ErrorKind::Invalid, message: problem });
    }
    // A login link works once, for whoever holds it: it crosses the network only encrypted.
    if matches!(request, Request::WebLogin) && config.http.tls.is_none() && !config.web.allow_http {
        let message = "sbalance --web gives a login link on this host only over TLS (it would cross the network \
                       in clear): run it on accountd's host, or ask your administrators to give accountd a \
                       certificate ([http] tls_certificate)";
        return answered(Reply::Error { kind: ErrorKind::Refused, message: message.into() });
    }
    if request.changes_balances() && !config.http.remote_writes {
        tracing::warn!("{} asked from {} to change balances over the network: refused", caller.name, peer.ip());
        let message = "balances are changed only on accountd's own host, over its socket ([http] remote_writes is off)";
        return answered(Reply::Error { kind: ErrorKind::Refused, message: message.into() });
    }
    let work = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        crate::socket::answer_blocking(&state.answering, &caller, &config, request)
    });
    match work.await {
        Ok(reply) => answered(reply),
        Err(e) => refused((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// How to make a credential for this path.
const HELP: &str = "authenticate with a MUNGE credential made for the request: its payload is \
                    \"gputokens request v1\\n\" and the body's SHA-256 in hex (sbalance does it)";

/// The credential's user, the config as read for it and the credential's payload; munged checks it
/// is this site's, unexpired and never decoded before.
fn prove(state: &AppState, credential: &str) -> Result<(Caller, gputokens::Config, Vec<u8>), Refusal> {
    let decoded = munge::decode(credential, state.munge_socket.as_deref()).map_err(|e| match e.kind {
        MungeErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        _ => (StatusCode::UNAUTHORIZED, e.to_string()),
    })?;
    // Made for a request (the purpose and a SHA-256), else refused before its body is read.
    let for_a_request = request_credential_payload("").len() + 64 == decoded.payload.len()
        && decoded.payload.starts_with(request_credential_payload("").as_bytes());
    if !for_a_request {
        let wrong = "the MUNGE credential was made for another purpose than a gputokens request";
        return Err((StatusCode::UNAUTHORIZED, wrong.into()));
    }
    let age = gputokens::time::now() - decoded.encoded_at;
    if !(-MAX_CREDENTIAL_AGE_SECS..=MAX_CREDENTIAL_AGE_SECS).contains(&age) {
        let stale = format!("the MUNGE credential was made {age} s ago: at most {MAX_CREDENTIAL_AGE_SECS} s");
        return Err((StatusCode::UNAUTHORIZED, stale));
    }
    // Who asks is looked up (a directory server) before the answering lock is taken (the audit's L1).
    let config = answering::lock(&state.answering).res.config.clone();
    let caller = Caller::identify(decoded.uid, &config);
    Ok((caller, config, decoded.payload))
}

/// accountd's answer, as the socket gives it.
fn answered(reply: Reply) -> Response {
    (StatusCode::OK, Json(reply)).into_response()
}

/// No answer: who asks is not proven, or accountd cannot take the request now.
fn refused((status, message): Refusal) -> Response {
    json_refusal(status, &message)
}
