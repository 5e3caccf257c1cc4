//! accountd's HTTP listener (loopback by default): `/metrics` for Prometheus and a read-only JSON API
//! for operators' tools. Users query their own balance through `sbalance` and the Unix socket.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gputokens::protocol::{BalanceRow, Reply};

use crate::agent::report::{read_token, AgentReport, REPORT_PATH};
use crate::error::{CliError, CliResult};
use crate::server::Shared;

#[derive(Clone)]
pub struct AppState {
    pub service: Shared,
    /// Agents must present this (`[agent] token_file`) when set.
    agent_token: Option<String>,
}

impl AppState {
    pub fn new(service: Shared) -> CliResult<AppState> {
        let token_file = service.lock().ok().and_then(|s| s.config.agent.token_file.clone());
        let agent_token = match token_file {
            Some(path) => Some(
                read_token(&path)
                    .map_err(|e| CliError::refused(format!("agent.token_file {}: {e}", path.display())))?,
            ),
            None => None,
        };
        Ok(AppState { service, agent_token })
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route(REPORT_PATH, post(agent_report))
        .route("/v1/health", get(|| async { Json(serde_json::json!({ "ok": true })) }))
        .route("/v1/balances", get(balances))
        .route("/v1/balances/{user}", get(balance))
        .with_state(Arc::new(state))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let service = state.service.clone();
    // Balances are read at scrape time: `accountd tick` or an admin may have changed the ledger.
    let work = tokio::task::spawn_blocking(move || {
        let s = service.lock().unwrap_or_else(|p| p.into_inner());
        s.ledger.accounts().map(|accounts| s.metrics.set_balances(&accounts)).map_err(|e| e.to_string())?;
        Ok::<_, String>(s.metrics.encode())
    });
    match work.await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn agent_report(State(state): State<Arc<AppState>>, headers: HeaderMap, body: String) -> Response {
    if let Some(token) = &state.agent_token {
        let presented =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            tracing::warn!("agent report refused: missing or wrong token");
            return (StatusCode::UNAUTHORIZED, "agent report needs the token of [agent] token_file\n").into_response();
        }
    }
    let report: AgentReport = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("malformed agent report: {e}\n")).into_response(),
    };
    let service = state.service.clone();
    let work = tokio::task::spawn_blocking(move || {
        let mut s = service.lock().unwrap_or_else(|p| p.into_inner());
        crate::usage::agents::ingest(&mut s, &report)
    });
    match work.await {
        Ok(Ok(summary)) => {
            tracing::debug!("agent report: {summary}");
            (StatusCode::OK, "ok\n").into_response()
        }
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn balances(State(state): State<Arc<AppState>>) -> Response {
    rows(state, None).await
}

async fn balance(State(state): State<Arc<AppState>>, Path(user): Path<String>) -> Response {
    rows(state, Some(user)).await
}

/// Balance rows as an admin would see them (the listener is for operators, loopback by default).
async fn rows(state: Arc<AppState>, user: Option<String>) -> Response {
    let service = state.service.clone();
    let work = tokio::task::spawn_blocking(move || {
        let s = service.lock().unwrap_or_else(|p| p.into_inner());
        let names: Vec<String> = match user {
            Some(u) => vec![u],
            None => s.ledger.accounts().map_err(|e| e.to_string())?.into_iter().map(|a| a.user).collect(),
        };
        let row = |name: &String| {
            s.balance_row(name, gputokens::time::now()).map_err(|reply| match reply {
                Reply::Error { message, .. } => message,
                other => format!("{other:?}"),
            })
        };
        names.iter().map(row).collect::<Result<Vec<BalanceRow>, String>>()
    });
    match work.await {
        Ok(Ok(rows)) => Json(serde_json::json!({ "users": rows })).into_response(),
        Ok(Err(message)) => (StatusCode::NOT_FOUND, Json(serde_json::json!({ "error": message }))).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
