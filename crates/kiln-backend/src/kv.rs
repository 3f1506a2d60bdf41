//! Paged KV storage: fixed-size blocks addressed by block id.
//!
//! The backend stores K and V; which request owns which block is the engine's business.
//! Layout per layer: `[block][kv_head][slot][head_dim]`, so one head's keys for a block
//! are contiguous for the attention loop.

use half::f16;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;

/// Element type of the stored K/V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    F16,
    F32,
}

impl KvDtype {
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F16 => 2,
            KvDtype::F32 => 4,
        }
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
        2 * self.n_layers * self.n_kv_heads * self.block_size * self.head_dim * dtype.bytes()
    }

    fn layer_elems(&self) -> usize {
        self.num_blocks * self.n_kv_heads * self.block_size * self.head_dim
    }
}

enum Store {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// K and V storage for every layer.
pub struct KvCache {
    pub shape: KvShape,
    pub dtype: KvDtype,
    k: Vec<Store>,
    v: Vec<Store>,
}

impl KvCache {
    pub fn new(shape: KvShape, dtype: KvDtype) -> Self {
        // Zeroed allocations come straight from the OS (calloc): pages are only touched
        // when a block is first written, so a large cache costs nothing up front.
        let make = || match dtype {
            KvDtype::F16 => Store::F16(vec![0u16; shape.layer_elems()].reinterpret_into()),
            KvDtype::F32 => Store::F32(vec![0.0; shape.layer_elems()]),
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
        let (block, i) = (slot / s.block_size, slot % s.block_size);
        ((block * s.n_kv_heads + head) * s.block_size + i) * s.head_dim
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

    fn read(&self, store: &Store, block: usize, head: usize, n: usize, out: &mut [f32]) {
        let o = self.offset(block * self.shape.block_size, head);
        let len = n * self.shape.head_dim;
        match store {
            Store::F16(s) => s[o..o + len].convert_to_f32_slice(&mut out[..len]),
            Store::F32(s) => out[..len].copy_from_slice(&s[o..o + len]),
        }
    }
}
