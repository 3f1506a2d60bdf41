//! Where a served model comes from, what it should cost in memory, and how it is loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_engine::{ServingModel, ServingOptions};

use crate::slot::LoadedModel;

/// KV cache the engine takes when none is configured: a quarter of available memory,
/// at most this (the engine's own default cap).
const DEFAULT_KV_CAP: u64 = 4 << 30;

/// A model to serve: its names, its file(s), its settings and whether it stays loaded.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub name: String,
    pub aliases: Vec<String>,
    /// Catalogue task, e.g. `text-generation`; picks the loader.
    pub task: String,
    /// The weights file (GGUF), or a model directory for formats that have several.
    pub path: PathBuf,
    pub options: ServingOptions,
    /// Loaded at start and never unloaded.
    pub pin: bool,
}

impl ModelSource {
    /// Loads the model for its task.
    pub fn load(&self) -> Result<LoadedModel, String> {
        match self.task.as_str() {
            "text-generation" => ServingModel::load(&self.name, &self.path, &self.options)
                .map(|m| LoadedModel::Generate(Arc::new(m)))
                .map_err(|e| format!("cannot load {}: {e}", self.path.display())),
            other => Err(format!(
                "the server can't run {other} models (model `{}`)",
                self.name
            )),
        }
    }

    /// Bytes of the weights: the file's size, or the files' in a model directory.
    pub fn weights_bytes(&self) -> u64 {
        size_of(&self.path)
    }

    /// What the model will take when loaded: its weights plus its KV cache (the
    /// configured size, or the engine's default cap when none is; an upper bound that
    /// the first load replaces with what was actually allocated).
    pub fn estimated_bytes(&self) -> u64 {
        let kv = match self.task.as_str() {
            "text-generation" => self.options.kv_cache_bytes.map_or_else(
                || {
                    kiln_engine::serving::available_memory()
                        .map_or(DEFAULT_KV_CAP, |m| (m as u64 / 4).min(DEFAULT_KV_CAP))
                },
                |b| b as u64,
            ),
            _ => 0,
        };
        self.weights_bytes().saturating_add(kv)
    }
}

/// A file's size, or the total of the files directly in a directory (0 if unreadable:
/// the load then fails with the real error).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
