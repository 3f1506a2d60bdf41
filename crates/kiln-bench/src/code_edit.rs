//! The code-edit workload: a model gets a source file of 60–200 lines and a small change
//! (rename one function everywhere) and is asked for the whole file back, as coding
//! agents ask. The output copies the input almost entirely, which is what speculative
//! decoding from the prompt feeds on.
//!
//! The files are Kiln's own sources, compiled in, so the workload needs no download; a
//! saved workload file keeps a comparison's prompts fixed while the sources change.

use crate::error::{Error, Result};
use crate::workload::{shuffle, LengthFilter, TokenCounter, Workload, WorkloadRequest, SAMPLER};
use crate::WORKLOAD_FORMAT;

/// Name of the workload in saved files and reports.
pub const CODE_EDIT_DATASET: &str = "kiln-code-edit";

/// Source files to edit: (path in the repository, text).
const SOURCES: &[(&str, &str)] = &[
    (
        "crates/kiln-engine/src/stop.rs",
        include_str!("../../kiln-engine/src/stop.rs"),
    ),
    (
        "crates/kiln-engine/src/kv/prefix_hash.rs",
        include_str!("../../kiln-engine/src/kv/prefix_hash.rs"),
    ),
    (
        "crates/kiln-engine/src/plan.rs",
        include_str!("../../kiln-engine/src/plan.rs"),
    ),
    (
        "crates/kiln-files/src/id.rs",
        include_str!("../../kiln-files/src/id.rs"),
    ),
    (
        "crates/kiln-generate/src/output/logprobs.rs",
        include_str!("../../kiln-generate/src/output/logprobs.rs"),
    ),
    (
        "crates/kiln-guard/src/verdict.rs",
        include_str!("../../kiln-guard/src/verdict.rs"),
    ),
    (
        "crates/kiln-http/src/settings.rs",
        include_str!("../../kiln-http/src/settings.rs"),
    ),
    (
        "crates/kiln-outbound/src/address.rs",
        include_str!("../../kiln-outbound/src/address.rs"),
    ),
    (
        "crates/kiln-router/src/limits.rs",
        include_str!("../../kiln-router/src/limits.rs"),
    ),
    (
        "crates/kiln-tokenizer/src/detok.rs",
        include_str!("../../kiln-tokenizer/src/detok.rs"),
    ),
    (
        "crates/kiln-api/src/error.rs",
        include_str!("../../kiln-api/src/error.rs"),
    ),
    (
        "crates/kiln/src/load.rs",
        include_str!("../../kiln/src/load.rs"),
    ),
];

/// Output tokens beyond the file's own: the code fence and the longer names.
const OUTPUT_MARGIN: usize = 32;

/// One edit: the file, and the function to rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeEdit {
    pub path: &'static str,
    pub source: &'static str,
    pub function: String,
}

impl CodeEdit {
    /// The user message asking for the edit.
    pub fn prompt(&self) -> String {
        format!(
            "Here is the Rust file `{}`:\n\n```rust\n{}```\n\nRename the function `{}` to \
             `{}_checked`, updating every use of it. Reply with the whole updated file in \
             one ```rust code block and nothing else.",
            self.path, self.source, self.function, self.function
        )
    }
}

/// Every (file, function) edit the sources offer, in a fixed order.
pub fn all_edits() -> Vec<CodeEdit> {
    edits_by_file().into_iter().flatten().collect()
}

/// The edits of each source file, in [`SOURCES`]' order.
fn edits_by_file() -> Vec<Vec<CodeEdit>> {
    SOURCES
        .iter()
        .map(|&(path, source)| {
            functions(source)
                .into_iter()
                .map(|function| CodeEdit {
                    path,
                    source,
                    function,
                })
                .collect()
        })
        .collect()
}

/// Names of the functions a file defines (`fn name` at any indentation), deduplicated.
fn functions(source: &str) -> Vec<String> {
    let mut names: Vec<String> = source
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("fn ")? + 3..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `fn` inside a word (`const_fn `) or a comment isn't a definition.
            let before = &l[..l.find("fn ")?];
            let definition = before.split_whitespace().all(|w| {
                matches!(
                    w,
                    "pub" | "pub(crate)" | "pub(super)" | "async" | "const" | "unsafe"
                )
            });
            (definition && !name.is_empty()).then_some(name)
        })
        .collect();
    names.dedup();
    names
}

impl Workload {
    /// `num_prompts` code edits drawn with `seed`: every file once (in a shuffled order,
    /// each with one of its functions) before any file twice, so a short workload never
    /// edits one file twice; each asks for the file's tokens plus a small margin.
    pub fn code_edit(counter: &dyn TokenCounter, num_prompts: usize, seed: u64) -> Result<Self> {
        let mut by_file = edits_by_file();
        for (i, edits) in by_file.iter_mut().enumerate() {
            shuffle(edits, seed.wrapping_add(i as u64 + 1));
        }
        shuffle(&mut by_file, seed);
        let most = by_file.iter().map(Vec::len).max().unwrap_or(0);
        let order: Vec<&CodeEdit> = (0..most)
            .flat_map(|round| by_file.iter().filter_map(move |edits| edits.get(round)))
            .collect();
        if order.is_empty() || num_prompts == 0 {
            return Err(Error::NotEnoughPrompts {
                wanted: num_prompts,
                found: 0,
            });
        }
        let mut requests = Vec::with_capacity(num_prompts);
        for edit in order.iter().cycle().take(num_prompts) {
            let prompt = edit.prompt();
            requests.push(WorkloadRequest {
                prompt_tokens: counter.count(&prompt)?,
                output_tokens: counter.count(edit.source)? + OUTPUT_MARGIN,
                prompt,
            });
        }
        let longest = |f: fn(&WorkloadRequest) -> usize| requests.iter().map(f).max();
        Ok(Workload {
            format: WORKLOAD_FORMAT.to_owned(),
            dataset: CODE_EDIT_DATASET.to_owned(),
            tokenizer: counter.name(),
            seed,
            sampler: SAMPLER.to_owned(),
            // Nothing is filtered out: the filter records the sizes drawn.
            filter: LengthFilter {
                min_tokens: 1,
                max_prompt_tokens: longest(|r| r.prompt_tokens).unwrap_or(0),
                max_total_tokens: longest(|r| r.prompt_tokens + r.output_tokens).unwrap_or(0),
            },
            requests,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::Words;

    #[test]
    fn every_source_is_60_to_200_lines_and_offers_edits() {
        for &(path, source) in SOURCES {
            let lines = source.lines().count();
            assert!((60..=200).contains(&lines), "{path}: {lines} lines");
            assert!(!functions(source).is_empty(), "{path} has no function");
        }
    }

    #[test]
    fn finds_definitions_not_mentions() {
        let src = "pub fn a() {}\n    pub(crate) async fn b_2() {}\n// calls fn c here\nlet f = |x| x; fn d<T>() {}\n";
        assert_eq!(functions(src), ["a", "b_2"]);
    }

    #[test]
    fn a_workload_is_seeded_and_asks_for_the_file_back() {
        let a = Workload::code_edit(&Words, 30, 7).expect("workload");
        let b = Workload::code_edit(&Words, 30, 7).expect("workload");
        assert_eq!(a, b);
        assert_eq!(a.requests.len(), 30);
        assert_eq!(a.dataset, CODE_EDIT_DATASET);
        let r = &a.requests[0];
        assert!(r.prompt.contains("Rename the function"));
        assert!(r.output_tokens > OUTPUT_MARGIN);
        assert!(r.prompt_tokens > r.output_tokens - OUTPUT_MARGIN);
        assert_ne!(a, Workload::code_edit(&Words, 30, 8).expect("workload"));
        // The first edits are of different files.
        let files: std::collections::HashSet<_> = a.requests[..SOURCES.len()]
            .iter()
            .map(|r| r.prompt.lines().next())
            .collect();
        assert_eq!(files.len(), SOURCES.len());
    }
}
