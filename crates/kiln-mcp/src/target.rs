//! Validates an [`McpServer`] up front so that configuration mistakes surface as
//! precise errors instead of failed (and retried) requests.

use reqwest::{
    header::{HeaderMap, HeaderName, HeaderValue},
    Url,
};

use crate::{error::McpError, types::McpServer};

/// Headers the MCP transport sets itself; letting a user override them would
/// break the protocol (session routing, content negotiation).
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

/// A validated server: what to connect to and how to name it in messages.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub label: String,
    /// The URL requests go to (may carry user info).
    pub url: Url,
    /// The URL for messages and logs, with any password replaced by `***`.
    pub display_url: String,
    /// Sent on every request; values are marked sensitive so `Debug` hides them.
    pub headers: HeaderMap,
}

impl Target {
    pub fn new(server: &McpServer) -> Result<Self, McpError> {
        let label = server.label.clone();
        let invalid_url = |reason: &str| McpError::InvalidUrl {
            label: label.clone(),
            url: redact_raw(&server.url),
            reason: reason.to_owned(),
        };
        let url = Url::parse(server.url.trim()).map_err(|e| invalid_url(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid_url(&format!(
                "scheme '{}' is not supported; use http:// or https://",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid_url("the URL has no host"));
        }
        let display_url = display(&url);

        let mut headers = HeaderMap::new();
        for (name, value) in &server.headers {
            let invalid_header = |reason: &str| McpError::InvalidHeader {
                label: label.clone(),
                name: name.clone(),
                reason: reason.to_owned(),
            };
            let header_name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| invalid_header("not a valid HTTP header name"))?;
            if RESERVED_HEADERS.contains(&header_name.as_str()) {
                return Err(invalid_header(
                    "this header is managed by the MCP transport and cannot be overridden",
                ));
            }
            let mut header_value = HeaderValue::from_str(value.trim()).map_err(|_| {
                invalid_header("the value contains characters not allowed in HTTP headers")
            })?;
            header_value.set_sensitive(true);
            headers.append(header_name, header_value);
        }

        Ok(Self {
            label,
            url,
            display_url,
            headers,
        })
    }

    /// Replaces the raw URL with the display form in text produced by lower
    /// layers (reqwest errors quote the URL, password included).
    pub fn scrub(&self, text: &str) -> String {
        let raw = self.url.as_str();
        if raw == self.display_url {
            text.to_owned()
        } else {
            text.replace(raw, &self.display_url)
        }
    }
}

fn display(url: &Url) -> String {
    if url.password().is_none() {
        return url.to_string();
    }
    let mut shown = url.clone();
    // Cannot fail for http(s) URLs, which always have a host.
    let _ = shown.set_password(Some("***"));
    shown.to_string()
}

/// Best-effort redaction for a URL that did not even parse.
fn redact_raw(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}://***@{}", &raw[..start], &raw[at + 1..])
        }
        _ => raw.to_owned(),
    }
}
