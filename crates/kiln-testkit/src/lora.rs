//! PEFT LoRA adapters made by tests, and the same adapters merged into a GGUF's weights.
//!
//! [`write_adapter`] writes what PEFT's `save_pretrained` writes (`adapter_config.json`
//! and `adapter_model.safetensors` with `lora_A`/`lora_B` per projection).
//! [`MergedFixture`] writes two GGUF variants of a real model: `base`, with the adapted
//! projections dequantized to F32, and `merged`, the same with `scale·B·A` added, laid out
//! as llama.cpp's converter lays out Hugging Face weights (the `llama` family's Q/K rows
//! permuted per head). Serving `base` with the adapter must then match serving `merged`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kiln_formats::GgufFile;
use kiln_kernels::{KernelTable, WeightType};

use crate::gguf_copy::{copy_replacing, Replacement};

/// One projection's pair, as PEFT stores it (row-major, outermost dimension first).
#[derive(Debug, Clone)]
pub struct Pair {
    pub layer: usize,
    /// The Hugging Face module under the layer, e.g. `self_attn.q_proj`, `mlp.down_proj`.
    pub module: &'static str,
    pub rank: usize,
    pub inputs: usize,
    pub outputs: usize,
    /// `rank × inputs`.
    pub a: Vec<f32>,
    /// `outputs × rank`.
    pub b: Vec<f32>,
}

impl Pair {
    fn key(&self, half: &str) -> String {
        format!(
            "base_model.model.model.layers.{}.{}.lora_{half}.weight",
            self.layer, self.module
        )
    }
}

/// The Hugging Face module of each GGUF projection and its GGUF tensor name part.
pub const PROJECTIONS: [(&str, &str); 7] = [
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// Every projection's Hugging Face module name.
pub const ALL_MODULES: [&str; 7] = [
    PROJECTIONS[0].0,
    PROJECTIONS[1].0,
    PROJECTIONS[2].0,
    PROJECTIONS[3].0,
    PROJECTIONS[4].0,
    PROJECTIONS[5].0,
    PROJECTIONS[6].0,
];

/// Writes a safetensors file of F32 tensors `(name, shape, values)`.
pub fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, &[f32])]) {
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0;
    for (name, shape, values) in tensors {
        let end = offset + values.len() * 4;
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let _ = write!(
            header,
            ",\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
            dims.join(",")
        );
        offset = end;
    }
    header.push('}');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for (_, _, values) in tensors {
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, bytes).expect("write safetensors");
}

/// Writes a PEFT adapter directory with `config` as its `adapter_config.json`.
pub fn write_adapter(dir: &Path, config: &str, pairs: &[Pair]) {
    std::fs::create_dir_all(dir).expect("create adapter dir");
    std::fs::write(dir.join("adapter_config.json"), config).expect("write adapter config");
    let mut tensors = Vec::new();
    for p in pairs {
        tensors.push((p.key("A"), vec![p.rank, p.inputs], &p.a[..]));
        tensors.push((p.key("B"), vec![p.outputs, p.rank], &p.b[..]));
    }
    write_safetensors(&dir.join("adapter_model.safetensors"), &tensors);
}

/// A PEFT config of rank `r` and `lora_alpha` `alpha` over `pairs`' modules.
pub fn config_json(r: usize, alpha: f32, base: &str, pairs: &[Pair]) -> String {
    let mut modules: Vec<&str> = pairs
        .iter()
        .map(|p| p.module.rsplit('.').next().unwrap_or(p.module))
        .collect();
    modules.sort_unstable();
    modules.dedup();
    format!(
        "{{\"peft_type\":\"LORA\",\"task_type\":\"CAUSAL_LM\",\"r\":{r},\"lora_alpha\":{alpha},\
         \"lora_dropout\":0.0,\"bias\":\"none\",\"use_rslora\":false,\"use_dora\":false,\
         \"fan_in_fan_out\":false,\"target_modules\":{modules:?},\
         \"base_model_name_or_path\":\"{base}\"}}"
    )
}

/// A small deterministic generator (tests need reproducible adapters, not good randomness).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self(
            seed.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    }

    /// Uniform in `[-1, 1)`.
    pub fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// A model's shape as the adapter fixtures need it, read from its GGUF.
pub struct Shape {
    pub head_dim: usize,
    /// Whether llama.cpp's converter permuted Q/K rows (the `llama` family).
    pub permuted_qk: bool,
}

impl Shape {
    pub fn of(file: &GgufFile) -> Self {
        let arch = file
            .get_str("general.architecture")
            .ok()
            .flatten()
            .unwrap_or("");
        let get = |k: &str| {
            file.get_u64(&format!("{arch}.{k}"))
                .ok()
                .flatten()
                .expect("model metadata") as usize
        };
        let d = get("embedding_length");
        let heads = get("attention.head_count");
        let head_dim = file
            .get_u64(&format!("{arch}.attention.key_length"))
            .ok()
            .flatten()
            .map_or(d / heads, |v| v as usize);
        Self {
            head_dim,
            permuted_qk: arch == "llama",
        }
    }
}

/// `(inputs, outputs)` of projection `gguf_name` in `layer`, from the GGUF's shapes.
pub fn projection_dims(file: &GgufFile, layer: usize, gguf_name: &str) -> (usize, usize) {
    let info = file
        .tensor_info(&format!("blk.{layer}.{gguf_name}.weight"))
        .expect("projection tensor");
    (info.shape[0] as usize, info.shape[1] as usize)
}

/// Random pairs of rank `rank` for `modules` (Hugging Face names) in `layers`: `A` entries
/// in `±1/√inputs`, `B` entries in `±b_scale`.
pub fn random_pairs(
    gguf: &Path,
    layers: &[usize],
    modules: &[&'static str],
    rank: usize,
    b_scale: f32,
    seed: u64,
) -> Vec<Pair> {
    let file = GgufFile::open(gguf).expect("open GGUF");
    let mut rng = Lcg::new(seed);
    let mut pairs = Vec::new();
    for &layer in layers {
        for &module in modules {
            let name = PROJECTIONS
                .iter()
                .find(|(hf, _)| *hf == module)
                .map(|(_, g)| *g)
                .expect("known module");
            let (inputs, outputs) = projection_dims(&file, layer, name);
            let a_scale = 1.0 / (inputs as f32).sqrt();
            pairs.push(Pair {
                layer,
                module,
                rank,
                inputs,
                outputs,
                a: (0..rank * inputs)
                    .map(|_| rng.uniform() * a_scale)
                    .collect(),
                b: (0..outputs * rank)
                    .map(|_| rng.uniform() * b_scale)
                    .collect(),
            });
        }
    }
    pairs
}

/// The GGUF row of Hugging Face row `j` of a Q/K projection, as llama.cpp's converter
/// permutes it: each head's rows reshaped to `(2, head_dim/2)` and transposed, so the two
/// halves that RoPE pairs become adjacent rows.
fn converter_row(j: usize, head_dim: usize) -> usize {
    let (head, r) = (j / head_dim, j % head_dim);
    let (t, i) = (r / (head_dim / 2), r % (head_dim / 2));
    head * head_dim + i * 2 + t
}

/// Two variants of a GGUF for checking an adapter against its merge. Every quantized
/// matrix is dequantized (the adapted ones to F32, the others to F16), so every matmul
/// runs on unquantized activations: with 8-bit activations, the last-bit differences
/// between `W·x + B·(A·x)` and `(W + B·A)·x` flip roundings that grow through the layers.
pub struct MergedFixture {
    /// The model with every adapted projection in F32, the other matrices in F16.
    pub base: PathBuf,
    /// The same with `scale·B·A` added to those projections.
    pub merged: PathBuf,
}

impl MergedFixture {
    /// Writes `base.gguf` and `merged.gguf` into `dir` from `src` and `pairs` at `scale`.
    pub fn write(src: &Path, dir: &Path, pairs: &[Pair], scale: f32) -> Self {
        let file = GgufFile::open(src).expect("open GGUF");
        let shape = Shape::of(&file);
        let kt = KernelTable::best();
        let dequantized = |name: &str| -> Option<Vec<f32>> {
            let info = file.tensor_info(name)?;
            let ty = WeightType::ALL
                .into_iter()
                .find(|w| format!("{w:?}") == info.dtype.name())?;
            if info.shape.len() != 2 || matches!(ty, WeightType::F32 | WeightType::F16) {
                return None;
            }
            let (cols, rows) = (info.shape[0] as usize, info.shape[1] as usize);
            let data = file.tensor(name).ok()?.data;
            let row_bytes = ty.row_bytes(cols)?;
            let mut out = vec![0f32; rows * cols];
            for (r, o) in out.chunks_exact_mut(cols).enumerate() {
                (kt.weight(ty).dequantize_row)(&data[r * row_bytes..(r + 1) * row_bytes], o);
            }
            Some(out)
        };
        let adapted = |name: &str| -> Option<&Pair> {
            let (layer, proj) = parse_tensor(name)?;
            let hf = PROJECTIONS.iter().find(|(_, g)| *g == proj)?.0;
            pairs.iter().find(|p| p.layer == layer && p.module == hf)
        };
        let variant = |name: &str, merge: bool| -> Option<Replacement> {
            let mut w = dequantized(name)?;
            let Some(p) = adapted(name) else {
                return Some(Replacement::F16(w));
            };
            if !merge {
                return Some(Replacement::F32(w));
            }
            let permute =
                shape.permuted_qk && (name.contains(".attn_q.") || name.contains(".attn_k."));
            for j in 0..p.outputs {
                let row = if permute {
                    converter_row(j, shape.head_dim)
                } else {
                    j
                };
                for k in 0..p.rank {
                    let bk = scale * p.b[j * p.rank + k];
                    let a = &p.a[k * p.inputs..(k + 1) * p.inputs];
                    for (wi, ai) in w[row * p.inputs..(row + 1) * p.inputs].iter_mut().zip(a) {
                        *wi += bk * ai;
                    }
                }
            }
            Some(Replacement::F32(w))
        };
        let base = dir.join("base.gguf");
        copy_replacing(&file, &base, |info| variant(&info.name, false)).expect("write base");
        let merged = dir.join("merged.gguf");
        copy_replacing(&file, &merged, |info| variant(&info.name, true)).expect("write merged");
        Self { base, merged }
    }
}

/// `blk.{layer}.{proj}.weight` → `(layer, proj)`.
fn parse_tensor(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (layer, proj) = rest.split_once('.')?;
    Some((layer.parse().ok()?, proj))
}
