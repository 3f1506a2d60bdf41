//! f16/bf16 ↔ f32 row conversion (round to nearest even when narrowing).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::check_len;

/// Widens f16 values to f32 (exact).
pub fn f16_to_f32_row(src: &[f16], dst: &mut [f32]) {
    check_len("f16_to_f32_row", "dst", src.len(), dst.len());
    src.convert_to_f32_slice(dst);
}

/// Narrows f32 values to f16, rounding to nearest even.
pub fn f32_to_f16_row(src: &[f32], dst: &mut [f16]) {
    check_len("f32_to_f16_row", "dst", src.len(), dst.len());
    dst.convert_from_f32_slice(src);
}

/// Widens bf16 values to f32 (exact).
pub fn bf16_to_f32_row(src: &[bf16], dst: &mut [f32]) {
    check_len("bf16_to_f32_row", "dst", src.len(), dst.len());
    src.convert_to_f32_slice(dst);
}

/// Narrows f32 values to bf16, rounding to nearest even.
pub fn f32_to_bf16_row(src: &[f32], dst: &mut [bf16]) {
    check_len("f32_to_bf16_row", "dst", src.len(), dst.len());
    dst.convert_from_f32_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rounds_to_nearest_even() {
        let x = [1.0f32, -2.5, 65504.0, 1.0 + 1.0 / 2048.0];
        let mut h = [f16::ZERO; 4];
        f32_to_f16_row(&x, &mut h);
        let mut back = [0f32; 4];
        f16_to_f32_row(&h, &mut back);
        // 1 + 2^-11 is halfway between two f16 values: ties go to the even one (1.0).
        assert_eq!(back, [1.0, -2.5, 65504.0, 1.0]);

        let mut b = [bf16::ZERO; 4];
        f32_to_bf16_row(&x, &mut b);
        bf16_to_f32_row(&b, &mut back);
        assert_eq!(back[..2], [1.0, -2.5]);
        assert_eq!(back[2], 65536.0);
    }
}
