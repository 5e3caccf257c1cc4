//! The JSON API's refusal, one for the three ways in that MUNGE proves (the balances API, agents'
//! reports and remote requests): `{"error": message}` with its status, and on a 401 the scheme a
//! caller must use (`WWW-Authenticate: MUNGE`). A module of its own, so that `http/mod.rs` and the
//! handlers it declares (`remote_request`) both use it without importing each other.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// `{"error": message}` with `status`; an unauthenticated caller is told the scheme (MUNGE).
pub fn json_refusal(status: StatusCode, message: &str) -> Response {
    let mut response = (status, Json(serde_json::json!({ "error": message }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("MUNGE"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 10).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_refusal_is_its_message_and_an_unauthenticated_one_names_munge() {
        let unproven = json_refusal(StatusCode::UNAUTHORIZED, "no credential");
        assert_eq!(unproven.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(unproven.headers()[header::WWW_AUTHENTICATE], "MUNGE");
        assert_eq!(body(unproven).await, serde_json::json!({ "error": "no credential" }));
        let busy = json_refusal(StatusCode::SERVICE_UNAVAILABLE, "busy");
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(busy.headers().get(header::WWW_AUTHENTICATE).is_none());
        assert_eq!(body(busy).await, serde_json::json!({ "error": "busy" }));
    }
}
