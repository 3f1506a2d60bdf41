//! Shared helpers for reading ggml blocks and checking row sizes.
//!
//! Every kernel (scalar or SIMD) starts with one of the `check_*` calls. They run once per
//! row and panic with a clear message on a size mismatch: that can only be an internal
//! bug, because row sizes come from validated tensor shapes via `row_bytes`. After the
//! check, SIMD kernels may index without bounds checks.

use crate::types::{ActType, WeightType};

/// Exact f16 → f32 conversion of raw bits, branch-free so loops over it vectorize.
///
/// Shifting the exponent and mantissa into f32 position and multiplying by 2^112
/// rebiases the exponent (15 → 127) exactly, for subnormals too (they land on f32
/// subnormals that scale back to normals); only inf/NaN need their exponent forced.
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    const REBIAS: f32 = f32::from_bits((127 + 112) << 23); // 2^112
    let h = u32::from(h);
    let magnitude = f32::from_bits((h & 0x7fff) << 13) * REBIAS;
    let special = (h & 0x7c00) == 0x7c00;
    let bits = if special {
        0x7f80_0000 | ((h & 0x03ff) << 13)
    } else {
        magnitude.to_bits()
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// f32 → f16 bits, round to nearest even (as ggml's `GGML_FP32_TO_FP16`).
#[inline]
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The f16 stored little-endian at `b[off..off + 2]`, as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// The f32 stored little-endian at `b[off..off + 4]`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Scale and min of sub-block `j` (0..8) from the 12 packed 6-bit values of a
/// q4_K/q5_K super-block (ggml's `get_scale_min_k4`); the readable form, kept as the
/// test oracle for [`scales_mins_k4`].
#[cfg(test)]
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// All 8 scales and 8 mins of a q4_K/q5_K super-block, unpacked four at a time with
/// word masks (equivalent to [`scale_min_k4`] for j = 0..8).
#[inline(always)]
pub(crate) fn scales_mins_k4(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let u0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let u1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let u2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let sc_hi = (u2 & LOW4) | (((u0 >> 6) & TOP2) << 4);
    let mn_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4);
    let join = |lo: u32, hi: u32| (u64::from(hi) << 32 | u64::from(lo)).to_le_bytes();
    (join(u0 & LOW6, sc_hi), join(u1 & LOW6, mn_hi))
}

/// The `N` elements at `b[off..off + N]` as an array reference. Kernels index blocks
/// obtained from `as_chunks`, so the range is known at compile time and the check folds.
#[inline(always)]
pub(crate) fn sub<T, const N: usize>(b: &[T], off: usize) -> &[T; N] {
    match b[off..off + N].first_chunk::<N>() {
        Some(a) => a,
        None => unreachable!("a slice of length N has a first chunk of N"),
    }
}

/// [`sub`] for writing.
#[inline(always)]
pub(crate) fn sub_mut<T, const N: usize>(b: &mut [T], off: usize) -> &mut [T; N] {
    match b[off..off + N].first_chunk_mut::<N>() {
        Some(a) => a,
        None => unreachable!("a slice of length N has a first chunk of N"),
    }
}

/// Checks a `vec_dot` call; returns the number of weight blocks.
///
/// # Panics
/// If `n` is not a whole number of blocks or a slice is not exactly one row long.
#[inline]
pub(crate) fn check_dot(ty: WeightType, n: usize, w: &[u8], a: &[u8]) -> usize {
    let act = ty.act_type();
    match (ty.row_bytes(n), act.row_bytes(n)) {
        (Some(wb), Some(ab)) if wb == w.len() && ab == a.len() => n / ty.block_elems(),
        (wb, ab) => panic!(
            "vec_dot {ty}×{act}: n={n} needs {wb:?} weight and {ab:?} activation bytes, \
             got {} and {}",
            w.len(),
            a.len()
        ),
    }
}

/// Checks a weight `dequantize_row` call; returns the number of blocks.
///
/// # Panics
/// If `out.len()` is not a whole number of blocks or `w` is not exactly one row long.
#[inline]
pub(crate) fn check_dequant(ty: WeightType, w: &[u8], out: &[f32]) -> usize {
    match ty.row_bytes(out.len()) {
        Some(wb) if wb == w.len() => out.len() / ty.block_elems(),
        wb => panic!(
            "dequantize_row {ty}: {} outputs need {wb:?} bytes, got {}",
            out.len(),
            w.len()
        ),
    }
}

/// Checks an activation `quantize_row` (`x` → `out`) or `dequantize_row` (`out` → `x`)
/// call; returns the number of blocks.
///
/// # Panics
/// If `x.len()` is not a whole number of blocks or `bytes` is not exactly one row long.
#[inline]
pub(crate) fn check_act(ty: ActType, x: &[f32], bytes: &[u8]) -> usize {
    match ty.row_bytes(x.len()) {
        Some(b) if b == bytes.len() => x.len() / ty.block_elems(),
        b => panic!(
            "{ty} activation row: {} elements need {b:?} bytes, got {}",
            x.len(),
            bytes.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_half_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn word_unpacking_matches_bytewise_unpacking() {
        let mut s = [0u8; 12];
        for seed in 0u32..500 {
            for (i, b) in s.iter_mut().enumerate() {
                *b = (seed.wrapping_mul(2_654_435_761).rotate_left(i as u32 * 3) >> 7) as u8;
            }
            let (sc, mn) = scales_mins_k4(&s);
            for j in 0..8 {
                assert_eq!((sc[j], mn[j]), scale_min_k4(j, &s), "seed {seed} j {j}");
            }
        }
    }

    #[test]
    fn scale_min_k4_unpacks_high_bits() {
        // Sub-block 5: low nibble of byte 9 plus the top two bits of byte 1 (scale), high
        // nibble of byte 9 plus the top two bits of byte 5 (min).
        let mut s = [0u8; 12];
        s[9] = 0xa7;
        s[1] = 0b1100_0000;
        s[5] = 0b0100_0000;
        assert_eq!(scale_min_k4(5, &s), (0x37, 0x1a));
    }

    #[test]
    #[should_panic(expected = "vec_dot q4_0×q8_0")]
    fn check_dot_rejects_short_rows() {
        check_dot(WeightType::Q4_0, 64, &[0; 18], &[0; 68]);
    }
}
