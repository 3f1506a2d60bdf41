//! What a served model does (its catalogue task), which decides what can be asked of it;
//! asking a model of another kind is [`HostError::WrongModelTask`].

use crate::error::HostError;

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

    /// The error for a caller that needs a model of kind `wanted` but has `model`, whose
    /// task is `task`.
    pub fn mismatch(wanted: ModelKind, model: &str, task: &str) -> HostError {
        HostError::WrongModelTask {
            model: model.to_string(),
            task: task.to_string(),
            wanted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_round_trip() {
        for k in [ModelKind::Generate, ModelKind::Embed, ModelKind::Classify] {
            assert_eq!(ModelKind::from_task(k.task()), Some(k));
        }
        assert_eq!(ModelKind::from_task("dataset"), None);
        let e = ModelKind::mismatch(ModelKind::Generate, "minilm", "embeddings");
        assert_eq!(
            e.to_string(),
            "model `minilm` does embeddings, not text-generation"
        );
    }
}
