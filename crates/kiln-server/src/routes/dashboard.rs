//! `GET /dashboard`: the node's own live page, static assets compiled into the binary
//! (no CDN). The script polls this node's `/metrics` and draws the serving panels of
//! vLLM's Grafana dashboard (requests, TTFT and inter-token percentiles, tokens/s,
//! queue, KV-cache use, finish reasons, errors, prefix and disk cache hits, firewall
//! blocks) per model; a fleet is watched on the router's `/dashboard`.
//!
//! The page is open; the numbers are not: when the node has metrics keys the page sends
//! the one in its URL's `#key=` fragment (never sent to the server with the page).

use axum::response::Response;
use kiln_http::assets::{asset, CSS, HTML, JAVASCRIPT};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

pub async fn page() -> Response {
    asset(HTML, INDEX)
}

pub async fn script() -> Response {
    asset(JAVASCRIPT, SCRIPT)
}

pub async fn style() -> Response {
    asset(CSS, STYLE)
}
