//! Text classification with NanoGuard, a 16.8M-parameter prompt-injection classifier
//! (`metatronnanoguard==0.1.0`, MIT).
//!
//! The package ships a PyTorch pickle and a pickled tiktoken tokenizer. [`convert`]
//! rewrites them once as `model.safetensors`, `tokenizer.json` and `config.json` in the
//! model's directory (what `scripts/fixtures/nanoguard_convert.py` writes with torch);
//! [`Classifier::load`] does so itself on first load, then reads only those.

mod checkpoint;
mod config;
mod convert;
mod model;
mod pickle;
mod st_write;
mod tiktoken;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kiln_backend::{CpuBackend, EncoderBackend};

use crate::error::{Error, Result};
use crate::json;
use crate::threads::default_backend;
use crate::tokenize::{TextTokenizer, Tokens};
use crate::weights::Tensors;
use config::NanoGuardConfig;
pub use convert::{convert, is_converted, KnownFile, OUTPUTS, SOURCES};
pub use model::Precision;
use model::{NanoGuardModel, Scratch};

/// Most inputs per forward pass. Every input is `sequence_len` (512) rows, so this bounds
/// activation memory (about 12 MiB per input) without changing results.
const MAX_INPUTS_PER_FORWARD: usize = 4;

/// `text[start..end]` widened to character boundaries (byte-level BPE offsets may fall
/// inside a character).
fn char_slice(text: &str, start: usize, end: usize) -> &str {
    let mut s = start.min(text.len());
    while !text.is_char_boundary(s) {
        s -= 1;
    }
    let mut e = end.clamp(s, text.len());
    while !text.is_char_boundary(e) {
        e += 1;
    }
    &text[s..e]
}

/// One class and its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

/// The result for one input.
#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    /// Every class, highest probability first (probabilities sum to 1).
    pub scores: Vec<LabelScore>,
    /// Tokens the model read for this input (BOS included, after truncation; padding
    /// not counted).
    pub tokens: usize,
}

impl Classification {
    /// The most probable class.
    pub fn top(&self) -> Option<&LabelScore> {
        self.scores.first()
    }
}

/// A loaded NanoGuard classifier, on backend `B` (the CPU unless loaded with
/// [`Classifier::with_backend`]). `Send + Sync`: one instance serves concurrent callers.
pub struct Classifier<B: EncoderBackend = CpuBackend> {
    model: NanoGuardModel<B>,
    tokenizer: TextTokenizer,
    backend: B,
    /// Forward-pass buffers, one per concurrent caller.
    scratch: Mutex<Vec<Scratch<B>>>,
    dir: PathBuf,
}

impl<B: EncoderBackend> std::fmt::Debug for Classifier<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("dir", &self.dir)
            .field("labels", &self.labels())
            .field("max_tokens", &self.max_tokens())
            .finish()
    }
}

impl Classifier<CpuBackend> {
    /// Loads the converted model in `dir`, first converting the package's `model.pt` and
    /// `tokenizer.pkl` there when they are present and the conversion is missing or
    /// stale ([`is_converted`]). The first load needs `dir` to be writable. Runs on the
    /// CPU with one worker per available core.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        Self::with_backend(dir, default_backend())
    }

    /// Replaces the CPU backend with one of `n_threads` threads (the caller included).
    /// The int8 weights stay as they were prepared: the kernels are the same.
    #[must_use]
    pub fn with_threads(mut self, n_threads: usize) -> Self {
        self.backend = CpuBackend::detect(n_threads);
        self
    }
}

impl<B: EncoderBackend> Classifier<B> {
    /// [`Classifier::load`] on `backend`: the weights are bound in its memory and every
    /// forward pass runs on it.
    pub fn with_backend(dir: impl AsRef<Path>, backend: B) -> Result<Self> {
        let dir = dir.as_ref();
        let sources_present = SOURCES.iter().all(|s| dir.join(s.file).is_file());
        if sources_present && !is_converted(dir) {
            convert(dir, dir)?;
        }
        // Without the sources, converted files are taken as they are (e.g. written by the
        // reference script); the checks below still validate their structure.
        let missing: Vec<&str> = OUTPUTS
            .iter()
            .map(|f| f.file)
            .filter(|f| !dir.join(f).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(Error::MissingFiles {
                dir: dir.to_path_buf(),
                missing: format!(
                    "{} (or {} to convert from)",
                    missing.join(", "),
                    SOURCES.map(|s| s.file).join(" and ")
                ),
            });
        }
        let config_path = dir.join("config.json");
        let cfg: NanoGuardConfig = json::read(&config_path)?;
        cfg.validate(&config_path)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = TextTokenizer::load(&tokenizer_path, true)?;
        for (token, id) in [
            (&cfg.bos_token, cfg.bos_token_id),
            (&cfg.pad_token, cfg.pad_token_id),
        ] {
            if tokenizer.token_id(token) != Some(id) {
                return Err(Error::Config {
                    path: config_path,
                    field: token.clone(),
                    reason: format!("id {id} disagrees with {}", tokenizer_path.display()),
                });
            }
        }
        let tensors = Tensors::open(&dir.join("model.safetensors"))?;
        let model = NanoGuardModel::load(&tensors, &cfg, &backend)?;
        Ok(Self {
            model,
            tokenizer,
            backend,
            scratch: Mutex::new(Vec::new()),
            dir: dir.to_path_buf(),
        })
    }

    fn take_scratch(&self) -> Scratch<B> {
        self.scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    fn give_scratch(&self, s: Scratch<B>) {
        self.scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s);
    }

    /// Class names, by the model's logit index.
    pub fn labels(&self) -> &[String] {
        &self.model.config().labels
    }

    /// Most tokens one input may have, BOS included (the model's `sequence_len`).
    pub fn max_tokens(&self) -> usize {
        self.model.config().sequence_len
    }

    /// The ids the model reads for `text` (BOS first, no padding); an input over
    /// [`Classifier::max_tokens`] is an error unless `truncate`.
    pub fn tokenize(&self, text: &str, truncate: bool) -> Result<Vec<u32>> {
        Ok(self.encode(0, text, truncate)?.ids)
    }

    fn encode(&self, index: usize, text: &str, truncate: bool) -> Result<Tokens> {
        let cfg = self.model.config();
        let tokens = self
            .tokenizer
            .encode(index, text, cfg.sequence_len, truncate)?;
        if let Some(&bad) = tokens.ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(Error::Tokenize {
                index,
                message: format!(
                    "token id {bad} is outside the model's vocabulary of {}",
                    cfg.vocab_size
                ),
            });
        }
        Ok(tokens)
    }

    /// Classifies `texts` of any length: each is cut into pieces the model reads whole
    /// (at most [`Classifier::max_tokens`] less BOS tokens each, at token boundaries),
    /// and every piece of every text is classified, several per forward pass. The
    /// result has each text's pieces in order.
    pub fn classify_pieces<S: AsRef<str>>(
        &self,
        texts: &[S],
        p: Precision,
    ) -> Result<Vec<Vec<Classification>>> {
        let per_piece = self.max_tokens().saturating_sub(1).max(1);
        let mut pieces: Vec<&str> = Vec::new();
        let mut counts = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let t = t.as_ref();
            let spans = self.tokenizer.spans(t).map_err(|e| match e {
                Error::Tokenize { message, .. } => Error::Tokenize { index: i, message },
                e => e,
            })?;
            if spans.len() <= per_piece {
                pieces.push(t);
                counts.push(1);
                continue;
            }
            let before = pieces.len();
            for window in spans.chunks(per_piece) {
                let (start, end) = (window[0].start, window[window.len() - 1].end);
                pieces.push(char_slice(t, start, end));
            }
            counts.push(pieces.len() - before);
        }
        // A piece re-tokenized alone may differ slightly at its edges; it is cut to the
        // model's length rather than refused.
        let mut all = self.classify_at(&pieces, true, p)?.into_iter();
        Ok(counts
            .into_iter()
            .map(|n| all.by_ref().take(n).collect())
            .collect())
    }

    /// Classifies `texts`, several per forward pass.
    ///
    /// An input over [`Classifier::max_tokens`] is [`Error::InputTooLong`] unless
    /// `truncate`, which keeps its first tokens as the package does. Nothing is computed
    /// if any input fails.
    pub fn classify<S: AsRef<str>>(
        &self,
        texts: &[S],
        truncate: bool,
    ) -> Result<Vec<Classification>> {
        self.classify_at(texts, truncate, Precision::F32)
    }

    /// [`Classifier::classify`] at precision `p`.
    pub fn classify_at<S: AsRef<str>>(
        &self,
        texts: &[S],
        truncate: bool,
        p: Precision,
    ) -> Result<Vec<Classification>> {
        let cfg = self.model.config();
        let tokens = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.encode(i, t.as_ref(), truncate))
            .collect::<Result<Vec<Tokens>>>()?;
        let mut out = Vec::with_capacity(tokens.len());
        for batch in tokens.chunks(MAX_INPUTS_PER_FORWARD) {
            let mut ids = Vec::with_capacity(batch.len() * cfg.sequence_len);
            for t in batch {
                ids.extend_from_slice(&t.ids);
                ids.resize(ids.len() + cfg.sequence_len - t.ids.len(), cfg.pad_token_id);
            }
            let n_real: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
            let mut scratch = self.take_scratch();
            let probs = self
                .model
                .forward(&self.backend, &ids, &n_real, p, &mut scratch);
            self.give_scratch(scratch);
            for (t, p) in batch.iter().zip(probs.chunks_exact(cfg.num_classes)) {
                let mut scores: Vec<LabelScore> = cfg
                    .labels
                    .iter()
                    .zip(p)
                    .map(|(label, &score)| LabelScore {
                        label: label.clone(),
                        score,
                    })
                    .collect();
                scores.sort_by(|a, b| b.score.total_cmp(&a.score));
                out.push(Classification {
                    scores,
                    tokens: t.ids.len(),
                });
            }
        }
        Ok(out)
    }
}
