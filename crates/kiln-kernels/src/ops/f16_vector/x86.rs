//! F16C / AVX-512 forms of the f16 kernels; bit-identical to the scalar references.
//!
//! The `*_f16c` and `*_avx512` functions are the AVX2 and AVX-512 tables' entries (see
//! `dispatch/op_kernels.rs`): each op's argument check, then the kernels below it.

use std::arch::x86_64::*;

use half::f16;

use super::LANES;

/// The AVX2 and AVX-512 tables' [`dot_f16`](super::dot_f16).
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn dot_f16_f16c(k: &[f16], q: &[f32]) -> f32 {
    super::check_dot(k, q);
    // SAFETY: this function's features; `q` is as long as `k` (checked).
    unsafe { dot_f16(k, q) }
}

/// The AVX2 and AVX-512 tables' [`axpy_f16`](super::axpy_f16).
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn axpy_f16_f16c(alpha: f32, v: &[f16], y: &mut [f32]) {
    super::check_axpy(v, y);
    // SAFETY: this function's features; `y` is as long as `v` (checked).
    unsafe { axpy_f16(alpha, v, y) }
}

/// The AVX2 and AVX-512 tables' [`dot_f16_rows`](super::dot_f16_rows).
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn dot_f16_rows_f16c(keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]) {
    super::check_dot_rows(keys, q, out);
    // SAFETY: this function's features; `keys` holds `out.len()` rows (checked).
    unsafe { dot_f16_rows(keys, q, scale, out) }
}

/// The AVX2 table's [`axpy_f16_rows`](super::axpy_f16_rows): `y` kept in registers
/// across rows when the rows are whole 8-lane vectors, else one [`axpy_f16`] per row.
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn axpy_f16_rows_f16c(w: &[f32], values: &[f16], y: &mut [f32]) {
    let hd = super::check_axpy_rows(w, values, y);
    if hd.is_multiple_of(LANES) {
        // SAFETY: this function's features; `y` is one head of `hd`, a multiple of 8;
        // `values` holds `w.len()` whole rows (checked) and `w` one weight per row.
        unsafe { axpy_f16_rows_heads_256::<1>(w, w.len(), &values[..w.len() * hd], hd, y) }
    } else {
        // SAFETY: this function's features (no length precondition).
        unsafe { axpy_f16_rows(w, values, y) }
    }
}

/// The AVX-512 table's [`axpy_f16_rows`](super::axpy_f16_rows): 16 lanes wide when the
/// rows are whole vectors, else as [`axpy_f16_rows_f16c`].
///
/// # Safety
/// Needs AVX-512F, AVX, FMA and F16C: calling it from code that does not enable these features
/// is `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx512f,avx,fma,f16c")]
pub(crate) fn axpy_f16_rows_avx512(w: &[f32], values: &[f16], y: &mut [f32]) {
    let hd = super::check_axpy_rows(w, values, y);
    if hd.is_multiple_of(16) {
        // SAFETY: this function's features; `y.len()` (`hd`) is a multiple of 16.
        unsafe { axpy_f16_rows_512(w, values, y) }
    } else {
        // SAFETY: this function's features (no length precondition).
        unsafe { axpy_f16_rows(w, values, y) }
    }
}

/// `Σ k[i]·q[i]`, eight lanes as [`dot_f16_scalar`](super::dot_f16_scalar).
///
/// # Safety
/// The CPU must support AVX, FMA and F16C; `q` must be at least as long as `k`.
#[inline]
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
    let chunks = k.len() / LANES;
    let mut acc = _mm256_setzero_ps();
    for c in 0..chunks {
        // SAFETY: chunk `c` is in bounds of both slices (equal lengths).
        let (kv, qv) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(c * LANES).cast())),
                _mm256_loadu_ps(q.as_ptr().add(c * LANES)),
            )
        };
        acc = _mm256_fmadd_ps(qv, kv, acc);
    }
    let mut lanes = [0f32; LANES];
    // SAFETY: `lanes` is 8 writable f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let done = chunks * LANES;
    let tail: f32 = q[done..]
        .iter()
        .zip(&k[done..])
        .map(|(x, y)| x * y.to_f32())
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// Eight rows at a time, each row's eight lanes accumulated in its own register
/// exactly as [`dot_f16`] does (so the chains of eight rows overlap instead of
/// running one after another), then the 8×8 lanes transposed so that one vector add
/// per lane sums all eight rows' lanes in `dot_f16`'s order: bit-identical results.
/// Rows past the last whole tile, and rows not a multiple of eight wide, go through
/// `dot_f16` one by one.
///
/// # Safety
/// The CPU must support AVX, FMA and F16C; `keys` must hold at least `out.len()` rows of
/// `max(q.len(), 1)` elements.
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn dot_f16_rows(keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]) {
    let hd = q.len().max(1);
    let mut j = 0;
    if hd.is_multiple_of(LANES) {
        // What `dot_f16`'s `sum()` of lanes and of an empty tail start from.
        let zero = _mm256_set1_ps(std::iter::empty::<f32>().sum());
        let s = _mm256_set1_ps(scale);
        while j + LANES <= out.len() {
            // SAFETY: rows j..j + 8 are whole rows of `keys` (checked by the caller's
            // length check and the loop bound) and out[j..j + 8] is in bounds.
            unsafe {
                let mut acc = [_mm256_setzero_ps(); LANES];
                let base = keys.as_ptr().add(j * hd);
                for c in (0..hd).step_by(LANES) {
                    let qv = _mm256_loadu_ps(q.as_ptr().add(c));
                    for (r, a) in acc.iter_mut().enumerate() {
                        let kv = _mm256_cvtph_ps(_mm_loadu_si128(base.add(r * hd + c).cast()));
                        *a = _mm256_fmadd_ps(qv, kv, *a);
                    }
                }
                let sum = sum_lanes8(acc, zero);
                _mm256_storeu_ps(out.as_mut_ptr().add(j), _mm256_mul_ps(s, sum));
            }
            j += LANES;
        }
    }
    for (o, k) in out[j..].iter_mut().zip(keys[j * hd..].chunks_exact(hd)) {
        // SAFETY: same features as this function.
        *o = scale * unsafe { dot_f16(k, q) };
    }
}

/// Lane `r` of the result: the sum of input `r`'s eight lanes in `dot_f16`'s order
/// (`zero` is what its `sum()` of lanes and of an empty tail start from).
///
/// # Safety
/// The CPU must support AVX.
#[inline]
#[target_feature(enable = "avx")]
unsafe fn sum_lanes8(acc: [__m256; 8], zero: __m256) -> __m256 {
    // SAFETY: same features as this function.
    let t = unsafe { transpose8(acc) };
    let mut sum = _mm256_add_ps(zero, t[0]);
    for v in &t[1..] {
        sum = _mm256_add_ps(sum, *v);
    }
    _mm256_add_ps(sum, zero)
}

/// `out[l]` holds lane `l` of each of the eight inputs (input `r` in lane `r`).
///
/// # Safety
/// The CPU must support AVX.
#[inline]
#[target_feature(enable = "avx")]
pub(crate) unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// `y += w[j] · values[j]` per `y.len()`-wide row, one [`axpy_f16`] per row.
///
/// # Safety
/// The CPU must support AVX, FMA and F16C.
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn axpy_f16_rows(w: &[f32], values: &[f16], y: &mut [f32]) {
    for (&a, v) in w.iter().zip(values.chunks_exact(y.len().max(1))) {
        // SAFETY: same features as this function.
        unsafe { axpy_f16(a, v, y) };
    }
}

/// `y` stays in registers across rows, 64 columns at a time (re-loading it per row
/// would chain every row behind the previous row's store).
///
/// # Safety
/// The CPU must support AVX-512F, FMA and F16C; `y.len()` must be a multiple of 16.
#[target_feature(enable = "avx512f,fma,f16c")]
pub(super) unsafe fn axpy_f16_rows_512(w: &[f32], values: &[f16], y: &mut [f32]) {
    let hd = y.len();
    let mut c0 = 0;
    while c0 < hd {
        let width = (hd - c0).min(64) / 16;
        // SAFETY (whole loop): columns c0..c0 + 16·width are within every row and `y`
        // (hd is a multiple of 16).
        unsafe {
            let yp = y.as_mut_ptr().add(c0);
            let mut acc = [_mm512_setzero_ps(); 4];
            for (i, a) in acc.iter_mut().enumerate().take(width) {
                *a = _mm512_loadu_ps(yp.add(16 * i));
            }
            for (&a, v) in w.iter().zip(values.chunks_exact(hd)) {
                let a = _mm512_set1_ps(a);
                let vp = v.as_ptr().add(c0);
                for (i, acc) in acc.iter_mut().enumerate().take(width) {
                    let vv = _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(16 * i).cast()));
                    // Fused, like the scalar `mul_add`: bit-identical results.
                    *acc = _mm512_fmadd_ps(a, vv, *acc);
                }
            }
            for (i, a) in acc.iter().enumerate().take(width) {
                _mm512_storeu_ps(yp.add(16 * i), *a);
            }
        }
        c0 += 16 * width;
    }
}

/// [`axpy_f16_rows_heads`] on 256-bit vectors, the AVX2 table's form: head `h` adds
/// `w[h·stride + j] · values[j]` to `ys[h·hd..(h + 1)·hd]`, rows in order. The heads'
/// sums stay in registers across rows, 32 columns at a time (re-loading `y` per row
/// chains each row behind the previous row's store, which made the per-row form twice
/// the dot's time), and each value chunk is converted once for all `H` heads.
/// Bit-identical to one [`axpy_f16`] per head and row.
///
/// # Safety
/// AVX, FMA and F16C; `hd` a multiple of 8; `ys.len() == H·hd`; `values` whole rows; `w` holds
/// `(H - 1)·stride + rows` elements.
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn axpy_f16_rows_heads_256<const H: usize>(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
) {
    let mut c0 = 0;
    while c0 < hd {
        // SAFETY: columns c0.. within `hd` (a multiple of 8), forwarded contract.
        unsafe {
            c0 += match (hd - c0) / LANES {
                1 => axpy_columns::<H, 1>(w, stride, values, hd, ys, c0),
                2 => axpy_columns::<H, 2>(w, stride, values, hd, ys, c0),
                3 => axpy_columns::<H, 3>(w, stride, values, hd, ys, c0),
                _ => axpy_columns::<H, 4>(w, stride, values, hd, ys, c0),
            };
        }
    }
}

/// Columns `c0..c0 + 8·W` of [`axpy_f16_rows_heads_256`]; returns `8·W`. `H·W`
/// accumulators, `H` broadcast weights, a value chunk and a product take at most 14 of
/// AVX2's 16 registers for `H ≤ 2`.
///
/// # Safety
/// As [`axpy_f16_rows_heads_256`], and `c0 + 8·W ≤ hd`.
#[inline]
#[target_feature(enable = "avx,fma,f16c")]
unsafe fn axpy_columns<const H: usize, const W: usize>(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
    c0: usize,
) -> usize {
    let rows = values.len() / hd;
    // SAFETY (whole body): columns c0..c0 + 8·W lie within every row and every head's
    // `ys`; `w` holds each head's `rows` weights (the caller's contract).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); W]; H];
        for (h, acc) in acc.iter_mut().enumerate() {
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(ys.as_ptr().add(h * hd + c0 + LANES * i));
            }
        }
        for j in 0..rows {
            let vp = values.as_ptr().add(j * hd + c0);
            let a: [__m256; H] =
                std::array::from_fn(|h| _mm256_set1_ps(*w.as_ptr().add(h * stride + j)));
            for i in 0..W {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(LANES * i).cast()));
                for (acc, a) in acc.iter_mut().zip(a) {
                    // Fused, like the scalar `mul_add`.
                    acc[i] = _mm256_fmadd_ps(a, v, acc[i]);
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(ys.as_mut_ptr().add(h * hd + c0 + LANES * i), *a);
            }
        }
    }
    LANES * W
}

/// [`round_f16_scalar`](super::round_f16_scalar) eight at a time; also the AVX2 and
/// AVX-512 tables' entry.
///
/// # Safety
/// The CPU must support AVX and F16C.
#[target_feature(enable = "avx,f16c")]
pub(crate) unsafe fn round_f16_inplace(x: &mut [f32]) {
    let chunks = x.len() / LANES;
    for c in 0..chunks {
        // SAFETY: chunk `c` is in bounds.
        unsafe {
            let p = x.as_mut_ptr().add(c * LANES);
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p));
            _mm256_storeu_ps(p, _mm256_cvtph_ps(h));
        }
    }
    for v in &mut x[chunks * LANES..] {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `y[i] += alpha · v[i]`, as [`axpy_f16_scalar`](super::axpy_f16_scalar).
///
/// # Safety
/// The CPU must support AVX, FMA and F16C; `y` must be at least as long as `v`.
#[inline]
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn axpy_f16(alpha: f32, v: &[f16], y: &mut [f32]) {
    let chunks = v.len() / LANES;
    let a = _mm256_set1_ps(alpha);
    for c in 0..chunks {
        // SAFETY: chunk `c` is in bounds of both slices (equal lengths).
        unsafe {
            let vv = _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(c * LANES).cast()));
            let p = y.as_mut_ptr().add(c * LANES);
            _mm256_storeu_ps(p, _mm256_fmadd_ps(a, vv, _mm256_loadu_ps(p)));
        }
    }
    let done = chunks * LANES;
    for (o, v) in y[done..].iter_mut().zip(&v[done..]) {
        *o = alpha.mul_add(v.to_f32(), *o);
    }
}

/// [`dot_f16_rows`] for `H` query heads against the same keys on AVX2's 16 registers,
/// the AVX2 table's form: tiles of 4 rows, each key chunk converted once for all heads
/// into `4·H` accumulators (the multiplies read the queries from memory). Each row's lanes
/// are summed as `dot_f16_rows` sums them (its 8×8 transpose, of the tile's 4 rows for
/// two heads at once), so results are bit-identical. Head `h`'s scores go to
/// `out[h·stride + j]`. Handles whole 4-row tiles and returns how many rows it did.
///
/// # Safety
/// AVX, FMA and F16C; `hd` a multiple of 8; `qs.len() == H·hd`; `keys` whole rows; `out` holds
/// `(H - 1)·stride + rows` elements.
#[target_feature(enable = "avx,fma,f16c")]
pub(super) unsafe fn dot_f16_rows_heads_256<const H: usize>(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) -> usize {
    const TILE: usize = 4;
    let rows = keys.len() / hd;
    let zero = _mm256_set1_ps(std::iter::empty::<f32>().sum());
    let s = _mm256_set1_ps(scale);
    let mut j = 0;
    while j + TILE <= rows {
        // SAFETY: rows j..j + 4 are whole rows of `keys`, column chunks lie within `hd`,
        // and `out` holds each head's j..j + 4 (the caller's contract).
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); TILE]; H];
            let base = keys.as_ptr().add(j * hd);
            for c in (0..hd).step_by(LANES) {
                for r in 0..TILE {
                    let kv = _mm256_cvtph_ps(_mm_loadu_si128(base.add(r * hd + c).cast()));
                    for (h, acc) in acc.iter_mut().enumerate() {
                        let q = _mm256_loadu_ps(qs.as_ptr().add(h * hd + c));
                        acc[r] = _mm256_fmadd_ps(q, kv, acc[r]);
                    }
                }
            }
            // Two heads' tiles fill one transpose (the tile's rows of head `h` in the low
            // lanes, of `h + 1` in the high); a head left over fills it with itself.
            for h in (0..H).step_by(2) {
                let pair = (h + 1).min(H - 1);
                let ([a0, a1, a2, a3], [b0, b1, b2, b3]) = (acc[h], acc[pair]);
                let sum = _mm256_mul_ps(s, sum_lanes8([a0, a1, a2, a3, b0, b1, b2, b3], zero));
                _mm_storeu_ps(
                    out.as_mut_ptr().add(h * stride + j),
                    _mm256_castps256_ps128(sum),
                );
                if pair != h {
                    _mm_storeu_ps(
                        out.as_mut_ptr().add(pair * stride + j),
                        _mm256_extractf128_ps::<1>(sum),
                    );
                }
            }
        }
        j += TILE;
    }
    j
}

/// [`dot_f16_rows`] for `H` query heads (`qs`, `H × hd`) against the same keys: each key
/// chunk is converted once and multiplied into every head's accumulators, whose
/// arithmetic is `dot_f16_rows`'s (bit-identical). Head `h`'s scores go to
/// `out[h·stride + j]`. Handles whole 8-row tiles and returns how many rows it did.
/// 8·H accumulators stay in registers, which takes AVX-512VL's 32 vector registers.
///
/// # Safety
/// AVX-512F/VL, FMA and F16C; `hd` a multiple of 8; `qs.len() == H·hd`; `keys` whole rows;
/// `out` holds `(H - 1)·stride + rows` elements.
#[target_feature(enable = "avx512f,avx512vl,fma,f16c")]
pub(super) unsafe fn dot_f16_rows_heads<const H: usize>(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) -> usize {
    let rows = keys.len() / hd;
    let zero = _mm256_set1_ps(std::iter::empty::<f32>().sum());
    let s = _mm256_set1_ps(scale);
    let mut j = 0;
    while j + LANES <= rows {
        // SAFETY: rows j..j + 8 are whole rows of `keys`, column chunks lie within `hd`,
        // and `out` holds each head's j..j + 8 (the caller's contract).
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); LANES]; H];
            let base = keys.as_ptr().add(j * hd);
            for c in (0..hd).step_by(LANES) {
                let qv: [__m256; H] =
                    std::array::from_fn(|h| _mm256_loadu_ps(qs.as_ptr().add(h * hd + c)));
                for r in 0..LANES {
                    let kv = _mm256_cvtph_ps(_mm_loadu_si128(base.add(r * hd + c).cast()));
                    for (acc, q) in acc.iter_mut().zip(qv) {
                        acc[r] = _mm256_fmadd_ps(q, kv, acc[r]);
                    }
                }
            }
            for (h, a) in acc.into_iter().enumerate() {
                let sum = sum_lanes8(a, zero);
                _mm256_storeu_ps(out.as_mut_ptr().add(h * stride + j), _mm256_mul_ps(s, sum));
            }
        }
        j += LANES;
    }
    j
}

/// [`axpy_f16_rows_512`] for `H` heads sharing the value rows: head `h` adds
/// `w[h·stride + j] · values[j]` to `ys[h·hd..(h + 1)·hd]`, rows in order, each value
/// chunk converted once for all heads (bit-identical to one call per head).
///
/// # Safety
/// AVX-512F, FMA and F16C; `hd` a multiple of 16; `ys.len() == H·hd`; `values` whole rows;
/// `w` holds `(H - 1)·stride + rows` elements.
#[target_feature(enable = "avx512f,fma,f16c")]
pub(super) unsafe fn axpy_f16_rows_heads<const H: usize>(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
) {
    let rows = values.len() / hd;
    let mut c0 = 0;
    while c0 < hd {
        let width = (hd - c0).min(64) / 16;
        // SAFETY (whole loop): columns c0..c0 + 16·width lie within every row and every
        // head's `ys` (hd is a multiple of 16); `w` holds each head's `rows` weights.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; H];
            for (h, acc) in acc.iter_mut().enumerate() {
                for (i, a) in acc.iter_mut().enumerate().take(width) {
                    *a = _mm512_loadu_ps(ys.as_ptr().add(h * hd + c0 + 16 * i));
                }
            }
            for j in 0..rows {
                let vp = values.as_ptr().add(j * hd + c0);
                let mut vv = [_mm512_setzero_ps(); 4];
                for (i, v) in vv.iter_mut().enumerate().take(width) {
                    *v = _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(16 * i).cast()));
                }
                for (h, acc) in acc.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*w.as_ptr().add(h * stride + j));
                    for (a_i, v) in acc.iter_mut().zip(vv).take(width) {
                        // Fused, like the scalar `mul_add`.
                        *a_i = _mm512_fmadd_ps(a, v, *a_i);
                    }
                }
            }
            for (h, acc) in acc.iter().enumerate() {
                for (i, a) in acc.iter().enumerate().take(width) {
                    _mm512_storeu_ps(ys.as_mut_ptr().add(h * hd + c0 + 16 * i), *a);
                }
            }
        }
        c0 += 16 * width;
    }
}
