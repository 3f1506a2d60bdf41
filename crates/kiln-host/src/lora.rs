//! LoRA adapters served on top of text models: where they are found, and the cache of
//! loaded ones.
//!
//! A request names an adapter by `model: "base:adapter"` or by the `lora` field. The
//! name is looked up among `--lora NAME=PATH` entries, then as a subdirectory of each
//! `--lora-dir`; the adapter is loaded on a blocking thread at the first request for it
//! (checked against the base model's shapes) and kept in an LRU cache of at most
//! `max_loaded` adapters. An evicted adapter stays alive while sequences still use it;
//! a later request loads it again (with a new prefix-cache key, in case it changed).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kiln_engine::ServingModel;
pub use kiln_model::lora::is_adapter_dir;
use kiln_model::{LoraAdapter, LoraError};

use crate::error::HostError;
use crate::hosted::HostedModel;

/// Where adapters come from and how many stay loaded.
#[derive(Debug, Clone)]
pub struct LoraConfig {
    /// Directories whose subdirectories are adapters (the name is the subdirectory's).
    pub dirs: Vec<PathBuf>,
    /// Adapters by explicit name.
    pub named: Vec<(String, PathBuf)>,
    /// Most adapters kept loaded (over all models).
    pub max_loaded: usize,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            dirs: Vec::new(),
            named: Vec::new(),
            max_loaded: 8,
        }
    }
}

struct Entry {
    model: String,
    name: String,
    adapter: Arc<LoraAdapter>,
}

/// The loaded adapters, least recently used first.
pub struct AdapterCache {
    config: LoraConfig,
    entries: Mutex<Vec<Entry>>,
    /// (model, adapter) loads under way: requests are waiting for these.
    loading: Arc<Mutex<Vec<(String, String)>>>,
}

/// Marks one adapter load as under way while it lives.
struct Loading {
    list: Arc<Mutex<Vec<(String, String)>>>,
    key: (String, String),
}

impl Drop for Loading {
    fn drop(&mut self) {
        let mut list = lock(&self.list);
        if let Some(i) = list.iter().position(|k| *k == self.key) {
            list.swap_remove(i);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An adapter name is a plain directory name: it can't reach outside `--lora-dir`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl AdapterCache {
    pub fn new(config: LoraConfig) -> Self {
        Self {
            config,
            entries: Mutex::new(Vec::new()),
            loading: Arc::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        lock(&self.entries)
    }

    /// Most adapters kept loaded.
    pub fn max_loaded(&self) -> usize {
        self.config.max_loaded
    }

    /// Names of the adapters being loaded for `model` (requests wait for them).
    pub fn loading(&self, model: &str) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.loading)
            .iter()
            .filter(|(m, _)| m == model)
            .map(|(_, n)| n.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The directory of adapter `name`, if there is one.
    fn path_of(&self, name: &str) -> Option<PathBuf> {
        if let Some((_, p)) = self.config.named.iter().find(|(n, _)| n == name) {
            return Some(p.clone());
        }
        if !is_plain_name(name) {
            return None;
        }
        self.config
            .dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| is_adapter_dir(p))
    }

    /// Every adapter that can be asked for (named ones, then each directory's), sorted.
    pub fn available(&self) -> Vec<String> {
        let mut names: Vec<String> = self.config.named.iter().map(|(n, _)| n.clone()).collect();
        for dir in &self.config.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if is_plain_name(&name) && is_adapter_dir(&e.path()) {
                    names.push(name);
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Names of the adapters loaded for `model`.
    pub fn loaded(&self, model: &str) -> Vec<String> {
        self.entries()
            .iter()
            .filter(|e| e.model == model)
            .map(|e| e.name.clone())
            .collect()
    }

    /// Adapter `name` for the text model of `hosted`, loading it if needed.
    pub async fn get(
        &self,
        hosted: &HostedModel,
        model: &ServingModel,
        name: &str,
    ) -> Result<Arc<LoraAdapter>, HostError> {
        {
            let mut entries = self.entries();
            if let Some(i) = entries
                .iter()
                .position(|e| e.model == hosted.name && e.name == name)
            {
                let e = entries.remove(i);
                let adapter = e.adapter.clone();
                entries.push(e);
                return Ok(adapter);
            }
        }
        let Some(path) = self.path_of(name) else {
            return Err(self.not_found(&hosted.name, name));
        };
        let config = model.model_config.clone();
        let owned = name.to_string();
        let started = std::time::Instant::now();
        let key = (hosted.name.clone(), name.to_string());
        lock(&self.loading).push(key.clone());
        let _loading = Loading {
            list: self.loading.clone(),
            key,
        };
        let loaded = tokio::task::spawn_blocking(move || LoraAdapter::load(&owned, &path, &config))
            .await
            .map_err(|_| HostError::Internal("the adapter loader panicked".into()))?;
        let adapter = Arc::new(loaded.map_err(|e| self.load_error(&hosted.name, name, e))?);
        hosted.metrics.adapter_loads.add(1);
        tracing::info!(
            model = %hosted.name,
            adapter = name,
            pairs = adapter.num_pairs(),
            rank = adapter.max_rank(),
            bytes = adapter.bytes(),
            seconds = started.elapsed().as_secs_f64(),
            "adapter loaded"
        );
        let mut entries = self.entries();
        // A concurrent request may have loaded it meanwhile: keep one copy.
        if let Some(e) = entries
            .iter()
            .find(|e| e.model == hosted.name && e.name == name)
        {
            return Ok(e.adapter.clone());
        }
        entries.push(Entry {
            model: hosted.name.clone(),
            name: name.to_string(),
            adapter: adapter.clone(),
        });
        let excess = entries.len().saturating_sub(self.config.max_loaded.max(1));
        for e in entries.drain(..excess) {
            tracing::info!(model = %e.model, adapter = %e.name, "adapter evicted from the cache");
        }
        Ok(adapter)
    }

    fn not_found(&self, model: &str, name: &str) -> HostError {
        let available = self.available();
        HostError::AdapterNotFound {
            model: model.to_string(),
            adapter: name.to_string(),
            available: if available.is_empty() {
                "; no adapters are configured (--lora-dir, --lora)".into()
            } else {
                format!("; adapters: {}", available.join(", "))
            },
        }
    }

    fn load_error(&self, model: &str, name: &str, e: LoraError) -> HostError {
        tracing::warn!(model, adapter = name, error = %e, "cannot load adapter");
        match e {
            LoraError::NotFound(_) => self.not_found(model, name),
            LoraError::WrongBase(reason) => HostError::AdapterMismatch {
                model: model.to_string(),
                adapter: name.to_string(),
                reason,
            },
            other => HostError::AdapterInvalid {
                adapter: name.to_string(),
                reason: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_names_cannot_leave_their_directory() {
        for ok in ["steer", "my-adapter_v2", "a.b"] {
            assert!(is_plain_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "/etc", "a:b", "x y"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
