//! What stands in front of the model: the prompt firewall (an injection score from the
//! NanoGuard classifier, PII recognisers, a policy that logs or blocks), per-key rate
//! limits and daily neuron quotas, and an exact-match response cache, without HTTP.
//!
//! The classifier is reached through [`InjectionModel`], which the server implements
//! over its hosted model; concurrent requests' texts are scored in one batch.

mod cache;
mod firewall;
mod limits;
pub mod pii;
mod policy;
mod prompt_text;
mod quota;
mod verdict;

pub use cache::{deterministic, request_key, Cached, ResponseCache};
pub use firewall::{Firewall, GuardError, InjectionModel, MAX_BATCH};
pub use limits::{reset_text, BucketState, Limited, Limiter, RateLimits, RateStatus};
pub use pii::PiiCategory;
pub use policy::{BlockReason, Mode, Policies, Policy, Turns, BLOCK_MESSAGE, INJECTION_THRESHOLD};
pub use prompt_text::{prompt_texts, PromptShape};
pub use quota::{day_of, until_tomorrow, OverQuota, Quota};
pub use verdict::{injection_score, Verdict};
