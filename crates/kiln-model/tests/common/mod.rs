//! Test helpers: run one or more sequences through the model with simple block tables.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use kiln_backend::{KvCache, KvDtype};
use std::sync::Arc;

use kiln_model::{BatchInput, LoadOptions, LoraAdapter, LoraBatch, Model, SeqSpan, Workspace};

pub const BLOCK_SIZE: usize = 16;

pub fn load(name: &str) -> Model {
    let path = kiln_testkit::gguf(name);
    Model::load(&path, &LoadOptions::detect()).expect("model loads")
}

/// One sequence with contiguous blocks `first_block..`.
pub struct Seq {
    pub block_table: Vec<u32>,
    pub len: usize,
    /// The LoRA adapter its rows use, if any.
    pub adapter: Option<Arc<LoraAdapter>>,
}

impl Seq {
    pub fn new(first_block: u32, max_tokens: usize) -> Self {
        let n = max_tokens.div_ceil(BLOCK_SIZE) as u32;
        Self {
            block_table: (first_block..first_block + n).collect(),
            len: 0,
            adapter: None,
        }
    }

    fn slot(&self, pos: usize) -> u32 {
        self.block_table[pos / BLOCK_SIZE] * BLOCK_SIZE as u32 + (pos % BLOCK_SIZE) as u32
    }
}

pub fn kv_for(model: &Model, num_blocks: usize) -> KvCache {
    model.new_kv_cache(num_blocks, BLOCK_SIZE, KvDtype::F16)
}

/// Appends `tokens` to each sequence in one batch; returns the logits of every appended
/// token (`all_logits`) or only of each sequence's last one.
pub fn step(
    model: &Model,
    kv: &mut KvCache,
    ws: &mut Workspace,
    seqs: &mut [&mut Seq],
    tokens: &[&[u32]],
    all_logits: bool,
) -> Vec<Vec<f32>> {
    let (mut ids, mut pos, mut slots, mut logits_rows) = (vec![], vec![], vec![], vec![]);
    let (mut spans, mut adapters, mut lora_rows) = (vec![], Vec::<Arc<LoraAdapter>>::new(), vec![]);
    for (s, toks) in seqs.iter().zip(tokens) {
        let start = ids.len();
        let lora_index = s.adapter.as_ref().map_or(0, |a| {
            let i = adapters.iter().position(|b| Arc::ptr_eq(a, b));
            i.unwrap_or_else(|| {
                adapters.push(a.clone());
                adapters.len() - 1
            }) as u16
                + 1
        });
        lora_rows.extend(std::iter::repeat_n(lora_index, toks.len()));
        for (i, &t) in toks.iter().enumerate() {
            let p = s.len + i;
            ids.push(t);
            pos.push(p as u32);
            slots.push(s.slot(p));
            if all_logits || i + 1 == toks.len() {
                logits_rows.push((start + i) as u32);
            }
        }
        spans.push((start, toks.len()));
    }
    let mut tables = vec![];
    let mut seq_spans = vec![];
    for (s, &(start, len)) in seqs.iter().zip(&spans) {
        seq_spans.push(SeqSpan {
            start,
            len,
            table_start: tables.len(),
            table_len: s.block_table.len(),
        });
        tables.extend_from_slice(&s.block_table);
    }
    let batch = BatchInput {
        token_ids: &ids,
        positions: &pos,
        slot_mapping: &slots,
        seqs: &seq_spans,
        block_tables: &tables,
        logits_rows: &logits_rows,
        lora: if adapters.is_empty() {
            LoraBatch::default()
        } else {
            LoraBatch {
                adapters: &adapters,
                rows: &lora_rows,
            }
        },
    };
    let vocab = model.config().vocab_size;
    let logits = model.forward(&batch, kv, ws).expect("forward").to_vec();
    for (s, toks) in seqs.iter_mut().zip(tokens) {
        s.len += toks.len();
    }
    logits.chunks_exact(vocab).map(|c| c.to_vec()).collect()
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy continuation of `prompt` for `n` tokens, one sequence alone.
pub fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut kv = kv_for(model, (prompt.len() + n).div_ceil(BLOCK_SIZE) + 1);
    let mut ws = Workspace::new();
    let mut seq = Seq::new(0, prompt.len() + n);
    let mut out = vec![];
    let mut next = argmax(&step(model, &mut kv, &mut ws, &mut [&mut seq], &[prompt], false)[0]);
    for _ in 0..n {
        out.push(next);
        next = argmax(&step(model, &mut kv, &mut ws, &mut [&mut seq], &[&[next]], false)[0]);
    }
    out
}
