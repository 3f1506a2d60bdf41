//! LoRA adapters on the real SmolLM2 (a `llama` GGUF, so Q/K rows are permuted): an
//! adapter gives the logits of the same adapter merged into the weights, rows with and
//! without adapters share a batch without affecting each other, and bad adapters are
//! refused with the reason.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{step, Seq, BLOCK_SIZE};
use kiln_backend::{KvCache, KvDtype};
use kiln_model::{LoadOptions, LoraAdapter, LoraError, Model, Workspace};
use kiln_testkit::lora::{
    config_json, random_pairs, write_adapter, Lcg, MergedFixture, Pair, ALL_MODULES,
};

const MODEL: &str = "smollm2-135m-instruct";

fn prompt(n: usize) -> Vec<u32> {
    let mut rng = Lcg::new(7);
    (0..n)
        .map(|_| 200 + ((rng.uniform() + 1.0) * 20_000.0) as u32)
        .collect()
}

/// An f32 KV cache, so that the comparisons with merged weights aren't blurred by f16
/// roundings of K and V.
fn kv_f32(model: &Model, blocks: usize) -> KvCache {
    model.new_kv_cache(blocks, BLOCK_SIZE, KvDtype::F32)
}

/// Every logit of `prompt` run alone through `model` (with `adapter`).
fn logits(model: &Model, adapter: Option<&Arc<LoraAdapter>>, prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut kv = kv_f32(model, 8);
    let mut ws = Workspace::new();
    let mut seq = Seq::new(0, 64);
    seq.adapter = adapter.cloned();
    step(model, &mut kv, &mut ws, &mut [&mut seq], &[prompt], true)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn load(path: &Path) -> Model {
    Model::load(path, &LoadOptions::detect()).expect("model loads")
}

#[test]
fn adapter_matches_its_merge_and_mixes_with_other_rows() {
    let src = kiln_testkit::gguf(MODEL);
    // Every projection type, in the first, a middle and the last layer.
    let pairs = random_pairs(&src, &[0, 14, 29], &ALL_MODULES, 8, 0.05, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let (r, alpha) = (8, 16.0);
    write_adapter(
        &dir.path().join("steer"),
        &config_json(r, alpha, MODEL, &pairs),
        &pairs,
    );
    let fixture = MergedFixture::write(&src, dir.path(), &pairs, alpha / r as f32);
    let base = load(&fixture.base);
    let merged = load(&fixture.merged);
    let adapter = Arc::new(
        LoraAdapter::load("steer", &dir.path().join("steer"), base.config())
            .expect("adapter loads"),
    );
    assert_eq!(adapter.num_pairs(), 21);
    assert_eq!(adapter.max_rank(), 8);

    let p = prompt(40);
    let plain = logits(&base, None, &p);
    let adapted = logits(&base, Some(&adapter), &p);
    let reference = logits(&merged, None, &p);
    let effect = max_diff(&adapted, &plain);
    let error = max_diff(&adapted, &reference);
    eprintln!("adapter effect {effect}, error against the merged weights {error}");
    // Attention rounds Q and the probabilities to f16 (as llama.cpp does), so last-bit
    // differences between the two orders of summation flip a few roundings that grow
    // through the layers; a wrong layout (Q/K rows unpermuted, B not transposed, the
    // wrong scale) gives an error of the order of the effect itself.
    assert!(
        effect > 1.0,
        "the adapter barely changes the logits ({effect})"
    );
    assert!(
        error < 0.05 * effect,
        "adapter vs merged weights differ by {error} (the adapter's effect is {effect})"
    );
    for (a, m) in adapted.iter().zip(&reference) {
        let top = |v: &[f32]| {
            (0..v.len())
                .max_by(|&i, &j| v[i].total_cmp(&v[j]))
                .expect("ok")
        };
        let mut sorted = m.clone();
        sorted.sort_by(|x, y| y.total_cmp(x));
        if sorted[0] - sorted[1] > 2.0 * error {
            assert_eq!(
                top(a),
                top(m),
                "greedy token differs from the merged model's"
            );
        }
    }

    // One step holding the adapted sequence and a plain one: each row gets exactly what
    // it gets alone.
    let mut kv = kv_f32(&base, 16);
    let mut ws = Workspace::new();
    let (mut with, mut without) = (Seq::new(0, 64), Seq::new(8, 64));
    with.adapter = Some(adapter.clone());
    let mixed = step(
        &base,
        &mut kv,
        &mut ws,
        &mut [&mut with, &mut without],
        &[&p, &p],
        true,
    );
    let (mixed_with, mixed_without) = mixed.split_at(p.len());
    assert_eq!(max_diff(mixed_with, &adapted), 0.0);
    assert_eq!(max_diff(mixed_without, &plain), 0.0);
}

/// An adapter over SmolLM2's layer 0 with `pairs`, loaded into a fresh directory.
fn try_load(model: &Model, config: &str, pairs: &[Pair]) -> Result<LoraAdapter, LoraError> {
    let dir = tempfile::tempdir().expect("tempdir");
    write_adapter(dir.path(), config, pairs);
    LoraAdapter::load("t", dir.path(), model.config())
}

#[test]
fn equivalent_adapters_give_equal_logits_and_a_zero_adapter_changes_nothing() {
    let src = kiln_testkit::gguf(MODEL);
    let pairs = random_pairs(&src, &[3, 20], &ALL_MODULES, 4, 0.05, 2);
    let model = load(&src);
    let p = prompt(24);
    let plain = logits(&model, None, &p);

    // PEFT initialises B to zero: such an adapter is the identity.
    let mut zero = pairs.clone();
    zero.iter_mut()
        .for_each(|p| p.b.iter_mut().for_each(|b| *b = 0.0));
    let zero = Arc::new(try_load(&model, &config_json(4, 8.0, MODEL, &zero), &zero).expect("ok"));
    assert_eq!(max_diff(&logits(&model, Some(&zero), &p), &plain), 0.0);

    // alpha 8 with B equals alpha 4 with 2B (scale = alpha / r).
    let x = Arc::new(try_load(&model, &config_json(4, 8.0, MODEL, &pairs), &pairs).expect("ok"));
    let mut doubled = pairs.clone();
    doubled
        .iter_mut()
        .for_each(|p| p.b.iter_mut().for_each(|b| *b *= 2.0));
    let y =
        Arc::new(try_load(&model, &config_json(4, 4.0, MODEL, &doubled), &doubled).expect("ok"));
    let (lx, ly) = (logits(&model, Some(&x), &p), logits(&model, Some(&y), &p));
    assert_eq!(max_diff(&lx, &ly), 0.0);
    assert!(max_diff(&lx, &plain) > 0.1);
    assert_ne!(x.id(), y.id(), "each load is a distinct prefix-cache key");
}

#[test]
fn bad_adapters_are_refused_with_the_reason() {
    let src = kiln_testkit::gguf(MODEL);
    let model = load(&src);
    let good = random_pairs(&src, &[0], &["self_attn.q_proj"], 4, 0.05, 3);
    let cfg = config_json(4, 8.0, MODEL, &good);
    let err = |pairs: &[Pair], config: &str| {
        try_load(&model, config, pairs).expect_err("the adapter is refused")
    };

    // Made for a wider model (Qwen2.5-0.5B's hidden size is 896).
    let mut wide = good.clone();
    wide[0].inputs = 896;
    wide[0].a = vec![0.01; 4 * 896];
    let e = err(&wide, &cfg);
    assert!(matches!(e, LoraError::WrongBase(_)), "{e}");
    assert!(e.to_string().contains("896"), "{e}");

    let mut deep = good.clone();
    deep[0].layer = 40;
    assert!(matches!(err(&deep, &cfg), LoraError::WrongBase(_)));

    let mut nan = good.clone();
    nan[0].b[3] = f32::NAN;
    assert!(err(&nan, &cfg).to_string().contains("NaN"));

    let dora = cfg.replace("\"use_dora\":false", "\"use_dora\":true");
    assert!(matches!(err(&good, &dora), LoraError::Unsupported(_)));

    // A truncated weights file, a missing one, a missing config.
    let dir = tempfile::tempdir().expect("tempdir");
    write_adapter(dir.path(), &cfg, &good);
    let weights = dir.path().join("adapter_model.safetensors");
    let bytes = std::fs::read(&weights).expect("ok");
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).expect("ok");
    let e = LoraAdapter::load("t", dir.path(), model.config()).expect_err("the adapter is refused");
    assert!(matches!(e, LoraError::Weights(_)), "{e}");
    std::fs::remove_file(&weights).expect("ok");
    let e = LoraAdapter::load("t", dir.path(), model.config()).expect_err("the adapter is refused");
    assert!(e.to_string().contains("adapter_model.safetensors"), "{e}");
    let e = LoraAdapter::load("t", &dir.path().join("nope"), model.config())
        .expect_err("the adapter is refused");
    assert!(matches!(e, LoraError::NotFound(_)), "{e}");

    // lora_A without its lora_B.
    kiln_testkit::lora::write_safetensors(
        &dir.path().join("adapter_model.safetensors"),
        &[(
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".into(),
            vec![4, 576],
            &good[0].a,
        )],
    );
    let e = LoraAdapter::load("t", dir.path(), model.config()).expect_err("the adapter is refused");
    assert!(e.to_string().contains("no lora_B"), "{e}");
}
