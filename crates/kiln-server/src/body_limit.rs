//! Each route's body limit, from the endpoint table: uploads take the file store's
//! limit, Vectorize writes what Cloudflare documents, everything else the configured
//! default (`--max-body-size`). The outermost layer works it out once per request (from
//! the whole path, before nested routers strip their prefix) and leaves it on the
//! request for the extractors and gates that read bodies.

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::Extensions;
use axum::middleware::Next;
use axum::response::Response;
use kiln_api::endpoints::{find_named, BodyLimit};
use tower::{Layer, ServiceExt};

/// The server's limits, as the endpoint table's kinds of limit resolve.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub default: usize,
    /// An upload's: the file store's limit and its form's framing.
    pub upload: usize,
}

impl BodyLimits {
    pub fn new(default: usize, max_file_bytes: Option<u64>) -> Self {
        let upload = max_file_bytes.unwrap_or(0).saturating_add(1 << 20);
        Self {
            default,
            upload: usize::try_from(upload).unwrap_or(usize::MAX),
        }
    }

    /// The most bytes a `method` `path` request's body may have.
    pub fn of(&self, method: &str, path: &str) -> usize {
        match find_named(method, path).map(|e| e.body) {
            Some(BodyLimit::Upload) => self.upload,
            // Never below the default an operator raised.
            Some(BodyLimit::Bytes(n)) => n.max(self.default),
            Some(BodyLimit::Default) | None => self.default,
        }
    }
}

/// The limit [`apply`] set on a request.
#[derive(Debug, Clone, Copy)]
struct RouteLimit(usize);

/// The body limit of the request with these extensions (`default` where no limit was
/// set, as for requests that never passed the layer).
pub(crate) fn of_request(extensions: &Extensions, default: usize) -> usize {
    extensions.get::<RouteLimit>().map_or(default, |l| l.0)
}

/// Whether `method` `path` is an upload (which gets its own body deadline too).
pub(crate) fn is_upload(method: &str, path: &str) -> bool {
    find_named(method, path).is_some_and(|e| e.body == BodyLimit::Upload)
}

/// Sets the request's body limit for axum's extractors and for [`of_request`].
pub(crate) async fn apply(
    State(limits): State<BodyLimits>,
    mut req: Request,
    next: Next,
) -> Response {
    let limit = limits.of(req.method().as_str(), req.uri().path());
    req.extensions_mut().insert(RouteLimit(limit));
    match DefaultBodyLimit::max(limit).layer(next).oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}
