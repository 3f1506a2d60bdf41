//! The router's shared state: settings, the HTTP client to nodes, the placement and
//! the routing rules in force, and the metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::config::{NodeSpec, RouterConfig};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::nodes::Node;
use crate::placement::Placement;
use crate::ring::moved_share;
use crate::rules::Rules;

/// Cheap to clone; one per router.
#[derive(Clone)]
pub struct RouterState(Arc<Inner>);

struct Inner {
    config: RouterConfig,
    client: reqwest::Client,
    placement: RwLock<Arc<Placement>>,
    /// Swapped whole when the config file's rules change; requests read a snapshot.
    rules: RwLock<Arc<Rules>>,
    /// Held while a new placement is computed from the current one, so a membership
    /// change and a catalogue change at the same moment cannot undo each other.
    updating: Mutex<()>,
    metrics: Metrics,
    /// Inference events, rollups and alerts.
    observer: Arc<kiln_observe::Observer>,
    dashboard: crate::dashboard::Cache,
    /// Per-client-key buckets, for every node.
    limiter: kiln_guard::Limiter,
    shutting_down: AtomicBool,
}

/// Longest a kept-alive connection to a node is reused after its last response.
const NODE_IDLE_REUSE: std::time::Duration = std::time::Duration::from_secs(5);

impl RouterState {
    pub fn new(config: RouterConfig) -> Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.idle_timeout)
            .tcp_keepalive(std::time::Duration::from_secs(30))
            // Nodes close a connection idle for their header timeout (10 s by default):
            // drop ours sooner, so a request never goes out on one a node is closing.
            .pool_idle_timeout(NODE_IDLE_REUSE)
            .tcp_nodelay(true)
            .build()
            .map_err(Error::Client)?;
        let limiter = kiln_guard::Limiter::new(config.rate_limits, Default::default());
        let observer = match &config.data_dir {
            Some(dir) => kiln_observe::Observer::open(dir, config.observe.clone())?,
            None => kiln_observe::Observer::in_memory(config.observe.clone()),
        };
        let metrics = Metrics::default();
        metrics
            .rules
            .store(config.rules.len() as u64, Ordering::Relaxed);
        Ok(Self(Arc::new(Inner {
            observer,
            dashboard: Default::default(),
            limiter,
            rules: RwLock::new(Arc::new(config.rules.clone())),
            config,
            client,
            placement: RwLock::new(Arc::new(Placement::default())),
            updating: Mutex::new(()),
            metrics,
            shutting_down: AtomicBool::new(false),
        })))
    }

    pub fn config(&self) -> &RouterConfig {
        &self.0.config
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.0.client
    }

    pub fn limiter(&self) -> &kiln_guard::Limiter {
        &self.0.limiter
    }

    pub fn observer(&self) -> &Arc<kiln_observe::Observer> {
        &self.0.observer
    }

    pub fn dashboard_cache(&self) -> &crate::dashboard::Cache {
        &self.0.dashboard
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The placement in force (a snapshot; later changes don't affect it).
    pub fn placement(&self) -> Arc<Placement> {
        self.0
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The routing rules in force (a snapshot; a reload does not affect it).
    pub fn rules(&self) -> Arc<Rules> {
        self.0
            .rules
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts `rules` in force for the requests that arrive from now on.
    pub fn set_rules(&self, rules: Rules) {
        self.metrics()
            .rules
            .store(rules.len() as u64, Ordering::Relaxed);
        let rules = Arc::new(rules);
        *self.0.rules.write().unwrap_or_else(|p| p.into_inner()) = rules;
    }

    /// Sets the membership: nodes still present keep their state (health, load,
    /// catalogue); new ones start unchecked. Returns whether it changed.
    pub fn set_members(&self, specs: Vec<NodeSpec>) -> bool {
        let _updating = self.0.updating.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.placement();
        let nodes: Vec<Arc<Node>> = specs
            .into_iter()
            .map(|spec| {
                current
                    .nodes
                    .iter()
                    .find(|n| n.spec == spec)
                    .cloned()
                    .unwrap_or_else(|| {
                        let metrics = self.metrics().node(&spec.id());
                        Arc::new(Node::new(spec, metrics))
                    })
            })
            .collect();
        let unchanged = nodes.len() == current.nodes.len()
            && nodes
                .iter()
                .all(|n| current.nodes.iter().any(|c| Arc::ptr_eq(n, c)));
        if unchanged {
            return false;
        }
        let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        tracing::info!(nodes = ?ids, "membership changed");
        self.install(nodes);
        true
    }

    /// Re-places every model over the current nodes (after a catalogue changed).
    pub fn rebuild(&self) {
        let _updating = self.0.updating.lock().unwrap_or_else(|p| p.into_inner());
        let nodes = self.placement().nodes.clone();
        self.install(nodes);
    }

    fn install(&self, nodes: Vec<Arc<Node>>) {
        let next = Arc::new(Placement::build(nodes, self.config()));
        let mut slot = self.0.placement.write().unwrap_or_else(|p| p.into_inner());
        let (old, new) = (slot.shards(), next.shards());
        if old != new {
            tracing::info!(
                models = new.len(),
                moved_share = moved_share(&old, &new),
                capacity = next.capacity,
                "placement changed"
            );
        }
        *slot = next;
    }

    /// New requests get 503 from now on.
    pub fn begin_shutdown(&self) {
        self.0.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.0.shutting_down.load(Ordering::Acquire)
    }
}
