//! Sentence embeddings with a BERT encoder (all-MiniLM-L6-v2 and its kin), computed the
//! way sentence-transformers does: tokens → BERT → mean over the tokens → optional L2
//! normalisation.

mod config;
mod model;

use std::path::{Path, PathBuf};

use kiln_backend::{CpuBackend, EncoderBackend, RowSpan};

use crate::error::{Error, Result};
use crate::threads::default_backend;
use crate::tokenize::{TextTokenizer, Tokens};
use crate::weights::Tensors;
use config::EmbedderConfig;
use model::BertModel;

/// Most token rows one forward pass holds; larger batches run in several passes, which
/// bounds activation memory (about 15 KiB per row for MiniLM) without changing results.
const MAX_ROWS_PER_FORWARD: usize = 4096;

/// Files [`Embedder::load`] needs in the model directory.
const REQUIRED_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// A loaded sentence-embedding model, on backend `B` (the CPU unless loaded with
/// [`Embedder::with_backend`]). `Send + Sync`: one instance serves concurrent callers
/// (on the CPU their passes take turns on its worker pool).
pub struct Embedder<B: EncoderBackend = CpuBackend> {
    model: BertModel<B>,
    tokenizer: TextTokenizer,
    backend: B,
    dir: PathBuf,
    max_tokens: usize,
    normalize: bool,
    dim: usize,
}

impl<B: EncoderBackend> std::fmt::Debug for Embedder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("dir", &self.dir)
            .field("dim", &self.dim)
            .field("max_tokens", &self.max_tokens)
            .field("normalize", &self.normalize)
            .finish()
    }
}

/// The result of [`Embedder::embed`].
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// One vector of [`Embedder::dim`] floats per input, in input order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens the model read for each input (special tokens included, after truncation).
    pub token_counts: Vec<usize>,
}

impl Embeddings {
    /// Tokens read over all inputs (what an API reports as prompt tokens).
    pub fn total_tokens(&self) -> usize {
        self.token_counts.iter().sum()
    }
}

impl Embedder<CpuBackend> {
    /// Loads a sentence-transformers BERT directory: `config.json`, `model.safetensors`
    /// and `tokenizer.json`, plus the pipeline files when present. Runs on the CPU with
    /// one worker per available core.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        Self::with_backend(dir, default_backend())
    }

    /// Replaces the CPU backend with one of `n_threads` threads (the caller included).
    #[must_use]
    pub fn with_threads(mut self, n_threads: usize) -> Self {
        self.backend = CpuBackend::detect(n_threads);
        self
    }
}

impl<B: EncoderBackend> Embedder<B> {
    /// [`Embedder::load`] on `backend`: the weights are bound in its memory and every
    /// forward pass runs on it.
    pub fn with_backend(dir: impl AsRef<Path>, backend: B) -> Result<Self> {
        let dir = dir.as_ref();
        let missing: Vec<&str> = REQUIRED_FILES
            .into_iter()
            .filter(|f| !dir.join(f).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(Error::MissingFiles {
                dir: dir.to_path_buf(),
                missing: missing.join(", "),
            });
        }
        let cfg = EmbedderConfig::load(dir)?;
        let tokenizer = TextTokenizer::load(&dir.join("tokenizer.json"), false)?;
        let tensors = Tensors::open(&dir.join("model.safetensors"))?;
        let model = BertModel::load(tensors, &cfg.bert, &backend)?;
        Ok(Self {
            model,
            tokenizer,
            backend,
            dir: dir.to_path_buf(),
            max_tokens: cfg.max_tokens,
            normalize: cfg.normalize,
            dim: cfg.bert.hidden_size,
        })
    }

    /// Floats per embedding.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Most tokens one input may have, special tokens included (sentence-transformers'
    /// `max_seq_length`, capped by the position table).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Most tokens of text one input may have: [`Embedder::max_tokens`] less the
    /// special tokens the tokenizer adds.
    pub fn max_text_tokens(&self) -> usize {
        self.max_tokens.saturating_sub(self.tokenizer.n_special())
    }

    /// The byte range in `text` of each of its tokens (special tokens left out), for
    /// cutting a long text into pieces the model reads whole.
    pub fn token_spans(&self, text: &str) -> Result<Vec<std::ops::Range<usize>>> {
        self.tokenizer.spans(text)
    }

    /// Whether vectors are L2-normalised (the pipeline ends in `Normalize`).
    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    /// Tokens `text` has, special tokens included, without any truncation.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.tokenizer.encode(0, text, usize::MAX, false)?.full_len)
    }

    /// The ids the model reads for `text` (special tokens included); an input over
    /// [`Embedder::max_tokens`] is an error unless `truncate`.
    pub fn tokenize(&self, text: &str, truncate: bool) -> Result<Vec<u32>> {
        Ok(self.encode(0, text, truncate)?.ids)
    }

    /// Embeds `texts`, several per forward pass.
    ///
    /// An input over [`Embedder::max_tokens`] is [`Error::InputTooLong`] (naming its
    /// index and length) unless `truncate`, which keeps its first tokens as
    /// sentence-transformers does. Nothing is computed if any input fails.
    pub fn embed<S: AsRef<str>>(&self, texts: &[S], truncate: bool) -> Result<Embeddings> {
        let tokens = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.encode(i, t.as_ref(), truncate))
            .collect::<Result<Vec<Tokens>>>()?;
        let mut vectors = Vec::with_capacity(tokens.len());
        let mut start = 0;
        while start < tokens.len() {
            // Greedy batches of whole inputs under the row budget (at least one each).
            let mut end = start + 1;
            let mut rows = tokens[start].ids.len();
            while end < tokens.len() && rows + tokens[end].ids.len() <= MAX_ROWS_PER_FORWARD {
                rows += tokens[end].ids.len();
                end += 1;
            }
            vectors.extend(self.forward(&tokens[start..end]));
            start = end;
        }
        Ok(Embeddings {
            vectors,
            token_counts: tokens.iter().map(|t| t.ids.len()).collect(),
        })
    }

    fn encode(&self, index: usize, text: &str, truncate: bool) -> Result<Tokens> {
        let tokens = self
            .tokenizer
            .encode(index, text, self.max_tokens, truncate)?;
        let vocab = self.model.vocab_size();
        if let Some(&bad) = tokens.ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::Tokenize {
                index,
                message: format!("token id {bad} is outside the model's vocabulary of {vocab}"),
            });
        }
        Ok(tokens)
    }

    fn forward(&self, batch: &[Tokens]) -> Vec<Vec<f32>> {
        let mut ids = Vec::new();
        let mut spans = Vec::with_capacity(batch.len());
        for t in batch {
            spans.push(RowSpan {
                start: ids.len(),
                len: t.ids.len(),
            });
            ids.extend_from_slice(&t.ids);
        }
        let pooled = self
            .model
            .forward(&self.backend, &ids, &spans, self.normalize);
        pooled.chunks_exact(self.dim).map(<[f32]>::to_vec).collect()
    }
}
