//! How retrieved chunks reach the model, and which files an answer cites.
//!
//! The sources go into the last user turn, not a system message: every chat template
//! renders a user turn, and the earlier turns (and their cached prefix) stay as they
//! were.

use kiln_api::chat::{ChatCompletionRequest, ContentPart, MessageContent, Role};
use kiln_api::Caller;
use serde_json::{json, Value};

use crate::search::Hit;
use crate::{FileSearchTool, Result, VectorStores};

/// Chat completions' server-side `file_search` tool: searches `tool`'s stores with
/// `req`'s last user message and puts the passages found before it. Returns the
/// `file_citation` annotations the answer carries (none when nothing matched or there
/// is no user message to search with).
pub async fn ground_chat(
    stores: &VectorStores,
    caller: &Caller,
    tool: &FileSearchTool,
    req: &mut ChatCompletionRequest,
) -> Result<Vec<Value>> {
    let Some((at, question)) = req
        .messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| (m.role == Role::User).then(|| (i, text_of(m.content.as_ref()))))
    else {
        return Ok(Vec::new());
    };
    if question.trim().is_empty() {
        return Ok(Vec::new());
    }
    let hits = stores
        .search(caller, &tool.store_ids, &tool.search_for(&question))
        .await?;
    req.messages[at].content = Some(MessageContent::Text(with_sources(&question, &hits)));
    Ok(cited_files(&hits)
        .into_iter()
        .map(|(file_id, filename)| {
            json!({"type": "file_citation", "file_citation": {"file_id": file_id, "filename": filename}})
        })
        .collect())
}

fn text_of(content: Option<&MessageContent>) -> String {
    match content {
        Some(MessageContent::Text(t)) => t.clone(),
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    }
}

/// `question` preceded by the numbered `hits`, as the model reads it. With no hits the
/// model is told so, rather than left to guess.
pub fn with_sources(question: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return format!(
            "No passage of the attached files matched this question; say so if it depends on \
             them.\n\nQuestion: {question}"
        );
    }
    let mut out = String::from(
        "Answer the question using these passages from the attached files. Cite a passage \
         by its number, like [1].\n\n",
    );
    for (i, h) in hits.iter().enumerate() {
        out.push_str(&format!(
            "[{}] {}:\n{}\n\n",
            i + 1,
            h.filename,
            h.text.trim()
        ));
    }
    out.push_str("Question: ");
    out.push_str(question);
    out
}

/// The distinct files among `hits` as `(file_id, filename)`, best first: what an answer
/// drawn from them cites.
pub fn cited_files(hits: &[Hit]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for h in hits {
        if !out.iter().any(|(id, _)| *id == h.file_id) {
            out.push((h.file_id.clone(), h.filename.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(file: &str, text: &str) -> Hit {
        Hit {
            file_id: format!("file-{file}"),
            filename: format!("{file}.md"),
            score: 0.5,
            attributes: Default::default(),
            text: text.into(),
        }
    }

    #[test]
    fn sources_are_numbered_before_the_question() {
        let hits = [
            hit("a", "Kilns fire clay. "),
            hit("b", "Glaze melts."),
            hit("a", "More."),
        ];
        let p = with_sources("How hot?", &hits);
        assert!(p.contains("[1] a.md:\nKilns fire clay.\n"), "{p}");
        assert!(p.contains("[3] a.md:\nMore."), "{p}");
        assert!(p.ends_with("Question: How hot?"), "{p}");
        assert_eq!(
            cited_files(&hits),
            vec![
                ("file-a".to_string(), "a.md".to_string()),
                ("file-b".to_string(), "b.md".to_string())
            ]
        );
        assert!(with_sources("Q?", &[]).contains("No passage"));
    }
}
