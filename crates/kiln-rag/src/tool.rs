//! The `file_search` tool as a request declares it (the Responses API's shape, which
//! chat completions take too): the stores, and how to search them. The query is the
//! turn's question, filled in when it runs.

use serde_json::{json, Value};

use crate::error::{RagError, Result};
use crate::search::Search;

/// Most vector stores one `file_search` tool may name.
const MAX_STORES: usize = 10;

#[derive(Debug, Clone, PartialEq)]
pub struct FileSearchTool {
    pub store_ids: Vec<String>,
    pub search: Search,
}

impl FileSearchTool {
    /// `{type: "file_search", vector_store_ids, max_num_results?, filters?,
    /// ranking_options?: {score_threshold?}}` at `at` (`tools[2]`).
    pub fn parse(t: &Value, at: &str) -> Result<Self> {
        let store_ids: Vec<String> = t
            .get("vector_store_ids")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
                    .collect()
            })
            .filter(|ids: &Vec<String>| (1..=MAX_STORES).contains(&ids.len()))
            .ok_or_else(|| {
                RagError::invalid(
                    format!("{at}.vector_store_ids"),
                    format!("`vector_store_ids` must list 1 to {MAX_STORES} vector store ids"),
                )
            })?;
        let threshold = t
            .get("ranking_options")
            .and_then(|r| r.get("score_threshold"))
            .and_then(Value::as_f64);
        let max = match t.get("max_num_results") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                RagError::invalid(
                    format!("{at}.max_num_results"),
                    "`max_num_results` must be a positive integer",
                )
            })?),
        };
        // A placeholder query checks everything else now.
        let search = Search::parse(
            Some(&json!("?")),
            t.get("filters"),
            max,
            threshold,
            &format!("{at}."),
        )?;
        Ok(Self { store_ids, search })
    }

    /// The search for `question`.
    pub fn search_for(&self, question: &str) -> Search {
        let mut s = self.search.clone();
        s.queries = vec![question.to_string()];
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_parse_and_bad_ones_name_their_field() {
        let t = FileSearchTool::parse(
            &json!({"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 3,
                    "filters": {"type": "eq", "key": "a", "value": 1}}),
            "tools[0]",
        )
        .expect("file_search");
        assert_eq!((t.store_ids.len(), t.search.max_results), (1, 3));
        assert_eq!(t.search_for("why?").queries, vec!["why?".to_string()]);
        for (bad, param) in [
            (json!({"type": "file_search"}), "tools[0].vector_store_ids"),
            (json!({"vector_store_ids": []}), "tools[0].vector_store_ids"),
            (
                json!({"vector_store_ids": ["v"], "max_num_results": 99}),
                "tools[0].max_num_results",
            ),
            (
                json!({"vector_store_ids": ["v"], "max_num_results": "3"}),
                "tools[0].max_num_results",
            ),
            (
                json!({"vector_store_ids": ["v"], "filters": {"type": "xx"}}),
                "tools[0].filters.type",
            ),
            (
                json!({"vector_store_ids": ["v"], "ranking_options": {"score_threshold": 2.0}}),
                "tools[0].ranking_options.score_threshold",
            ),
        ] {
            match FileSearchTool::parse(&bad, "tools[0]") {
                Err(RagError::Invalid { param: p, .. }) => assert_eq!(p, param, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
