//! The KV-cache element types give nearly the same logits on the real default model:
//! f32 and f16 within f16 rounding, q8_0 within its 8-bit quantization.

mod common;

use kiln_backend::KvDtype;
use kiln_model::{BatchInput, SeqSpan, Workspace};

fn last_logits(model: &kiln_model::Model, dtype: KvDtype, tokens: &[u32]) -> Vec<f32> {
    let bs = common::BLOCK_SIZE;
    let n_blocks = tokens.len().div_ceil(bs);
    let mut kv = model.new_kv_cache(n_blocks, bs, dtype);
    let table: Vec<u32> = (0..n_blocks as u32).collect();
    let positions: Vec<u32> = (0..tokens.len() as u32).collect();
    let last = [tokens.len() as u32 - 1];
    let seqs = [SeqSpan {
        start: 0,
        len: tokens.len(),
        table_start: 0,
        table_len: n_blocks,
    }];
    let batch = BatchInput {
        token_ids: tokens,
        positions: &positions,
        slot_mapping: &positions,
        seqs: &seqs,
        block_tables: &table,
        logits_rows: &last,
        lora: Default::default(),
    };
    let mut ws = Workspace::new();
    model
        .forward(&batch, &mut kv, &mut ws)
        .expect("forward")
        .to_vec()
}

#[test]
fn f32_f16_and_q8_0_caches_agree() {
    let model = common::load("smollm2-135m-instruct");
    let tokens: Vec<u32> = (0..200)
        .map(|i| (1000 + i * 7919 % 40_000) as u32)
        .collect();
    let f32 = last_logits(&model, KvDtype::F32, &tokens);
    let f16 = last_logits(&model, KvDtype::F16, &tokens);
    let q8 = last_logits(&model, KvDtype::Q8_0, &tokens);
    let max_diff =
        |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let (d16, d8) = (max_diff(&f32, &f16), max_diff(&f32, &q8));
    eprintln!("max |logit diff| vs f32 cache: f16 {d16:.4}, q8_0 {d8:.4}");
    assert!(d16 < 1.0, "f16 cache: {d16}");
    assert!(d8 < 2.0, "q8_0 cache: {d8}");
    assert_eq!(common::argmax(&f32), common::argmax(&q8), "same top-1");
}
