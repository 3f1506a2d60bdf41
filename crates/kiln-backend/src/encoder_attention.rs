//! Bidirectional multi-head attention over the sequences of a flat batch.
//!
//! Sequences are packed one after another with no padding, so each attends to exactly
//! its own rows: the same result as a padded batch with a key mask, without the wasted
//! rows. Work is split over (sequence, head) pairs; within a pair, both products are
//! GEMMs over strided views of the fused Q|K|V rows (no gathering copies).

use std::sync::Mutex;

use kiln_kernels::ops::softmax_inplace;

use crate::encoder::{Heads, RowSpan};
use crate::gemm::{gemm, MatMut, MatRef};
use crate::pool::ThreadPool;

/// `out = softmax(Q·Kᵀ · scale) · V` per sequence and head, for only the first
/// `queries[i]` rows of span `i` as queries (every row of the span is still a key and a
/// value); the other rows of `out` are left as they were. A layer whose later rows are
/// never read needs no more.
///
/// `qkv` holds, for every row, the queries, keys and values of all heads side by side
/// (`3 · width` floats, head-major inside each); `out` receives `width` floats per row.
///
/// # Panics
///
/// If the buffers do not match the spans and head layout (an internal bug).
pub(crate) fn attention(
    pool: &ThreadPool,
    qkv: &[f32],
    spans: &[RowSpan],
    queries: &[usize],
    heads: Heads,
    scale: f32,
    out: &mut [f32],
) {
    let width = heads.width();
    let stride = 3 * width;
    let rows = qkv.len() / stride.max(1);
    assert!(
        qkv.len() == rows * stride
            && out.len() == rows * width
            && spans.iter().all(|s| s.start + s.len <= rows),
        "attention: qkv {} / out {} elements do not fit {} spans over {rows} rows",
        qkv.len(),
        out.len(),
        spans.len()
    );
    assert_eq!(
        queries.len(),
        spans.len(),
        "attention: one query count per span"
    );
    let hd = heads.head_dim;
    let tasks: Vec<(RowSpan, usize, usize)> = spans
        .iter()
        .zip(queries)
        .filter(|(s, &nq)| s.len > 0 && nq > 0)
        .flat_map(|(&s, &nq)| (0..heads.n_heads).map(move |h| (s, nq.min(s.len), h)))
        .collect();
    let results: Vec<Mutex<Vec<f32>>> = tasks.iter().map(|_| Mutex::new(Vec::new())).collect();
    pool.run(tasks.len(), |i| {
        let (span, nq, h) = tasks[i];
        let rows = &qkv[span.start * stride..(span.start + span.len) * stride];
        let view = |offset: usize, n: usize| MatRef::strided(&rows[offset..], n, hd, stride, 1);
        let (q, k, v) = (
            view(h * hd, nq),
            view(width + h * hd, span.len),
            view(2 * width + h * hd, span.len),
        );
        let mut scores = vec![0f32; nq * span.len];
        gemm(scale, q, k.t(), MatMut::new(&mut scores, nq, span.len));
        for row in scores.chunks_exact_mut(span.len) {
            softmax_inplace(row);
        }
        let mut ctx = vec![0f32; nq * hd];
        gemm(
            1.0,
            MatRef::new(&scores, nq, span.len),
            v,
            MatMut::new(&mut ctx, nq, hd),
        );
        *results[i].lock().unwrap_or_else(|e| e.into_inner()) = ctx;
    });
    for ((span, _, h), ctx) in tasks.iter().zip(results) {
        let ctx = ctx.into_inner().unwrap_or_else(|e| e.into_inner());
        for (r, src) in ctx.chunks_exact(hd).enumerate() {
            let dst = (span.start + r) * width + h * hd;
            out[dst..dst + hd].copy_from_slice(src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward per-query attention for one head of one span.
    fn naive(qkv: &[f32], span: RowSpan, h: usize, heads: Heads, scale: f32) -> Vec<f32> {
        let (width, hd) = (heads.width(), heads.head_dim);
        let at = |r: usize, part: usize, d: usize| {
            qkv[(span.start + r) * 3 * width + part * width + h * hd + d]
        };
        let mut out = vec![0f32; span.len * hd];
        for i in 0..span.len {
            let mut s: Vec<f32> = (0..span.len)
                .map(|j| (0..hd).map(|d| at(i, 0, d) * at(j, 1, d)).sum::<f32>() * scale)
                .collect();
            softmax_inplace(&mut s);
            for d in 0..hd {
                out[i * hd + d] = (0..span.len).map(|j| s[j] * at(j, 2, d)).sum();
            }
        }
        out
    }

    #[test]
    fn each_span_attends_only_to_itself() {
        let heads = Heads {
            n_heads: 3,
            head_dim: 4,
        };
        let spans = [
            RowSpan { start: 0, len: 5 },
            RowSpan { start: 5, len: 1 },
            RowSpan { start: 6, len: 7 },
        ];
        let rows = 13;
        let qkv: Vec<f32> = (0..rows * 3 * heads.width())
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut out = vec![0f32; rows * heads.width()];
        let all: Vec<usize> = spans.iter().map(|s| s.len).collect();
        attention(
            &ThreadPool::new(2),
            &qkv,
            &spans,
            &all,
            heads,
            0.5,
            &mut out,
        );
        // The leading rows alone as queries give those rows the same answers.
        let mut some = vec![0f32; rows * heads.width()];
        attention(
            &ThreadPool::new(2),
            &qkv,
            &spans,
            &[2, 1, 0],
            heads,
            0.5,
            &mut some,
        );
        for r in (0..2).chain(5..6) {
            let w = heads.width();
            assert_eq!(some[r * w..(r + 1) * w], out[r * w..(r + 1) * w], "row {r}");
        }
        assert!(
            some[6 * heads.width()..].iter().all(|&v| v == 0.0),
            "no queries, untouched"
        );
        for span in spans {
            for h in 0..heads.n_heads {
                let want = naive(&qkv, span, h, heads, 0.5);
                for r in 0..span.len {
                    for d in 0..heads.head_dim {
                        let got = out[(span.start + r) * heads.width() + h * heads.head_dim + d];
                        assert!((got - want[r * heads.head_dim + d]).abs() < 1e-5);
                    }
                }
            }
        }
    }
}
