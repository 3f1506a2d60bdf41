//! [`Backend`] on the CPU: weights in the file mapping (or repacked beside it), f32
//! activations in host vectors, the paged [`KvCache`], work split over a [`ThreadPool`]
//! and per-element kernels from the runtime-selected [`KernelTable`].

use kiln_kernels::packed::PackedType;
use kiln_kernels::{ops, KernelTable, WeightType};

use crate::attention::{paged_attention, AttentionParams, SeqSpan};
use crate::backend::{
    Activation, Backend, LowRank, MatmulInput, Prepared, Rope, WeightMatrix, MAX_LOW_RANK,
};
use crate::kv::{KvCache, KvDtype, KvShape};
use crate::matmul::{matmul, matmul_same_input, MatmulScratch, QMatrix, WeightBytes};
use crate::pool::ThreadPool;

/// Rows per pool task for the element-wise ops: enough work to pay for the hand-off.
const ROWS_PER_TASK: usize = 4;

pub struct CpuBackend {
    pub(crate) pool: ThreadPool,
    pub(crate) kernels: &'static KernelTable,
}

impl CpuBackend {
    /// `threads` doing the math (the caller's thread included), with `kernels`.
    pub fn new(threads: usize, kernels: &'static KernelTable) -> Self {
        Self {
            pool: ThreadPool::new(threads),
            kernels,
        }
    }

    /// `threads` doing the math, with the best kernels for this CPU
    /// ([`KernelTable::best`]).
    pub fn detect(threads: usize) -> Self {
        Self::new(threads, KernelTable::best())
    }
}

impl WeightMatrix for QMatrix {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn bytes_read(&self) -> usize {
        QMatrix::bytes_read(self)
    }
}

impl Backend for CpuBackend {
    type Matrix = QMatrix;
    type Vector = Vec<f32>;
    type Activations = Vec<f32>;
    type MatmulScratch = MatmulScratch;
    type Kv = KvCache;

    fn matrix(
        &self,
        ty: WeightType,
        rows: usize,
        cols: usize,
        bytes: WeightBytes,
    ) -> Option<QMatrix> {
        QMatrix::new(ty, rows, cols, bytes)
    }

    /// Repacks for this CPU's packed kernel where there is one; the mapped rows of a
    /// packed matrix are never read again.
    fn prepare(&self, m: &mut QMatrix) -> Prepared {
        if !m.pack(self.kernels, &self.pool) {
            return Prepared::default();
        }
        Prepared {
            copy_bytes: m.packed_bytes(),
            unused_mapping: m.mapped_range(),
        }
    }

    /// The packed layout's version and the types this kernel table packs: a copy made
    /// where fewer types had kernels would leave this table's matrices unpacked.
    fn prepared_layout(&self) -> Option<String> {
        let types: Vec<String> = PackedType::ALL
            .into_iter()
            .filter(|&ty| self.kernels.packed_gemm(ty).is_some())
            .map(|ty| format!("{ty:?}"))
            .collect();
        Some(format!(
            "kiln-cpu-packed v{} rows {} types {}",
            kiln_kernels::packed::LAYOUT_VERSION,
            kiln_kernels::packed::PACK_ROWS,
            types.join(",")
        ))
    }

    fn prepared_copy(&self, m: &QMatrix) -> Option<WeightBytes> {
        m.packed_copy()
    }

    fn adopt_prepared(&self, m: &mut QMatrix, bytes: WeightBytes) -> Prepared {
        if !m.adopt_packed(self.kernels, bytes) {
            return Prepared::default();
        }
        Prepared {
            copy_bytes: m.packed_bytes(),
            unused_mapping: m.mapped_range(),
        }
    }

    fn vector(&self, values: Vec<f32>) -> Vec<f32> {
        values
    }

    fn reserve(&self, a: &mut Vec<f32>, len: usize) {
        if a.is_empty() {
            // Zeroed by the allocator (fresh pages from the OS for large buffers), not
            // written: a start reserves hundreds of MB of workspace, a whole batch's
            // logits among it, and zeroing it was most of creating the engine.
            *a = vec![0.0; len];
        } else if a.len() < len {
            a.resize(len, 0.0);
        }
    }

    fn new_kv(&self, shape: KvShape, dtype: KvDtype) -> KvCache {
        KvCache::new(shape, dtype)
    }

    fn kv_shape(kv: &KvCache) -> KvShape {
        kv.shape
    }

    fn export_kv_block(kv: &KvCache, block: usize, out: &mut Vec<u8>) {
        kv.export_block(block, out);
    }

    fn import_kv_block(kv: &mut KvCache, block: usize, bytes: &[u8]) -> bool {
        kv.import_block(block, bytes)
    }

    fn embed(&self, table: &QMatrix, tokens: &[u32], scale: Option<f32>, out: &mut Vec<f32>) {
        let d = table.cols;
        for (r, &tok) in tokens.iter().enumerate() {
            let row = &mut out[r * d..(r + 1) * d];
            table.dequantize_row(self.kernels, tok as usize, row);
            if let Some(s) = scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
    }

    fn matmul(
        &self,
        w: &QMatrix,
        x: &Vec<f32>,
        rows: usize,
        out: &mut Vec<f32>,
        scratch: &mut MatmulScratch,
        input: MatmulInput,
    ) {
        let mm = match input {
            MatmulInput::New => matmul,
            MatmulInput::Same => matmul_same_input,
        };
        let (x, out) = (&x[..rows * w.cols], &mut out[..rows * w.rows]);
        mm(&self.pool, self.kernels, w, x, rows, out, scratch);
    }

    fn add_low_rank<'u>(
        &self,
        x: &Vec<f32>,
        inputs: usize,
        rows: usize,
        out: &mut Vec<f32>,
        outputs: usize,
        update: impl Fn(usize) -> Option<LowRank<'u>> + Sync,
    ) {
        let out = &mut out[..rows * outputs];
        self.pool
            .for_each_chunk_mut(out, outputs, ROWS_PER_TASK, |r, y| {
                let Some(p) = update(r) else {
                    return;
                };
                let x = &x[r * inputs..(r + 1) * inputs];
                let mut t = [0f32; MAX_LOW_RANK];
                for (k, tk) in t[..p.rank].iter_mut().enumerate() {
                    *tk = ops::dot_f32(&p.a[k * inputs..(k + 1) * inputs], x);
                }
                for (k, &tk) in t[..p.rank].iter().enumerate() {
                    ops::axpy(tk, &p.b_t[k * outputs..(k + 1) * outputs], y);
                }
            });
    }

    fn rms_norm(
        &self,
        x: &Vec<f32>,
        w: &Vec<f32>,
        eps: f32,
        rows: usize,
        width: usize,
        out: &mut Vec<f32>,
    ) {
        let out = &mut out[..rows * width];
        self.pool
            .for_each_chunk_mut(out, width, ROWS_PER_TASK, |r, o| {
                ops::rms_norm(&x[r * width..(r + 1) * width], w, eps, o);
            });
    }

    /// Serial: the pieces (heads, or Gemma's sandwich-normed rows) are cheap.
    fn rms_norm_inplace(&self, x: &mut Vec<f32>, w: &Vec<f32>, eps: f32, len: usize, width: usize) {
        for piece in x[..len].chunks_exact_mut(width) {
            ops::rms_norm_inplace(piece, w, eps);
        }
    }

    fn gather_rms_norm(
        &self,
        x: &Vec<f32>,
        rows: &[u32],
        w: &Vec<f32>,
        eps: f32,
        width: usize,
        out: &mut Vec<f32>,
    ) {
        for (i, &r) in rows.iter().enumerate() {
            let r = r as usize;
            let o = &mut out[i * width..(i + 1) * width];
            ops::rms_norm(&x[r * width..(r + 1) * width], w, eps, o);
        }
    }

    fn add_bias(&self, x: &mut Vec<f32>, bias: &Vec<f32>, rows: usize, width: usize) {
        for row in x[..rows * width].chunks_exact_mut(width) {
            ops::add_inplace(row, bias);
        }
    }

    fn rope_and_store_kv(
        &self,
        rope: &Rope,
        positions: &[u32],
        q: &mut Vec<f32>,
        k: &mut Vec<f32>,
        v: &Vec<f32>,
        kv: &mut KvCache,
        layer: usize,
        slots: &[u32],
    ) {
        let hd = rope.head_dim;
        let (qd, kvd) = (rope.n_heads * hd, rope.n_kv_heads * hd);
        for (r, &pos) in positions.iter().enumerate() {
            let q = &mut q[r * qd..(r + 1) * qd];
            ops::rope_inplace(q, rope.n_heads, hd, rope.dims, pos, rope.base, rope.style);
            let k = &mut k[r * kvd..(r + 1) * kvd];
            ops::rope_inplace(
                k,
                rope.n_kv_heads,
                hd,
                rope.dims,
                pos,
                rope.base,
                rope.style,
            );
            kv.write(layer, slots[r] as usize, k, &v[r * kvd..(r + 1) * kvd]);
        }
    }

    fn attention(
        &self,
        kv: &KvCache,
        layer: usize,
        params: &AttentionParams,
        q: &Vec<f32>,
        positions: &[u32],
        seqs: &[SeqSpan],
        block_tables: &[u32],
        out: &mut Vec<f32>,
    ) {
        let len = positions.len() * params.n_heads * params.head_dim;
        paged_attention(
            &self.pool,
            kv,
            layer,
            params,
            &q[..len],
            positions,
            seqs,
            block_tables,
            &mut out[..len],
        );
    }

    fn gated_activation(
        &self,
        gate: &mut Vec<f32>,
        up: &Vec<f32>,
        rows: usize,
        width: usize,
        act: Activation,
    ) {
        let act = match act {
            Activation::Silu => ops::swiglu_inplace,
            Activation::GeluTanh => ops::geglu_tanh_inplace,
        };
        let gate = &mut gate[..rows * width];
        self.pool
            .for_each_chunk_mut(gate, width, ROWS_PER_TASK, |r, g| {
                act(g, &up[r * width..(r + 1) * width])
            });
    }

    fn add_rows(&self, x: &mut Vec<f32>, o: &Vec<f32>, rows: usize, width: usize) {
        let x = &mut x[..rows * width];
        self.pool
            .for_each_chunk_mut(x, width, ROWS_PER_TASK, |r, row| {
                ops::add_inplace(row, &o[r * width..(r + 1) * width]);
            });
    }

    fn host<'a>(&self, a: &'a mut Vec<f32>, len: usize) -> &'a mut [f32] {
        &mut a[..len]
    }
}
