//! `kiln-observe`: what the router learns from every inference request, kept so an
//! operator can see each colo (PoP) on its own.
//!
//! - [`event`]: one [`Event`] per request (colo, node, model, latency, TTFT, tokens,
//!   cold start, fallback and why, confidence, error, neurons);
//! - [`ring`]: the latest events in a bounded ring, for `/v1/observability/events`;
//! - [`rollup`]: per-minute aggregates per colo × model, with latency histograms that
//!   merge, so any window's percentiles come from them;
//! - [`store`]: events and rollups in SQLite under the router's data dir, flushed every
//!   second, so a restart keeps the last day and loses at most its last second;
//! - [`alerts`]: the rules evaluated over the rollups;
//! - [`labels`]: the bound on distinct colos and models (Prometheus label cardinality);
//! - [`prom`]: the per-colo Prometheus series.
//!
//! [`Observer`] ties them together; the router records into it and serves from it.

pub mod alerts;
pub mod error;
pub mod event;
pub mod labels;
pub mod observer;
pub mod prom;
pub mod ring;
pub mod rollup;
pub mod store;
pub mod summary;

pub use alerts::{Alert, AlertRules};
pub use error::ObserveError;
pub use event::{Event, FallbackInfo};
pub use observer::{Observer, ObserverConfig};
pub use rollup::Rollup;
