//! Chunking strategies (OpenAI's `auto` and `static`) and cutting a text into chunks
//! by the embedder's tokens, so every chunk fits the model whole.

use std::ops::Range;

use kiln_api::vector_stores::{ChunkingStrategy, StaticChunking, StaticKind};
use serde_json::Value;

use crate::error::{RagError, Result};

/// OpenAI's bounds on `max_chunk_size_tokens`.
const MIN_CHUNK: u64 = 100;
const MAX_CHUNK: u64 = 4096;
/// What `auto` asks for when the embedder allows it (OpenAI's `auto` size).
const AUTO_CHUNK: u64 = 800;

/// The strategy `v` asks for (`None` or `auto`: the embedder's limit up to 800 tokens,
/// a quarter overlapping), checked against the embedder's limit of `max_tokens`.
pub fn strategy(v: Option<&Value>, param: &str, max_tokens: usize) -> Result<ChunkingStrategy> {
    let limit = (max_tokens as u64).min(MAX_CHUNK);
    let bad = |message: String| RagError::invalid(param, message);
    let sizes = match v {
        None | Some(Value::Null) => auto(limit),
        Some(Value::Object(o)) => match o.get("type").and_then(Value::as_str) {
            Some("auto") => auto(limit),
            Some("static") => {
                let s = o.get("static").and_then(Value::as_object).ok_or_else(|| {
                    bad("a `static` strategy needs `static`: {max_chunk_size_tokens, chunk_overlap_tokens}".into())
                })?;
                let field = |name: &str| {
                    s.get(name).and_then(Value::as_u64).ok_or_else(|| {
                        RagError::invalid(
                            format!("{param}.static.{name}"),
                            format!("`{name}` must be a non-negative integer"),
                        )
                    })
                };
                let size = field("max_chunk_size_tokens")?;
                let overlap = field("chunk_overlap_tokens")?;
                if !(MIN_CHUNK..=limit.max(MIN_CHUNK)).contains(&size) || size > limit {
                    return Err(RagError::invalid(
                        format!("{param}.static.max_chunk_size_tokens"),
                        format!(
                            "`max_chunk_size_tokens` must be between {MIN_CHUNK} and {limit} \
                             (the embedding model reads at most {max_tokens} tokens at once), not {size}"
                        ),
                    ));
                }
                if overlap > size / 2 {
                    return Err(RagError::invalid(
                        format!("{param}.static.chunk_overlap_tokens"),
                        format!(
                            "`chunk_overlap_tokens` must not exceed half of `max_chunk_size_tokens` ({}), not {overlap}",
                            size / 2
                        ),
                    ));
                }
                StaticChunking {
                    max_chunk_size_tokens: size,
                    chunk_overlap_tokens: overlap,
                }
            }
            _ => return Err(bad("`type` must be \"auto\" or \"static\"".into())),
        },
        Some(_) => return Err(bad("`chunking_strategy` must be an object".into())),
    };
    Ok(ChunkingStrategy {
        kind: StaticKind::Static,
        sizes,
    })
}

fn auto(limit: u64) -> StaticChunking {
    let size = AUTO_CHUNK.min(limit).max(1);
    StaticChunking {
        max_chunk_size_tokens: size,
        chunk_overlap_tokens: size / 4,
    }
}

/// The byte ranges of `text`'s chunks: windows of `size` tokens (by `spans`, each
/// token's range), each starting `size - overlap` tokens after the last, the last
/// ending at the last token. A chunk runs from its first token's start to its last
/// token's end, so the whitespace between them is kept.
pub fn cut(spans: &[Range<usize>], size: usize, overlap: usize) -> Vec<Range<usize>> {
    let size = size.max(1);
    let step = size.saturating_sub(overlap).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let end = (start + size).min(spans.len());
        out.push(spans[start].start..spans[end - 1].end);
        if end == spans.len() {
            break;
        }
        start += step;
    }
    out
}

/// `text[range]`, widened to the nearest character boundaries (a tokenizer's offsets
/// should land on them; a byte inside a character must not panic).
pub fn slice(text: &str, range: Range<usize>) -> &str {
    let mut start = range.start.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = range.end.clamp(start, text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One-byte tokens separated by spaces: token i is at 2i..2i+1.
    fn spans(n: usize) -> Vec<Range<usize>> {
        (0..n).map(|i| 2 * i..2 * i + 1).collect()
    }

    #[test]
    fn windows_overlap_and_cover_every_token() {
        assert_eq!(cut(&spans(0), 4, 1), Vec::<Range<usize>>::new());
        assert_eq!(cut(&spans(3), 4, 1), vec![0..5]);
        assert_eq!(cut(&spans(4), 4, 1), vec![0..7]);
        // 10 tokens, windows of 4 stepping 3: 0-3, 3-6, 6-9.
        assert_eq!(cut(&spans(10), 4, 1), vec![0..7, 6..13, 12..19]);
        // No overlap: 0-3, 4-7, 8-9.
        assert_eq!(cut(&spans(10), 4, 0), vec![0..7, 8..15, 16..19]);
        for (n, size, overlap) in [(1000, 100, 50), (999, 254, 63), (7, 3, 1)] {
            let s = spans(n);
            let chunks = cut(&s, size, overlap);
            let covered: std::collections::BTreeSet<usize> = chunks
                .iter()
                .flat_map(|c| {
                    s.iter()
                        .enumerate()
                        .filter(move |(_, t)| t.start >= c.start && t.end <= c.end)
                        .map(|(i, _)| i)
                })
                .collect();
            assert_eq!(covered.len(), n, "every token is in a chunk");
            for c in &chunks {
                let tokens = s
                    .iter()
                    .filter(|t| t.start >= c.start && t.end <= c.end)
                    .count();
                assert!(tokens <= size, "{tokens} > {size}");
            }
        }
    }

    #[test]
    fn slices_keep_whole_characters() {
        let t = "añb";
        assert_eq!(slice(t, 0..1), "a");
        assert_eq!(slice(t, 2..3), "ñ");
        assert_eq!(slice(t, 1..2), "ñ");
        assert_eq!(slice(t, 0..99), "añb");
    }

    #[test]
    fn strategies_are_checked_against_the_embedder() {
        let auto = strategy(None, "chunking_strategy", 254).expect("auto");
        assert_eq!(
            (
                auto.sizes.max_chunk_size_tokens,
                auto.sizes.chunk_overlap_tokens
            ),
            (254, 63)
        );
        let auto = strategy(Some(&json!({"type": "auto"})), "c", 8190).expect("auto");
        assert_eq!(auto.sizes.max_chunk_size_tokens, 800);
        let ok = strategy(
            Some(&json!({"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 100}})),
            "c",
            254,
        )
        .expect("static");
        assert_eq!(ok.sizes.chunk_overlap_tokens, 100);
        for (bad, param) in [
            (
                json!({"type": "static", "static": {"max_chunk_size_tokens": 300, "chunk_overlap_tokens": 10}}),
                "c.static.max_chunk_size_tokens",
            ),
            (
                json!({"type": "static", "static": {"max_chunk_size_tokens": 99, "chunk_overlap_tokens": 10}}),
                "c.static.max_chunk_size_tokens",
            ),
            (
                json!({"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 101}}),
                "c.static.chunk_overlap_tokens",
            ),
            (
                json!({"type": "static", "static": {"max_chunk_size_tokens": -1, "chunk_overlap_tokens": 1}}),
                "c.static.max_chunk_size_tokens",
            ),
            (json!({"type": "static"}), "c"),
            (json!({"type": "semantic"}), "c"),
            (json!("auto"), "c"),
        ] {
            match strategy(Some(&bad), "c", 254) {
                Err(RagError::Invalid { param: p, .. }) => assert_eq!(p, param, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
