//! The HTTP client every request of a session goes through.
//!
//! Custom headers are installed as the client's default headers rather than via
//! rmcp's per-request `custom_headers`: that way they reach every request the SDK
//! makes (initialize, tool calls, the SSE GET stream, the closing DELETE), and
//! rmcp's reserved-name check doesn't apply to `Authorization`.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use reqwest::redirect;
use rustls_platform_verifier::BuilderVerifierExt;

use crate::target::Target;

/// Follow at most this many same-origin redirects per request.
const MAX_REDIRECTS: usize = 10;

pub(crate) fn build(target: &Target, connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .default_headers(target.headers.clone())
        .connect_timeout(connect_timeout)
        // No overall request timeout: the SSE stream of a session is long-lived.
        // Per-request bounds are applied by the session around each operation.
        //
        // Like rmcp's own default client: idle pooled connections stall ~40 ms on
        // Linux delayed ACKs when a previous SSE body was not fully read.
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .tls_backend_preconfigured(tls_config()?)
        .build()
        .map_err(|e| e.to_string())
}

/// TLS for `https://`: rustls with the `ring` provider (no aws-lc, no OpenSSL),
/// verifying against the operating system's trust store. Built once, because
/// loading the system roots reads the disk.
///
/// Passing a ready `ClientConfig` (instead of reqwest's "install a process-wide
/// default crypto provider") keeps this library from changing global state.
fn tls_config() -> Result<rustls::ClientConfig, String> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS setup failed: {e}"))?
                .with_platform_verifier()
                .map_err(|e| format!("cannot load the system's TLS trust store: {e}"))?
                .with_no_client_auth();
            Ok(config)
        })
        .clone()
}

/// Only same-origin 307/308 redirects are followed: they keep the POST body, and
/// staying on one origin keeps the custom headers (credentials) from being
/// replayed to another host. Mirrors rmcp's default client policy.
fn same_origin_redirects() -> redirect::Policy {
    redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}
