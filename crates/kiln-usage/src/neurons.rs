//! The compute unit ("neurons"), after Workers AI's: one number per request that grows
//! with the model's size and with the work its tokens cost.
//!
//! A transformer's forward pass costs about `2 × params` FLOPs per token (one multiply
//! and one add per weight). Prompt tokens found in the prefix cache skip that pass, so
//! they cost nothing here (they only hold KV memory). A generated token costs the same
//! FLOPs as a prompt token but far more time: prefill runs many tokens through each
//! weight read, while a decode step streams every weight for one token per sequence, so
//! on a CPU a decoded token costs several batched prompt tokens; [`DECODE_WEIGHT`] is
//! that ratio. One neuron is 10^12 such weighted FLOPs, which puts a 1B-parameter model
//! at 0.002 neurons per prompt token and 0.008 per generated token (the same order as
//! Workers AI's published rates for models of that size).

/// How many uncached prompt tokens one generated token counts as.
pub const DECODE_WEIGHT: f64 = 4.0;

/// Weighted FLOPs per neuron.
pub const FLOPS_PER_NEURON: f64 = 1e12;

/// The formula, as documented and as `/admin/usage` states it.
pub const FORMULA: &str = "neurons = 2 * parameters * ((prompt_tokens - cached_tokens) \
                           + 4 * completion_tokens) / 10^12";

/// Neurons of one request on a model with `parameters` weights.
pub fn neurons(parameters: u64, prompt_tokens: u64, cached_tokens: u64, completion: u64) -> f64 {
    let computed = prompt_tokens.saturating_sub(cached_tokens) as f64;
    let work = computed + DECODE_WEIGHT * completion as f64;
    2.0 * parameters as f64 * work / FLOPS_PER_NEURON
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_weights_decode_and_skips_cached_tokens() {
        let p = 1_000_000_000;
        assert!((neurons(p, 1000, 0, 0) - 2.0).abs() < 1e-12);
        assert!((neurons(p, 0, 0, 1000) - 8.0).abs() < 1e-12);
        assert!((neurons(p, 1000, 1000, 0)).abs() < 1e-12);
        assert!((neurons(p, 100, 40, 10) - neurons(p, 60, 0, 10)).abs() < 1e-12);
        // More cached than prompt (never happens) can't go negative.
        assert_eq!(neurons(p, 10, 20, 0), 0.0);
        // Linear: two requests cost what their sum does.
        let (a, b) = (neurons(p, 30, 5, 7), neurons(p, 11, 0, 3));
        assert!((a + b - neurons(p, 41, 5, 10)).abs() < 1e-12);
    }
}
