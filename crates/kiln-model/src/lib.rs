//! Model architectures over Kiln's backend: `llama` (SmolLM2), `qwen2` and `gemma3`.
//!
//! One transformer definition ([`forward`]) covers all three; their differences are
//! data in [`ModelConfig`] plus optional weights. It is written against the
//! [`Backend`] trait and runs on [`CpuBackend`] unless given another; on the CPU weights
//! stay in the GGUF mapping and go through one quant-agnostic matmul. The API is batch-first: a [`BatchInput`] is a flat
//! list of tokens from many sequences with per-token positions and KV slots, read and
//! written through paged block tables. The model holds no request state and no sampling
//! policy. [`perplexity`] scores a tokenized text as llama.cpp's `llama-perplexity` does.

mod batch;
mod config;
mod content_digest;
mod diagnose;
mod digest_memo;
mod error;
mod forward;
pub mod lora;
mod pack_cache;
pub mod perplexity;
mod weights;
mod workspace;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use kiln_backend::{Backend, CpuBackend, KvDtype, KvShape};
use kiln_kernels::KernelTable;

pub use batch::BatchInput;
pub use config::{Arch, ModelConfig};
pub use content_digest::content_digest;
pub use error::{Error, Result};
pub use kiln_backend::Activation;
pub use kiln_backend::SeqSpan;
pub use kiln_formats::GgufFile;
pub use lora::{LoraAdapter, LoraBatch, LoraError};
pub use pack_cache::PackCache;
use pack_cache::PackOutcome;
pub use workspace::{ForwardProfile, Workspace};

/// A loaded model: configuration, and weights bound to the file mapping in the memory of
/// backend `B`, which runs its steps.
pub struct Model<B: Backend = CpuBackend> {
    file: Arc<GgufFile>,
    config: ModelConfig,
    weights: weights::Weights<B>,
    packed_bytes: usize,
    prepared_from_cache: bool,
    /// The thread writing this load's prepared copies to the pack cache, if any.
    pack_writer: Mutex<Option<JoinHandle<std::io::Result<()>>>>,
    /// The file's content digest, once something needed it, the threads that hash,
    /// and where digests are remembered between loads (beside the pack cache).
    digest: OnceLock<[u8; 32]>,
    threads: usize,
    digest_memo: Option<digest_memo::DigestMemo>,
    backend: B,
}

/// A model dropped while its prepared copies are still being written waits for the
/// writer: a process that exits normally leaves a whole cache file, not a temporary one.
impl<B: Backend> Drop for Model<B> {
    fn drop(&mut self) {
        if let Some(Err(e)) = self.finish_pack_cache() {
            tracing::warn!(error = %e, "could not keep the prepared weights in the pack cache");
        }
    }
}

/// Options that don't come from the model file.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Threads doing the math (the caller's thread included).
    pub threads: usize,
    pub kernels: &'static KernelTable,
    /// Repack matmul weights for the batched kernels where the CPU has them (a copy of
    /// those weights in memory, made once at load).
    pub repack: bool,
    /// Keep repacked weights here and map them on later loads instead of repacking
    /// (see [`PackCache`]); `None`: repack at every load.
    pub pack_cache: Option<PackCache>,
}

impl LoadOptions {
    /// All available cores, best kernels for this CPU.
    pub fn detect() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernels: KernelTable::best(),
            repack: true,
            pack_cache: None,
        }
    }
}

impl Model<CpuBackend> {
    /// Maps a GGUF file and binds its weights (no tensor data is copied).
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let file = Arc::new(GgufFile::open(path)?);
        Self::from_gguf(file, opts)
    }

    /// Binds `file`'s weights for the CPU backend, repacked if `opts.repack`.
    pub fn from_gguf(file: Arc<GgufFile>, opts: &LoadOptions) -> Result<Self> {
        let backend = CpuBackend::new(opts.threads, opts.kernels);
        let prepare = opts.repack.then(|| Prepare {
            cache: opts.pack_cache.clone(),
            threads: opts.threads,
        });
        Self::with_backend(file, backend, prepare)
    }
}

/// How [`Model::with_backend`] prepares the matmul weights (see [`Backend::prepare`]).
#[derive(Debug, Clone, Default)]
pub struct Prepare {
    /// Where prepared copies are kept between loads.
    pub cache: Option<PackCache>,
    /// Threads that hash the model file for the cache's fingerprint.
    pub threads: usize,
}

impl<B: Backend> Model<B> {
    /// Binds `file`'s weights in `backend`, and prepares the matmul weights for its
    /// kernels if asked to (see [`Backend::prepare`]).
    pub fn with_backend(file: Arc<GgufFile>, backend: B, prepare: Option<Prepare>) -> Result<Self> {
        let config = ModelConfig::from_gguf(&file)?;
        let mut weights = weights::Weights::load(&file, &config, &backend)?;
        let digest = OnceLock::new();
        let threads = prepare.as_ref().map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |p| p.threads,
        );
        let digest_memo = prepare
            .as_ref()
            .and_then(|p| p.cache.as_ref())
            .map(PackCache::digest_memo);
        let (packed_bytes, outcome) = match prepare {
            Some(p) => {
                let content = match &p.cache {
                    Some(_) => *digest.get_or_init(|| {
                        content_digest::remembered(&file, threads, digest_memo.as_ref())
                    }),
                    None => [0; 32],
                };
                weights.prepare(&backend, &file, p.cache.as_ref(), &content)
            }
            None => (0, PackOutcome::Off),
        };
        let prepared_from_cache = matches!(outcome, PackOutcome::Mapped);
        let pack_writer = match outcome {
            PackOutcome::Writing(w) => Some(w),
            PackOutcome::Off | PackOutcome::Mapped => None,
        };
        Ok(Self {
            file,
            config,
            weights,
            packed_bytes,
            prepared_from_cache,
            pack_writer: Mutex::new(pack_writer),
            digest,
            threads,
            digest_memo,
            backend,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Weight bytes one forward pass reads through its matmuls (see `Weights`): batch-1
    /// decode's memory traffic, against which its bandwidth is quoted.
    pub fn matmul_weight_bytes(&self) -> usize {
        self.weights.matmul_bytes()
    }

    /// Memory taken by weights repacked for the batched kernels (0 if none were).
    pub fn packed_bytes(&self) -> usize {
        self.packed_bytes
    }

    /// The digest of the model file's whole content (see [`content_digest`]): computed
    /// at most once per load (and not at all where the pack cache remembers it, see
    /// `digest_memo.rs`), and shared by the pack cache and the engine's KV disk tier.
    pub fn content_digest(&self) -> [u8; 32] {
        *self.digest.get_or_init(|| {
            content_digest::remembered(&self.file, self.threads, self.digest_memo.as_ref())
        })
    }

    /// Whether the repacked weights were mapped from the pack cache (no repacking).
    pub fn prepared_from_cache(&self) -> bool {
        self.prepared_from_cache
    }

    /// Waits until this load's repacked weights are in the pack cache, if it is writing
    /// them; `Some` with the outcome the first time, `None` if nothing was being written.
    pub fn finish_pack_cache(&self) -> Option<std::io::Result<()>> {
        let writer = self
            .pack_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some(
            writer
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the pack cache writer panicked"))),
        )
    }

    /// The first tensor of the model's file holding a NaN or an infinity (see
    /// [`diagnose`]); reads every weight, so it is for diagnosing, not for steps.
    pub fn first_non_finite_tensor(&self) -> Option<String> {
        diagnose::first_non_finite_tensor(&self.file, KernelTable::best())
    }

    /// The GGUF file the model was loaded from (metadata, tokenizer, chat template).
    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// The shape of a KV cache with `num_blocks` blocks of `block_size` tokens.
    pub fn kv_shape(&self, num_blocks: usize, block_size: usize) -> KvShape {
        KvShape {
            n_layers: self.config.n_layers,
            n_kv_heads: self.config.n_kv_heads,
            head_dim: self.config.head_dim,
            block_size,
            num_blocks,
        }
    }

    /// A KV cache for this model.
    pub fn new_kv_cache(&self, num_blocks: usize, block_size: usize, dtype: KvDtype) -> B::Kv {
        let shape = self.kv_shape(num_blocks, block_size);
        self.backend.new_kv(shape, dtype)
    }

    /// A workspace already sized for batches of up to `max_rows` tokens and
    /// `max_logits_rows` logits rows over sequences of at most `max_context` tokens, so
    /// steps within those limits never allocate.
    pub fn new_workspace(
        &self,
        max_rows: usize,
        max_logits_rows: usize,
        max_context: usize,
    ) -> Workspace<B> {
        let mut ws = Workspace::new();
        ws.ensure(&self.backend, &self.config, max_rows, max_logits_rows);
        ws.max_context = Some(max_context);
        ws
    }

    /// Runs one step over `batch`: writes each row's K/V into `kv` and returns the logits
    /// of `batch.logits_rows`, `vocab_size` floats per row, in `ws` (mutable, so a sampler
    /// can work in place).
    pub fn forward<'w>(
        &self,
        batch: &BatchInput<'_>,
        kv: &mut B::Kv,
        ws: &'w mut Workspace<B>,
    ) -> Result<&'w mut [f32]> {
        let s = B::kv_shape(kv);
        if (s.n_layers, s.n_kv_heads, s.head_dim)
            != (
                self.config.n_layers,
                self.config.n_kv_heads,
                self.config.head_dim,
            )
        {
            return Err(Error::InvalidBatch(
                "KV cache was made for another model".into(),
            ));
        }
        batch.validate(&self.config, s.block_size, s.num_blocks)?;
        let m = batch.logits_rows.len();
        ws.ensure(&self.backend, &self.config, batch.n_rows(), m);
        let ctx = forward::Ctx {
            cfg: &self.config,
            weights: &self.weights,
            backend: &self.backend,
            lora: batch.lora,
            matmul_time: Default::default(),
            attention_time: Default::default(),
        };
        let start = std::time::Instant::now();
        ctx.forward(batch, kv, ws);
        let (matmul, attention) = (ctx.matmul_time.get(), ctx.attention_time.get());
        ws.profile = ForwardProfile {
            matmul,
            attention,
            other: start.elapsed().saturating_sub(matmul + attention),
        };
        let len = m * self.config.vocab_size;
        Ok(self.backend.host(&mut ws.logits, len))
    }
}
