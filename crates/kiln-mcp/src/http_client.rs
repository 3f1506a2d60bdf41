//! The HTTP client every request of a session goes through.
//!
//! Custom headers are installed as the client's default headers rather than via
//! rmcp's per-request `custom_headers`: that way they reach every request the SDK
//! makes (initialize, tool calls, the SSE GET stream, the closing DELETE), and
//! rmcp's reserved-name check doesn't apply to `Authorization`.
//!
//! The server's host was resolved and every address checked against the outbound
//! policy before the client is built; the client is pinned to those addresses
//! (`resolve_to_addrs`), so a name server that answers differently at connect time
//! (DNS rebinding) is never asked. Any other name (none today: redirects stay on the
//! origin) goes through the policy's own resolver, and a redirect hop to an address
//! literal is checked before it is followed.

use std::{
    net::SocketAddr,
    sync::{Arc, OnceLock},
    time::Duration,
};

use kiln_outbound::OutboundPolicy;
use reqwest::{
    dns::{Addrs, Name, Resolve, Resolving},
    redirect,
};
use rustls_platform_verifier::BuilderVerifierExt;

use crate::target::Target;

/// Follow at most this many same-origin redirects per request.
const MAX_REDIRECTS: usize = 10;

pub(crate) fn build(
    target: &Target,
    connect_timeout: Duration,
    policy: &OutboundPolicy,
    checked: &[SocketAddr],
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder();
    if let Some(host) = target.url.host_str() {
        builder = builder.resolve_to_addrs(host, checked);
    }
    builder
        .dns_resolver(Arc::new(PolicyResolver(policy.clone())))
        .default_headers(target.headers.clone())
        .connect_timeout(connect_timeout)
        // No overall request timeout: the SSE stream of a session is long-lived.
        // Per-request bounds are applied by the session around each operation.
        //
        // Like rmcp's own default client: idle pooled connections stall ~40 ms on
        // Linux delayed ACKs when a previous SSE body was not fully read.
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects(policy.clone()))
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

/// Resolves names for the client through the outbound policy: every address checked,
/// only checked addresses returned.
struct PolicyResolver(OutboundPolicy);

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port on each address.
            let addrs = policy.resolve(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Only same-origin 307/308 redirects are followed: they keep the POST body, and
/// staying on one origin keeps the custom headers (credentials) from being
/// replayed to another host. Mirrors rmcp's default client policy. Each hop is
/// checked against the outbound policy again.
fn same_origin_redirects(policy: OutboundPolicy) -> redirect::Policy {
    redirect::Policy::custom(move |attempt| {
        let host = attempt.url().host_str().unwrap_or_default();
        if let Some(ip) = kiln_outbound::ip_literal(host) {
            if let Err(denied) = policy.check_ip(host, ip) {
                return attempt.error(denied);
            }
        }
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
