//! NanoGuard's `config.json`, written by the conversion and read at load.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Hyper-parameters (from the checkpoint's `config`), labels and special tokens (from the
/// package's source). Field order is the file's: keep it in step with
/// `scripts/fixtures/nanoguard_convert.py`, whose output must match byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NanoGuardConfig {
    pub architecture: String,
    /// Tokens per input: every input is padded to this many.
    pub sequence_len: usize,
    pub vocab_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub n_embd: usize,
    pub num_classes: usize,
    pub rope_base: u32,
    /// Class names by logit index.
    pub labels: Vec<String>,
    pub bos_token: String,
    pub bos_token_id: u32,
    pub pad_token: String,
    pub pad_token_id: u32,
}

impl NanoGuardConfig {
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, reason: String| Error::Config {
            path: path.to_path_buf(),
            field: field.into(),
            reason,
        };
        if self.architecture != "nanoguard" {
            return Err(bad(
                "architecture",
                format!("{:?}, expected \"nanoguard\"", self.architecture),
            ));
        }
        for (field, v) in [
            ("sequence_len", self.sequence_len),
            ("vocab_size", self.vocab_size),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
            ("num_classes", self.num_classes),
        ] {
            if v == 0 || v > 1 << 20 {
                return Err(bad(field, format!("{v} is outside 1..=1048576")));
            }
        }
        if self.n_kv_head != self.n_head {
            return Err(bad(
                "n_kv_head",
                format!("{} differs from n_head {}", self.n_kv_head, self.n_head),
            ));
        }
        if !self.n_embd.is_multiple_of(2 * self.n_head) {
            return Err(bad(
                "n_embd",
                format!("{} is not a multiple of 2 * n_head", self.n_embd),
            ));
        }
        if self.labels.len() != self.num_classes {
            return Err(bad(
                "labels",
                format!(
                    "{} labels for {} classes",
                    self.labels.len(),
                    self.num_classes
                ),
            ));
        }
        for (field, id) in [
            ("bos_token_id", self.bos_token_id),
            ("pad_token_id", self.pad_token_id),
        ] {
            if id as usize >= self.vocab_size {
                return Err(bad(
                    field,
                    format!("{id} is outside the vocabulary of {}", self.vocab_size),
                ));
            }
        }
        Ok(())
    }
}
