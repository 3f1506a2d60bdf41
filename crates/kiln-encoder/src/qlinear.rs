//! A linear layer in int8 for the classifier's fast path: its weights quantized once to
//! q8_0 (blocks of 32 int8 values with an f16 scale, ggml's layout, which q8_0
//! activations share) and multiplied by the backend's quantized matmul (on the CPU, the
//! engine's packed kernels, VNNI where the CPU has it), against activations quantized
//! per row the same way. About four times less memory traffic and several times the
//! throughput of the f32 GEMM, for scores that move by a few thousandths (see the
//! reference test).

use kiln_backend::{EncoderBackend, MatmulInput, WeightMatrix};

use crate::linear::Linear;

pub(crate) struct QLinear<B: EncoderBackend> {
    w: B::Matrix,
    bias: Option<B::Vector>,
}

impl<B: EncoderBackend> QLinear<B> {
    /// `l` in q8_0, prepared for `backend`'s kernels; `None` when its input width is not
    /// a whole number of 32-value blocks.
    pub fn from_linear(l: &Linear, backend: &B) -> Option<Self> {
        let (out_dim, in_dim) = l.dims();
        let mut w = backend.quantize_q8_0(l.weight(), out_dim, in_dim)?;
        backend.prepare(&mut w);
        Some(Self {
            w,
            bias: l.bias().map(|b| backend.vector(b.to_vec())),
        })
    }

    /// `out = x · Wᵀ + b` for `rows` rows.
    pub fn forward(&self, backend: &B, x: &B::Activations, rows: usize, out: &mut B::Activations) {
        let mut scratch = B::MatmulScratch::default();
        backend.matmul(&self.w, x, rows, out, &mut scratch, MatmulInput::New);
        if let Some(b) = &self.bias {
            backend.add_bias(out, b, rows, self.w.rows());
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_backend::{Backend, CpuBackend};

    use super::*;

    #[test]
    fn int8_products_stay_close_to_f32() {
        let (rows, inp, outp) = (40, 64, 48);
        let val = |i: usize, s: u32| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(s) % 1000) as f32 / 500.0 - 1.0
        };
        let x: Vec<f32> = (0..rows * inp).map(|i| val(i, 3)).collect();
        let l = Linear::from_parts(
            (0..outp * inp).map(|i| val(i, 9)).collect(),
            Some(vec![0.5; outp]),
            inp,
            outp,
        );
        let b = CpuBackend::detect(2);
        let q = QLinear::from_linear(&l, &b).expect("q8_0");
        let (mut want, mut got) = (Vec::new(), Vec::new());
        b.reserve(&mut want, rows * outp);
        b.reserve(&mut got, rows * outp);
        b.dense_forward(&l.bind(&b), &x, rows, &mut want);
        q.forward(&b, &x, rows, &mut got);
        let scale = want.iter().map(|v| v.abs()).fold(0f32, f32::max);
        let worst = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst / scale < 0.02, "worst {worst} of {scale}");
    }
}
