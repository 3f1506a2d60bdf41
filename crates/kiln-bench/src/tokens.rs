//! Token counts with a model's own tokenizer, read from its GGUF file.

use std::path::{Path, PathBuf};

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

use crate::error::{Error, Result};
use crate::workload::TokenCounter;

/// Counts tokens as the served model does (no BOS/EOS, special-token text as plain text).
#[derive(Debug)]
pub struct GgufTokenCounter {
    tokenizer: Tokenizer,
    path: PathBuf,
    name: String,
}

impl GgufTokenCounter {
    /// Loads the tokenizer of the GGUF at `path`; `name` labels the counts in the
    /// workload (a catalogue name, or the file name when `None`).
    pub fn open(path: &Path, name: Option<&str>) -> Result<Self> {
        let file = GgufFile::open(path).map_err(|source| Error::Gguf {
            path: path.to_owned(),
            source,
        })?;
        let tokenizer = Tokenizer::from_gguf(&file).map_err(|source| Error::Tokenizer {
            path: path.to_owned(),
            source,
        })?;
        let name = name.map(str::to_owned).unwrap_or_else(|| {
            path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        });
        Ok(GgufTokenCounter {
            tokenizer,
            path: path.to_owned(),
            name,
        })
    }
}

impl TokenCounter for GgufTokenCounter {
    fn count(&self, text: &str) -> Result<usize> {
        self.tokenizer
            .encode(text, false, false)
            .map(|ids| ids.len())
            .map_err(|source| Error::Tokenizer {
                path: self.path.clone(),
                source,
            })
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}
