//! A PyTorch `Linear` layer over many rows at once.

use std::sync::Mutex;

use kiln_backend::ThreadPool;

use crate::error::Result;
use crate::gemm::{gemm, MatMut, MatRef};
use crate::weights::Tensors;

/// Rows per pool task below which splitting a product costs more than it saves.
const MIN_ROWS_PER_TASK: usize = 32;

/// `y = x · Wᵀ + b`, with `W` stored `out_dim × in_dim` as PyTorch keeps it.
pub(crate) struct Linear {
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    in_dim: usize,
    out_dim: usize,
}

impl Linear {
    /// Loads `{prefix}.weight` (and `{prefix}.bias` when `bias`).
    pub fn load(
        t: &Tensors,
        prefix: &str,
        out_dim: usize,
        in_dim: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = t.f32(&format!("{prefix}.weight"), &[out_dim, in_dim])?;
        let bias = if bias {
            Some(t.f32(&format!("{prefix}.bias"), &[out_dim])?)
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            in_dim,
            out_dim,
        })
    }

    /// A layer of `weight` (`out_dim × in_dim`) and `bias`.
    #[cfg(test)]
    pub fn from_parts(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        in_dim: usize,
        out_dim: usize,
    ) -> Self {
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

    /// The weights, `out_dim × in_dim` row-major.
    pub fn weight(&self) -> &[f32] {
        &self.weight
    }

    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    /// One layer computing all of `parts`' outputs side by side (e.g. fused Q, K, V), so
    /// the input is packed once.
    ///
    /// # Panics
    ///
    /// If the parts disagree on input size or on having a bias (an internal bug).
    pub fn concat(parts: Vec<Linear>) -> Self {
        let in_dim = parts.first().map_or(0, |p| p.in_dim);
        let has_bias = parts.first().is_some_and(|p| p.bias.is_some());
        assert!(
            parts
                .iter()
                .all(|p| p.in_dim == in_dim && p.bias.is_some() == has_bias),
            "Linear::concat: parts differ in input size or bias"
        );
        let out_dim = parts.iter().map(|p| p.out_dim).sum();
        let mut weight = Vec::with_capacity(out_dim * in_dim);
        let mut bias = has_bias.then(|| Vec::with_capacity(out_dim));
        for p in parts {
            weight.extend_from_slice(&p.weight);
            if let (Some(all), Some(b)) = (bias.as_mut(), p.bias.as_ref()) {
                all.extend_from_slice(b);
            }
        }
        Self {
            weight,
            bias,
            in_dim,
            out_dim,
        }
    }

    /// `out = x · Wᵀ + b` for `rows` rows; rows are split over the pool when there are
    /// enough of them (never inside a pool task: the pool runs one job at a time).
    ///
    /// # Panics
    ///
    /// If `x` is not `rows × in_dim` or `out` not `rows × out_dim` (an internal bug).
    pub fn forward(&self, pool: &ThreadPool, x: &[f32], rows: usize, out: &mut [f32]) {
        assert!(
            x.len() == rows * self.in_dim && out.len() == rows * self.out_dim,
            "Linear::forward: x {} and out {} for {rows} rows of {} -> {}",
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

    /// [`Linear::forward`] on the calling thread.
    pub fn forward_rows(&self, x: &[f32], out: &mut [f32]) {
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

    fn layer(out_dim: usize, in_dim: usize, seed: u32) -> Linear {
        Linear {
            weight: data(out_dim * in_dim, seed),
            bias: Some(data(out_dim, seed + 1)),
            in_dim,
            out_dim,
        }
    }

    #[test]
    fn split_rows_and_fused_layers_give_the_same_results() {
        let (rows, inp) = (150, 24);
        let x = data(rows * inp, 3);
        let (a, b) = (layer(9, inp, 10), layer(5, inp, 20));
        let mut one = vec![0f32; rows * 9];
        let mut many = vec![0f32; rows * 9];
        a.forward(&ThreadPool::new(1), &x, rows, &mut one);
        a.forward(&ThreadPool::new(3), &x, rows, &mut many);
        assert_eq!(one, many);
        let r = 77;
        for j in 0..9 {
            let want: f32 = (0..inp)
                .map(|p| x[r * inp + p] * a.weight[j * inp + p])
                .sum::<f32>()
                + a.bias.as_ref().map_or(0.0, |b| b[j]);
            assert!((one[r * 9 + j] - want).abs() < 1e-4);
        }
        let mut b_out = vec![0f32; rows * 5];
        b.forward_rows(&x, &mut b_out);
        let fused = Linear::concat(vec![a, b]);
        let mut both = vec![0f32; rows * 14];
        fused.forward(&ThreadPool::new(2), &x, rows, &mut both);
        for r in 0..rows {
            assert_eq!(both[r * 14..r * 14 + 9], one[r * 9..r * 9 + 9]);
            assert_eq!(both[r * 14 + 9..r * 14 + 14], b_out[r * 5..r * 5 + 5]);
        }
    }
}
