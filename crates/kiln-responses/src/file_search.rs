//! The `file_search` tool: one search of the request's vector stores with the turn's
//! question, before the first model round. The chunks found go into that question as
//! the model reads it (the stored conversation keeps the question as asked), and the
//! answer cites their files.
//!
//! Searching first, rather than waiting for the model to ask, works the same for the
//! smallest models, which rarely call a search tool on their own.

use kiln_api::chat::{ChatMessage, MessageContent, Role};
use kiln_api::responses::{FileSearchResult, Item};
use kiln_rag::sources::{cited_files, with_sources};
use kiln_rag::Hit;
use serde_json::{json, Value};

use crate::chat::{ChatRunner, GenError};
use crate::ids::new_id;
use crate::turn::Turn;

/// What a search found for a question.
pub struct Sources {
    question: String,
    hits: Vec<Hit>,
}

impl Sources {
    /// Puts the sources before the question: the last user message.
    pub fn insert(&self, messages: &mut [ChatMessage]) {
        if let Some(m) = messages.iter_mut().rev().find(|m| m.role == Role::User) {
            m.content = Some(MessageContent::Text(with_sources(
                &self.question,
                &self.hits,
            )));
        }
    }

    /// `file_citation` annotations for the files found (their `index` is set where the
    /// answer's text ends).
    pub fn citations(&self) -> Vec<Value> {
        cited_files(&self.hits)
            .into_iter()
            .map(|(file_id, filename)| {
                json!({"type": "file_citation", "file_id": file_id, "filename": filename, "index": 0})
            })
            .collect()
    }
}

/// Searches for the turn's question when it has a `file_search` tool (and `tool_choice`
/// isn't `none`), adding the `file_search_call` item to `output`.
pub async fn run(
    turn: &Turn,
    chat: &dyn ChatRunner,
    output: &mut Vec<Item>,
) -> Result<Option<Sources>, GenError> {
    let Some(spec) = &turn.tools.file_search else {
        return Ok(None);
    };
    if turn.tool_choice.as_ref().and_then(Value::as_str) == Some("none") {
        return Ok(None);
    }
    let Some(question) = question(&turn.input) else {
        return Ok(None);
    };
    let search = spec.search_for(&question);
    let hits = chat
        .file_search(&turn.caller, spec.store_ids.clone(), search)
        .await?;
    output.push(Item::FileSearchCall {
        id: new_id("fs"),
        status: "completed".into(),
        queries: vec![question.clone()],
        results: turn.search_results.then(|| {
            hits.iter()
                .map(|h| FileSearchResult {
                    file_id: h.file_id.clone(),
                    filename: h.filename.clone(),
                    score: h.score,
                    text: h.text.clone(),
                    attributes: h.attributes.clone(),
                })
                .collect()
        }),
    });
    Ok(Some(Sources { question, hits }))
}

/// The text of the input's last user message.
fn question(input: &[Item]) -> Option<String> {
    input.iter().rev().find_map(|item| match item {
        Item::Message { role, content, .. } if role == "user" => {
            let text: String = content.iter().map(|p| p.text()).collect();
            (!text.trim().is_empty()).then_some(text)
        }
        _ => None,
    })
}
