//! Random but valid weight rows and activations: random quants, finite f16 scales in the
//! range real checkpoints use (so no kernel meets a NaN or a subnormal it wouldn't see in
//! a model).

use kiln_kernels::half::{bf16, f16};
use kiln_kernels::WeightType;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Byte offsets of the f16 scale (and min) fields in one block of `ty`.
fn f16_fields(ty: WeightType) -> &'static [usize] {
    match ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => &[],
        WeightType::Q4_0 | WeightType::Q5_0 | WeightType::Q8_0 => &[0],
        WeightType::Q4_1 | WeightType::Q4_K | WeightType::Q5_K => &[0, 2],
        WeightType::Q6_K => &[208],
    }
}

/// `n_rows` rows of `cols` elements of `ty`, seeded; `None` if `cols` isn't a whole
/// number of blocks.
pub(crate) fn random_rows(
    ty: WeightType,
    n_rows: usize,
    cols: usize,
    seed: u64,
) -> Option<Vec<u8>> {
    let bytes = ty.row_bytes(cols)?.checked_mul(n_rows)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; bytes];
    match ty {
        WeightType::F32 => fill_floats(&mut out, 4, &mut rng, |x| x.to_le_bytes().to_vec()),
        WeightType::F16 => fill_floats(&mut out, 2, &mut rng, |x| {
            f16::from_f32(x).to_le_bytes().to_vec()
        }),
        WeightType::BF16 => fill_floats(&mut out, 2, &mut rng, |x| {
            bf16::from_f32(x).to_le_bytes().to_vec()
        }),
        _ => {
            rng.fill_bytes(&mut out);
            let fields = f16_fields(ty);
            for block in out.chunks_exact_mut(ty.block_bytes()) {
                for &off in fields {
                    let scale = f16::from_f32(scale(&mut rng)).to_le_bytes();
                    block[off..off + 2].copy_from_slice(&scale);
                }
            }
        }
    }
    Some(out)
}

/// `n` activations uniform in ±1.
pub(crate) fn random_activations(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| unit(&mut rng) * 2.0 - 1.0).collect()
}

/// A block scale: magnitude in [2⁻¹⁰, 2⁻⁵], either sign.
fn scale(rng: &mut ChaCha8Rng) -> f32 {
    let magnitude = 2f32.powf(-10.0 + 5.0 * unit(rng));
    if rng.next_u32() & 1 == 0 {
        magnitude
    } else {
        -magnitude
    }
}

/// Uniform in [0, 1) from the top 24 bits.
fn unit(rng: &mut ChaCha8Rng) -> f32 {
    (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32
}

fn fill_floats(out: &mut [u8], width: usize, rng: &mut ChaCha8Rng, enc: impl Fn(f32) -> Vec<u8>) {
    for v in out.chunks_exact_mut(width) {
        v.copy_from_slice(&enc(unit(rng) * 2.0 - 1.0));
    }
}

#[cfg(test)]
mod tests {
    use kiln_kernels::KernelTable;

    use super::*;

    #[test]
    fn rows_dequantize_to_finite_values() {
        let kt = KernelTable::best();
        for ty in WeightType::ALL {
            let cols = 512;
            let rows = random_rows(ty, 3, cols, 7).unwrap_or_default();
            let row_bytes = ty.row_bytes(cols).unwrap_or(0);
            assert_eq!(rows.len(), 3 * row_bytes, "{ty}");
            let mut out = vec![0f32; cols];
            for row in rows.chunks_exact(row_bytes) {
                (kt.weight(ty).dequantize_row)(row, &mut out);
                assert!(out.iter().all(|x| x.is_finite()), "{ty}");
                assert!(out.iter().any(|&x| x != 0.0), "{ty}");
            }
        }
        assert_eq!(random_rows(WeightType::Q4_K, 1, 576, 0), None);
        assert_eq!(
            random_rows(WeightType::Q8_0, 2, 64, 1),
            random_rows(WeightType::Q8_0, 2, 64, 1)
        );
    }
}
