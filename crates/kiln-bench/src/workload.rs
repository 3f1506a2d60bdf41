//! The benchmark workload: ShareGPT prompts sampled as vLLM's serving benchmark does,
//! saved to JSON so that two servers receive byte-identical requests.

use std::fs;
use std::path::Path;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dataset::{Conversation, SHAREGPT_CATALOG_NAME};
use crate::error::{Error, Result};

/// Version tag written into (and required of) workload files.
pub const WORKLOAD_FORMAT: &str = "kiln-bench-workload/1";
/// How the sample was drawn; part of the file so a future change can't pass silently.
pub const SAMPLER: &str = "chacha8-seed_from_u64/fisher-yates-lemire";

/// Counts the tokens a text encodes to, with the served model's own tokenizer.
pub trait TokenCounter {
    /// Number of tokens of `text`, without special tokens.
    fn count(&self, text: &str) -> Result<usize>;
    /// What the counts came from (a model or file name), recorded in the workload.
    fn name(&self) -> String;
}

/// Length limits a conversation must pass to enter the workload (vLLM's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LengthFilter {
    /// Prompts and outputs shorter than this many tokens are dropped.
    pub min_tokens: usize,
    /// Prompts longer than this are dropped.
    pub max_prompt_tokens: usize,
    /// Pairs whose prompt + output exceed this are dropped.
    pub max_total_tokens: usize,
}

impl Default for LengthFilter {
    fn default() -> Self {
        LengthFilter {
            min_tokens: 4,
            max_prompt_tokens: 1024,
            max_total_tokens: 2048,
        }
    }
}

impl LengthFilter {
    /// Whether a (prompt, output) pair of these token counts is kept.
    pub fn accepts(&self, prompt_tokens: usize, output_tokens: usize) -> bool {
        prompt_tokens >= self.min_tokens
            && output_tokens >= self.min_tokens
            && prompt_tokens <= self.max_prompt_tokens
            && prompt_tokens + output_tokens <= self.max_total_tokens
    }
}

/// One request of the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadRequest {
    /// Sent as the one user message (or the raw prompt on `/v1/completions`).
    pub prompt: String,
    /// Tokens of `prompt` alone (no chat template), with the workload's tokenizer.
    pub prompt_tokens: usize,
    /// Tokens of the data set's reply: the request's `max_tokens`.
    pub output_tokens: usize,
}

/// A sampled workload, as saved to and loaded from JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Always [`WORKLOAD_FORMAT`].
    pub format: String,
    /// Where the prompts came from (catalogue name).
    pub dataset: String,
    /// What counted the tokens.
    pub tokenizer: String,
    /// The shuffle's seed.
    pub seed: u64,
    /// Always [`SAMPLER`].
    pub sampler: String,
    pub filter: LengthFilter,
    pub requests: Vec<WorkloadRequest>,
}

impl Workload {
    /// Shuffles `conversations` with `seed` and keeps the first `num_prompts` that pass
    /// `filter`, counting tokens lazily (only the candidates looked at are tokenized).
    pub fn sample(
        conversations: &[Conversation],
        counter: &dyn TokenCounter,
        num_prompts: usize,
        seed: u64,
        filter: LengthFilter,
    ) -> Result<Self> {
        let mut order: Vec<usize> = (0..conversations.len()).collect();
        shuffle(&mut order, seed);
        let mut requests = Vec::with_capacity(num_prompts);
        for &i in &order {
            if requests.len() == num_prompts {
                break;
            }
            let c = &conversations[i];
            let prompt_tokens = counter.count(&c.prompt)?;
            let output_tokens = counter.count(&c.reply)?;
            if filter.accepts(prompt_tokens, output_tokens) {
                requests.push(WorkloadRequest {
                    prompt: c.prompt.clone(),
                    prompt_tokens,
                    output_tokens,
                });
            }
        }
        if requests.len() < num_prompts {
            return Err(Error::NotEnoughPrompts {
                wanted: num_prompts,
                found: requests.len(),
            });
        }
        Ok(Workload {
            format: WORKLOAD_FORMAT.to_owned(),
            dataset: SHAREGPT_CATALOG_NAME.to_owned(),
            tokenizer: counter.name(),
            seed,
            sampler: SAMPLER.to_owned(),
            filter,
            requests,
        })
    }

    /// Writes the workload as pretty JSON (atomically: a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_vec_pretty(self).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        text.push(b'\n');
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, &text).map_err(Error::io(&tmp))?;
        fs::rename(&tmp, path).map_err(Error::io(path))
    }

    /// Reads a workload written by [`Workload::save`], checking its format and contents.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).map_err(Error::io(path))?;
        let w: Workload = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        let bad = |reason: String| Error::Workload {
            path: path.to_owned(),
            reason,
        };
        if w.format != WORKLOAD_FORMAT {
            return Err(bad(format!(
                "format is {:?}, expected {WORKLOAD_FORMAT:?}",
                w.format
            )));
        }
        if w.requests.is_empty() {
            return Err(bad("the workload has no requests".to_owned()));
        }
        if let Some(i) = w.requests.iter().position(|r| r.output_tokens == 0) {
            return Err(bad(format!("request {i} asks for 0 output tokens")));
        }
        Ok(w)
    }

    /// Sum of the prompts' token counts.
    pub fn total_prompt_tokens(&self) -> u64 {
        self.requests.iter().map(|r| r.prompt_tokens as u64).sum()
    }
}

/// Fisher–Yates with unbiased bounded draws (Lemire's multiply-and-reject) from ChaCha8
/// seeded by `seed_from_u64`: specified here rather than borrowed from a library whose
/// algorithm may change between versions, so a seed names the same sample forever.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..items.len()).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// A uniform integer in `0..n` (`n > 0`).
pub(crate) fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    // 2^64 mod n: products whose low word falls below it would bias the result.
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Counts whitespace-separated words: a tokenizer for tests.
    pub(crate) struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> Result<usize> {
            Ok(text.split_whitespace().count())
        }
        fn name(&self) -> String {
            "words".to_owned()
        }
    }

    fn conv(p: usize, r: usize) -> Conversation {
        Conversation {
            prompt: vec!["w"; p].join(" "),
            reply: vec!["w"; r].join(" "),
        }
    }

    #[test]
    fn filter_matches_vllm_limits() {
        let f = LengthFilter::default();
        assert!(f.accepts(4, 4));
        assert!(!f.accepts(3, 100));
        assert!(!f.accepts(100, 3));
        assert!(f.accepts(1024, 1024));
        assert!(!f.accepts(1025, 10));
        assert!(!f.accepts(1000, 1049));
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u32> = (0..1000).collect();
        let mut b = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        assert_eq!(a, b);
        let mut c: Vec<u32> = (0..1000).collect();
        shuffle(&mut c, 8);
        assert_ne!(a, c);
        a.sort_unstable();
        assert_eq!(a, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn sample_keeps_only_passing_pairs() -> Result<()> {
        let convs = vec![
            conv(2, 10),
            conv(10, 10),
            conv(10, 2),
            conv(5, 6),
            conv(2000, 5),
        ];
        let w = Workload::sample(&convs, &Words, 2, 0, LengthFilter::default())?;
        assert_eq!(w.requests.len(), 2);
        for r in &w.requests {
            assert!(LengthFilter::default().accepts(r.prompt_tokens, r.output_tokens));
        }
        let err = Workload::sample(&convs, &Words, 3, 0, LengthFilter::default());
        assert!(matches!(
            err,
            Err(Error::NotEnoughPrompts {
                wanted: 3,
                found: 2
            })
        ));
        Ok(())
    }
}
