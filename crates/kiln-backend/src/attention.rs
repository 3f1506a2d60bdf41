//! Causal attention over paged K/V, for a flat batch of tokens from many sequences.
//!
//! Each task handles one token and one KV head's whole GQA group, so each cached key and
//! value is read and converted once for the group (a part of the group per task only
//! when an f16 cache meets a batch whose groups can't be spread evenly over the threads,
//! see [`heads_per_task`]). Scores are kept
//! per task in a thread-local buffer that grows once and is then reused, so steady-state
//! steps don't allocate.
//!
//! Precision follows llama.cpp's CPU attention with an f16 cache, whose numerics we are
//! checked against: queries are rounded to f16 before `q·k`, and the softmax weights are
//! rounded to f16 before they multiply the values (accumulation stays f32). Quantized
//! small models amplify even such 5e-4 relative differences into visible logit changes.

use std::cell::RefCell;

use kiln_kernels::ops;

use crate::kv::{KvCache, KvDtype};
use crate::pool::ThreadPool;
use crate::sync_ptr::SyncPtr;

/// One sequence's rows in the flat batch and where its K/V live.
///
/// Plain indices (no borrows), so a step's list of spans can live in a reused buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqSpan {
    /// First row of this sequence in the batch.
    pub start: usize,
    /// Rows of this sequence in the batch.
    pub len: usize,
    /// Where this sequence's block table starts in the batch's flat `block_tables`.
    pub table_start: usize,
    /// Entries of its block table: block ids holding positions `0..`, `block_size` each.
    pub table_len: usize,
}

impl SeqSpan {
    /// This sequence's block table within the flat buffer.
    pub fn block_table<'t>(&self, block_tables: &'t [u32]) -> &'t [u32] {
        &block_tables[self.table_start..self.table_start + self.table_len]
    }
}

/// Head layout and masking for one attention layer.
#[derive(Debug, Clone, Copy)]
pub struct AttentionParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
    /// Sliding window: a query at position p sees keys at positions `> p - window`.
    pub window: Option<usize>,
    /// The longest context a query will see; each thread's score buffer is sized for it
    /// on first use, so later steps never grow it.
    pub max_context: usize,
}

/// Per-thread buffers: scores, one block of converted keys/values, f16-rounded queries.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    kbuf: Vec<f32>,
    q: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `out[t, h] = softmax(scale · q[t, h] · K[seq(t), ≤pos(t)]) · V` for every row `t`.
///
/// `q` and `out` are `n_rows × n_heads·head_dim`. The K/V of every row must already be in
/// `kv` at its position. Sequences must be given in row order.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention(
    pool: &ThreadPool,
    kv: &KvCache,
    layer: usize,
    p: &AttentionParams,
    q: &[f32],
    positions: &[u32],
    seqs: &[SeqSpan],
    block_tables: &[u32],
    out: &mut [f32],
) {
    let n_rows = positions.len();
    let q_width = p.n_heads * p.head_dim;
    assert_eq!(q.len(), n_rows * q_width, "attention q shape");
    assert_eq!(out.len(), n_rows * q_width, "attention out shape");
    let out_ptr = SyncPtr::new(out);
    let group = p.n_heads / p.n_kv_heads;
    let heads_per_task = if kv.dtype == KvDtype::F16 {
        heads_per_task(n_rows, p.n_heads, group, pool.n_threads())
    } else {
        group
    };
    let tasks_per_row = p.n_heads / heads_per_task;
    pool.run(n_rows * tasks_per_row, |task| {
        let (row, h0) = (task / tasks_per_row, task % tasks_per_row * heads_per_task);
        let seq_idx = seqs.partition_point(|s| s.start + s.len <= row);
        let Some(seq) = seqs.get(seq_idx) else { return };
        let cols = h0 * p.head_dim..(h0 + heads_per_task) * p.head_dim;
        let q_heads = &q[row * q_width..(row + 1) * q_width][cols.clone()];
        // SAFETY: each (row, heads) task owns its slice of the output row.
        let o = unsafe { out_ptr.slice_mut(row * q_width + cols.start, cols.len()) };
        let task = GroupTask {
            layer,
            kv_head: h0 / group,
            block_table: seq.block_table(block_tables),
            pos: positions[row] as usize,
            q_group: q_heads,
        };
        SCRATCH.with(|s| attend_group(kv, p, &task, o, &mut s.borrow_mut()));
    });
}

/// How many of a GQA group's heads one task takes: as many as keep the threads evenly
/// loaded. The heads of one task share each pass over their K/V rows (a key converted
/// from f16 once serves them all, which at batch 1 and a long context nearly halves
/// attention's time), but a batch too small for whole groups to split evenly over the
/// threads (SmolLM2's 3 groups on 2 threads) would leave a thread idle, so there the
/// group is split: into the largest divisor of its heads that makes the task count a
/// multiple of the threads, or at least four tasks a thread.
fn heads_per_task(n_rows: usize, n_heads: usize, group: usize, n_threads: usize) -> usize {
    let balanced = |h: usize| {
        let tasks = n_rows * (n_heads / h);
        tasks.is_multiple_of(n_threads) || tasks >= 4 * n_threads
    };
    (1..=group)
        .rev()
        .filter(|h| group.is_multiple_of(*h))
        .find(|&h| balanced(h))
        .unwrap_or(1)
}

/// Per-task inputs of [`attend_group`].
struct GroupTask<'a> {
    layer: usize,
    kv_head: usize,
    block_table: &'a [u32],
    pos: usize,
    q_group: &'a [f32],
}

fn attend_group(
    kv: &KvCache,
    p: &AttentionParams,
    t: &GroupTask<'_>,
    out: &mut [f32],
    s: &mut Scratch,
) {
    let (hd, bs) = (p.head_dim, kv.shape.block_size);
    let group = t.q_group.len() / hd;
    let end = t.pos + 1;
    let start = p.window.map_or(0, |w| end.saturating_sub(w));
    let n_ctx = end - start;
    if s.scores.len() < group * n_ctx {
        let most = p.window.map_or(p.max_context, |w| w.min(p.max_context));
        s.scores.resize((group * n_ctx).max(group * most), 0.0);
    }
    if s.kbuf.len() < bs * hd {
        s.kbuf.resize(bs * hd, 0.0);
    }
    s.q.clear();
    s.q.extend_from_slice(t.q_group);
    ops::round_f16_inplace(&mut s.q);
    let (scores, kbuf, q) = (&mut s.scores, &mut s.kbuf, &s.q);
    // An f16 cache is read in place, a run of adjacent blocks at a time; other types are
    // converted one block at a time into `kbuf`.
    let run = if kv.dtype == KvDtype::F16 {
        usize::MAX
    } else {
        1
    };
    // Pass 1: scaled scores for every visible position. An f16 cache is read in place.
    for_each_block(t.block_table, bs, start, end, run, |block, base, lo, hi| {
        let c0 = base + lo - start;
        if let Some(k) = kv.k_f16(t.layer, block, t.kv_head, hi) {
            ops::dot_f16_rows_heads(&k[lo * hd..], q, hd, p.scale, &mut scores[c0..], n_ctx);
            return;
        }
        kv.read_k(t.layer, block, t.kv_head, hi, kbuf);
        for j in lo..hi {
            for h in 0..group {
                let dot = ops::dot_f32(&q[h * hd..(h + 1) * hd], &kbuf[j * hd..(j + 1) * hd]);
                scores[h * n_ctx + c0 + j - lo] = p.scale * dot;
            }
        }
    });
    ops::softmax_rows_f32(&mut scores[..group * n_ctx], n_ctx);
    ops::round_f16_inplace(&mut scores[..group * n_ctx]);
    // Pass 2: probability-weighted sum of values.
    out.fill(0.0);
    for_each_block(t.block_table, bs, start, end, run, |block, base, lo, hi| {
        let c0 = base + lo - start;
        if let Some(v) = kv.v_f16(t.layer, block, t.kv_head, hi) {
            ops::axpy_f16_rows_heads(&scores[c0..], n_ctx, &v[lo * hd..], hd, out);
            return;
        }
        kv.read_v(t.layer, block, t.kv_head, hi, kbuf);
        for j in lo..hi {
            for h in 0..group {
                let w = scores[h * n_ctx + c0 + j - lo];
                ops::axpy(
                    w,
                    &kbuf[j * hd..(j + 1) * hd],
                    &mut out[h * hd..(h + 1) * hd],
                );
            }
        }
    });
}

/// Calls `f(block_id, first_position_of_block, lo, hi)` for each block overlapping
/// positions `start..end`, where `lo..hi` are the slots to use counted from that block's
/// start. Up to `max_run` blocks with consecutive ids come as one call (then `hi` may pass
/// the block size): their rows are adjacent in an f16 cache, so one kernel call covers
/// them all.
fn for_each_block(
    block_table: &[u32],
    bs: usize,
    start: usize,
    end: usize,
    max_run: usize,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let last = end.div_ceil(bs).min(block_table.len());
    let mut b = start / bs;
    while b < last {
        let mut e = b + 1;
        while e < last && e - b < max_run && block_table[e] == block_table[e - 1].wrapping_add(1) {
            e += 1;
        }
        let base = b * bs;
        let lo = start.max(base) - base;
        let hi = end.min(e * bs) - base;
        f(block_table[b] as usize, base, lo, hi);
        b = e;
    }
}

#[cfg(test)]
mod tests {
    use super::for_each_block;

    fn calls(table: &[u32], start: usize, end: usize, max_run: usize) -> Vec<[usize; 4]> {
        let mut got = vec![];
        for_each_block(table, 4, start, end, max_run, |b, base, lo, hi| {
            got.push([b, base, lo, hi])
        });
        got
    }

    #[test]
    fn tasks_take_whole_groups_when_the_threads_stay_even() {
        use super::heads_per_task;
        // Qwen2.5 (14 heads in 2 groups of 7), 2 threads: a group per task at any batch.
        assert_eq!(heads_per_task(1, 14, 7, 2), 7);
        assert_eq!(heads_per_task(3, 14, 7, 2), 7);
        // SmolLM2 (9 heads in 3 groups of 3): 3 tasks can't split over 2 threads.
        assert_eq!(heads_per_task(1, 9, 3, 2), 1);
        assert_eq!(heads_per_task(2, 9, 3, 2), 3);
        assert_eq!(heads_per_task(4, 9, 3, 4), 3, "12 tasks on 4 threads");
        assert_eq!(
            heads_per_task(3, 9, 3, 4),
            1,
            "9 group tasks on 4 threads: split"
        );
        // Gemma 3 270M (4 heads, 1 group): halves keep 2 threads busy.
        assert_eq!(heads_per_task(1, 4, 4, 2), 2);
        assert_eq!(heads_per_task(1, 4, 4, 3), 1);
    }

    #[test]
    fn runs_of_adjacent_blocks_come_as_one_call() {
        let table = [5, 6, 7, 2, 3, 9, 10];
        // Positions 1..22 of a 4-slot table: blocks 5-7, then 2-3, then 9 (10 unused).
        assert_eq!(
            calls(&table, 1, 22, usize::MAX),
            [[5, 0, 1, 12], [2, 12, 0, 8], [9, 20, 0, 2]]
        );
        assert_eq!(
            calls(&table, 1, 22, 2),
            [[5, 0, 1, 8], [7, 8, 0, 4], [2, 12, 0, 8], [9, 20, 0, 2]]
        );
        let single = calls(&table, 5, 9, 1);
        assert_eq!(single, [[6, 4, 1, 4], [7, 8, 0, 1]]);
    }
}
