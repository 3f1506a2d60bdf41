//! A model ready to serve: weights, tokenizer, chat template and a running engine thread.
//!
//! The CLI and the HTTP server both load models through here, so they behave the same.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_backend::KvDtype;
use kiln_model::{GgufFile, LoadOptions, Model, ModelConfig};
use kiln_tokenizer::{ChatTemplate, Tokenizer};

use crate::core::EngineCore;
use crate::handle::{EngineHandle, EngineThread};
use crate::kv::{disk, DiskTierConfig};
use crate::output::TextStream;
use crate::request::GenerateRequest;
use crate::spec::SpecMode;
use crate::{EngineConfig, Error, Result};

/// Serving limits; `None` fields get defaults from the model and the machine.
#[derive(Debug, Clone)]
pub struct ServingOptions {
    /// Bytes of KV cache; default: enough for `max_num_seqs` sequences of the full
    /// context, but at most a quarter of available memory and 4 GiB.
    pub kv_cache_bytes: Option<usize>,
    pub kv_dtype: KvDtype,
    pub block_size: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// Tokens per step for background sequences while interactive ones are about.
    pub background_step_tokens: usize,
    /// Default: the model's context length, capped to what the KV cache can hold.
    pub max_model_len: Option<usize>,
    pub enable_prefix_caching: bool,
    pub speculative: SpecMode,
    pub load: LoadOptions,
    /// The prefix cache's disk tier: its root directory (each model and KV layout gets
    /// its own directory under it) and the bytes each model may keep there.
    pub kv_disk: Option<(PathBuf, u64)>,
}

impl ServingOptions {
    pub fn detect() -> Self {
        Self {
            kv_cache_bytes: None,
            kv_dtype: KvDtype::F16,
            block_size: 16,
            max_num_batched_tokens: 512,
            max_num_seqs: 64,
            background_step_tokens: 8,
            max_model_len: None,
            enable_prefix_caching: true,
            speculative: SpecMode::Auto,
            load: LoadOptions::detect(),
            kv_disk: None,
        }
    }
}

/// Memory the OS says is available (Linux `MemAvailable`), if known.
pub fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Most KV cache a model takes when none is configured.
const DEFAULT_KV_CAP: usize = 4 << 30;

/// The KV cache a model may take when none is configured: a quarter of available
/// memory, at most 4 GiB. (A model that needs less for `max_num_seqs` full contexts
/// takes only that.)
pub fn default_kv_cache_cap() -> usize {
    available_memory().map_or(DEFAULT_KV_CAP, |m| (m / 4).min(DEFAULT_KV_CAP))
}

pub struct ServingModel {
    pub name: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    pub model_config: ModelConfig,
    pub engine_config: EngineConfig,
    /// Weight bytes each forward pass streams through its matmuls.
    pub matmul_weight_bytes: usize,
    handle: EngineHandle,
    thread: Option<EngineThread>,
}

impl ServingModel {
    /// Loads `path` (GGUF) and starts its engine thread.
    pub fn load(name: &str, path: &Path, opts: &ServingOptions) -> Result<Self> {
        // The tokenizer is built on a thread of its own while the weights are bound and
        // mapped: 35-40 ms for a 151k-token BPE, off a start's critical path.
        let gguf = Arc::new(GgufFile::open(path).map_err(kiln_model::Error::from)?);
        let (model, tokenizer) = std::thread::scope(|s| {
            let tokenizer = s.spawn(|| Tokenizer::from_gguf(&gguf));
            (Model::from_gguf(gguf.clone(), &opts.load), tokenizer.join())
        });
        let model = model?;
        let tokenizer = tokenizer
            .map_err(|_| Error::Config("tokenizer: its thread panicked".into()))?
            .map_err(|e| Error::Config(format!("tokenizer: {e}")))?;
        let tokenizer = Arc::new(tokenizer);
        let token_text = |id: Option<u32>| {
            id.map(|id| String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned())
                .unwrap_or_default()
        };
        let chat_template = match tokenizer.chat_template() {
            Some(src) => Some(
                ChatTemplate::new(
                    src,
                    &token_text(tokenizer.bos_id()),
                    &token_text(tokenizer.eos_id()),
                )
                .map_err(|e| Error::Config(format!("chat template: {e}")))?,
            ),
            None => None,
        };
        let model_config = model.config().clone();
        let matmul_weight_bytes = model.matmul_weight_bytes();
        let block_bytes = model
            .kv_shape(1, opts.block_size)
            .block_bytes(opts.kv_dtype);
        let context = opts.max_model_len.unwrap_or(model_config.context_length);
        let wanted = opts.max_num_seqs * context.div_ceil(opts.block_size) * block_bytes;
        let kv_bytes = opts
            .kv_cache_bytes
            .unwrap_or_else(|| wanted.min(default_kv_cache_cap()));
        let num_kv_blocks = EngineConfig::blocks_for_budget(kv_bytes, block_bytes);
        let fits = num_kv_blocks * opts.block_size;
        let max_model_len = opts
            .max_model_len
            .unwrap_or_else(|| model_config.context_length.min(fits));
        if max_model_len > model_config.context_length {
            return Err(Error::Config(format!(
                "max model length {max_model_len} exceeds the model's context of {}",
                model_config.context_length
            )));
        }
        let engine_config = EngineConfig {
            block_size: opts.block_size,
            num_kv_blocks,
            kv_dtype: opts.kv_dtype,
            max_num_batched_tokens: opts.max_num_batched_tokens,
            max_num_seqs: opts.max_num_seqs,
            background_step_tokens: opts.background_step_tokens,
            max_model_len,
            enable_prefix_caching: opts.enable_prefix_caching,
            speculative: opts.speculative,
            kv_disk: None,
        };
        let kv_disk = opts.kv_disk.as_ref().map(|(root, budget)| DiskTierConfig {
            root: root.clone(),
            budget_bytes: *budget,
            fingerprint: kv_fingerprint(&model, opts),
        });
        let engine_config = EngineConfig {
            kv_disk,
            ..engine_config
        };
        let (cfg, eos) = (engine_config.clone(), tokenizer.eos_ids().to_vec());
        let (handle, thread) = crate::handle::spawn(move || EngineCore::new(model, cfg, eos))?;
        Ok(Self {
            name: name.to_string(),
            tokenizer,
            chat_template,
            model_config,
            engine_config,
            matmul_weight_bytes,
            handle,
            thread: Some(thread),
        })
    }

    pub fn handle(&self) -> &EngineHandle {
        &self.handle
    }

    /// Submits `req` and returns its text stream.
    pub fn generate(&self, req: GenerateRequest, skip_special: bool) -> Result<TextStream> {
        let n = req.n.max(1);
        let stops = req.stop.stop_strings.clone();
        let events = self.handle.submit(req)?;
        Ok(TextStream::new(
            events,
            self.tokenizer.clone(),
            n,
            &stops,
            skip_special,
        ))
    }

    /// Stops admitting requests, lets running ones finish, and joins the engine thread.
    pub fn shutdown(mut self) {
        self.handle.drain();
        if let Some(t) = self.thread.take() {
            t.join();
        }
    }
}

/// The disk tier's fingerprint for `model` served with `opts`: the model file's content
/// (weights, tokenizer, chat template, RoPE settings), the KV dtype and block size, the
/// parsed model settings, the kernels (another ISA rounds differently) and this build of
/// Kiln (its executable's size and time: a rebuilt engine may compute other K/V bits).
fn kv_fingerprint(model: &Model, opts: &ServingOptions) -> [u8; 32] {
    let started = std::time::Instant::now();
    let digest = model.content_digest();
    let build = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| format!("{} {:?}", m.len(), m.modified().ok()))
        .unwrap_or_default();
    let layout = format!(
        "kv {:?} block {} kernels {} model {:?} kiln {} build {build}",
        opts.kv_dtype,
        opts.block_size,
        opts.load.kernels.isa().name(),
        model.config(),
        env!("CARGO_PKG_VERSION"),
    );
    tracing::debug!(
        ms = started.elapsed().as_millis() as u64,
        "fingerprinted the model for the KV disk tier"
    );
    disk::fingerprint(&digest, &layout)
}
