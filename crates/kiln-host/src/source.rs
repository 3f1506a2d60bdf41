//! Where a served model comes from, what it should cost in memory, and how it is loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_encoder::{Classifier, Embedder};
use kiln_engine::{ServingModel, ServingOptions};

use crate::encoder::{Encoder, EncoderWeights};
use crate::kind::ModelKind;
use crate::loaded::LoadedModel;

/// The weights file of an encoder's directory (NanoGuard's is written by its first load).
const ENCODER_WEIGHTS: &str = "model.safetensors";

/// A model to serve: its names, its file(s), its settings and whether it stays loaded.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub name: String,
    pub aliases: Vec<String>,
    /// Catalogue task, e.g. `text-generation`; picks the loader.
    pub task: String,
    /// The weights file (GGUF) of a text model, or the model directory of an encoder.
    pub path: PathBuf,
    pub options: ServingOptions,
    /// Loaded at start and never unloaded.
    pub pin: bool,
}

impl ModelSource {
    /// Loads the model for its task (blocking: reads and decodes the weights).
    pub fn load(&self) -> Result<LoadedModel, String> {
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot load {}: {e}", self.path.display());
        match ModelKind::from_task(&self.task) {
            Some(ModelKind::Generate) => ServingModel::load(&self.name, &self.path, &self.options)
                .map(|m| LoadedModel::Generate(Arc::new(m)))
                .map_err(|e| failed(&e)),
            Some(ModelKind::Embed) => {
                let model = Embedder::load(&self.path).map_err(|e| failed(&e))?;
                let weights = EncoderWeights::read(&self.path.join(ENCODER_WEIGHTS))
                    .map_err(|e| failed(&e))?;
                Ok(LoadedModel::Embed(Arc::new(Encoder::new(model, weights))))
            }
            Some(ModelKind::Classify) => {
                let model = Classifier::load(&self.path).map_err(|e| failed(&e))?;
                let weights = EncoderWeights::read(&self.path.join(ENCODER_WEIGHTS))
                    .map_err(|e| failed(&e))?;
                Ok(LoadedModel::Classify(Arc::new(Encoder::new(
                    model, weights,
                ))))
            }
            None => Err(format!(
                "the server can't run {} models (model `{}`)",
                self.task, self.name
            )),
        }
    }

    /// Bytes of the weights: the file's size, or the files' in a model directory.
    pub fn weights_bytes(&self) -> u64 {
        size_of(&self.path)
    }

    /// What the model will take when loaded (an upper bound that the first load replaces
    /// with what was actually allocated). A text model: its weights file plus its KV
    /// cache (the configured size, or the engine's default cap when none is). An
    /// encoder: its float weights as f32; before NanoGuard's first load has converted
    /// them, twice its files' size (stored weights take at least two bytes each).
    pub fn estimated_bytes(&self) -> u64 {
        match ModelKind::from_task(&self.task) {
            Some(ModelKind::Generate) => {
                let kv = self
                    .options
                    .kv_cache_bytes
                    .unwrap_or_else(kiln_engine::serving::default_kv_cache_cap)
                    as u64;
                self.weights_bytes().saturating_add(kv)
            }
            Some(ModelKind::Embed | ModelKind::Classify) => {
                EncoderWeights::read(&self.path.join(ENCODER_WEIGHTS))
                    .map_or_else(|_| self.weights_bytes().saturating_mul(2), |w| w.bytes)
            }
            None => self.weights_bytes(),
        }
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
