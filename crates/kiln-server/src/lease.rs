//! Who is calling (for metering) and whether the model was warm (for the `x-kiln-warm`
//! header), read from a request's extensions into the generator's [`Call`].

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
pub use kiln_api::Caller;
use kiln_api::{SpeculativeUsage, Usage};
use kiln_generate::{Call, RequestClass, TokenUsage, Warmth};

/// The header saying whether the model was loaded when the request arrived.
pub const WARM_HEADER: &str = "x-kiln-warm";

/// What a handler needs to run a request, read from the request's extensions (put there
/// by the auth and request-context middleware). Clients can't set extensions, so every
/// HTTP request is interactive; batch lines build their [`Call`] themselves.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub caller: Caller,
    pub warmth: Warmth,
}

impl CallContext {
    /// The generator's view of this request.
    pub fn call(&self) -> Call {
        Call {
            caller: self.caller.clone(),
            warmth: self.warmth.clone(),
            class: RequestClass::Interactive,
        }
    }
}

/// The caller the auth layer put on a request, or the anonymous one on an open server.
pub(crate) fn caller_of(extensions: &axum::http::Extensions) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::anonymous)
}

impl<S: Send + Sync> FromRequestParts<S> for CallContext {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(Self {
            caller: caller_of(&parts.extensions),
            warmth: parts
                .extensions
                .get::<Warmth>()
                .cloned()
                .unwrap_or_default(),
        })
    }
}

/// OpenAI's usage object for `usage`.
pub fn api_usage(usage: TokenUsage) -> Usage {
    Usage {
        speculative: SpeculativeUsage::new(usage.draft, usage.accepted),
        ..Usage::new(usage.prompt, usage.completion, usage.cached)
    }
}
