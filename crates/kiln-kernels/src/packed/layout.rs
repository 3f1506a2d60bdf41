//! Repacking one row's ggml block into its lane of a packed block (see the module doc of
//! [`super`] for the layout). Runs once per weight at load, so it favours plainness: the
//! block is first decoded to its unsigned quants and metadata, then scattered.

use super::{PackedType, PACK_ROWS, SUB};
use crate::quant::block::{scales_mins_k4, sub};
use crate::types::QK_K;

/// One ggml block decoded: unsigned quants in element order (the first `block_elems`
/// used), and the per-block metadata bytes as stored.
struct Decoded {
    q: [u8; QK_K],
    /// `d` (f16 bytes; q8_0/q4_0/q5_0/q4_1 and the k-quants).
    d: [u8; 2],
    /// q4_1's `m` or the k-quants' `dmin` (f16 bytes).
    m: [u8; 2],
    /// q4_K/q5_K: 8 scales; q6_K: 16 signed scales (as bytes).
    scales: [u8; 16],
    /// q4_K/q5_K: 8 mins.
    mins: [u8; 8],
}

fn decode(ty: PackedType, x: &[u8]) -> Decoded {
    let mut o = Decoded {
        q: [0; QK_K],
        d: [0; 2],
        m: [0; 2],
        scales: [0; 16],
        mins: [0; 8],
    };
    let nibbles = |q: &mut [u8], qs: &[u8]| {
        // ggml's 32-element blocks: byte j holds element j (low) and j + 16 (high).
        for (j, &b) in qs.iter().enumerate() {
            q[j] = b & 0x0f;
            q[j + 16] = b >> 4;
        }
    };
    match ty {
        PackedType::Q4_0 => {
            o.d.copy_from_slice(&x[0..2]);
            nibbles(&mut o.q, &x[2..18]);
        }
        PackedType::Q4_1 => {
            o.d.copy_from_slice(&x[0..2]);
            o.m.copy_from_slice(&x[2..4]);
            nibbles(&mut o.q, &x[4..20]);
        }
        PackedType::Q5_0 => {
            o.d.copy_from_slice(&x[0..2]);
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            nibbles(&mut o.q, &x[6..22]);
            for (e, q) in o.q[..32].iter_mut().enumerate() {
                *q |= (((qh >> e) & 1) << 4) as u8;
            }
        }
        PackedType::Q8_0 => {
            o.d.copy_from_slice(&x[0..2]);
            for (q, &b) in o.q.iter_mut().zip(&x[2..34]) {
                *q = b ^ 0x80;
            }
        }
        PackedType::Q4_K | PackedType::Q5_K => {
            o.d.copy_from_slice(&x[0..2]);
            o.m.copy_from_slice(&x[2..4]);
            let (sc, mn) = scales_mins_k4(sub(x, 4));
            o.scales[..8].copy_from_slice(&sc);
            o.mins = mn;
            // 64-element chunks: byte l of chunk j holds element 64j + l (low nibble)
            // and 64j + 32 + l (high); q5_K's `qh[l]` bit 2j / 2j+1 is their bit 4.
            let (qs, qh) = if ty == PackedType::Q4_K {
                (&x[16..144], None)
            } else {
                (&x[48..176], Some(&x[16..48]))
            };
            for j in 0..QK_K / 64 {
                for l in 0..32 {
                    let b = qs[32 * j + l];
                    let (h0, h1) = qh.map_or((0, 0), |h| {
                        ((h[l] >> (2 * j)) & 1, (h[l] >> (2 * j + 1)) & 1)
                    });
                    o.q[64 * j + l] = (b & 0x0f) | (h0 << 4);
                    o.q[64 * j + 32 + l] = (b >> 4) | (h1 << 4);
                }
            }
        }
        PackedType::Q6_K => {
            o.d.copy_from_slice(&x[208..210]);
            o.scales.copy_from_slice(&x[192..208]);
            for h in 0..2 {
                let (ql, qh) = (&x[64 * h..64 * h + 64], &x[128 + 32 * h..128 + 32 * h + 32]);
                let y = &mut o.q[128 * h..128 * h + 128];
                for l in 0..32 {
                    y[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                    y[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                    y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
    }
    o
}

/// Writes row `i`'s source block `blk` into packed block `dst`.
pub(super) fn pack_block_row(ty: PackedType, blk: &[u8], i: usize, dst: &mut [u8]) {
    let x = decode(ty, blk);
    if ty == PackedType::Q8_0 {
        for g in 0..8 {
            dst[g * 64 + 4 * i..][..4].copy_from_slice(&x.q[4 * g..4 * g + 4]);
        }
    }
    for s in 0..ty.subs() {
        let q = &x.q[SUB * s..SUB * (s + 1)];
        for j in 0..4 {
            if ty != PackedType::Q8_0 {
                for p in 0..4 {
                    dst[256 * s + 64 * p + 4 * i + j] =
                        (q[4 * p + j] & 0x0f) | ((q[16 + 4 * p + j] & 0x0f) << 4);
                }
            }
            let high = ty.high_offset() + s * ty.high_bits() * 64 + 4 * i + j;
            match ty.high_bits() {
                1 => {
                    dst[high] = (0..8).fold(0, |acc, g| acc | (((q[4 * g + j] >> 4) & 1) << g));
                }
                2 => {
                    for h in 0..2 {
                        dst[high + 64 * h] = (0..4).fold(0, |acc, t| {
                            acc | (((q[4 * (4 * h + t) + j] >> 4) & 3) << (2 * t))
                        });
                    }
                }
                _ => {}
            }
        }
    }
    dst[ty.d_offset() + 2 * i..][..2].copy_from_slice(&x.d);
    let meta = ty.meta_offset();
    match ty {
        PackedType::Q4_1 => dst[ty.m_offset() + 2 * i..][..2].copy_from_slice(&x.m),
        PackedType::Q4_K | PackedType::Q5_K => {
            dst[ty.m_offset() + 2 * i..][..2].copy_from_slice(&x.m);
            for s in 0..8 {
                dst[meta + PACK_ROWS * s + i] = x.scales[s];
                dst[ty.mins_offset() + PACK_ROWS * s + i] = x.mins[s];
            }
        }
        PackedType::Q6_K => {
            for s in 0..8 {
                dst[meta + 2 * PACK_ROWS * s + 2 * i..][..2]
                    .copy_from_slice(&x.scales[2 * s..2 * s + 2]);
            }
        }
        _ => {}
    }
}
