//! `kiln route` end to end: real `kiln serve` nodes and a real router on loopback.
//!
//! - placement is stable when a node leaves and comes back, sessions stick to a node,
//!   and the router answers the nodes' API (union catalogue, OpenAI errors);
//! - killing a node during a bounded load run loses no request that had not started
//!   streaming, and every stream it breaks ends with an SSE error event;
//! - the upstream receives exactly the unknown-model, over-context and overloaded
//!   requests;
//! - each agent lives on the node its name places it on, and a key's response chains
//!   hold through the router;
//! - placement keeps models warm (>= 99% in steady state) where random routing over
//!   the same nodes does not;
//! - the router holds each key's rate limit for every node;
//! - nodes name their colo, and the router keeps inference events, rollups and alerts
//!   per colo across a restart; the shipped Grafana dashboard and alert rules query
//!   only exported metrics; the `/dashboard` renders every panel in headless Chromium;
//! - low-confidence edge classifications are re-run centrally (`--escalate-below`);
//! - the config file's routing rules send long prompts central and short ones to the
//!   edge, and a rewritten file takes effect without a restart (a bad one is refused).

#[path = "e2e_router/browser.rs"]
mod browser;
#[path = "e2e_router/dashboards.rs"]
mod dashboards;
#[path = "e2e_router/deploy.rs"]
mod deploy;
#[path = "e2e_router/escalate.rs"]
mod escalate;
#[path = "e2e_router/failover.rs"]
mod failover;
#[path = "e2e_router/fallback.rs"]
mod fallback;
#[path = "e2e_router/harness.rs"]
mod harness;
#[path = "e2e_router/limits.rs"]
mod limits;
#[path = "e2e_router/observe.rs"]
mod observe;
#[path = "e2e_router/placement.rs"]
mod placement;
#[path = "support/python.rs"]
#[allow(dead_code)]
mod python;
#[path = "e2e_router/rules.rs"]
mod rules;
#[path = "e2e_router/stateful.rs"]
mod stateful;
#[path = "e2e_router/warm.rs"]
mod warm;
