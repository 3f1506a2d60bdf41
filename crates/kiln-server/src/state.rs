//! What every handler shares: the served models (by name and alias) under their memory
//! budget, API and admin keys, limits, the usage meter and the shutdown flag.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_agents::Agents;
use kiln_batch::Batches;
use kiln_engine::ServingModel;
use kiln_files::FileStore;
use kiln_host::{
    AdapterCache, Generator, Host, HostedModel, Lease, LoadedModel, LoraConfig, ModelKind,
};
use kiln_http::{ConnectionLimits, CorsPolicy};
use kiln_rag::VectorStores;
use kiln_responses::Responses;
use kiln_usage::Meter;
use kiln_vectors::VectorDb;

use crate::cutoff::{Cutoff, CutoffSignal};
use crate::error::{ApiError, Result};
use crate::gate::{Gates, GuardSettings};
use crate::lease::{usage_sink, CallContext};

/// One accepted bearer token and the label its usage is reported under.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub key: String,
    pub label: Option<String>,
}

impl ApiKey {
    pub fn new(key: impl Into<String>, label: Option<String>) -> Self {
        Self {
            key: key.into(),
            label,
        }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        Self::new(key, None)
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key, None)
    }
}

/// Never prints the secret.
impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &kiln_usage::key_id(&self.key))
            .field("label", &self.label)
            .finish()
    }
}

/// Server-wide limits and credentials.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted bearer tokens; empty means no authentication.
    pub api_keys: Vec<ApiKey>,
    /// Keys for `/admin/*`. Without any, those routes are open when `api_keys` is empty
    /// too, and closed (403) otherwise.
    pub admin_keys: Vec<ApiKey>,
    /// Keys for `/metrics` and `/ready` (admin keys work too). Without any they are
    /// open, for orchestrators and scrapers.
    pub metrics_keys: Vec<ApiKey>,
    /// Sequences that may wait per model beyond the `max_num_seqs` running ones.
    pub max_queued: usize,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Time a request's body may take to arrive, from its head (408 past it).
    pub body_timeout: Duration,
    /// The same for a file upload (`POST /v1/files`), which may be large.
    pub upload_timeout: Duration,
    /// Browser origins allowed to call the API (CORS); none by default.
    pub cors: CorsPolicy,
    /// Bytes all loaded models may take together (weights file plus KV cache);
    /// `None`: no limit.
    pub models_memory: Option<u64>,
    /// LoRA adapters requests may name.
    pub lora: LoraConfig,
    /// Rate limits, quotas, the response cache and the prompt firewall.
    pub guard: GuardSettings,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            admin_keys: Vec::new(),
            metrics_keys: Vec::new(),
            max_queued: 1024,
            body_limit: 4 << 20,
            body_timeout: ConnectionLimits::DEFAULT_BODY_TIMEOUT,
            upload_timeout: Duration::from_secs(600),
            cors: CorsPolicy::default(),
            models_memory: None,
            lora: LoraConfig::default(),
            guard: GuardSettings::default(),
        }
    }
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub(crate) struct Inner {
    host: Host,
    pub(crate) gates: Gates,
    config: ServerConfig,
    meter: Option<Arc<Meter>>,
    cutoff: Cutoff,
    /// The Responses API (`responses_chat::enable_responses`).
    responses: OnceLock<Arc<Responses>>,
    /// Agents, once `responses_chat::enable_agents` gave them a directory.
    agents: OnceLock<Arc<Agents>>,
    /// Files and batches, once `batch_runner::enable_batches` gave them a directory.
    batches: OnceLock<Arc<Batches>>,
    /// Vector indexes, once `serve` gave them a directory.
    vectors: OnceLock<VectorDb>,
    /// Vector stores, once `rag_embedder::enable_vector_stores` set them up.
    vector_stores: OnceLock<VectorStores>,
}

impl AppState {
    /// State over `models` (the first is the default for requests that name none),
    /// without usage metering.
    pub fn new(config: ServerConfig, models: Vec<HostedModel>) -> Result<Self> {
        Self::with_meter(config, models, None)
    }

    /// State over `models` whose requests are metered into `meter`.
    pub fn with_meter(
        config: ServerConfig,
        models: Vec<HostedModel>,
        meter: Option<Arc<Meter>>,
    ) -> Result<Self> {
        let host = Host::new(models, config.models_memory, config.lora.clone())?;
        Ok(Self(Arc::new(Inner {
            host,
            gates: Gates::new(&config.guard),
            config,
            meter,
            cutoff: Cutoff::default(),
            responses: OnceLock::new(),
            agents: OnceLock::new(),
            batches: OnceLock::new(),
            vectors: OnceLock::new(),
            vector_stores: OnceLock::new(),
        })))
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self(inner)
    }

    /// A handle that does not keep the state alive (the services the state owns hold
    /// one to reach back).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.0)
    }

    /// Serves the Responses API with `responses` (once, before serving).
    pub(crate) fn set_responses(&self, responses: Arc<Responses>) -> bool {
        self.0.responses.set(responses).is_ok()
    }

    /// Serves agents with `agents` (once, before serving).
    pub(crate) fn set_agents(&self, agents: Arc<Agents>) -> bool {
        self.0.agents.set(agents).is_ok()
    }

    /// Serves files and batches with `batches` (once, before serving).
    pub(crate) fn set_batches(&self, batches: Arc<Batches>) -> bool {
        self.0.batches.set(batches).is_ok()
    }

    /// The batch service, when the server has a data directory.
    pub fn batches(&self) -> std::result::Result<&Arc<Batches>, ApiError> {
        self.0.batches.get().ok_or_else(|| {
            ApiError::StoreUnavailable(
                "files and batches need a data directory; start the server with --data-dir".into(),
            )
        })
    }

    /// Serves vector indexes from `db` (once, before serving).
    pub(crate) fn set_vectors(&self, db: VectorDb) -> bool {
        self.0.vectors.set(db).is_ok()
    }

    /// The vector indexes, when the server has a data directory.
    pub fn vectors(&self) -> std::result::Result<&VectorDb, ApiError> {
        self.0.vectors.get().ok_or_else(|| {
            ApiError::StoreUnavailable(
                "vector indexes need a data directory; start the server with --data-dir".into(),
            )
        })
    }

    /// The gates in front of the model routes.
    pub(crate) fn gates(&self) -> &Gates {
        &self.0.gates
    }

    /// The prompt firewall, when the server has a classifier for it.
    pub fn firewall(&self) -> std::result::Result<&Arc<kiln_guard::Firewall>, ApiError> {
        self.0
            .gates
            .firewall
            .get()
            .ok_or_else(|| ApiError::InvalidRequest {
                param: None,
                message: "this server has no prompt classifier: start it with --firewall log (or \
                      serve nanoguard-prompt-injection)"
                    .into(),
            })
    }

    /// Serves vector stores from `stores` (once, before serving).
    pub(crate) fn set_vector_stores(&self, stores: VectorStores) -> bool {
        self.0.vector_stores.set(stores).is_ok()
    }

    /// The vector stores, when the server has a data directory.
    pub fn vector_stores(&self) -> std::result::Result<&VectorStores, ApiError> {
        self.0.vector_stores.get().ok_or_else(|| {
            ApiError::StoreUnavailable(
                "vector stores need a data directory; start the server with --data-dir".into(),
            )
        })
    }

    /// The file store (under the batch service, which reads and writes it too).
    pub fn files(&self) -> std::result::Result<&Arc<FileStore>, ApiError> {
        Ok(self.batches()?.files())
    }

    /// The agents, when the server has a data directory.
    pub fn agents(&self) -> std::result::Result<&Arc<Agents>, ApiError> {
        self.0.agents.get().ok_or_else(|| ApiError::InvalidRequest {
            param: None,
            message: "agents need a data directory; start the server with --data-dir".into(),
        })
    }

    /// The Responses API.
    pub fn responses(&self) -> std::result::Result<&Arc<Responses>, ApiError> {
        self.0
            .responses
            .get()
            .ok_or_else(|| ApiError::InvalidRequest {
                param: None,
                message: "the Responses API is not set up on this server".into(),
            })
    }

    /// State over one already loaded model (tests, embedding the server).
    pub fn with_model(
        config: ServerConfig,
        name: &str,
        task: &str,
        model: Arc<ServingModel>,
    ) -> Result<Self> {
        let hosted =
            HostedModel::preloaded(name, task, LoadedModel::Generate(model), config.max_queued);
        Self::new(config, vec![hosted])
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn host(&self) -> &Host {
        &self.0.host
    }

    pub fn models(&self) -> &[Arc<HostedModel>] {
        self.0.host.models()
    }

    pub fn adapters(&self) -> &AdapterCache {
        self.0.host.adapters()
    }

    /// Where requests' usage goes, when metering is on.
    pub fn meter(&self) -> Option<&Arc<Meter>> {
        self.0.meter.as_ref()
    }

    /// The model a request names ([`Host::resolve`]).
    pub fn resolve(&self, name: Option<&str>) -> std::result::Result<Arc<HostedModel>, ApiError> {
        Ok(self.0.host.resolve(name)?)
    }

    /// The model of kind `kind` a request names or defaults to ([`Host::resolve_for`]).
    pub fn resolve_for(
        &self,
        name: Option<&str>,
        kind: ModelKind,
    ) -> std::result::Result<Arc<HostedModel>, ApiError> {
        Ok(self.0.host.resolve_for(name, kind)?)
    }

    /// A lease on the model of kind `kind` a request names, loaded (waiting for its
    /// load if needed) and held until the lease is dropped.
    pub async fn lease_for(
        &self,
        name: Option<&str>,
        ctx: &CallContext,
        kind: ModelKind,
    ) -> std::result::Result<Lease, ApiError> {
        let hosted = self.resolve_for(name, kind)?;
        self.lease_hosted(hosted, ctx).await
    }

    /// A lease on `hosted` that meters nothing (its caller meters what it used).
    pub(crate) async fn lease_unmetered(
        &self,
        hosted: Arc<HostedModel>,
    ) -> std::result::Result<Lease, ApiError> {
        Ok(self.0.host.lease(hosted).await?)
    }

    /// A lease on `hosted`, loading it first if needed. Records warm or cold in `ctx`,
    /// and sends the request's usage to the meter under the caller's key.
    pub async fn lease_hosted(
        &self,
        hosted: Arc<HostedModel>,
        ctx: &CallContext,
    ) -> std::result::Result<Lease, ApiError> {
        let mut lease = self.0.host.lease(hosted).await.inspect_err(|_| {
            ctx.warmth.set(false);
        })?;
        ctx.warmth.set(lease.warm());
        let limiter = &self.0.gates.limiter;
        if self.0.meter.is_some() || limiter.any() {
            lease.set_usage_sink(usage_sink(
                self.0.meter.clone(),
                limiter.clone(),
                ctx.caller.clone(),
                ctx.class,
            ));
        }
        Ok(lease)
    }

    /// The model and adapter names a request gives ([`Host::split_adapter`]).
    pub fn split_adapter<'a>(
        &self,
        model: Option<&'a str>,
        lora: Option<&'a str>,
    ) -> std::result::Result<(Option<&'a str>, Option<&'a str>), ApiError> {
        Ok(self.0.host.split_adapter(model, lora)?)
    }

    /// A lease on the text model a request names, with its adapter when it names one
    /// (`model: "base:adapter"` or `lora`), loaded if needed.
    pub async fn lease_generator(
        &self,
        model: Option<&str>,
        lora: Option<&str>,
        ctx: &CallContext,
    ) -> std::result::Result<Generator, ApiError> {
        let (model, lora) = self.split_adapter(model, lora)?;
        let lease = self.lease_for(model, ctx, ModelKind::Generate).await?;
        self.with_adapter(lease, lora).await
    }

    /// The text model of `lease` and adapter `lora` of it, if named.
    pub async fn with_adapter(
        &self,
        lease: Lease,
        lora: Option<&str>,
    ) -> std::result::Result<Generator, ApiError> {
        Ok(self.0.host.with_adapter(lease, lora).await?)
    }

    /// New requests get 503 from now on; in-flight ones carry on.
    pub fn begin_shutdown(&self) {
        if let Some(b) = self.0.batches.get() {
            b.stop();
        }
        self.0.host.begin_shutdown();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.0.host.is_shutting_down()
    }

    /// The shutdown deadline, as running requests wait on it.
    pub fn cutoff(&self) -> CutoffSignal {
        self.0.cutoff.signal()
    }

    /// The shutdown deadline has passed: ends the requests still running.
    pub fn cut_requests(&self) {
        self.0.cutoff.fire();
    }

    /// Requests ended by the shutdown deadline.
    pub fn requests_cut(&self) -> usize {
        self.0.cutoff.cut()
    }

    /// Every pinned model loaded and not shutting down (unpinned models load on demand).
    pub fn is_ready(&self) -> bool {
        self.0.host.is_ready()
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
