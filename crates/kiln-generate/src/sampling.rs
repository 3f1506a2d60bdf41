//! Sampling fields → the engine's [`GenerateRequest`]: every field range-checked,
//! and a failure names the field (`param`).
//!
//! Checks that don't need the prompt run first ([`Sampling::check`]), so a bad request
//! fails before any tokenization; [`Sampling::request`] then adds the prompt and the
//! context-length check.

use std::collections::BTreeMap;

use kiln_engine::sample::SamplingParams;
use kiln_engine::{GenerateRequest, StopConditions};

use crate::error::GenerateError;

/// Most completions one request may ask for (`n`).
pub const MAX_N: u32 = 16;
/// Most alternatives per token (`top_logprobs`, legacy `logprobs`).
pub const MAX_LOGPROBS: u32 = 20;
/// Most stop strings (OpenAI's limit).
pub const MAX_STOP: usize = 4;

/// The sampling fields the generation endpoints share, as sent.
#[derive(Debug, Clone, Default)]
pub struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub logit_bias: Option<BTreeMap<String, f32>>,
    pub seed: Option<i64>,
    pub n: Option<u32>,
    /// vLLM's `best_of`: only equal to `n` is served.
    pub best_of: Option<u32>,
    pub max_tokens: Option<u32>,
    /// Which field `max_tokens` came from (`max_tokens` or `max_completion_tokens`).
    pub max_tokens_param: &'static str,
    pub min_tokens: Option<u32>,
    pub ignore_eos: Option<bool>,
    pub stop: Option<Vec<String>>,
    pub stop_token_ids: Option<Vec<u32>>,
    /// Alternatives per token, already resolved from the endpoint's own fields.
    pub logprobs: Option<u32>,
    /// The field `logprobs` came from, for its error.
    pub logprobs_param: &'static str,
    /// `false` opts out of speculative decoding.
    pub speculative: Option<bool>,
}

/// Checked sampling settings, ready to be combined with a prompt.
#[derive(Debug, Clone)]
pub struct Sampling {
    pub params: SamplingParams,
    pub n: usize,
    max_tokens: Option<usize>,
    max_tokens_param: &'static str,
    stop: StopConditions,
    speculative: bool,
}

impl Sampling {
    /// Checks every field that doesn't depend on the prompt; `vocab_size` bounds token ids.
    pub fn check(f: &SamplingFields, vocab_size: usize) -> Result<Self, GenerateError> {
        let temperature = f.temperature.unwrap_or(1.0);
        ensure(
            temperature.is_finite() && temperature >= 0.0,
            "temperature",
            || format!("temperature must be a number >= 0, got {temperature}"),
        )?;
        let top_p = f.top_p.unwrap_or(1.0);
        ensure(top_p > 0.0 && top_p <= 1.0, "top_p", || {
            format!("top_p must be in (0, 1], got {top_p}")
        })?;
        let top_k = f.top_k.unwrap_or(0);
        ensure(top_k >= -1, "top_k", || {
            format!("top_k must be -1 or 0 (off) or a positive count, got {top_k}")
        })?;
        let min_p = f.min_p.unwrap_or(0.0);
        ensure((0.0..=1.0).contains(&min_p), "min_p", || {
            format!("min_p must be in [0, 1], got {min_p}")
        })?;
        let repetition_penalty = f.repetition_penalty.unwrap_or(1.0);
        ensure(
            repetition_penalty.is_finite() && repetition_penalty > 0.0,
            "repetition_penalty",
            || format!("repetition_penalty must be > 0, got {repetition_penalty}"),
        )?;
        let presence_penalty = penalty(f.presence_penalty, "presence_penalty")?;
        let frequency_penalty = penalty(f.frequency_penalty, "frequency_penalty")?;
        let logit_bias = logit_bias(f.logit_bias.as_ref(), vocab_size)?;

        let n = f.n.unwrap_or(1);
        ensure((1..=MAX_N).contains(&n), "n", || {
            format!("n must be between 1 and {MAX_N}, got {n}")
        })?;
        // Kiln returns every completion it samples; picking the best of more is not done.
        let best_of = f.best_of.unwrap_or(n);
        ensure(best_of == n, "best_of", || {
            format!("best_of must equal n when given (got {best_of}, n = {n})")
        })?;
        if let Some(m) = f.max_tokens {
            ensure(m >= 1, f.max_tokens_param, || {
                format!("{} must be at least 1, got {m}", f.max_tokens_param)
            })?;
        }
        let min_tokens = f.min_tokens.unwrap_or(0);
        if let Some(m) = f.max_tokens.filter(|&m| min_tokens > m) {
            return Err(GenerateError::invalid(
                "min_tokens",
                format!(
                    "min_tokens ({min_tokens}) must not exceed {} ({m})",
                    f.max_tokens_param
                ),
            ));
        }
        let stop_strings = f.stop.clone().unwrap_or_default();
        ensure(stop_strings.len() <= MAX_STOP, "stop", || {
            format!(
                "at most {MAX_STOP} stop sequences are allowed, got {}",
                stop_strings.len()
            )
        })?;
        ensure(stop_strings.iter().all(|s| !s.is_empty()), "stop", || {
            "stop sequences must not be empty".into()
        })?;
        let stop_token_ids = f.stop_token_ids.clone().unwrap_or_default();
        if let Some(bad) = stop_token_ids.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(GenerateError::invalid(
                "stop_token_ids",
                format!("token id {bad} is outside the vocabulary (size {vocab_size})"),
            ));
        }
        if let Some(k) = f.logprobs {
            ensure(k <= MAX_LOGPROBS, f.logprobs_param, || {
                format!(
                    "{} must be at most {MAX_LOGPROBS}, got {k}",
                    f.logprobs_param
                )
            })?;
        }
        Ok(Self {
            params: SamplingParams {
                temperature,
                top_p,
                top_k: usize::try_from(top_k).unwrap_or(0),
                min_p,
                repetition_penalty,
                presence_penalty,
                frequency_penalty,
                logit_bias,
                // OpenAI seeds are signed; any 64-bit pattern is a fine seed.
                seed: f.seed.map(|s| s as u64),
                logprobs: f.logprobs.map(|k| k as usize),
                prompt_logprobs: None,
            },
            n: n as usize,
            max_tokens: f.max_tokens.map(|m| m as usize),
            max_tokens_param: f.max_tokens_param,
            stop: StopConditions {
                max_tokens: 0,
                min_tokens: min_tokens as usize,
                ignore_eos: f.ignore_eos.unwrap_or(false),
                stop_token_ids,
                stop_strings,
            },
            speculative: f.speculative.unwrap_or(true),
        })
    }

    /// Sets `max_tokens` when the endpoint has its own default (not the rest of the context).
    pub fn set_max_tokens(&mut self, max_tokens: usize) {
        self.max_tokens = Some(max_tokens);
    }

    /// The engine request for `prompt`. `max_tokens` defaults to the rest of the context;
    /// a prompt that leaves no room, or a `max_tokens` past the context, is a 400 naming
    /// both numbers. `prompt_param` names the field the prompt came from.
    pub fn request(
        &self,
        prompt: Vec<u32>,
        prompt_param: &str,
        max_model_len: usize,
    ) -> Result<GenerateRequest, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::invalid(
                prompt_param,
                "the prompt is empty (it has no tokens)",
            ));
        }
        let room = max_model_len.saturating_sub(prompt.len());
        let max_tokens = self.max_tokens.unwrap_or(room);
        if max_tokens == 0 || prompt.len() + max_tokens > max_model_len {
            return Err(GenerateError::ContextLength {
                prompt: prompt.len(),
                max_tokens: max_tokens.max(1),
                max_model_len,
                param: if self.max_tokens.is_some() {
                    self.max_tokens_param
                } else {
                    prompt_param
                }
                .to_string(),
            });
        }
        if self.stop.min_tokens > max_tokens {
            return Err(GenerateError::invalid(
                "min_tokens",
                format!(
                    "min_tokens ({}) is more than the {max_tokens} tokens left in the context",
                    self.stop.min_tokens
                ),
            ));
        }
        Ok(GenerateRequest {
            prompt,
            sampling: self.params.clone(),
            stop: StopConditions {
                max_tokens,
                ..self.stop.clone()
            },
            n: self.n,
            priority: 0,
            cache_key: Vec::new(),
            adapter: None,
            constraint: None,
            speculative: self.speculative,
        })
    }
}

fn ensure(ok: bool, param: &str, msg: impl FnOnce() -> String) -> Result<(), GenerateError> {
    if ok {
        Ok(())
    } else {
        Err(GenerateError::invalid(param, msg()))
    }
}

fn penalty(v: Option<f32>, param: &str) -> Result<f32, GenerateError> {
    let v = v.unwrap_or(0.0);
    ensure((-2.0..=2.0).contains(&v), param, || {
        format!("{param} must be in [-2, 2], got {v}")
    })?;
    Ok(v)
}

fn logit_bias(
    map: Option<&BTreeMap<String, f32>>,
    vocab_size: usize,
) -> Result<Vec<(u32, f32)>, GenerateError> {
    let Some(map) = map else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(k, &bias)| {
            let id: u32 = k.trim().parse().map_err(|_| {
                GenerateError::invalid(
                    "logit_bias",
                    format!("logit_bias keys must be token ids, got {k:?}"),
                )
            })?;
            ensure((id as usize) < vocab_size, "logit_bias", || {
                format!("token id {id} in logit_bias is outside the vocabulary (size {vocab_size})")
            })?;
            ensure((-100.0..=100.0).contains(&bias), "logit_bias", || {
                format!("logit_bias values must be in [-100, 100], got {bias} for token {id}")
            })?;
            Ok((id, bias))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_api::ClassifiedError;

    fn fields() -> SamplingFields {
        SamplingFields {
            max_tokens_param: "max_tokens",
            logprobs_param: "logprobs",
            ..Default::default()
        }
    }

    fn param_of(f: SamplingFields) -> Option<String> {
        Sampling::check(&f, 100).err().and_then(|e| e.param())
    }

    #[test]
    fn each_out_of_range_field_is_named() {
        assert_eq!(
            param_of(SamplingFields {
                temperature: Some(-0.1),
                ..fields()
            })
            .as_deref(),
            Some("temperature")
        );
        assert_eq!(
            param_of(SamplingFields {
                top_p: Some(0.0),
                ..fields()
            })
            .as_deref(),
            Some("top_p")
        );
        assert_eq!(
            param_of(SamplingFields {
                n: Some(0),
                ..fields()
            })
            .as_deref(),
            Some("n")
        );
        assert_eq!(
            param_of(SamplingFields {
                n: Some(MAX_N + 1),
                ..fields()
            })
            .as_deref(),
            Some("n")
        );
        assert_eq!(
            param_of(SamplingFields {
                max_tokens: Some(0),
                ..fields()
            })
            .as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            param_of(SamplingFields {
                logprobs: Some(21),
                ..fields()
            })
            .as_deref(),
            Some("logprobs")
        );
        let five = Some(vec!["a".to_string(); 5]);
        assert_eq!(
            param_of(SamplingFields {
                stop: five,
                ..fields()
            })
            .as_deref(),
            Some("stop")
        );
        let bias: BTreeMap<String, f32> = [("100".to_string(), 1.0)].into();
        assert_eq!(
            param_of(SamplingFields {
                logit_bias: Some(bias),
                ..fields()
            })
            .as_deref(),
            Some("logit_bias")
        );
        assert_eq!(
            param_of(SamplingFields {
                top_k: Some(-2),
                ..fields()
            })
            .as_deref(),
            Some("top_k")
        );
        assert_eq!(
            param_of(SamplingFields {
                min_tokens: Some(5),
                max_tokens: Some(4),
                ..fields()
            })
            .as_deref(),
            Some("min_tokens")
        );
    }

    #[test]
    fn max_tokens_defaults_to_the_rest_of_the_context() {
        let s = Sampling::check(&fields(), 100).expect("defaults are valid");
        let r = s.request(vec![1; 10], "prompt", 64).expect("fits");
        assert_eq!(r.stop.max_tokens, 54);
        match s.request(vec![1; 64], "prompt", 64) {
            Err(GenerateError::ContextLength {
                prompt: 64, param, ..
            }) => assert_eq!(param, "prompt"),
            other => panic!("{other:?}"),
        }
        let s = Sampling::check(
            &SamplingFields {
                max_tokens: Some(60),
                ..fields()
            },
            100,
        )
        .expect("valid");
        match s.request(vec![1; 10], "prompt", 64) {
            Err(e @ GenerateError::ContextLength { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("10 tokens")
                        && m.contains("60 for the completion")
                        && m.contains("64"),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
