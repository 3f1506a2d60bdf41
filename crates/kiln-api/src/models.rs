//! `GET /v1/models` and `GET /v1/models/{model}`.

use serde::{Deserialize, Serialize};

/// `{"object": "list", "data": [...]}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

impl ModelList {
    pub fn new(data: Vec<ModelCard>) -> Self {
        Self {
            object: "list".into(),
            data,
        }
    }
}

/// One served model: OpenAI's fields plus vLLM's `max_model_len` and Kiln's `task`,
/// `aliases` and `ready`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The catalogue name.
    pub id: String,
    /// `model`
    pub object: String,
    /// Unix seconds at which the server started serving it.
    pub created: u64,
    /// `kiln`
    pub owned_by: String,
    /// Longest prompt plus completion, in tokens; absent while the model loads.
    #[serde(default)]
    pub max_model_len: Option<usize>,
    /// `text-generation`, `embeddings`, ...
    pub task: String,
    /// Other names requests may use.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Whether it is loaded and accepting requests.
    #[serde(default)]
    pub ready: bool,
}
