//! A BERT encoder's shape (`config.json`) and the sentence-transformers pipeline around it
//! (`sentence_bert_config.json`, `modules.json`, `1_Pooling/config.json`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::json;

/// Hugging Face `BertConfig`, the fields the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f32,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f32 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}

impl BertConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, reason: String| Error::Config {
            path: path.to_path_buf(),
            field: field.into(),
            reason,
        };
        for (field, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 || v > 1 << 20 {
                return Err(bad(field, format!("{v} is outside 1..=1048576")));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(bad(
                "num_attention_heads",
                format!(
                    "{} does not divide hidden_size {}",
                    self.num_attention_heads, self.hidden_size
                ),
            ));
        }
        let unsupported = |what: String| Error::Unsupported {
            path: path.to_path_buf(),
            what,
        };
        if self.hidden_act != "gelu" {
            return Err(unsupported(format!(
                "hidden_act {:?} (only \"gelu\")",
                self.hidden_act
            )));
        }
        match self.position_embedding_type.as_deref() {
            None | Some("absolute") => Ok(()),
            Some(other) => Err(unsupported(format!("position_embedding_type {other:?}"))),
        }
    }
}

#[derive(Debug, Deserialize)]
struct SentenceBertConfig {
    #[serde(default)]
    max_seq_length: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Debug, Default, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// Everything `Embedder::load` reads besides the weights and the tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct EmbedderConfig {
    pub bert: BertConfig,
    /// Tokens per input, special tokens included.
    pub max_tokens: usize,
    /// Whether the pipeline ends in sentence-transformers' `Normalize`.
    pub normalize: bool,
}

impl EmbedderConfig {
    pub fn load(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        let bert: BertConfig = json::read(&config_path)?;
        bert.validate(&config_path)?;
        // sentence-transformers truncates at max_seq_length (256 for all-MiniLM-L6-v2),
        // below the 512 positions the weights have; inputs beyond it were never trained.
        let st: Option<SentenceBertConfig> =
            json::read_optional(&dir.join("sentence_bert_config.json"))?;
        let max_tokens = st
            .and_then(|c| c.max_seq_length)
            .map_or(bert.max_position_embeddings, |m| {
                m.min(bert.max_position_embeddings)
            });
        let modules: Option<Vec<Module>> = json::read_optional(&dir.join("modules.json"))?;
        let modules = modules.unwrap_or_default();
        let pooling_dir = modules
            .iter()
            .find(|m| m.kind.ends_with(".Pooling"))
            .map_or_else(|| PathBuf::from("1_Pooling"), |m| PathBuf::from(&m.path));
        let pooling_path = dir.join(pooling_dir).join("config.json");
        let pooling: PoolingConfig = json::read_optional(&pooling_path)?.unwrap_or(PoolingConfig {
            pooling_mode_mean_tokens: true,
            ..PoolingConfig::default()
        });
        if !pooling.pooling_mode_mean_tokens
            || pooling.pooling_mode_cls_token
            || pooling.pooling_mode_max_tokens
            || pooling.pooling_mode_mean_sqrt_len_tokens
        {
            return Err(Error::Unsupported {
                path: pooling_path,
                what: "pooling mode (only mean pooling over tokens)".into(),
            });
        }
        // Without modules.json sentence-transformers builds Transformer + mean Pooling
        // only, so vectors are normalised only when the pipeline says so.
        let normalize = modules.iter().any(|m| m.kind.ends_with(".Normalize"));
        Ok(Self {
            bert,
            max_tokens,
            normalize,
        })
    }
}
