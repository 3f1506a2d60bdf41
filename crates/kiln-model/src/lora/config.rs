//! PEFT's `adapter_config.json`: the fields that change what the adapter computes.
//!
//! Anything that would make the adapter compute something Kiln does not (DoRA, trained
//! biases, fully fine-tuned modules, `fan_in_fan_out` layers) is refused at load rather
//! than silently ignored.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::LoraError;

#[derive(Debug, Clone, Deserialize)]
pub struct AdapterConfig {
    #[serde(default = "default_peft_type")]
    pub peft_type: String,
    /// The default rank (a pair's rank is read from its tensors' shapes).
    pub r: usize,
    pub lora_alpha: f32,
    /// Scale by `alpha / sqrt(r)` rather than `alpha / r`.
    #[serde(default)]
    pub use_rslora: bool,
    #[serde(default)]
    pub use_dora: bool,
    #[serde(default)]
    pub fan_in_fan_out: bool,
    #[serde(default = "default_bias")]
    pub bias: String,
    #[serde(default)]
    pub modules_to_save: Option<Vec<String>>,
    /// Per-module alpha overrides, keyed by a module-path suffix.
    #[serde(default)]
    pub alpha_pattern: BTreeMap<String, f32>,
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
}

fn default_peft_type() -> String {
    "LORA".into()
}

fn default_bias() -> String {
    "none".into()
}

impl AdapterConfig {
    pub fn parse(text: &str) -> Result<Self, LoraError> {
        let cfg: Self = serde_json::from_str(text)
            .map_err(|e| LoraError::Config(format!("adapter_config.json: {e}")))?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), LoraError> {
        let unsupported = |what: String| Err(LoraError::Unsupported(what));
        if !self.peft_type.eq_ignore_ascii_case("LORA") {
            return unsupported(format!("peft_type {:?} (only LORA is)", self.peft_type));
        }
        if self.use_dora {
            return unsupported("DoRA (`use_dora: true`)".into());
        }
        if self.fan_in_fan_out {
            return unsupported("`fan_in_fan_out: true` (Conv1D layers)".into());
        }
        if self.bias != "none" {
            return unsupported(format!("trained biases (`bias: {:?}`)", self.bias));
        }
        if self.modules_to_save.as_ref().is_some_and(|m| !m.is_empty()) {
            return unsupported("`modules_to_save` (fully trained modules)".into());
        }
        if self.r == 0 || self.r > super::MAX_RANK {
            return Err(LoraError::Config(format!(
                "rank r = {} is outside 1..={}",
                self.r,
                super::MAX_RANK
            )));
        }
        if !self.lora_alpha.is_finite() || self.alpha_pattern.values().any(|a| !a.is_finite()) {
            return Err(LoraError::Config(
                "lora_alpha must be a finite number".into(),
            ));
        }
        Ok(())
    }

    /// The scale of a pair of rank `rank` on module `module` (its path without the
    /// `base_model.model.` prefix, e.g. `model.layers.3.self_attn.q_proj`).
    pub fn scale(&self, module: &str, rank: usize) -> f32 {
        let alpha = self
            .alpha_pattern
            .iter()
            .filter(|(k, _)| module == k.as_str() || module.ends_with(&format!(".{k}")))
            .max_by_key(|(k, _)| k.len())
            .map_or(self.lora_alpha, |(_, &a)| a);
        let r = rank as f32;
        if self.use_rslora {
            alpha / r.sqrt()
        } else {
            alpha / r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_follow_peft() {
        let c = AdapterConfig::parse(r#"{"r": 8, "lora_alpha": 16}"#).expect("valid config");
        assert_eq!(c.scale("model.layers.0.self_attn.q_proj", 8), 2.0);
        let c = AdapterConfig::parse(r#"{"r": 16, "lora_alpha": 8, "use_rslora": true}"#)
            .expect("valid config");
        assert_eq!(c.scale("x", 16), 2.0);
        let c = AdapterConfig::parse(
            r#"{"r": 4, "lora_alpha": 4, "alpha_pattern": {"q_proj": 8, "layers.1.self_attn.q_proj": 12}}"#,
        )
        .expect("valid config");
        assert_eq!(c.scale("model.layers.0.self_attn.q_proj", 4), 2.0);
        assert_eq!(c.scale("model.layers.1.self_attn.q_proj", 4), 3.0);
        assert_eq!(c.scale("model.layers.1.self_attn.k_proj", 4), 1.0);
        // A suffix must match whole path components.
        assert_eq!(c.scale("model.layers.0.self_attn.xq_proj", 4), 1.0);
    }

    #[test]
    fn refuses_what_it_cannot_compute() {
        for (json, what) in [
            (r#"{"r": 8, "lora_alpha": 16, "use_dora": true}"#, "DoRA"),
            (r#"{"r": 8, "lora_alpha": 16, "bias": "all"}"#, "biases"),
            (
                r#"{"r": 8, "lora_alpha": 16, "fan_in_fan_out": true}"#,
                "fan_in_fan_out",
            ),
            (
                r#"{"r": 8, "lora_alpha": 16, "modules_to_save": ["lm_head"]}"#,
                "modules_to_save",
            ),
            (r#"{"r": 8, "lora_alpha": 16, "peft_type": "IA3"}"#, "IA3"),
            (r#"{"r": 0, "lora_alpha": 16}"#, "rank"),
            (r#"{"r": 8}"#, "lora_alpha"),
            (r#"{"r": 8, "lora_alpha": 16"#, "adapter_config.json"),
        ] {
            let e = AdapterConfig::parse(json).expect_err(json).to_string();
            assert!(e.contains(what), "{json}: {e}");
        }
    }
}
