//! [`EncoderBackend`] on the CPU: f32 layers as GEMMs (`matrixmultiply`, rows split over
//! the pool), int8 layers through the decoder's packed q8_0 matmul, attention per
//! (span, head) over the pool, and row-wise norms and activations in f64 where PyTorch
//! parity asks for it.

use kiln_kernels::{ops, ActType, WeightType};

use crate::cpu::CpuBackend;
use crate::dense::DenseMatrix;
use crate::encoder::{EncoderActivation, EncoderBackend, Heads, RopeTables, RowCopy, RowSpan};
use crate::encoder_attention::attention;
use crate::encoder_ops::{
    gelu_erf_inplace, l2_normalize, layer_norm, mean_rows, relu_squared_inplace, rms_norm,
    rotate_halves,
};
use crate::matmul::{QMatrix, WeightBytes};
use crate::rows::for_each_row_block;

impl EncoderBackend for CpuBackend {
    type Dense = DenseMatrix;

    fn dense(
        &self,
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        out_dim: usize,
        in_dim: usize,
    ) -> DenseMatrix {
        DenseMatrix::new(weight, bias, out_dim, in_dim)
    }

    fn quantize_q8_0(&self, weight: &[f32], rows: usize, cols: usize) -> Option<QMatrix> {
        let row_bytes = WeightType::Q8_0.row_bytes(cols)?;
        if cols == 0 || weight.len() != rows.checked_mul(cols)? {
            return None;
        }
        let quantize = self.kernels.quantize(ActType::Q8_0);
        let mut bytes = vec![0u8; row_bytes.checked_mul(rows)?];
        for (row, dst) in weight
            .chunks_exact(cols)
            .zip(bytes.chunks_exact_mut(row_bytes))
        {
            quantize(row, dst);
        }
        QMatrix::new(WeightType::Q8_0, rows, cols, WeightBytes::Owned(bytes))
    }

    fn dense_forward(&self, w: &DenseMatrix, x: &Vec<f32>, rows: usize, out: &mut Vec<f32>) {
        let (out_dim, in_dim) = w.dims();
        w.forward(
            &self.pool,
            &x[..rows * in_dim],
            rows,
            &mut out[..rows * out_dim],
        );
    }

    fn lookup_rows(&self, table: &Vec<f32>, width: usize, ids: &[u32], out: &mut Vec<f32>) {
        for (row, &id) in out[..ids.len() * width].chunks_exact_mut(width).zip(ids) {
            let id = id as usize;
            row.copy_from_slice(&table[id * width..(id + 1) * width]);
        }
    }

    fn add_lookup_rows(&self, table: &Vec<f32>, width: usize, ids: &[u32], out: &mut Vec<f32>) {
        for (row, &id) in out[..ids.len() * width].chunks_exact_mut(width).zip(ids) {
            let id = id as usize;
            ops::add_inplace(row, &table[id * width..(id + 1) * width]);
        }
    }

    fn copy(&self, src: &Vec<f32>, dst: &mut Vec<f32>, len: usize) {
        dst[..len].copy_from_slice(&src[..len]);
    }

    fn copy_rows(&self, src: &Vec<f32>, dst: &mut Vec<f32>, width: usize, copies: &[RowCopy]) {
        for c in copies {
            let n = c.rows * width;
            dst[c.dst * width..c.dst * width + n]
                .copy_from_slice(&src[c.src * width..c.src * width + n]);
        }
    }

    fn move_rows(&self, x: &mut Vec<f32>, width: usize, copies: &[RowCopy]) {
        for c in copies {
            let from = c.src * width;
            x.copy_within(from..from + c.rows * width, c.dst * width);
        }
    }

    fn mix(&self, x: &mut Vec<f32>, a: f32, x0: &Vec<f32>, b: f32, len: usize) {
        for (v, &v0) in x[..len].iter_mut().zip(&x0[..len]) {
            *v = a * *v + b * v0;
        }
    }

    /// Serial: a row costs little next to the layers around it.
    fn layer_norm(
        &self,
        x: &mut Vec<f32>,
        weight: &Vec<f32>,
        bias: &Vec<f32>,
        eps: f32,
        rows: usize,
        width: usize,
    ) {
        for row in x[..rows * width].chunks_exact_mut(width) {
            layer_norm(row, weight, bias, eps);
        }
    }

    fn plain_rms_norm(
        &self,
        x: &Vec<f32>,
        out: &mut Vec<f32>,
        eps: f32,
        rows: usize,
        width: usize,
    ) {
        let out = &mut out[..rows * width];
        out.copy_from_slice(&x[..rows * width]);
        for row in out.chunks_exact_mut(width) {
            rms_norm(row, eps);
        }
    }

    fn activation(&self, x: &mut Vec<f32>, rows: usize, width: usize, act: EncoderActivation) {
        let act = match act {
            EncoderActivation::GeluErf => gelu_erf_inplace,
            EncoderActivation::ReluSquared => relu_squared_inplace,
        };
        for_each_row_block(&self.pool, &mut x[..rows * width], width, |_, block| {
            act(block);
        });
    }

    fn rotate_and_norm_qk(
        &self,
        qkv: &mut Vec<f32>,
        rows: usize,
        heads: Heads,
        rope: RopeTables<'_, Vec<f32>>,
        eps: f32,
    ) {
        let d = heads.width();
        let period = rope.period.max(1);
        for_each_row_block(
            &self.pool,
            &mut qkv[..rows * 3 * d],
            3 * d,
            |first, block| {
                for (r, row) in block.chunks_exact_mut(3 * d).enumerate() {
                    let pos = (first + r) % period;
                    for head in row[..2 * d].chunks_exact_mut(heads.head_dim) {
                        rotate_halves(head, rope.cos, rope.sin, pos);
                        rms_norm(head, eps);
                    }
                }
            },
        );
    }

    fn bidirectional_attention(
        &self,
        qkv: &Vec<f32>,
        rows: usize,
        spans: &[RowSpan],
        queries: &[usize],
        heads: Heads,
        scale: f32,
        out: &mut Vec<f32>,
    ) {
        let w = heads.width();
        attention(
            &self.pool,
            &qkv[..rows * 3 * w],
            spans,
            queries,
            heads,
            scale,
            &mut out[..rows * w],
        );
    }

    fn mean_pool(&self, x: &Vec<f32>, spans: &[RowSpan], width: usize, out: &mut Vec<f32>) {
        for (span, o) in spans.iter().zip(out.chunks_exact_mut(width)) {
            let rows = &x[span.start * width..(span.start + span.len) * width];
            mean_rows(rows, width, o);
        }
    }

    fn l2_normalize(&self, x: &mut Vec<f32>, rows: usize, width: usize) {
        for row in x[..rows * width].chunks_exact_mut(width) {
            l2_normalize(row);
        }
    }

    fn softmax(&self, x: &mut Vec<f32>, rows: usize, width: usize) {
        for row in x[..rows * width].chunks_exact_mut(width) {
            ops::softmax_inplace(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    fn rows(n: usize, width: usize) -> Vec<f32> {
        (0..n * width).map(|i| (i / width) as f32).collect()
    }

    #[test]
    fn row_copies_and_moves_land_where_asked() {
        let b = CpuBackend::detect(1);
        let src = rows(6, 2);
        let mut dst = vec![-1f32; 12];
        let copies = [
            RowCopy {
                src: 4,
                dst: 0,
                rows: 2,
            },
            RowCopy {
                src: 1,
                dst: 3,
                rows: 1,
            },
        ];
        b.copy_rows(&src, &mut dst, 2, &copies);
        assert_eq!(dst[..8], [4.0, 4.0, 5.0, 5.0, -1.0, -1.0, 1.0, 1.0]);
        // Moving spans to the front, in order, never reads a row already overwritten.
        let mut x = rows(6, 2);
        let front = [
            RowCopy {
                src: 1,
                dst: 0,
                rows: 2,
            },
            RowCopy {
                src: 4,
                dst: 2,
                rows: 2,
            },
        ];
        b.move_rows(&mut x, 2, &front);
        assert_eq!(x[..8], [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 5.0, 5.0]);
    }

    #[test]
    fn queries_and_keys_are_rotated_by_position_then_normalised() {
        let b = CpuBackend::detect(2);
        let heads = Heads {
            n_heads: 1,
            head_dim: 2,
        };
        // Position 0 leaves a head as it is; position 1 turns it by a quarter.
        let (cos, sin) = (vec![1.0, 0.0], vec![0.0, 1.0]);
        let mut qkv = vec![3.0, 4.0, 1.0, 0.0, 7.0, 7.0, 3.0, 4.0, 1.0, 0.0, 7.0, 7.0];
        let rope = RopeTables {
            cos: &cos,
            sin: &sin,
            period: 2,
        };
        b.rotate_and_norm_qk(&mut qkv, 2, heads, rope, 0.0);
        // RMS norms: (3, 4) over sqrt(12.5), a unit key over sqrt(0.5); values untouched.
        let (r, k) = (12.5f32.sqrt(), 2f32.sqrt());
        let want = [
            [3.0 / r, 4.0 / r, k, 0.0, 7.0, 7.0],
            [4.0 / r, -3.0 / r, 0.0, -k, 7.0, 7.0],
        ];
        for (g, w) in qkv.iter().zip(want.as_flattened()) {
            assert!((g - w).abs() < 1e-6, "{qkv:?}");
        }
        let mut out = Vec::new();
        b.reserve(&mut out, 4);
        b.mean_pool(
            &rows(4, 1),
            &[RowSpan { start: 1, len: 3 }, RowSpan { start: 0, len: 1 }],
            1,
            &mut out,
        );
        assert_eq!(out[..2], [2.0, 0.0]);
    }
}
