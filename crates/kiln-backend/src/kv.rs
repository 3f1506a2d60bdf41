//! Paged KV storage: fixed-size blocks addressed by block id.
//!
//! The backend stores K and V; which request owns which block is the engine's business.
//! Layout per layer: `[kv_head][block][slot][head_dim]`, so one head's keys for a block
//! are contiguous for the attention loop, and so are those of consecutive blocks: the
//! block pool keeps a sequence's blocks adjacent where it can, and attention then reads
//! one stream instead of jumping (measured: scattered 2 KiB blocks read at a quarter of
//! the speed of contiguous ones on this VM, from TLB misses and prefetcher restarts).

use half::f16;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;

/// Element type of the stored K/V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    F16,
    F32,
    /// 8-bit quants in blocks of 32 with an f16 scale (llama.cpp's `q8_0` cache type):
    /// about half the memory of f16. Needs a head size that is a multiple of 32.
    Q8_0,
}

/// Elements per scale of the q8_0 cache.
const Q8_BLOCK: usize = 32;

impl KvDtype {
    /// Bytes `n` stored elements take (`n` a multiple of 32 for q8_0).
    pub fn bytes_for(self, n: usize) -> usize {
        match self {
            KvDtype::F16 => 2 * n,
            KvDtype::F32 => 4 * n,
            KvDtype::Q8_0 => n / Q8_BLOCK * (Q8_BLOCK + 2),
        }
    }

    /// Parses `f16`, `f32` or `q8_0`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f16" => Some(KvDtype::F16),
            "f32" => Some(KvDtype::F32),
            "q8_0" => Some(KvDtype::Q8_0),
            _ => None,
        }
    }

    /// Whether heads of `head_dim` elements can be stored in this type.
    pub fn supports_head_dim(self, head_dim: usize) -> bool {
        self != KvDtype::Q8_0 || head_dim.is_multiple_of(Q8_BLOCK)
    }
}

/// The dimensions of a KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub num_blocks: usize,
}

impl KvShape {
    /// Bytes one block takes across all layers, K and V.
    pub fn block_bytes(&self, dtype: KvDtype) -> usize {
        2 * self.n_layers * dtype.bytes_for(self.n_kv_heads * self.block_size * self.head_dim)
    }

    fn layer_elems(&self) -> usize {
        self.num_blocks * self.n_kv_heads * self.block_size * self.head_dim
    }
}

enum Store {
    F16(Vec<f16>),
    F32(Vec<f32>),
    /// Quants, and one scale per 32 consecutive elements.
    Q8_0(Vec<i8>, Vec<f16>),
}

/// K and V storage for every layer.
pub struct KvCache {
    pub shape: KvShape,
    pub dtype: KvDtype,
    k: Vec<Store>,
    v: Vec<Store>,
}

impl KvCache {
    /// # Panics
    /// If `dtype` can't store heads of `shape.head_dim` (see
    /// [`KvDtype::supports_head_dim`]); callers check it when configuring.
    pub fn new(shape: KvShape, dtype: KvDtype) -> Self {
        assert!(
            dtype.supports_head_dim(shape.head_dim),
            "{dtype:?} KV cache needs a head size that is a multiple of 32"
        );
        // Zeroed allocations come straight from the OS (calloc): pages are only touched
        // when a block is first written, so a large cache costs nothing up front.
        let make = || match dtype {
            KvDtype::F16 => Store::F16(vec![0u16; shape.layer_elems()].reinterpret_into()),
            KvDtype::F32 => Store::F32(vec![0.0; shape.layer_elems()]),
            KvDtype::Q8_0 => Store::Q8_0(
                vec![0i8; shape.layer_elems()],
                vec![0u16; shape.layer_elems() / Q8_BLOCK].reinterpret_into(),
            ),
        };
        Self {
            shape,
            dtype,
            k: (0..shape.n_layers).map(|_| make()).collect(),
            v: (0..shape.n_layers).map(|_| make()).collect(),
        }
    }

    /// Element offset of (slot, head) in a layer's store; `slot = block * block_size + i`.
    #[inline]
    fn offset(&self, slot: usize, head: usize) -> usize {
        let s = &self.shape;
        ((head * s.num_blocks + slot / s.block_size) * s.block_size + slot % s.block_size)
            * s.head_dim
    }

    /// Stores one token's K and V (`n_kv_heads × head_dim` each) at `slot`.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let hd = self.shape.head_dim;
        for h in 0..self.shape.n_kv_heads {
            let o = self.offset(slot, h);
            for (store, src) in [(&mut self.k[layer], k), (&mut self.v[layer], v)] {
                let src = &src[h * hd..(h + 1) * hd];
                match store {
                    Store::F16(d) => d[o..o + hd].convert_from_f32_slice(src),
                    Store::F32(d) => d[o..o + hd].copy_from_slice(src),
                    Store::Q8_0(q, d) => quantize_q8(
                        src,
                        &mut q[o..o + hd],
                        &mut d[o / Q8_BLOCK..(o + hd) / Q8_BLOCK],
                    ),
                }
            }
        }
    }

    /// Copies the keys of `n` consecutive slots of one block for one head into `out` as f32
    /// (`out.len() >= n * head_dim`).
    #[inline]
    pub fn read_k(&self, layer: usize, block: usize, head: usize, n: usize, out: &mut [f32]) {
        self.read(&self.k[layer], block, head, n, out)
    }

    /// Like [`read_k`](Self::read_k), for values.
    #[inline]
    pub fn read_v(&self, layer: usize, block: usize, head: usize, n: usize, out: &mut [f32]) {
        self.read(&self.v[layer], block, head, n, out)
    }

    /// The first `n` cached keys of `head` in `block`, when the cache holds f16 (the
    /// attention kernel then reads them in place). `n` may pass the block size: the rows
    /// then continue into blocks `block + 1, …`, which follow in memory.
    ///
    /// # Panics
    /// If the rows would run past the last block.
    #[inline]
    pub fn k_f16(&self, layer: usize, block: usize, head: usize, n: usize) -> Option<&[f16]> {
        self.f16_rows(&self.k[layer], block, head, n)
    }

    /// Like [`k_f16`](Self::k_f16), for values.
    #[inline]
    pub fn v_f16(&self, layer: usize, block: usize, head: usize, n: usize) -> Option<&[f16]> {
        self.f16_rows(&self.v[layer], block, head, n)
    }

    fn f16_rows<'a>(
        &self,
        store: &'a Store,
        block: usize,
        head: usize,
        n: usize,
    ) -> Option<&'a [f16]> {
        match store {
            Store::F16(s) => {
                let o = self.offset(block * self.shape.block_size, head);
                Some(&s[o..o + n * self.shape.head_dim])
            }
            _ => None,
        }
    }

    fn read(&self, store: &Store, block: usize, head: usize, n: usize, out: &mut [f32]) {
        let o = self.offset(block * self.shape.block_size, head);
        let len = n * self.shape.head_dim;
        match store {
            Store::F16(s) => s[o..o + len].convert_to_f32_slice(&mut out[..len]),
            Store::F32(s) => out[..len].copy_from_slice(&s[o..o + len]),
            Store::Q8_0(q, d) => {
                let scales = &d[o / Q8_BLOCK..(o + len) / Q8_BLOCK];
                for ((out, q), d) in out[..len]
                    .chunks_exact_mut(Q8_BLOCK)
                    .zip(q[o..o + len].chunks_exact(Q8_BLOCK))
                    .zip(scales)
                {
                    let d = d.to_f32();
                    for (o, &q) in out.iter_mut().zip(q) {
                        *o = f32::from(q) * d;
                    }
                }
            }
        }
    }
}

/// Whole blocks as bytes, for the engine's disk tier. Per layer, K then V, per head the
/// block's `block_size × head_dim` elements (little endian), and for q8_0 the quants then
/// their scales: the store's own bits, so a block read back is the block written.
impl KvCache {
    /// Bytes [`export_block`](Self::export_block) writes per block.
    pub fn block_bytes(&self) -> usize {
        self.shape.block_bytes(self.dtype)
    }

    /// Appends block `block`'s bytes to `out`.
    pub fn export_block(&self, block: usize, out: &mut Vec<u8>) {
        out.reserve(self.block_bytes());
        let n = self.shape.block_size * self.shape.head_dim;
        for layer in 0..self.shape.n_layers {
            for store in [&self.k[layer], &self.v[layer]] {
                for head in 0..self.shape.n_kv_heads {
                    let o = self.offset(block * self.shape.block_size, head);
                    match store {
                        Store::F16(d) => {
                            out.extend(d[o..o + n].iter().flat_map(|x| x.to_le_bytes()))
                        }
                        Store::F32(d) => {
                            out.extend(d[o..o + n].iter().flat_map(|x| x.to_le_bytes()))
                        }
                        Store::Q8_0(q, d) => {
                            out.extend(q[o..o + n].iter().map(|&x| x as u8));
                            let s = &d[o / Q8_BLOCK..(o + n) / Q8_BLOCK];
                            out.extend(s.iter().flat_map(|x| x.to_le_bytes()));
                        }
                    }
                }
            }
        }
    }

    /// Overwrites block `block` with `bytes` from [`export_block`](Self::export_block)
    /// of a cache with this shape and dtype; false if their length is not one block's.
    pub fn import_block(&mut self, block: usize, bytes: &[u8]) -> bool {
        if bytes.len() != self.block_bytes() || block >= self.shape.num_blocks {
            return false;
        }
        let n = self.shape.block_size * self.shape.head_dim;
        let mut at = 0;
        let mut take = |len: usize| {
            let s = &bytes[at..at + len];
            at += len;
            s
        };
        for layer in 0..self.shape.n_layers {
            for kv in 0..2 {
                for head in 0..self.shape.n_kv_heads {
                    let o = self.offset(block * self.shape.block_size, head);
                    let store = if kv == 0 {
                        &mut self.k[layer]
                    } else {
                        &mut self.v[layer]
                    };
                    match store {
                        Store::F16(d) => {
                            for (x, b) in d[o..o + n].iter_mut().zip(take(2 * n).chunks_exact(2)) {
                                *x = f16::from_le_bytes([b[0], b[1]]);
                            }
                        }
                        Store::F32(d) => {
                            for (x, b) in d[o..o + n].iter_mut().zip(take(4 * n).chunks_exact(4)) {
                                *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                            }
                        }
                        Store::Q8_0(q, d) => {
                            for (x, &b) in q[o..o + n].iter_mut().zip(take(n)) {
                                *x = b as i8;
                            }
                            let scales = &mut d[o / Q8_BLOCK..(o + n) / Q8_BLOCK];
                            for (x, b) in scales
                                .iter_mut()
                                .zip(take(2 * n / Q8_BLOCK).chunks_exact(2))
                            {
                                *x = f16::from_le_bytes([b[0], b[1]]);
                            }
                        }
                    }
                }
            }
        }
        true
    }
}

/// q8_0 as llama.cpp quantizes its cache: d = amax/127 (stored f16), q = round(x·127/amax)
/// with ties to even.
fn quantize_q8(src: &[f32], q: &mut [i8], d: &mut [f16]) {
    for ((x, q), d) in src
        .chunks_exact(Q8_BLOCK)
        .zip(q.chunks_exact_mut(Q8_BLOCK))
        .zip(d.iter_mut())
    {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        *d = f16::from_f32(amax / 127.0);
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> KvShape {
        KvShape {
            n_layers: 2,
            n_kv_heads: 2,
            head_dim: 64,
            block_size: 4,
            num_blocks: 3,
        }
    }

    #[test]
    fn every_dtype_roundtrips_within_its_precision() {
        let s = shape();
        let k: Vec<f32> = (0..128)
            .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
            .collect();
        let v: Vec<f32> = k.iter().map(|x| -x * 0.5).collect();
        for (dtype, tol) in [
            (KvDtype::F32, 0.0),
            (KvDtype::F16, 5e-3),
            (KvDtype::Q8_0, 2.5e-2),
        ] {
            let mut kv = KvCache::new(s, dtype);
            // Slot 6 = block 1, offset 2.
            kv.write(1, 6, &k, &v);
            let mut out = vec![0f32; 3 * 64];
            for head in 0..2 {
                kv.read_k(1, 1, head, 3, &mut out);
                for (a, b) in out[2 * 64..3 * 64]
                    .iter()
                    .zip(&k[head * 64..(head + 1) * 64])
                {
                    assert!((a - b).abs() <= tol, "{dtype:?} k: {a} vs {b}");
                }
                kv.read_v(1, 1, head, 3, &mut out);
                for (a, b) in out[2 * 64..3 * 64]
                    .iter()
                    .zip(&v[head * 64..(head + 1) * 64])
                {
                    assert!((a - b).abs() <= tol, "{dtype:?} v: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn a_block_exported_and_imported_is_the_same_block() {
        let s = shape();
        let k: Vec<f32> = (0..128).map(|i| (i as f32 * 0.37).sin()).collect();
        let v: Vec<f32> = k.iter().map(|x| x * -2.0).collect();
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
            let mut a = KvCache::new(s, dtype);
            for slot in 4..8 {
                for layer in 0..2 {
                    a.write(layer, slot, &k, &v);
                }
            }
            let mut bytes = Vec::new();
            a.export_block(1, &mut bytes);
            assert_eq!(bytes.len(), s.block_bytes(dtype));
            let mut b = KvCache::new(s, dtype);
            assert!(!b.import_block(2, &bytes[1..]), "wrong length refused");
            assert!(b.import_block(2, &bytes));
            let mut again = Vec::new();
            b.export_block(2, &mut again);
            assert_eq!(bytes, again, "{dtype:?}");
            let (mut x, mut y) = (vec![0f32; 4 * 64], vec![0f32; 4 * 64]);
            for layer in 0..2 {
                for head in 0..2 {
                    a.read_k(layer, 1, head, 4, &mut x);
                    b.read_k(layer, 2, head, 4, &mut y);
                    assert_eq!(x, y);
                    a.read_v(layer, 1, head, 4, &mut x);
                    b.read_v(layer, 2, head, 4, &mut y);
                    assert_eq!(x, y);
                }
            }
        }
    }

    #[test]
    fn q8_0_takes_about_half_of_f16() {
        let s = shape();
        assert_eq!(s.block_bytes(KvDtype::F16), 2 * 2 * 2 * 4 * 64 * 2);
        assert_eq!(s.block_bytes(KvDtype::Q8_0), 2 * 2 * (2 * 4 * 64) / 32 * 34);
        assert!(!KvDtype::Q8_0.supports_head_dim(48));
        assert_eq!(KvDtype::from_name("q8_0"), Some(KvDtype::Q8_0));
    }
}
