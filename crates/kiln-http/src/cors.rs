//! The CORS policy: off unless origins are configured, so browsers on other origins
//! cannot call a server by default. `*` allows any origin (no credentials are involved:
//! clients authenticate with a bearer key, not cookies).

use axum::http::{header, HeaderValue, Method};
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Which browser origins may call the API; the default allows none (no CORS headers).
#[derive(Debug, Clone, Default)]
pub struct CorsPolicy(Option<CorsLayer>);

impl CorsPolicy {
    /// Allows `origins` (`*` for any); none keeps CORS off.
    pub fn new(origins: &[String]) -> Result<Self, BadOrigin> {
        cors_layer(origins).map(Self)
    }

    /// `app` with the policy as its outermost layer, so preflights are answered before
    /// authentication (a browser sends no key with them).
    pub fn apply(&self, app: Router) -> Router {
        match &self.0 {
            Some(layer) => app.layer(layer.clone()),
            None => app,
        }
    }
}

/// An origin that cannot be a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CORS origin {0:?}: expected `*` or an origin like https://app.example")]
pub struct BadOrigin(pub String);

/// The layer allowing `origins` (`None` if there are none: CORS stays off).
fn cors_layer(origins: &[String]) -> Result<Option<CorsLayer>, BadOrigin> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                let valid = o.starts_with("http://") || o.starts_with("https://");
                let value = HeaderValue::from_str(o.trim_end_matches('/')).ok();
                value.filter(|_| valid).ok_or_else(|| BadOrigin(o.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(std::time::Duration::from_secs(600)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_origins_means_no_cors() {
        assert!(cors_layer(&[]).unwrap_or_default().is_none());
    }

    #[test]
    fn origins_must_be_http_urls() {
        assert!(cors_layer(&["https://app.example".into()]).is_ok_and(|l| l.is_some()));
        assert!(cors_layer(&["*".into()]).is_ok_and(|l| l.is_some()));
        let bad = cors_layer(&["app.example".into()]);
        assert_eq!(bad.err(), Some(BadOrigin("app.example".into())));
    }
}
