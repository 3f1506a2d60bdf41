//! Reading a PEFT adapter directory into [`LoraAdapter`] for one base model.

use std::collections::HashMap;
use std::path::Path;

use kiln_formats::{SafetensorsFile, StView};
use kiln_kernels::ops::RopeStyle;

use super::{AdapterConfig, LayerLora, LoraAdapter, LoraError, LoraPair, Target, MAX_RANK};
use crate::config::ModelConfig;

const CONFIG_FILE: &str = "adapter_config.json";
const WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Whether `dir` holds a PEFT adapter (has its `adapter_config.json`).
pub fn is_adapter_dir(dir: &Path) -> bool {
    dir.join(CONFIG_FILE).is_file()
}

/// Whether the GGUF converter permuted this model's Q/K rows: it does for the `llama`
/// family, whose GGUF RoPE rotates adjacent pairs where the Hugging Face weights rotate
/// split halves. An adapter's `lora_B` rows of `q_proj`/`k_proj` get the same permutation.
pub(crate) fn permutes_qk(cfg: &ModelConfig) -> bool {
    cfg.rope_style == RopeStyle::Norm
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Half {
    A,
    B,
}

/// Where a tensor belongs: `...layers.{layer}.{...}.{target}.lora_{A|B}[.{name}].weight`.
struct TensorKey {
    layer: usize,
    target: Target,
    half: Half,
    /// The module path without PEFT's `base_model.model.` prefix (for `alpha_pattern`).
    module: String,
}

fn parse_name(name: &str) -> Result<TensorKey, LoraError> {
    let unexpected = || {
        let what = if name.contains("embed") || name.contains("lm_head") {
            LoraError::Unsupported(format!(
                "tensor {name:?} adapts the embeddings or the output layer"
            ))
        } else {
            LoraError::Weights(format!("unexpected tensor {name:?}"))
        };
        Err(what)
    };
    let parts: Vec<&str> = name.split('.').collect();
    let Some(at) = parts.iter().position(|p| *p == "lora_A" || *p == "lora_B") else {
        return unexpected();
    };
    if parts.last() != Some(&"weight") || parts.len() - at > 3 || at == 0 {
        return unexpected();
    }
    let half = if parts[at] == "lora_A" {
        Half::A
    } else {
        Half::B
    };
    let Some(target) = Target::from_hf_name(parts[at - 1]) else {
        return unexpected();
    };
    let layer = parts[..at]
        .windows(2)
        .find(|w| w[0] == "layers")
        .and_then(|w| w[1].parse().ok());
    let Some(layer) = layer else {
        return unexpected();
    };
    let module = parts[..at].join(".");
    let module = module
        .strip_prefix("base_model.model.")
        .unwrap_or(&module)
        .to_string();
    Ok(TensorKey {
        layer,
        target,
        half,
        module,
    })
}

fn to_f32(t: &StView<'_>) -> Result<Vec<f32>, LoraError> {
    t.to_f32().ok_or_else(|| {
        LoraError::Weights(format!(
            "tensor {:?} is {}; adapters must be F32, F16 or BF16",
            t.name,
            t.dtype.name()
        ))
    })
}

/// Row `j` of a Hugging Face Q/K projection is row `perm(j)` in the GGUF: within each
/// head, element `i` of the first half and of the second become the adjacent pair `2i,
/// 2i + 1`.
fn gguf_row(j: usize, head_dim: usize) -> usize {
    let (head, within) = (j / head_dim, j % head_dim);
    let half = head_dim / 2;
    head * head_dim + (within % half) * 2 + within / half
}

impl LoraAdapter {
    /// Loads the adapter in `dir` for a base model of `cfg`.
    pub fn load(name: &str, dir: &Path, cfg: &ModelConfig) -> Result<Self, LoraError> {
        if !is_adapter_dir(dir) {
            return Err(LoraError::NotFound(dir.display().to_string()));
        }
        let config_path = dir.join(CONFIG_FILE);
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| LoraError::Io { path, source }
        };
        let text = std::fs::read_to_string(&config_path).map_err(io(&config_path))?;
        let config = AdapterConfig::parse(&text)?;
        let weights_path = dir.join(WEIGHTS_FILE);
        if !weights_path.is_file() {
            return Err(LoraError::Weights(format!(
                "{} is missing (only safetensors adapters are read)",
                weights_path.display()
            )));
        }
        let file =
            SafetensorsFile::open(&weights_path).map_err(|e| LoraError::Weights(e.to_string()))?;
        let layers = read_pairs(&file, &config, cfg)?;
        Ok(Self::new(name.to_string(), config, layers, cfg))
    }
}

fn read_pairs(
    file: &SafetensorsFile,
    config: &AdapterConfig,
    cfg: &ModelConfig,
) -> Result<Vec<LayerLora>, LoraError> {
    let mut halves: HashMap<(usize, usize, Half), (StView<'_>, String)> = HashMap::new();
    for t in file.tensors() {
        let t = t.map_err(|e| LoraError::Weights(e.to_string()))?;
        let key = parse_name(t.name)?;
        if key.layer >= cfg.n_layers {
            return Err(LoraError::WrongBase(format!(
                "tensor {:?} is for layer {} but the model has {} layers",
                t.name, key.layer, cfg.n_layers
            )));
        }
        let slot = (key.layer, key.target as usize, key.half);
        if halves.insert(slot, (t, key.module)).is_some() {
            return Err(LoraError::Weights(format!(
                "two tensors for layer {} {} {}",
                key.layer,
                key.target.hf_name(),
                if key.half == Half::A {
                    "lora_A"
                } else {
                    "lora_B"
                }
            )));
        }
    }
    if halves.is_empty() {
        return Err(LoraError::Weights(
            "the weights file has no LoRA tensors".into(),
        ));
    }
    let mut layers: Vec<LayerLora> = (0..cfg.n_layers).map(|_| Default::default()).collect();
    for (&(layer, ti, half), (t, module)) in &halves {
        if half == Half::B {
            continue;
        }
        let target = Target::ALL[ti];
        let Some((b, _)) = halves.get(&(layer, ti, Half::B)) else {
            return Err(LoraError::Weights(format!("{:?} has no lora_B", t.name)));
        };
        layers[layer][ti] = Some(pair(
            t,
            b,
            target,
            config.scale(module, t.shape[0] as usize),
            cfg,
        )?);
    }
    if let Some((_, (t, _))) = halves
        .iter()
        .find(|((l, ti, h), _)| *h == Half::B && layers[*l][*ti].is_none())
    {
        return Err(LoraError::Weights(format!("{:?} has no lora_A", t.name)));
    }
    Ok(layers)
}

/// Checks a pair's shapes against the projection and builds its compute layout.
fn pair(
    a: &StView<'_>,
    b: &StView<'_>,
    target: Target,
    scale: f32,
    cfg: &ModelConfig,
) -> Result<LoraPair, LoraError> {
    let (inputs, outputs) = target.dims(cfg);
    let (&[rank, a_in], &[b_out, b_rank]) = (a.shape, b.shape) else {
        return Err(LoraError::Weights(format!(
            "{:?} is {:?} and {:?} is {:?}; LoRA matrices are 2-D",
            a.name, a.shape, b.name, b.shape
        )));
    };
    let rank = rank as usize;
    if rank != b_rank as usize {
        return Err(LoraError::Weights(format!(
            "{:?} has rank {rank} but {:?} has rank {b_rank}",
            a.name, b.name
        )));
    }
    if rank == 0 || rank > MAX_RANK {
        return Err(LoraError::Weights(format!(
            "{:?} has rank {rank}, outside 1..={MAX_RANK}",
            a.name
        )));
    }
    if (a_in as usize, b_out as usize) != (inputs, outputs) {
        return Err(LoraError::WrongBase(format!(
            "{} maps {a_in} to {b_out} features but this model's {} maps {inputs} to {outputs}",
            target.hf_name(),
            target.hf_name(),
        )));
    }
    let a_vals = to_f32(a)?;
    let b_vals = to_f32(b)?;
    if a_vals.iter().chain(&b_vals).any(|v| !v.is_finite()) {
        return Err(LoraError::Weights(format!(
            "{:?} or {:?} holds a NaN or infinity",
            a.name, b.name
        )));
    }
    let permute = permutes_qk(cfg) && matches!(target, Target::Q | Target::K);
    let mut b_t = vec![0f32; rank * outputs];
    for j in 0..outputs {
        let row = if permute {
            gguf_row(j, cfg.head_dim)
        } else {
            j
        };
        for k in 0..rank {
            b_t[k * outputs + row] = scale * b_vals[j * rank + k];
        }
    }
    Ok(LoraPair {
        rank,
        inputs,
        outputs,
        a: a_vals,
        b_t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_peft() {
        let k = parse_name("base_model.model.model.layers.12.self_attn.k_proj.lora_B.weight")
            .expect("a PEFT name");
        assert_eq!(
            (k.layer, k.target, k.half == Half::B),
            (12, Target::K, true)
        );
        assert_eq!(k.module, "model.layers.12.self_attn.k_proj");
        let k = parse_name("base_model.model.model.layers.3.mlp.down_proj.lora_A.default.weight")
            .expect("a PEFT name");
        assert_eq!((k.layer, k.target), (3, Target::Down));
        for bad in [
            "base_model.model.lm_head.lora_A.weight",
            "base_model.model.model.embed_tokens.lora_embedding_A",
            "base_model.model.model.layers.0.self_attn.q_proj.weight",
            "base_model.model.model.layers.x.self_attn.q_proj.lora_A.weight",
            "lora_A.weight",
        ] {
            assert!(parse_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qk_rows_interleave_halves_per_head() {
        // head_dim 4: HF rows (0,1 | 2,3) pair as (0,2) and (1,3).
        let rows: Vec<usize> = (0..8).map(|j| gguf_row(j, 4)).collect();
        assert_eq!(rows, [0, 2, 1, 3, 4, 6, 5, 7]);
    }
}
