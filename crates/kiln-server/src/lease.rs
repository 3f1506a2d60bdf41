//! Who is calling (for metering) and whether the model was warm (for the `x-kiln-warm`
//! header), read from a request's extensions; and the usage sink that meters what a
//! request's [`Lease`] consumed.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kiln_api::Usage;
use kiln_guard::Limiter;
use kiln_host::{Lease, TokenUsage, UsageSink};
pub use kiln_usage::Caller;
use kiln_usage::{Meter, UsageRecord};

/// The header saying whether the model was loaded when the request arrived.
pub const WARM_HEADER: &str = "x-kiln-warm";

/// Set once a request knows whether its model was warm; the request middleware turns it
/// into the `x-kiln-warm` header of whatever response goes out (JSON, SSE or error).
#[derive(Debug, Clone, Default)]
pub struct Warmth(Arc<AtomicU8>);

impl Warmth {
    const COLD: u8 = 1;
    const WARM: u8 = 2;

    pub fn set(&self, warm: bool) {
        let v = if warm { Self::WARM } else { Self::COLD };
        self.0.store(v, Ordering::Release);
    }

    /// `None` when the request never reached a model.
    pub fn get(&self) -> Option<bool> {
        match self.0.load(Ordering::Acquire) {
            Self::WARM => Some(true),
            Self::COLD => Some(false),
            _ => None,
        }
    }
}

/// Whom a request serves: a client waiting on it, or a batch draining in the background.
/// Only the batch runner's internal requests carry `Batch` (clients can't set request
/// extensions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestClass {
    #[default]
    Interactive,
    Batch,
}

impl RequestClass {
    /// The engine priority (lower runs first): batch lines yield to interactive
    /// requests for slots, KV blocks and prompt tokens.
    pub fn priority(self) -> i32 {
        match self {
            Self::Interactive => 0,
            Self::Batch => 10,
        }
    }
}

/// What a handler needs to take a lease, read from the request's extensions (put there
/// by the auth and request-context middleware, or by the batch runner).
#[derive(Debug, Clone)]
pub struct CallContext {
    pub caller: Caller,
    pub warmth: Warmth,
    pub class: RequestClass,
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
            class: parts
                .extensions
                .get::<RequestClass>()
                .copied()
                .unwrap_or_default(),
        })
    }
}

/// The usage sink of a request by `caller`: its tokens and neurons go to `meter` under
/// the caller's key and the model's name, as batch usage for a batch line, and its
/// tokens to the key's tokens-per-minute bucket.
pub fn usage_sink(
    meter: Option<Arc<Meter>>,
    limiter: Arc<Limiter>,
    caller: Caller,
    class: RequestClass,
) -> UsageSink {
    Box::new(move |lease: &Lease, usage: TokenUsage| {
        limiter.consume_tokens(&caller.key_id, usage.prompt + usage.completion);
        let Some(meter) = &meter else { return };
        meter.record(UsageRecord {
            key_id: caller.key_id,
            label: caller.label,
            model: lease.hosted().name.clone(),
            requests: 1,
            prompt_tokens: usage.prompt,
            cached_tokens: usage.cached,
            completion_tokens: usage.completion,
            neurons: kiln_usage::neurons(
                lease.model().parameters(),
                usage.prompt,
                usage.cached,
                usage.completion,
            ),
            batch: class == RequestClass::Batch,
        });
    })
}

/// OpenAI's usage object for `usage`.
pub fn api_usage(usage: TokenUsage) -> Usage {
    Usage::new(usage.prompt, usage.completion, usage.cached)
}
