//! The page's files, embedded in the binary.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Name, content type and content of every asset under `/console/assets/`.
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.css", "text/css", include_str!("assets/app.css")),
    ("app.js", "text/javascript", include_str!("assets/app.js")),
    ("api.js", "text/javascript", include_str!("assets/api.js")),
    ("ui.js", "text/javascript", include_str!("assets/ui.js")),
    (
        "overview.js",
        "text/javascript",
        include_str!("assets/overview.js"),
    ),
    (
        "streams.js",
        "text/javascript",
        include_str!("assets/streams.js"),
    ),
    (
        "consumers.js",
        "text/javascript",
        include_str!("assets/consumers.js"),
    ),
    (
        "messages.js",
        "text/javascript",
        include_str!("assets/messages.js"),
    ),
    (
        "pubsub.js",
        "text/javascript",
        include_str!("assets/pubsub.js"),
    ),
    ("more.js", "text/javascript", include_str!("assets/more.js")),
];

/// The page itself.
const INDEX: &str = include_str!("assets/index.html");

/// `/`: the console page.
pub(super) async fn index() -> Response {
    with_type(StatusCode::OK, "text/html; charset=utf-8", INDEX)
}

/// `/console/assets/{file}`.
pub(super) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => with_type(StatusCode::OK, kind, body),
        None => with_type(StatusCode::NOT_FOUND, "text/plain", "not found"),
    }
}

fn with_type(status: StatusCode, kind: &'static str, body: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}
