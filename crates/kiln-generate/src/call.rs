//! Who a request serves and how: its caller (metered under its key), whether it is a
//! client's or a batch's (engine priority, batch usage), and where it reports whether
//! the model was warm. The HTTP server reads these from a request; services build them.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kiln_api::Caller;
use kiln_guard::Limiter;
use kiln_host::{Lease, TokenUsage, UsageSink};
use kiln_usage::{Meter, UsageRecord};

/// Set once a request knows whether its model was warm; the HTTP server turns it into
/// the `x-kiln-warm` header of whatever response goes out (JSON, SSE or error), and the
/// load wait and neurons into `x-kiln-cold-start` and `x-kiln-neurons`.
#[derive(Debug, Clone, Default)]
pub struct Warmth(Arc<WarmthInner>);

#[derive(Debug, Default)]
struct WarmthInner {
    state: AtomicU8,
    /// Milliseconds waited for a load (cold requests only).
    load_ms: AtomicU64,
    /// f64 bits of the neurons metered; 0 = none.
    neurons: AtomicU64,
}

impl Warmth {
    const COLD: u8 = 1;
    const WARM: u8 = 2;

    /// Records warm or cold, and for a cold one how long it waited for the load.
    pub fn set_lease(&self, warm: bool, waited: Duration) {
        self.set_load_wait(waited);
        self.set(warm);
    }

    pub fn set(&self, warm: bool) {
        let v = if warm { Self::WARM } else { Self::COLD };
        self.0.state.store(v, Ordering::Release);
    }

    /// `None` when the request never reached a model.
    pub fn get(&self) -> Option<bool> {
        match self.0.state.load(Ordering::Acquire) {
            Self::WARM => Some(true),
            Self::COLD => Some(false),
            _ => None,
        }
    }

    /// How long a cold request waited for its model to load.
    pub fn load_wait(&self) -> Option<Duration> {
        (self.get() == Some(false))
            .then(|| Duration::from_millis(self.0.load_ms.load(Ordering::Acquire)))
    }

    fn set_load_wait(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.0.load_ms.store(ms, Ordering::Release);
    }

    /// The neurons the request's usage came to, once metered.
    pub fn neurons(&self) -> Option<f64> {
        let bits = self.0.neurons.load(Ordering::Acquire);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    fn add_neurons(&self, n: f64) {
        let sum = self.neurons().unwrap_or(0.0) + n;
        self.0.neurons.store(sum.to_bits(), Ordering::Release);
    }
}

/// Whom a request serves: a client waiting on it, or a batch draining in the background.
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

/// One request's caller, class and warmth.
#[derive(Debug, Clone)]
pub struct Call {
    pub caller: Caller,
    pub warmth: Warmth,
    pub class: RequestClass,
}

impl Call {
    /// A call by `caller` of class `class` whose warmth nobody reads.
    pub fn new(caller: Caller, class: RequestClass) -> Self {
        Self {
            caller,
            warmth: Warmth::default(),
            class,
        }
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
    warmth: Warmth,
) -> UsageSink {
    Box::new(move |lease: &Lease, usage: TokenUsage| {
        limiter.consume_tokens(&caller.key_id, usage.prompt + usage.completion);
        let neurons = kiln_usage::neurons(
            lease.model().parameters(),
            usage.prompt,
            usage.cached,
            usage.completion,
        );
        warmth.add_neurons(neurons);
        let Some(meter) = &meter else { return };
        meter.record(UsageRecord {
            key_id: caller.key_id,
            label: caller.label,
            model: lease.hosted().name.clone(),
            requests: 1,
            prompt_tokens: usage.prompt,
            cached_tokens: usage.cached,
            completion_tokens: usage.completion,
            neurons,
            batch: class == RequestClass::Batch,
        });
    })
}
