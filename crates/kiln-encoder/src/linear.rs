//! A PyTorch `Linear` layer's weights as read from the file, before the backend binds
//! them: where Q, K and V are fused, and what the int8 copies are quantized from.

use kiln_backend::EncoderBackend;

use crate::error::Result;
use crate::weights::Tensors;

/// `y = x · Wᵀ + b`, with `W` stored `out_dim × in_dim` as PyTorch keeps it, in host
/// memory.
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

    /// Hands the weights to `backend` (the host copy goes with them).
    pub fn bind<B: EncoderBackend>(self, backend: &B) -> B::Dense {
        backend.dense(self.weight, self.bias, self.out_dim, self.in_dim)
    }
}

#[cfg(test)]
mod tests {
    use kiln_backend::{Backend, CpuBackend};

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
        Linear::from_parts(
            data(out_dim * in_dim, seed),
            Some(data(out_dim, seed + 1)),
            in_dim,
            out_dim,
        )
    }

    /// Runs `l` over `x` on a CPU backend of `threads`.
    fn run(l: Linear, x: &[f32], rows: usize, threads: usize) -> Vec<f32> {
        let b = CpuBackend::detect(threads);
        let out_dim = l.out_dim;
        let w = l.bind(&b);
        let mut out = Vec::new();
        b.reserve(&mut out, rows * out_dim);
        b.dense_forward(&w, &x.to_vec(), rows, &mut out);
        out
    }

    #[test]
    fn fused_layers_give_the_same_results_as_their_parts() {
        let (rows, inp) = (150, 24);
        let x = data(rows * inp, 3);
        let one = run(layer(9, inp, 10), &x, rows, 1);
        let r = 77;
        let a = layer(9, inp, 10);
        for j in 0..9 {
            let want: f32 = (0..inp)
                .map(|p| x[r * inp + p] * a.weight[j * inp + p])
                .sum::<f32>()
                + a.bias.as_ref().map_or(0.0, |b| b[j]);
            assert!((one[r * 9 + j] - want).abs() < 1e-4);
        }
        let b_out = run(layer(5, inp, 20), &x, rows, 3);
        let fused = Linear::concat(vec![layer(9, inp, 10), layer(5, inp, 20)]);
        let both = run(fused, &x, rows, 2);
        for r in 0..rows {
            assert_eq!(both[r * 14..r * 14 + 9], one[r * 9..r * 9 + 9]);
            assert_eq!(both[r * 14 + 9..r * 14 + 14], b_out[r * 5..r * 5 + 5]);
        }
    }
}
