//! `/healthz`: liveness and readiness in nats-server's shape.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::{Params, compact_json_response, flag};
use crate::server::Server;

/// `GET /healthz[?js-enabled-only|js-server-only|js-meta-only|account&stream&consumer|details]`.
pub(super) async fn handler(State(s): State<Arc<Server>>, Query(q): Params) -> Response {
    let details = flag(&q, "details");
    let error = |status: StatusCode, text: &str| {
        let body = if details {
            json!({"status": "error", "status_code": status.as_u16(), "errors": [{"type": "BAD_REQUEST", "error": text}]})
        } else {
            json!({"status": "error", "error": text})
        };
        compact_json_response(status, &body)
    };
    let has = |k: &str| q.get(k).is_some_and(|v| !v.is_empty());
    if (has("stream") || has("consumer")) && !has("account") {
        let what = if has("stream") { "stream" } else { "consumer" };
        return error(
            StatusCode::BAD_REQUEST,
            &format!("\"account\" must not be empty when checking {what} health"),
        );
    }
    if has("consumer") && !has("stream") {
        return error(
            StatusCode::BAD_REQUEST,
            "\"stream\" must not be empty when checking consumer health",
        );
    }
    if s.shutdown.is_cancelled() {
        return compact_json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unavailable", "error": "server is shutting down"}),
        );
    }
    if has("stream") {
        // Streams arrive with the JetStream issue; until then no stream exists.
        let stream = q.get("stream").map(String::as_str).unwrap_or_default();
        return error(
            StatusCode::NOT_FOUND,
            &format!("JetStream stream '{}' could not be found", stream),
        );
    }
    compact_json_response(StatusCode::OK, &json!({"status": "ok"}))
}
