//! What every handler shares: the generator (the served models under their memory
//! budget, metering, the shutdown deadline), the gates, the stateful services built
//! over the generator, API and admin keys and limits. Built whole before serving: no
//! service reaches back into it.

use std::sync::Arc;
use std::time::Duration;

use kiln_agents::Agents;
use kiln_batch::Batches;
use kiln_files::FileStore;
use kiln_generate::{CutoffSignal, Generator, ServingModel};
use kiln_host::{AdapterCache, Host, HostedModel, LoadedModel, LoraConfig};
use kiln_http::{ApiKey, ConnectionLimits, CorsPolicy};
use kiln_rag::VectorStores;
use kiln_responses::Responses;
use kiln_usage::Meter;
use kiln_vectors::VectorDb;

use crate::error::ApiError;
use crate::gate::{Gates, GuardSettings};

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
    /// Where this node runs (`--colo`), named in `x-kiln-colo` and `/health`.
    pub colo: Option<Colo>,
}

/// A node's location: a colo name (an IATA-style code such as `ams`) and, optionally,
/// its coordinates for the router's map.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Colo {
    pub name: String,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
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
            colo: None,
        }
    }
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    generator: Arc<Generator>,
    gates: Arc<Gates>,
    config: ServerConfig,
    services: Services,
}

/// The stateful services a server runs, each built over the generator before the
/// state (most need a data directory; a missing one answers what it needs).
#[derive(Default)]
pub struct Services {
    pub responses: Option<Arc<Responses>>,
    pub agents: Option<Arc<Agents>>,
    /// Files and batches.
    pub batches: Option<Arc<Batches>>,
    pub vectors: Option<VectorDb>,
    pub vector_stores: Option<VectorStores>,
}

/// `service`, or the 503 saying it needs a data directory.
fn needs_data_dir<'a, T>(service: Option<&'a T>, what: &str) -> Result<&'a T, ApiError> {
    service.ok_or_else(|| {
        ApiError::StoreUnavailable(format!(
            "{what} need a data directory; start the server with --data-dir"
        ))
    })
}

impl AppState {
    /// State over `models` (the first is the default for requests that name none),
    /// without usage metering or stateful services.
    pub fn new(config: ServerConfig, models: Vec<HostedModel>) -> crate::error::Result<Self> {
        Self::with_meter(config, models, None)
    }

    /// Like [`AppState::new`], metering requests into `meter`.
    pub fn with_meter(
        config: ServerConfig,
        models: Vec<HostedModel>,
        meter: Option<Arc<Meter>>,
    ) -> crate::error::Result<Self> {
        let host = Host::new(models, config.models_memory, config.lora.clone())?;
        let gates = Gates::new(&config.guard);
        let generator = Arc::new(Generator::new(host, meter, gates.limiter.clone()));
        Ok(Self::from_parts(
            config,
            generator,
            Arc::new(gates),
            Services::default(),
        ))
    }

    /// State over a generator, the gates and the services built over it.
    pub fn from_parts(
        config: ServerConfig,
        generator: Arc<Generator>,
        gates: Arc<Gates>,
        services: Services,
    ) -> Self {
        Self(Arc::new(Inner {
            generator,
            gates,
            config,
            services,
        }))
    }

    /// State over one already loaded model (tests, embedding the server).
    pub fn with_model(
        config: ServerConfig,
        name: &str,
        task: &str,
        model: Arc<ServingModel>,
    ) -> crate::error::Result<Self> {
        let hosted =
            HostedModel::preloaded(name, task, LoadedModel::Generate(model), config.max_queued);
        Self::new(config, vec![hosted])
    }

    /// The generation service every model route runs on.
    pub fn generator(&self) -> &Arc<Generator> {
        &self.0.generator
    }

    /// The batch service, when the server has a data directory.
    pub fn batches(&self) -> Result<&Arc<Batches>, ApiError> {
        needs_data_dir(self.0.services.batches.as_ref(), "files and batches")
    }

    /// The vector indexes, when the server has a data directory.
    pub fn vectors(&self) -> Result<&VectorDb, ApiError> {
        needs_data_dir(self.0.services.vectors.as_ref(), "vector indexes")
    }

    /// The vector stores, when the server has a data directory.
    pub fn vector_stores(&self) -> Result<&VectorStores, ApiError> {
        needs_data_dir(self.0.services.vector_stores.as_ref(), "vector stores")
    }

    /// The vector stores, if any (a chat's `file_search` says what is missing itself).
    pub(crate) fn stores(&self) -> Option<&VectorStores> {
        self.0.services.vector_stores.as_ref()
    }

    /// The gates in front of the model routes.
    pub(crate) fn gates(&self) -> &Arc<Gates> {
        &self.0.gates
    }

    /// The prompt firewall, when the server has a classifier for it.
    pub fn firewall(&self) -> Result<&Arc<kiln_guard::Firewall>, ApiError> {
        self.0.gates.firewall()
    }

    /// The file store (under the batch service, which reads and writes it too).
    pub fn files(&self) -> Result<&Arc<FileStore>, ApiError> {
        Ok(self.batches()?.files())
    }

    /// The agents, when the server has a data directory.
    pub fn agents(&self) -> Result<&Arc<Agents>, ApiError> {
        self.0
            .services
            .agents
            .as_ref()
            .ok_or_else(|| ApiError::InvalidRequest {
                param: None,
                message: "agents need a data directory; start the server with --data-dir".into(),
            })
    }

    /// The Responses API.
    pub fn responses(&self) -> Result<&Arc<Responses>, ApiError> {
        self.0
            .services
            .responses
            .as_ref()
            .ok_or_else(|| ApiError::InvalidRequest {
                param: None,
                message: "the Responses API is not set up on this server".into(),
            })
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn host(&self) -> &Host {
        self.0.generator.host()
    }

    pub fn models(&self) -> &[Arc<HostedModel>] {
        self.host().models()
    }

    pub fn adapters(&self) -> &AdapterCache {
        self.host().adapters()
    }

    /// Where requests' usage goes, when metering is on.
    pub fn meter(&self) -> Option<&Arc<Meter>> {
        self.0.generator.meter()
    }

    /// New requests get 503 from now on; in-flight ones carry on.
    pub fn begin_shutdown(&self) {
        if let Some(b) = &self.0.services.batches {
            b.stop();
        }
        self.host().begin_shutdown();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.host().is_shutting_down()
    }

    /// The shutdown deadline, as running requests wait on it.
    pub fn cutoff(&self) -> CutoffSignal {
        self.0.generator.cutoff()
    }

    /// The shutdown deadline has passed: ends the requests still running.
    pub fn cut_requests(&self) {
        self.0.generator.cut_requests();
    }

    /// Requests ended by the shutdown deadline.
    pub fn requests_cut(&self) -> usize {
        self.0.generator.requests_cut()
    }

    /// Every pinned model loaded and not shutting down (unpinned models load on demand).
    pub fn is_ready(&self) -> bool {
        self.host().is_ready()
    }
}
