//! The CPU's [`EncoderBackend::Dense`](crate::EncoderBackend::Dense): a PyTorch
//! `Linear` layer in f32, over many rows at once.

use std::sync::Mutex;

use crate::gemm::{gemm, MatMut, MatRef};
use crate::pool::ThreadPool;

/// Rows per pool task below which splitting a product costs more than it saves.
const MIN_ROWS_PER_TASK: usize = 32;

/// `y = x · Wᵀ + b`, with `W` stored `out_dim × in_dim` as PyTorch keeps it.
pub struct DenseMatrix {
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    in_dim: usize,
    out_dim: usize,
}

impl DenseMatrix {
    /// A layer of `weight` (`out_dim × in_dim`, row-major) and `bias` (`out_dim`).
    ///
    /// # Panics
    ///
    /// If the lengths don't fit the shape (an internal bug: callers check shapes when
    /// reading the weights).
    pub fn new(weight: Vec<f32>, bias: Option<Vec<f32>>, out_dim: usize, in_dim: usize) -> Self {
        assert!(
            weight.len() == out_dim * in_dim && bias.as_ref().is_none_or(|b| b.len() == out_dim),
            "DenseMatrix: {} weights and {:?} biases for {out_dim} x {in_dim}",
            weight.len(),
            bias.as_ref().map(Vec::len)
        );
        Self {
            weight,
            bias,
            in_dim,
            out_dim,
        }
    }

    /// `(out_dim, in_dim)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.out_dim, self.in_dim)
    }

    /// `out = x · Wᵀ + b` for `rows` rows; rows are split over the pool when there are
    /// enough of them (never inside a pool task: the pool runs one job at a time).
    ///
    /// # Panics
    ///
    /// If `x` is not `rows × in_dim` or `out` not `rows × out_dim` (an internal bug).
    pub(crate) fn forward(&self, pool: &ThreadPool, x: &[f32], rows: usize, out: &mut [f32]) {
        assert!(
            x.len() == rows * self.in_dim && out.len() == rows * self.out_dim,
            "DenseMatrix::forward: x {} and out {} for {rows} rows of {} -> {}",
            x.len(),
            out.len(),
            self.in_dim,
            self.out_dim
        );
        let tasks = pool.n_threads().min(rows / MIN_ROWS_PER_TASK).max(1);
        if tasks == 1 || self.in_dim == 0 || self.out_dim == 0 {
            self.forward_rows(x, out);
            return;
        }
        let per_task = rows.div_ceil(tasks);
        // Each task owns one block of output rows; the mutexes are never contended, they
        // only let a shared closure hand out the disjoint `&mut` blocks.
        let blocks: Vec<Mutex<(&[f32], &mut [f32])>> = x
            .chunks(per_task * self.in_dim)
            .zip(out.chunks_mut(per_task * self.out_dim))
            .map(Mutex::new)
            .collect();
        pool.run(blocks.len(), |i| {
            let mut block = blocks[i].lock().unwrap_or_else(|e| e.into_inner());
            let (x, out) = &mut *block;
            self.forward_rows(x, out);
        });
    }

    /// [`DenseMatrix::forward`] on the calling thread.
    pub(crate) fn forward_rows(&self, x: &[f32], out: &mut [f32]) {
        let rows = x.len() / self.in_dim.max(1);
        let w = MatRef::new(&self.weight, self.out_dim, self.in_dim).t();
        gemm(
            1.0,
            MatRef::new(x, rows, self.in_dim),
            w,
            MatMut::new(out, rows, self.out_dim),
        );
        if let Some(b) = &self.bias {
            for row in out.chunks_exact_mut(self.out_dim) {
                kiln_kernels::ops::add_inplace(row, b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0
                    - 1.0
            })
            .collect()
    }

    #[test]
    fn split_rows_give_the_same_results() {
        let (rows, inp) = (150, 24);
        let x = data(rows * inp, 3);
        let a = DenseMatrix::new(data(9 * inp, 10), Some(data(9, 11)), 9, inp);
        let mut one = vec![0f32; rows * 9];
        let mut many = vec![0f32; rows * 9];
        let mut serial = vec![0f32; rows * 9];
        a.forward(&ThreadPool::new(1), &x, rows, &mut one);
        a.forward(&ThreadPool::new(3), &x, rows, &mut many);
        a.forward_rows(&x, &mut serial);
        assert_eq!(one, many);
        assert_eq!(one, serial);
        let r = 77;
        for j in 0..9 {
            let want: f32 = (0..inp)
                .map(|p| x[r * inp + p] * a.weight[j * inp + p])
                .sum::<f32>()
                + a.bias.as_ref().map_or(0.0, |b| b[j]);
            assert!((one[r * 9 + j] - want).abs() < 1e-4);
        }
    }
}
