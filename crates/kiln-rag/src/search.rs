//! Searching stores: each query embedded once, each store's index asked for its best
//! chunks under the filter (applied before top-K), results merged best first.

use std::collections::HashMap;

use kiln_api::vector_stores::{SearchPage, SearchResult, TextContent};
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_vectors::{Filter, Query, ReturnMetadata, VectorError};
use serde_json::{Map, Value};

use crate::error::{EmbedError, RagError, Result};
use crate::schema::{index_name, index_owner, parse_chunk_id};
use crate::service::{blocking, VectorStores};

/// Most results a search may ask for (OpenAI's limit).
pub const MAX_RESULTS: usize = 50;

/// A checked search.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    pub queries: Vec<String>,
    pub filter: Option<Filter>,
    pub max_results: usize,
    /// Results scoring below it are dropped.
    pub score_threshold: Option<f64>,
}

/// A chunk that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub file_id: String,
    pub filename: String,
    /// Cosine similarity to the closest query.
    pub score: f64,
    pub attributes: Map<String, Value>,
    pub text: String,
}

impl Search {
    /// OpenAI's search fields, checked (`param` prefixes the fields' names).
    pub fn parse(
        query: Option<&Value>,
        filters: Option<&Value>,
        max_num_results: Option<u64>,
        score_threshold: Option<f64>,
        prefix: &str,
    ) -> Result<Self> {
        let at = |f: &str| format!("{prefix}{f}");
        let queries: Vec<String> = match query {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|q| q.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    RagError::invalid(at("query"), "`query` must be a string or a list of strings")
                })?,
            _ => {
                return Err(RagError::invalid(
                    at("query"),
                    "`query` must be a string or a list of strings",
                ))
            }
        };
        if queries.is_empty() || queries.iter().any(|q| q.trim().is_empty()) || queries.len() > 10 {
            return Err(RagError::invalid(
                at("query"),
                "give 1 to 10 non-empty queries",
            ));
        }
        let max_results = match max_num_results {
            None => 10,
            Some(n) if (1..=MAX_RESULTS as u64).contains(&n) => n as usize,
            Some(n) => {
                return Err(RagError::invalid(
                    at("max_num_results"),
                    format!("`max_num_results` must be between 1 and {MAX_RESULTS}, not {n}"),
                ))
            }
        };
        if let Some(t) = score_threshold.filter(|t| !(0.0..=1.0).contains(t)) {
            return Err(RagError::invalid(
                at("ranking_options.score_threshold"),
                format!("`score_threshold` must be between 0 and 1, not {t}"),
            ));
        }
        let filter = filters
            .filter(|f| !f.is_null())
            .map(|f| crate::attributes::filter(f, &at("filters")))
            .transpose()?;
        Ok(Self {
            queries,
            filter,
            max_results,
            score_threshold,
        })
    }
}

impl VectorStores {
    /// The best chunks of `store_ids` (all `caller`'s) for `search`, best first.
    pub async fn search(
        &self,
        caller: &Caller,
        store_ids: &[String],
        search: &Search,
    ) -> Result<Vec<Hit>> {
        let owner = &caller.key_id;
        let stores = store_ids
            .iter()
            .map(|id| self.live_store(owner, id, "vector_store_ids"))
            .collect::<Result<Vec<_>>>()?;
        let info = self.inner.embedder.info().await?;
        for s in &stores {
            self.check_embedder(&s.embedder, &info.model, "vector_store_ids")?;
        }
        let vectors = self
            .inner
            .embedder
            .embed(caller, search.queries.clone(), false)
            .await
            .map_err(|e| match e {
                EmbedError::Input(m) => RagError::invalid("query", m),
                e => e.into(),
            })?;
        // Ask each index for more than wanted: chunks of files still being ingested
        // are dropped below.
        let top_k = (search.max_results * 2).min(self.inner.vectors.limits().max_top_k);
        let mut best: HashMap<(String, i64, i64), f64> = HashMap::new();
        for store in &stores {
            for v in &vectors {
                let q = Query {
                    vector: v.clone(),
                    top_k,
                    namespace: None,
                    filter: search.filter.clone(),
                    return_values: false,
                    return_metadata: ReturnMetadata::None,
                };
                let db = self.inner.vectors.clone();
                let (iowner, iname) = (index_owner(owner), index_name(&store.id));
                let matches = blocking(move || {
                    db.query(&iowner, &iname, &q).map_err(|e| match e {
                        // The client sent text, not the vector it became.
                        VectorError::Invalid { param, message } if param == "vector" => {
                            RagError::invalid(
                                "query",
                                format!("the query cannot be searched: {message}"),
                            )
                        }
                        e => e.into(),
                    })
                })
                .await?;
                for m in matches {
                    let Some((seq, n)) = parse_chunk_id(&m.id) else {
                        continue;
                    };
                    let e = best.entry((store.id.clone(), seq, n)).or_insert(f64::MIN);
                    *e = e.max(f64::from(m.score));
                }
            }
            self.inner.db.touch_store(&store.id, unix_now())?;
        }
        let mut ranked: Vec<((String, i64, i64), f64)> = best
            .into_iter()
            .filter(|(_, s)| search.score_threshold.is_none_or(|t| *s >= t))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut hits = Vec::new();
        let mut files = HashMap::new();
        for ((_, seq, n), score) in ranked {
            if hits.len() == search.max_results {
                break;
            }
            let file = match files.entry(seq) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(self.inner.db.file_by_seq(seq)?)
                }
            };
            let Some(file) = file.as_ref().filter(|f| f.status == "completed") else {
                continue;
            };
            let Some(Some(text)) = self.inner.db.chunk_texts(&[(seq, n)])?.pop() else {
                continue;
            };
            hits.push(Hit {
                file_id: file.file_id.clone(),
                filename: file.filename.clone(),
                score,
                attributes: file.attributes.clone(),
                text,
            });
        }
        Ok(hits)
    }

    /// `POST /v1/vector_stores/{id}/search`'s page.
    pub async fn search_page(
        &self,
        caller: &Caller,
        store_id: &str,
        search: &Search,
    ) -> Result<SearchPage> {
        let hits = self.search(caller, &[store_id.to_string()], search).await?;
        Ok(SearchPage {
            object: "vector_store.search_results.page".into(),
            search_query: search.queries.clone(),
            data: hits
                .into_iter()
                .map(|h| SearchResult {
                    file_id: h.file_id,
                    filename: h.filename,
                    score: h.score,
                    attributes: h.attributes,
                    content: vec![TextContent::text(h.text)],
                })
                .collect(),
            has_more: false,
            next_page: None,
        })
    }
}
