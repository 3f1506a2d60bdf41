//! The `ops` primitives with SIMD variants as [`KernelTable`] entries, so that one choice
//! of instruction set (detected, or [`Isa::force`]d) covers them as it covers the matmul
//! kernels. The public functions in [`crate::ops`] call [`KernelTable::best`]'s entries.
//!
//! Each entry performs its op's argument checks itself (the same checks and panics as
//! the public function), so, as for `vec_dot`, the CPU features of the table it lives in
//! are its only precondition. Every table's entries give bit-identical results.

use half::f16;

#[cfg(doc)]
use super::Isa;
use super::KernelTable;
use crate::ops::{exp, f16_vector, softmax};

/// Function pointers for the `ops` primitives that have SIMD variants, for one [`Isa`]:
/// each entry has the signature and contract of the [`crate::ops`] function of the same
/// name, and gives bit-identical results on every table.
#[derive(Clone, Copy)]
pub struct OpKernels {
    /// [`ops::exp_inplace`](crate::ops::exp_inplace).
    pub exp_inplace: fn(x: &mut [f32]),
    /// [`ops::softmax_rows_f32`](crate::ops::softmax_rows_f32).
    pub softmax_rows_f32: fn(rows: &mut [f32], n: usize),
    /// [`ops::round_f16_inplace`](crate::ops::round_f16_inplace).
    pub round_f16_inplace: fn(x: &mut [f32]),
    /// [`ops::dot_f16`](crate::ops::dot_f16).
    pub dot_f16: fn(k: &[f16], q: &[f32]) -> f32,
    /// [`ops::axpy_f16`](crate::ops::axpy_f16).
    pub axpy_f16: fn(alpha: f32, v: &[f16], y: &mut [f32]),
    /// [`ops::dot_f16_rows`](crate::ops::dot_f16_rows).
    pub dot_f16_rows: fn(keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]),
    /// [`ops::axpy_f16_rows`](crate::ops::axpy_f16_rows).
    pub axpy_f16_rows: fn(w: &[f32], values: &[f16], y: &mut [f32]),
    /// [`ops::dot_f16_rows_heads`](crate::ops::dot_f16_rows_heads).
    #[allow(clippy::type_complexity)] // the op's own signature
    pub dot_f16_rows_heads:
        fn(keys: &[f16], qs: &[f32], hd: usize, scale: f32, out: &mut [f32], stride: usize),
    /// [`ops::axpy_f16_rows_heads`](crate::ops::axpy_f16_rows_heads).
    pub axpy_f16_rows_heads:
        fn(w: &[f32], stride: usize, values: &[f16], hd: usize, ys: &mut [f32]),
}

/// The portable entries: the public ops' argument checks, then the scalar references.
pub(super) const SCALAR: OpKernels = OpKernels {
    exp_inplace: exp::exp_inplace_scalar,
    softmax_rows_f32: softmax::softmax_rows_f32_scalar,
    round_f16_inplace: f16_vector::round_f16_scalar,
    dot_f16: f16_vector::scalar::dot_f16,
    axpy_f16: f16_vector::scalar::axpy_f16,
    dot_f16_rows: f16_vector::scalar::dot_f16_rows,
    axpy_f16_rows: f16_vector::scalar::axpy_f16_rows,
    dot_f16_rows_heads: f16_vector::dot_f16_rows_heads_scalar,
    axpy_f16_rows_heads: f16_vector::axpy_f16_rows_heads_scalar,
};

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::*;
    use crate::ops::f16_vector::x86 as f16_x86;

    /// Wraps a `#[target_feature]` op kernel in a plain `fn` pointer.
    ///
    /// SAFETY (every use): the resulting pointer lives only in the table of an ISA that
    /// includes every feature the kernel enables (the AVX-512 table reuses AVX2 entries;
    /// `Isa::Avx512` requires all of `Isa::Avx2`'s features), and `KernelTable::for_isa`
    /// returns that table only after `Isa::is_supported` confirmed the CPU has them. The
    /// entries check their arguments themselves, so the CPU features are their only
    /// precondition.
    macro_rules! op {
        ($f:path, $($arg:ident),+) => {
            |$($arg),+| unsafe { $f($($arg),+) }
        };
    }

    /// What an AVX2 + FMA + F16C machine runs: the AVX2 `exp`, the F16C (AVX, 8-lane)
    /// f16 kernels and the 8-lane attention softmax.
    pub(in crate::dispatch) const AVX2: OpKernels = OpKernels {
        exp_inplace: op!(exp::avx2::exp_inplace, x),
        softmax_rows_f32: op!(softmax::x86::softmax_rows_f32_avx, rows, n),
        round_f16_inplace: op!(f16_x86::round_f16_inplace, x),
        dot_f16: op!(f16_x86::dot_f16_f16c, k, q),
        axpy_f16: op!(f16_x86::axpy_f16_f16c, alpha, v, y),
        dot_f16_rows: op!(f16_x86::dot_f16_rows_f16c, keys, q, scale, out),
        axpy_f16_rows: op!(f16_x86::axpy_f16_rows_f16c, w, values, y),
        dot_f16_rows_heads: op!(
            f16_vector::dot_f16_rows_heads_f16c,
            keys,
            qs,
            hd,
            scale,
            out,
            stride
        ),
        axpy_f16_rows_heads: op!(
            f16_vector::axpy_f16_rows_heads_f16c,
            w,
            stride,
            values,
            hd,
            ys
        ),
    };

    /// The AVX-512F/DQ `exp`, the 16-lane `axpy_f16_rows` and the AVX-512VL GQA-group
    /// kernels; the rest have no wider variant (a 16-lane dot would change the rounding)
    /// and are AVX2's.
    pub(in crate::dispatch) const AVX512: OpKernels = OpKernels {
        exp_inplace: op!(exp::avx512::exp_inplace, x),
        axpy_f16_rows: op!(f16_x86::axpy_f16_rows_avx512, w, values, y),
        dot_f16_rows_heads: op!(
            f16_vector::dot_f16_rows_heads_avx512,
            keys,
            qs,
            hd,
            scale,
            out,
            stride
        ),
        axpy_f16_rows_heads: op!(
            f16_vector::axpy_f16_rows_heads_avx512,
            w,
            stride,
            values,
            hd,
            ys
        ),
        ..AVX2
    };
}

/// The `ops` primitives through this table's entries (for code that already holds a
/// table; the [`crate::ops`] functions are these on [`KernelTable::best`]).
impl KernelTable {
    /// This table's entries for the `ops` primitives with SIMD variants.
    pub fn ops(&self) -> &OpKernels {
        &self.ops
    }

    /// [`ops::exp_inplace`](crate::ops::exp_inplace) with this table's kernel.
    #[inline]
    pub fn exp_inplace(&self, x: &mut [f32]) {
        (self.ops.exp_inplace)(x);
    }

    /// [`ops::softmax_rows_f32`](crate::ops::softmax_rows_f32) with this table's kernel.
    #[inline]
    pub fn softmax_rows_f32(&self, rows: &mut [f32], n: usize) {
        (self.ops.softmax_rows_f32)(rows, n);
    }

    /// [`ops::round_f16_inplace`](crate::ops::round_f16_inplace) with this table's kernel.
    #[inline]
    pub fn round_f16_inplace(&self, x: &mut [f32]) {
        (self.ops.round_f16_inplace)(x);
    }

    /// [`ops::dot_f16`](crate::ops::dot_f16) with this table's kernel.
    #[inline]
    pub fn dot_f16(&self, k: &[f16], q: &[f32]) -> f32 {
        (self.ops.dot_f16)(k, q)
    }

    /// [`ops::axpy_f16`](crate::ops::axpy_f16) with this table's kernel.
    #[inline]
    pub fn axpy_f16(&self, alpha: f32, v: &[f16], y: &mut [f32]) {
        (self.ops.axpy_f16)(alpha, v, y);
    }

    /// [`ops::dot_f16_rows`](crate::ops::dot_f16_rows) with this table's kernel.
    #[inline]
    pub fn dot_f16_rows(&self, keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]) {
        (self.ops.dot_f16_rows)(keys, q, scale, out);
    }

    /// [`ops::axpy_f16_rows`](crate::ops::axpy_f16_rows) with this table's kernel.
    #[inline]
    pub fn axpy_f16_rows(&self, w: &[f32], values: &[f16], y: &mut [f32]) {
        (self.ops.axpy_f16_rows)(w, values, y);
    }

    /// [`ops::dot_f16_rows_heads`](crate::ops::dot_f16_rows_heads) with this table's
    /// kernel.
    #[inline]
    pub fn dot_f16_rows_heads(
        &self,
        keys: &[f16],
        qs: &[f32],
        hd: usize,
        scale: f32,
        out: &mut [f32],
        stride: usize,
    ) {
        (self.ops.dot_f16_rows_heads)(keys, qs, hd, scale, out, stride);
    }

    /// [`ops::axpy_f16_rows_heads`](crate::ops::axpy_f16_rows_heads) with this table's
    /// kernel.
    #[inline]
    pub fn axpy_f16_rows_heads(
        &self,
        w: &[f32],
        stride: usize,
        values: &[f16],
        hd: usize,
        ys: &mut [f32],
    ) {
        (self.ops.axpy_f16_rows_heads)(w, stride, values, hd, ys);
    }
}
