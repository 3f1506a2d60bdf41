//! `kiln-router`: many `kiln serve` nodes as one OpenAI-compatible service.
//!
//! The router speaks the nodes' own API (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/embeddings`, `/v1/models`, `/ai/run/{model}`, `/tokenize`, `/detokenize`,
//! `/health`, `/ready`, `/metrics`) and adds `GET /nodes`. For each request it:
//!
//! 1. resolves the model against the union of the nodes' catalogues ([`placement`]);
//! 2. finds the model's shard: `k` nodes from a consistent-hash ring with bounded loads
//!    ([`ring`]), so a model is loaded on few nodes and found warm there;
//! 3. orders the shard by session affinity ([`affinity`]) or by load, then adds the
//!    rest of the ring for failover ([`select`]);
//! 4. forwards, retrying on the next node whatever fails before the first byte, and
//!    streams SSE through, ending a broken stream with an error event ([`proxy`],
//!    [`sse`]); what no node can serve goes to the optional upstream.
//!
//! Before step 2, an inference request meets the routing rules ([`rules`], over the
//! estimates of [`complexity`], applied by [`by_rule`]): a matching `central` rule sends
//! it straight to the upstream.
//!
//! In the background, [`discovery`] keeps the node set (flags, config file, DNS),
//! [`health`] checks every node's health, load and catalogue, and [`reload`] swaps in
//! the config file's rules when it changes. The router knows nothing about models'
//! insides: it never links the engine.

pub mod affinity;
pub mod app;
pub mod by_rule;
pub mod complexity;
pub mod config;
pub mod config_file;
pub mod dashboard;
pub mod discovery;
pub mod error;
pub mod escalate;
pub mod fallback;
pub mod hash;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod nodes;
pub mod observe;
pub mod observe_routes;
pub mod pinned;
pub mod placement;
pub mod prom;
pub mod proxy;
pub mod reload;
pub mod ring;
pub mod rules;
pub mod select;
pub mod serve;
pub mod sse;
pub mod state;

pub use app::app;
pub use config::{DnsSpec, NodeSpec, RouterConfig, Upstream};
pub use config_file::FileConfig;
pub use discovery::{Resolver, SystemResolver};
pub use error::{ApiError, Error, Result};
pub use serve::{run, serve};
pub use state::RouterState;
