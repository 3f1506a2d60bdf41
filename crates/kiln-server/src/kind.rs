//! What a served model does (its catalogue task), which decides the endpoints that
//! serve it; a request to the wrong kind of model is a 400 naming the right endpoints.

use crate::error::ApiError;

/// The kinds of model the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `text-generation`: chat, completions, tokenize, Workers AI text generation.
    Generate,
    /// `embeddings`: `/v1/embeddings` and Workers AI embeddings.
    Embed,
    /// `text-classification`: Workers AI text classification.
    Classify,
}

impl ModelKind {
    /// The kind of a catalogue task; `None` for tasks the server can't run.
    pub fn from_task(task: &str) -> Option<Self> {
        match task {
            "text-generation" => Some(ModelKind::Generate),
            "embeddings" => Some(ModelKind::Embed),
            "text-classification" => Some(ModelKind::Classify),
            _ => None,
        }
    }

    /// The catalogue task.
    pub fn task(self) -> &'static str {
        match self {
            ModelKind::Generate => "text-generation",
            ModelKind::Embed => "embeddings",
            ModelKind::Classify => "text-classification",
        }
    }

    /// The endpoints that serve model `model` of this kind, for error messages.
    pub fn endpoints(self, model: &str) -> String {
        match self {
            ModelKind::Generate => {
                format!("POST /v1/chat/completions, POST /v1/completions or POST /ai/run/{model}")
            }
            ModelKind::Embed => format!("POST /v1/embeddings or POST /ai/run/{model}"),
            ModelKind::Classify => format!("POST /ai/run/{model}"),
        }
    }

    /// The 400 for a request that needs a model of kind `wanted` but names `model`,
    /// whose task is `task`.
    pub fn mismatch(wanted: ModelKind, model: &str, task: &str) -> ApiError {
        let endpoints = ModelKind::from_task(task).map_or_else(
            || "nothing: the server can't run this task".to_string(),
            |k| k.endpoints(model),
        );
        ApiError::WrongModelTask {
            model: model.to_string(),
            task: task.to_string(),
            wanted: wanted.task(),
            endpoints,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_round_trip_and_mismatches_name_the_right_endpoint() {
        for k in [ModelKind::Generate, ModelKind::Embed, ModelKind::Classify] {
            assert_eq!(ModelKind::from_task(k.task()), Some(k));
        }
        assert_eq!(ModelKind::from_task("dataset"), None);
        let e = ModelKind::mismatch(ModelKind::Generate, "minilm", "embeddings");
        let msg = e.to_string();
        assert!(
            msg.contains("`minilm` is an embeddings model")
                && msg.contains("use POST /v1/embeddings or POST /ai/run/minilm"),
            "{msg}"
        );
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(e.param().as_deref(), Some("model"));
        let msg = ModelKind::mismatch(ModelKind::Embed, "smol", "text-generation").to_string();
        assert!(msg.contains("`smol` is a text-generation model"), "{msg}");
    }
}
