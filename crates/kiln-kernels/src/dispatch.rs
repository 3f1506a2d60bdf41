//! Runtime instruction-set selection and the per-ISA kernel tables.
//!
//! Each [`KernelTable`] is a `static` of plain function pointers. The SIMD tables call
//! `#[target_feature]` kernels through small closures; that is sound because
//! [`KernelTable::for_isa`] hands out a table only after checking the CPU supports its
//! instruction set, and the tables are reachable no other way.
//!
//! This is the crate's only CPU-feature check: the `ops` primitives with SIMD variants
//! (`exp_inplace`, the f16 attention kernels) are table entries too ([`OpKernels`],
//! wired in `op_kernels.rs`), and the public `ops` functions call [`KernelTable::best`]'s.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::packed::{self, PackedGemmFn, PackedType};
use crate::quant::{bf16, fp16, fp32, q4_0, q4_1, q4_k, q5_0, q5_k, q6_k, q8_0, q8_1, q8_k};
use crate::types::{ActType, WeightType};

mod op_kernels;

pub use op_kernels::OpKernels;

/// `vec_dot(n, w, a)`: dot product of a weight row of `n` elements (`w`, exactly
/// `WeightType::row_bytes(n)` bytes) with an activation row (`a`, exactly
/// `ActType::row_bytes(n)` bytes of the weight's activation type).
///
/// Sizes are checked once per call; a mismatch panics with the type and sizes (an
/// internal bug: sizes come from validated tensor shapes). Quantized activations must
/// come from this crate's quantizers.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// `dequantize_row(bytes, out)`: expands one row to f32; `bytes` must be exactly
/// `row_bytes(out.len())` long (checked, panics on mismatch).
pub type DequantizeFn = fn(bytes: &[u8], out: &mut [f32]);

/// `quantize_row(x, out)`: converts f32 activations; `out` must be exactly
/// `ActType::row_bytes(x.len())` long (checked, panics on mismatch).
pub type QuantizeFn = fn(x: &[f32], out: &mut [u8]);

/// An instruction set Kiln has kernels for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, the reference.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F + BW + VL + DQ + VNNI (plus everything `Avx2` needs).
    Avx512,
}

impl Isa {
    /// Every instruction set, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The name used by [`Isa::from_name`].
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses `scalar`, `avx2` or `avx512` (e.g. from a `KILN_CPU` override).
    pub fn from_name(name: &str) -> Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == name)
            .ok_or_else(|| Error::UnknownIsa {
                name: name.to_owned(),
            })
    }

    /// Whether this CPU can run the instruction set.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// The fastest supported instruction set (detected once, then cached).
    pub fn detect() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            Isa::ALL
                .into_iter()
                .rev()
                .find(|isa| isa.is_supported())
                .unwrap_or(Isa::Scalar)
        })
    }

    /// Makes [`KernelTable::best`] hand out `isa`'s table from now on instead of the
    /// detected one: a front end's choice (`KILN_CPU` in the `kiln` binary), to run and
    /// benchmark a slower instruction set's kernels, such as AVX2 on an AVX-512 machine.
    /// Call it before loading anything; an error if the CPU lacks `isa` or another one
    /// was forced already.
    pub fn force(isa: Isa) -> Result<()> {
        if !isa.is_supported() {
            return Err(Error::IsaUnsupported { isa });
        }
        match FORCED.set(isa) {
            Ok(()) => {
                // A `best()` before this resolved the detected table: replace it.
                let table = KernelTable::for_isa(isa)?;
                BEST.store(ptr::from_ref(table).cast_mut(), Ordering::Release);
                Ok(())
            }
            Err(_) if FORCED.get() == Some(&isa) => Ok(()),
            Err(_) => Err(Error::IsaAlreadyForced { isa }),
        }
    }

    /// Every instruction set this CPU supports, slowest first (for tests and tools).
    pub fn available() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|isa| isa.is_supported())
            .collect()
    }
}

/// The instruction set [`Isa::force`] chose, if any.
static FORCED: OnceLock<Isa> = OnceLock::new();

/// [`KernelTable::best`]'s answer once resolved, else null: always null or a pointer to
/// one of the `static` tables (made from a `&'static`, never written through), so the
/// hot path is one load.
static BEST: AtomicPtr<KernelTable> = AtomicPtr::new(ptr::null_mut());

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kernels for one weight type.
#[derive(Clone, Copy)]
pub struct TypeKernels {
    /// The activation type `vec_dot` expects.
    pub act: ActType,
    pub vec_dot: VecDotFn,
    pub dequantize_row: DequantizeFn,
}

/// The kernels for one activation type.
#[derive(Clone, Copy)]
pub struct ActKernels {
    pub quantize_row: QuantizeFn,
    /// The inverse of `quantize_row` up to quantization error (for tests and debugging).
    pub dequantize_row: DequantizeFn,
}

/// Function pointers for every weight and activation type, for one [`Isa`].
pub struct KernelTable {
    isa: Isa,
    weights: [TypeKernels; WeightType::ALL.len()],
    acts: [ActKernels; ActType::ALL.len()],
    /// Packed batched kernels, in [`PackedType::ALL`] order, where this ISA has one.
    packed: [Option<PackedGemmFn>; PackedType::ALL.len()],
    /// The `ops` primitives that have SIMD variants.
    ops: OpKernels,
}

impl KernelTable {
    /// The table for `isa`, or an error if this CPU does not support it.
    pub fn for_isa(isa: Isa) -> Result<&'static KernelTable> {
        if !isa.is_supported() {
            return Err(Error::IsaUnsupported { isa });
        }
        Ok(match isa {
            Isa::Scalar => &SCALAR,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => &x86::AVX2,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => &x86::AVX512,
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => return Err(Error::IsaUnsupported { isa }),
        })
    }

    /// The table for the fastest instruction set this CPU supports, or for the one
    /// [`Isa::force`] chose. Resolved once: after the first call this is one atomic load
    /// (every public `ops` kernel with SIMD variants goes through it, per call).
    #[inline]
    pub fn best() -> &'static KernelTable {
        let table = BEST.load(Ordering::Acquire);
        if table.is_null() {
            return KernelTable::resolve_best();
        }
        // SAFETY: `BEST` holds null or a pointer made from a `&'static KernelTable`.
        unsafe { &*table }
    }

    /// The first [`KernelTable::best`]: resolves the table and caches it (keeping one
    /// that [`Isa::force`] stored meanwhile).
    #[cold]
    fn resolve_best() -> &'static KernelTable {
        let isa = FORCED.get().copied().unwrap_or_else(Isa::detect);
        let table = KernelTable::for_isa(isa).unwrap_or(&SCALAR);
        let new = ptr::from_ref(table).cast_mut();
        match BEST.compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => table,
            // SAFETY: `BEST` holds null or a pointer made from a `&'static KernelTable`,
            // and it is not null here.
            Err(current) => unsafe { &*current },
        }
    }

    /// The instruction set these kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Kernels for weights of type `ty`.
    pub fn weight(&self, ty: WeightType) -> &TypeKernels {
        &self.weights[ty.index()]
    }

    /// Kernels for activations of type `act`.
    pub fn activation(&self, act: ActType) -> &ActKernels {
        &self.acts[act.index()]
    }

    /// The quantizer for activation type `act`.
    pub fn quantize(&self, act: ActType) -> QuantizeFn {
        self.acts[act.index()].quantize_row
    }

    /// The packed batched kernel for `ty`, if this ISA has one that beats `vec_dot`
    /// (AVX2 and AVX-512 VNNI; the scalar reference is [`packed::reference`]).
    pub fn packed_gemm(&self, ty: PackedType) -> Option<PackedGemmFn> {
        self.packed[ty as usize]
    }

    /// Most tokens a call of this table's packed kernels runs as one tile, so callers
    /// split larger batches evenly into tiles of at most this many (every kernel takes up
    /// to [`packed::TILE_TOKENS`]).
    pub fn packed_tile_tokens(&self) -> usize {
        match self.isa() {
            Isa::Avx512 => packed::AVX512_REGISTER_TILE,
            _ => packed::TILE_TOKENS,
        }
    }
}

/// The scalar reference of the packed kernel for `ty` (tests compare every ISA with it).
pub(crate) fn packed_reference(ty: PackedType) -> PackedGemmFn {
    match ty {
        PackedType::Q4_0 => packed::scalar::gemm_q4_0,
        PackedType::Q4_1 => packed::scalar::gemm_q4_1,
        PackedType::Q5_0 => packed::scalar::gemm_q5_0,
        PackedType::Q8_0 => packed::scalar::gemm_q8_0,
        PackedType::Q4_K => packed::scalar::gemm_q4_k,
        PackedType::Q5_K => packed::scalar::gemm_q5_k,
        PackedType::Q6_K => packed::scalar::gemm_q6_k,
    }
}

impl fmt::Debug for KernelTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelTable")
            .field("isa", &self.isa)
            .finish_non_exhaustive()
    }
}

const fn weight(ty: WeightType, vec_dot: VecDotFn, dequantize_row: DequantizeFn) -> TypeKernels {
    TypeKernels {
        act: ty.act_type(),
        vec_dot,
        dequantize_row,
    }
}

/// Activation kernels; dequantization is never hot, so every table uses the scalar one.
const fn act(quantize_row: QuantizeFn, dequantize_row: DequantizeFn) -> ActKernels {
    ActKernels {
        quantize_row,
        dequantize_row,
    }
}

/// Scalar activation dequantizers, in [`ActType::ALL`] order.
const ACT_DEQUANT: [DequantizeFn; 4] = [
    fp32::scalar::dequantize_act_f32,
    q8_0::scalar::dequantize_act_q8_0,
    q8_1::scalar::dequantize_act_q8_1,
    q8_k::scalar::dequantize_act_q8_k,
];

/// Scalar weight dequantizers, in [`WeightType::ALL`] order (no SIMD twin yet: they run
/// once per token for embedding lookups, never in the matmul loop).
const DEQUANT: [DequantizeFn; 10] = [
    fp32::scalar::dequantize_row_f32,
    fp16::scalar::dequantize_row_f16,
    bf16::scalar::dequantize_row_bf16,
    q4_0::scalar::dequantize_row_q4_0,
    q4_1::scalar::dequantize_row_q4_1,
    q5_0::scalar::dequantize_row_q5_0,
    q8_0::scalar::dequantize_row_q8_0,
    q4_k::scalar::dequantize_row_q4_k,
    q5_k::scalar::dequantize_row_q5_k,
    q6_k::scalar::dequantize_row_q6_k,
];

/// Builds a table from per-type `vec_dot`s and per-activation quantizers, both in table
/// order.
const fn table(
    isa: Isa,
    dots: [VecDotFn; 10],
    quants: [QuantizeFn; 4],
    packed: [Option<PackedGemmFn>; PackedType::ALL.len()],
    ops: OpKernels,
) -> KernelTable {
    let t = WeightType::ALL;
    KernelTable {
        isa,
        weights: [
            weight(t[0], dots[0], DEQUANT[0]),
            weight(t[1], dots[1], DEQUANT[1]),
            weight(t[2], dots[2], DEQUANT[2]),
            weight(t[3], dots[3], DEQUANT[3]),
            weight(t[4], dots[4], DEQUANT[4]),
            weight(t[5], dots[5], DEQUANT[5]),
            weight(t[6], dots[6], DEQUANT[6]),
            weight(t[7], dots[7], DEQUANT[7]),
            weight(t[8], dots[8], DEQUANT[8]),
            weight(t[9], dots[9], DEQUANT[9]),
        ],
        acts: [
            act(quants[0], ACT_DEQUANT[0]),
            act(quants[1], ACT_DEQUANT[1]),
            act(quants[2], ACT_DEQUANT[2]),
            act(quants[3], ACT_DEQUANT[3]),
        ],
        packed,
        ops,
    }
}

static SCALAR: KernelTable = table(
    Isa::Scalar,
    [
        fp32::scalar::vec_dot_f32_f32,
        fp16::scalar::vec_dot_f16_f32,
        bf16::scalar::vec_dot_bf16_f32,
        q4_0::scalar::vec_dot_q4_0_q8_0,
        q4_1::scalar::vec_dot_q4_1_q8_1,
        q5_0::scalar::vec_dot_q5_0_q8_0,
        q8_0::scalar::vec_dot_q8_0_q8_0,
        q4_k::scalar::vec_dot_q4_k_q8_k,
        q5_k::scalar::vec_dot_q5_k_q8_k,
        q6_k::scalar::vec_dot_q6_k_q8_k,
    ],
    SCALAR_QUANT,
    [None; PackedType::ALL.len()],
    op_kernels::SCALAR,
);

const SCALAR_QUANT: [QuantizeFn; 4] = [
    fp32::scalar::quantize_row_f32,
    q8_0::scalar::quantize_row_q8_0,
    q8_1::scalar::quantize_row_q8_1,
    q8_k::scalar::quantize_row_q8_k,
];

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    /// Wraps a `#[target_feature]` vec_dot in a plain `fn` pointer.
    ///
    /// SAFETY (every use): the resulting pointer lives only in the table of the ISA whose
    /// features the kernel enables, and `KernelTable::for_isa` returns that table only
    /// after `Isa::is_supported` confirmed the CPU has them. The kernels check slice
    /// sizes themselves, so the CPU features are their only precondition.
    macro_rules! dot {
        ($f:path) => {
            |n, w, a| unsafe { $f(n, w, a) }
        };
    }

    /// As [`dot!`], for activation quantizers.
    macro_rules! quant {
        ($f:path) => {
            |x, out| unsafe { $f(x, out) }
        };
    }

    /// As [`dot!`], for one ISA's packed kernels, in [`PackedType::ALL`] order.
    macro_rules! packed {
        ($isa:ident) => {
            [
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q4_0(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q4_1(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q5_0(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q8_0(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q4_k(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q5_k(c, g, a, r, s, n, o) }),
                Some(|c, g, a, r, s, n, o| unsafe { packed::$isa::gemm_q6_k(c, g, a, r, s, n, o) }),
            ]
        };
    }

    pub(super) static AVX2: KernelTable = table(
        Isa::Avx2,
        [
            dot!(fp32::avx2::vec_dot_f32_f32),
            dot!(fp16::avx2::vec_dot_f16_f32),
            dot!(bf16::avx2::vec_dot_bf16_f32),
            dot!(q4_0::avx2::vec_dot_q4_0_q8_0),
            dot!(q4_1::avx2::vec_dot_q4_1_q8_1),
            dot!(q5_0::avx2::vec_dot_q5_0_q8_0),
            dot!(q8_0::avx2::vec_dot_q8_0_q8_0),
            dot!(q4_k::avx2::vec_dot_q4_k_q8_k),
            dot!(q5_k::avx2::vec_dot_q5_k_q8_k),
            dot!(q6_k::avx2::vec_dot_q6_k_q8_k),
        ],
        AVX2_QUANT,
        packed!(avx2),
        op_kernels::x86::AVX2,
    );

    /// The AVX2 quantizers serve the AVX-512 table too, except q8_K's: quantizing is O(n)
    /// per token against O(n·rows) for the dots that consume it, but the k-quants'
    /// prefill runs its dots fast enough that q8_K's quantizer showed in profiles.
    const AVX2_QUANT: [QuantizeFn; 4] = [
        fp32::scalar::quantize_row_f32,
        quant!(q8_0::avx2::quantize_row_q8_0),
        quant!(q8_1::avx2::quantize_row_q8_1),
        quant!(q8_k::avx2::quantize_row_q8_k),
    ];

    pub(super) static AVX512: KernelTable = table(
        Isa::Avx512,
        [
            dot!(fp32::avx512::vec_dot_f32_f32),
            dot!(fp16::avx512::vec_dot_f16_f32),
            dot!(bf16::avx512::vec_dot_bf16_f32),
            dot!(q4_0::avx512::vec_dot_q4_0_q8_0),
            dot!(q4_1::avx512::vec_dot_q4_1_q8_1),
            dot!(q5_0::avx512::vec_dot_q5_0_q8_0),
            dot!(q8_0::avx512::vec_dot_q8_0_q8_0),
            dot!(q4_k::avx512::vec_dot_q4_k_q8_k),
            dot!(q5_k::avx512::vec_dot_q5_k_q8_k),
            dot!(q6_k::avx512::vec_dot_q6_k_q8_k),
        ],
        [
            AVX2_QUANT[0],
            AVX2_QUANT[1],
            AVX2_QUANT[2],
            quant!(q8_k::avx512::quantize_row_q8_k),
        ],
        packed!(avx512),
        op_kernels::x86::AVX512,
    );
}

/// Every table this CPU can run, slowest first (for the unit tests of table entries).
#[cfg(test)]
pub(crate) fn available_tables() -> Vec<&'static KernelTable> {
    Isa::available()
        .into_iter()
        .map(|isa| KernelTable::for_isa(isa).expect("available"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()).ok(), Some(isa));
        }
        assert!(matches!(
            Isa::from_name("neon"),
            Err(Error::UnknownIsa { name }) if name == "neon"
        ));
    }

    #[test]
    fn detected_isa_is_available_and_best() {
        let avail = Isa::available();
        assert_eq!(avail.first(), Some(&Isa::Scalar));
        assert_eq!(avail.last(), Some(&Isa::detect()));
        assert_eq!(KernelTable::best().isa(), Isa::detect());
        for isa in Isa::ALL {
            let t = KernelTable::for_isa(isa);
            assert_eq!(t.is_ok(), avail.contains(&isa), "{isa}");
            if let Ok(t) = t {
                assert_eq!(t.isa(), isa);
            }
        }
    }

    #[test]
    fn tables_declare_ggml_activation_types() {
        let t = KernelTable::best();
        for ty in WeightType::ALL {
            assert_eq!(t.weight(ty).act, ty.act_type());
        }
        assert_eq!(t.weight(WeightType::Q4_1).act, ActType::Q8_1);
        assert_eq!(t.weight(WeightType::Q6_K).act, ActType::Q8_K);
        assert_eq!(t.weight(WeightType::BF16).act, ActType::F32);
    }
}
