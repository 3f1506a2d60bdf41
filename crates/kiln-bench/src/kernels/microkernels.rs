//! The micro-kernels that measure the machine's ceilings: tight loops on registers for
//! the int8 dot-product and f32 FMA rates, the k-quant tiles' per-token instruction mix,
//! and a streaming sum for memory bandwidth.
//!
//! Every loop carries each accumulator from one iteration to the next, so the compiler
//! can neither hoist the arithmetic out of the loop nor drop it, and runs enough
//! independent chains to cover the instruction's latency, so the rate is bounded by
//! throughput alone. The `#[target_feature]` functions are safe to define; the only
//! `unsafe` is calling them, which each call site does after checking the CPU.

use std::hint::black_box;

use kiln_kernels::Isa;
use serde::{Deserialize, Serialize};

/// Independent `vpmaddubsw` chains of the AVX2 int8 ceiling loop.
const MADDUBS_CHAINS: usize = 12;

/// Tokens of the k-quant mix loops: as many as keep their sums in registers beside the
/// eight weight vectors (AVX2 has 16 registers, AVX-512 32).
const MIX_TOKENS_AVX2: usize = 4;
const MIX_TOKENS_AVX512: usize = 8;

/// The instructions an int8 ceiling was measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Int8Isa {
    /// AVX-512 VNNI `vpdpbusd` on zmm: 64 multiply-adds per instruction.
    Avx512Vnni,
    /// AVX2 `vpmaddubsw` on ymm: 32 multiply-adds per instruction (an upper bound: a real
    /// kernel also spends a `vpmaddwd` and a `vpaddd` to widen and accumulate).
    Avx2,
    /// Portable Rust, one multiply-add per step.
    Scalar,
}

/// The instructions an f32 FMA ceiling was measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FmaIsa {
    /// AVX-512 `vfmadd` on zmm: 16 lanes.
    Avx512,
    /// AVX2 `vfmadd` on ymm: 8 lanes.
    Avx2,
    /// Portable Rust: separate multiply and add.
    Scalar,
}

impl Int8Isa {
    /// The int8 dot-product instructions of kernel table `isa`: the ceiling the kernels
    /// being measured can reach (AVX2's `vpmaddubsw` under `KILN_CPU=avx2` on an
    /// AVX-512 machine, not the VNNI it doesn't use). The table's ISA is supported, so
    /// its instructions are.
    pub fn of(isa: Isa) -> Self {
        match isa {
            Isa::Avx512 => Self::Avx512Vnni,
            Isa::Avx2 => Self::Avx2,
            Isa::Scalar => Self::Scalar,
        }
    }

    /// What the report calls the instruction.
    pub fn instruction(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512-vnni vpdpbusd zmm",
            Self::Avx2 => "avx2 vpmaddubsw ymm",
            Self::Scalar => "scalar i8 multiply-add",
        }
    }

    /// Multiply-adds one iteration of [`int8_loop`] performs.
    pub fn macs_per_iter(self) -> u64 {
        match self {
            Self::Avx512Vnni => 16 * 64,
            Self::Avx2 => MADDUBS_CHAINS as u64 * 32,
            Self::Scalar => 8,
        }
    }

    /// What the report calls [`kquant_mix_loop`]'s instructions: per 32-element
    /// sub-block, 8 rows (AVX2) or 16 (AVX-512) and one token.
    pub fn kquant_mix(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "8 vpdpbusd + vpmulld + vpaddd zmm, 8 broadcasts",
            Self::Avx2 => "8 vpmaddubsw + 7 vpaddw + vpmaddwd + vpaddd ymm, 8 broadcasts",
            Self::Scalar => "scalar i8 multiply-add",
        }
    }

    /// Multiply-adds one iteration of [`kquant_mix_loop`] performs.
    pub fn kquant_mix_macs_per_iter(self) -> u64 {
        match self {
            Self::Avx512Vnni => MIX_TOKENS_AVX512 as u64 * 8 * 64,
            Self::Avx2 => MIX_TOKENS_AVX2 as u64 * 8 * 32,
            Self::Scalar => 8,
        }
    }
}

impl FmaIsa {
    /// The FMA instructions of kernel table `isa` (see [`Int8Isa::of`]).
    pub fn of(isa: Isa) -> Self {
        match isa {
            Isa::Avx512 => Self::Avx512,
            Isa::Avx2 => Self::Avx2,
            Isa::Scalar => Self::Scalar,
        }
    }

    pub fn instruction(self) -> &'static str {
        match self {
            Self::Avx512 => "avx512 vfmadd zmm",
            Self::Avx2 => "avx2 vfmadd ymm",
            Self::Scalar => "scalar f32 multiply + add",
        }
    }

    /// Floating-point operations (a fused multiply-add counts 2) per [`fma_loop`] iteration.
    pub fn flops_per_iter(self) -> u64 {
        match self {
            Self::Avx512 => 16 * 16 * 2,
            Self::Avx2 => 12 * 8 * 2,
            Self::Scalar => 8 * 2,
        }
    }
}

/// Runs `iters` iterations of the int8 loop for `isa`; returns a checksum that keeps the
/// work observable. `isa` must be [`Int8Isa::of`] a supported kernel table's ISA (or
/// `Scalar`).
pub fn int8_loop(isa: Int8Isa, iters: u64) -> i64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Int8Isa::of` gives `Avx512Vnni` only for the AVX-512 table, which needs
        // AVX-512 F and VNNI, the features `vnni_loop` enables.
        Int8Isa::Avx512Vnni => unsafe { x86::vnni_loop(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Int8Isa::of` gives `Avx2` only for the AVX2 table, which needs AVX2.
        Int8Isa::Avx2 => unsafe { x86::maddubs_loop(iters) },
        _ => scalar_int8_loop(iters),
    }
}

/// Runs `iters` iterations of the k-quant tiles' inner loop for `isa` on registers and
/// L1: per token and sub-block, eight broadcast activation words against eight weight
/// vectors, the products summed and scaled as the packed k-quant kernels do. Its rate
/// bounds theirs more tightly than [`int8_loop`]'s: on Zen 4 AVX2's `vpaddw` shares the
/// multiply ports, so the mix runs at about 70% of `vpmaddubsw` alone. Returns a
/// checksum; `isa` as for [`int8_loop`].
pub fn kquant_mix_loop(isa: Int8Isa, iters: u64) -> i64 {
    let acts: [i32; 64] = std::array::from_fn(|i| 0x0102_0304 * (i as i32 + 1));
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8_loop`; AVX-512 BW comes with the AVX-512 table.
        Int8Isa::Avx512Vnni => unsafe { x86::vnni_mix_loop(iters, &acts) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8_loop`.
        Int8Isa::Avx2 => unsafe { x86::maddubs_mix_loop(iters, &acts) },
        _ => scalar_int8_loop(iters),
    }
}

/// Runs `iters` iterations of the FMA loop for `isa`; returns a checksum. `isa` must
/// be [`FmaIsa::of`] a supported kernel table's ISA (or `Scalar`).
pub fn fma_loop(isa: FmaIsa, iters: u64) -> f64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `FmaIsa::of` gives `Avx512` only for the AVX-512 table, which needs
        // AVX-512 F.
        FmaIsa::Avx512 => unsafe { x86::fma512_loop(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `FmaIsa::of` gives `Avx2` only for the AVX2 table, which needs AVX2 and
        // FMA.
        FmaIsa::Avx2 => unsafe { x86::fma256_loop(iters) },
        _ => scalar_fma_loop(iters),
    }
}

/// The wrapping sum of `words`: every byte read once, in order (the bandwidth probe).
pub fn stream_sum(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F (checked just above).
            return unsafe { x86::sum512(words) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { x86::sum256(words) };
        }
    }
    sum_words(words)
}

/// The portable sum: eight independent lanes over fixed-size chunks.
fn sum_words(words: &[u64]) -> u64 {
    let (chunks, rest) = words.as_chunks::<8>();
    let mut lanes = [0u64; 8];
    for chunk in chunks {
        for (l, &w) in lanes.iter_mut().zip(chunk) {
            *l = l.wrapping_add(w);
        }
    }
    lanes
        .iter()
        .chain(rest)
        .fold(0u64, |a, &b| a.wrapping_add(b))
}

fn scalar_int8_loop(iters: u64) -> i64 {
    let w = i32::from(black_box(3i8));
    let mut acc: [i32; 8] = black_box([1, 2, 3, 4, 5, 6, 7, 8]);
    for _ in 0..iters {
        for a in &mut acc {
            // The activation byte is taken from the accumulator itself, so the product
            // can't be hoisted out of the loop.
            *a = a.wrapping_add(i32::from(*a as i8) * w);
        }
    }
    acc.iter().map(|&a| i64::from(a)).sum()
}

fn scalar_fma_loop(iters: u64) -> f64 {
    let (m, c) = black_box((0.999_9f32, 1e-4f32));
    let mut acc: [f32; 8] = black_box([1.0; 8]);
    for _ in 0..iters {
        for a in &mut acc {
            *a = *a * m + c;
        }
    }
    acc.iter().map(|&a| f64::from(a)).sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// 16 chains of `vpdpbusd` (latency ~4–5 cycles, up to 2 per cycle on current
    /// cores: 16 chains keep both ports busy with room to spare).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) fn vnni_loop(iters: u64) -> i64 {
        let a = _mm512_set1_epi32(black_box(0x0102_0304));
        let b = _mm512_set1_epi32(black_box(0x0105_0709));
        let mut acc = [_mm512_set1_epi32(black_box(1)); 16];
        for _ in 0..iters {
            for r in &mut acc {
                *r = _mm512_dpbusd_epi32(*r, a, b);
            }
        }
        let total = acc
            .iter()
            .fold(_mm512_setzero_si512(), |s, &r| _mm512_add_epi32(s, r));
        i64::from(_mm512_reduce_add_epi32(total))
    }

    /// [`MADDUBS_CHAINS`](super::MADDUBS_CHAINS) chains of `vpmaddubsw`, each result fed
    /// back as the next unsigned operand (2 per cycle on Zen 4: 12 keep both ports
    /// busy). Not 16: with the multiplier that needs 17 of AVX2's 16 registers, and the
    /// spills and register moves measured 40% less (273 against 457 GOPS a thread on
    /// Zen 4, where `vpdpbusd` on zmm measures 459).
    #[target_feature(enable = "avx2")]
    pub(super) fn maddubs_loop(iters: u64) -> i64 {
        let w = _mm256_set1_epi8(black_box(1));
        let mut acc = [_mm256_set1_epi16(black_box(0x0101)); super::MADDUBS_CHAINS];
        for _ in 0..iters {
            for r in &mut acc {
                *r = _mm256_maddubs_epi16(*r, w);
            }
        }
        let total = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, &r| _mm256_add_epi16(s, r));
        i64::from(_mm256_extract_epi16::<0>(total))
    }

    /// The AVX2 k-quant token loop: [`MIX_TOKENS_AVX2`](super::MIX_TOKENS_AVX2) tokens'
    /// sub-block sums, each 8 `vpmaddubsw` of a broadcast word, summed by `vpaddw`,
    /// widened and scaled by `vpmaddwd` and added into the token's int32 sums.
    ///
    /// Written in assembly because this is a ceiling: the weights, scale and sums take 13
    /// of the 16 registers, and compiled from intrinsics the loop spilled some of them,
    /// adding loads and stores the mix doesn't have.
    #[target_feature(enable = "avx2")]
    pub(super) fn maddubs_mix_loop(iters: u64, acts: &[i32; 64]) -> i64 {
        /// Word `k` (a byte offset) of the token at `[{a} + off]` times weight vector `w`,
        /// added into the token's int16 sums (`ymm13`).
        macro_rules! word {
            ($off:literal, $k:literal, $w:literal) => {
                concat!(
                    "vpbroadcastd ymm14, dword ptr [{a} + ",
                    $off,
                    " + ",
                    $k,
                    "]\n",
                    "vpmaddubsw ymm15, ",
                    $w,
                    ", ymm14\n",
                    "vpaddw ymm13, ymm13, ymm15\n",
                )
            };
        }
        /// One token: its 8 activation words at `[{a} + off]`, the sum into `acc`.
        macro_rules! token {
            ($off:literal, $acc:literal) => {
                concat!(
                    "vpbroadcastd ymm14, dword ptr [{a} + ",
                    $off,
                    "]\n",
                    "vpmaddubsw ymm13, ymm0, ymm14\n",
                    word!($off, 4, "ymm1"),
                    word!($off, 8, "ymm2"),
                    word!($off, 12, "ymm3"),
                    word!($off, 16, "ymm4"),
                    word!($off, 20, "ymm5"),
                    word!($off, 24, "ymm6"),
                    word!($off, 28, "ymm7"),
                    "vpmaddwd ymm13, ymm13, ymm12\n",
                    "vpaddd ",
                    $acc,
                    ", ",
                    $acc,
                    ", ymm13\n",
                )
            };
        }
        let w: [__m256i; 8] = std::array::from_fn(|k| _mm256_set1_epi8(black_box(k as i8 + 1)));
        let scale = _mm256_set1_epi32(black_box(0x0003_0003));
        let mut sums = [_mm256_setzero_si256(); 4];
        if iters > 0 {
            // SAFETY: the loop reads the 4·8 words at `acts` (of 64) and writes only the
            // named registers; AVX2 is enabled on this function.
            unsafe {
                std::arch::asm!(
                    "2:",
                    token!(0, "ymm8"),
                    token!(32, "ymm9"),
                    token!(64, "ymm10"),
                    token!(96, "ymm11"),
                    "dec {n}",
                    "jnz 2b",
                    a = in(reg) acts.as_ptr(),
                    n = inout(reg) iters => _,
                    in("ymm0") w[0], in("ymm1") w[1], in("ymm2") w[2], in("ymm3") w[3],
                    in("ymm4") w[4], in("ymm5") w[5], in("ymm6") w[6], in("ymm7") w[7],
                    inout("ymm8") sums[0], inout("ymm9") sums[1],
                    inout("ymm10") sums[2], inout("ymm11") sums[3],
                    in("ymm12") scale,
                    out("ymm13") _, out("ymm14") _, out("ymm15") _,
                    options(nostack, readonly),
                );
            }
        }
        let total = sums
            .iter()
            .fold(_mm256_setzero_si256(), |s, &r| _mm256_add_epi32(s, r));
        i64::from(_mm256_extract_epi32::<0>(total))
    }

    /// The AVX-512 k-quant token loop: [`MIX_TOKENS_AVX512`](super::MIX_TOKENS_AVX512)
    /// tokens' sub-block sums, each 8 `vpdpbusd` of a broadcast word, scaled by `vpmulld`
    /// and added into the token's int32 sums (as [`maddubs_mix_loop`]).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) fn vnni_mix_loop(iters: u64, acts: &[i32; 64]) -> i64 {
        const T: usize = super::MIX_TOKENS_AVX512;
        let w: [__m512i; 8] = std::array::from_fn(|k| _mm512_set1_epi8(black_box(k as i8 + 1)));
        let scale = _mm512_set1_epi32(black_box(3));
        let mut sums = [_mm512_setzero_si512(); T];
        for _ in 0..iters {
            // Through `black_box`, so the loads can't be hoisted out of the loop.
            let a = black_box(acts.as_ptr());
            let mut dots = [_mm512_setzero_si512(); T];
            for (k, &wk) in w.iter().enumerate() {
                for (t, dot) in dots.iter_mut().enumerate() {
                    // SAFETY: 8·7 + 7 = 63 < 64 words of `acts`.
                    let word = _mm512_set1_epi32(unsafe { a.add(8 * t + k).read() });
                    *dot = _mm512_dpbusd_epi32(*dot, wk, word);
                }
            }
            for (sum, dot) in sums.iter_mut().zip(dots) {
                *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(dot, scale));
            }
        }
        let total = sums
            .iter()
            .fold(_mm512_setzero_si512(), |s, &r| _mm512_add_epi32(s, r));
        i64::from(_mm512_reduce_add_epi32(total))
    }

    /// 16 chains of `acc = acc·m + c` (latency 4, 2 per cycle: 8 would do; 16 leave
    /// headroom). `m < 1` keeps every value finite and normal.
    #[target_feature(enable = "avx512f")]
    pub(super) fn fma512_loop(iters: u64) -> f64 {
        let m = _mm512_set1_ps(black_box(0.999_9));
        let c = _mm512_set1_ps(black_box(1e-4));
        let mut acc = [_mm512_set1_ps(black_box(1.0)); 16];
        for _ in 0..iters {
            for r in &mut acc {
                *r = _mm512_fmadd_ps(*r, m, c);
            }
        }
        let total = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, &r| _mm512_add_ps(s, r));
        f64::from(_mm512_reduce_add_ps(total))
    }

    /// 12 chains of ymm FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn fma256_loop(iters: u64) -> f64 {
        let m = _mm256_set1_ps(black_box(0.999_9));
        let c = _mm256_set1_ps(black_box(1e-4));
        let mut acc = [_mm256_set1_ps(black_box(1.0)); 12];
        for _ in 0..iters {
            for r in &mut acc {
                *r = _mm256_fmadd_ps(*r, m, c);
            }
        }
        let mut lanes = [0f32; 8];
        let total = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &r| _mm256_add_ps(s, r));
        // SAFETY: `lanes` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
        lanes.iter().map(|&x| f64::from(x)).sum()
    }

    /// Four 64-byte loads per iteration into four accumulators (explicit: left to
    /// itself, the compiler vectorizes the portable loop across chunks with gathers).
    #[target_feature(enable = "avx512f")]
    pub(super) fn sum512(words: &[u64]) -> u64 {
        let (blocks, rest) = words.as_chunks::<32>();
        let mut acc = [_mm512_setzero_si512(); 4];
        for block in blocks {
            for (a, part) in acc.iter_mut().zip(block.as_chunks::<8>().0) {
                // SAFETY: `part` is 8 readable u64 (64 bytes); `loadu` needs no alignment.
                let v = unsafe { _mm512_loadu_si512(part.as_ptr().cast()) };
                *a = _mm512_add_epi64(*a, v);
            }
        }
        let total = acc
            .iter()
            .fold(_mm512_setzero_si512(), |s, &a| _mm512_add_epi64(s, a));
        (_mm512_reduce_add_epi64(total) as u64).wrapping_add(super::sum_words(rest))
    }

    /// [`sum512`] with 32-byte loads.
    #[target_feature(enable = "avx2")]
    pub(super) fn sum256(words: &[u64]) -> u64 {
        let (blocks, rest) = words.as_chunks::<16>();
        let mut acc = [_mm256_setzero_si256(); 4];
        for block in blocks {
            for (a, part) in acc.iter_mut().zip(block.as_chunks::<4>().0) {
                // SAFETY: `part` is 4 readable u64 (32 bytes); `loadu` needs no alignment.
                let v = unsafe { _mm256_loadu_si256(part.as_ptr().cast()) };
                *a = _mm256_add_epi64(*a, v);
            }
        }
        let total = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, &a| _mm256_add_epi64(s, a));
        let mut lanes = [0u64; 4];
        // SAFETY: `lanes` is 32 writable bytes; `storeu` needs no alignment.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total) };
        lanes
            .iter()
            .fold(super::sum_words(rest), |s, &l| s.wrapping_add(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_sum_wraps_every_word() {
        // 1003 words: whole 32-word blocks plus a tail, every path.
        let words: Vec<u64> = (0..1003).map(|i| u64::MAX - i * 7).collect();
        let expected = words.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        assert_eq!(stream_sum(&words), expected);
        assert_eq!(sum_words(&words), expected);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            assert_eq!(unsafe { x86::sum256(&words) }, expected);
        }
        assert_eq!(stream_sum(&[]), 0);
    }

    #[test]
    fn loops_run_on_every_detected_isa() {
        // Same iteration count, same work: the checksums depend on the inputs only.
        let table = kiln_kernels::KernelTable::best().isa();
        let i8_isa = Int8Isa::of(table);
        assert_eq!(int8_loop(i8_isa, 3), int8_loop(i8_isa, 3));
        assert_eq!(kquant_mix_loop(i8_isa, 5), kquant_mix_loop(i8_isa, 5));
        assert!(fma_loop(FmaIsa::of(table), 100).is_finite());
        assert!(fma_loop(FmaIsa::Scalar, 100).is_finite());
        assert_ne!(int8_loop(Int8Isa::Scalar, 1), int8_loop(Int8Isa::Scalar, 0));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked just above): the fallbacks run too.
            let (a, b) = unsafe { (x86::maddubs_loop(3), x86::fma256_loop(100)) };
            assert_eq!(a, unsafe { x86::maddubs_loop(3) });
            let acts = [0x0102_0304; 64];
            // SAFETY: as above.
            let m = unsafe { x86::maddubs_mix_loop(2, &acts) };
            // A token's sub-block: bytes 4, 3, 2, 1 against weights k + 1 for k < 8 sum to
            // 10·36 per row, times the scale 3; 4 tokens, 2 iterations.
            assert_eq!(m, 2 * 4 * 10 * 36 * 3);
            assert!(b.is_finite());
        }
    }
}
