//! Weight and activation element types, with ggml's block layouts.
//!
//! Every quantized type stores a row as a sequence of fixed-size blocks; the byte layout
//! of each block is bit-exact with ggml/GGUF (little-endian, no padding).

use std::fmt;

/// Elements per k-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// The storage type of a weight tensor.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl WeightType {
    /// Every supported weight type, in table order.
    pub const ALL: [WeightType; 10] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::BF16,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q8_0,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
    ];

    /// Position in [`WeightType::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Elements per block (1 for the float types).
    pub const fn block_elems(self) -> usize {
        match self {
            WeightType::F32 | WeightType::F16 | WeightType::BF16 => 1,
            WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q5_0 | WeightType::Q8_0 => 32,
            WeightType::Q4_K | WeightType::Q5_K | WeightType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::BF16 => 2,
            WeightType::Q4_0 => 18,
            WeightType::Q4_1 => 20,
            WeightType::Q5_0 => 22,
            WeightType::Q8_0 => 34,
            WeightType::Q4_K => 144,
            WeightType::Q5_K => 176,
            WeightType::Q6_K => 210,
        }
    }

    /// Bytes in a row of `n_elems` elements; `None` if `n_elems` is not a whole number of
    /// blocks or the size overflows.
    pub const fn row_bytes(self, n_elems: usize) -> Option<usize> {
        row_bytes(n_elems, self.block_elems(), self.block_bytes())
    }

    /// The activation type this weight's dot product consumes (ggml's `vec_dot_type`).
    pub const fn act_type(self) -> ActType {
        match self {
            WeightType::F32 | WeightType::F16 | WeightType::BF16 => ActType::F32,
            WeightType::Q4_0 | WeightType::Q5_0 | WeightType::Q8_0 => ActType::Q8_0,
            WeightType::Q4_1 => ActType::Q8_1,
            WeightType::Q4_K | WeightType::Q5_K | WeightType::Q6_K => ActType::Q8_K,
        }
    }

    /// ggml's name for the type (`q4_K`, `bf16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::BF16 => "bf16",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_K => "q4_K",
            WeightType::Q5_K => "q5_K",
            WeightType::Q6_K => "q6_K",
        }
    }

    /// The `ggml_type` id stored in GGUF tensor infos.
    pub const fn ggml_type_id(self) -> u32 {
        match self {
            WeightType::F32 => 0,
            WeightType::F16 => 1,
            WeightType::Q4_0 => 2,
            WeightType::Q4_1 => 3,
            WeightType::Q5_0 => 6,
            WeightType::Q8_0 => 8,
            WeightType::Q4_K => 12,
            WeightType::Q5_K => 13,
            WeightType::Q6_K => 14,
            WeightType::BF16 => 30,
        }
    }

    /// Inverse of [`WeightType::ggml_type_id`]; `None` for types Kiln has no kernel for.
    pub fn from_ggml_type_id(id: u32) -> Option<WeightType> {
        WeightType::ALL.into_iter().find(|t| t.ggml_type_id() == id)
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type activations are converted to before a dot product with a weight row.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActType {
    /// Plain little-endian f32 (for float weights).
    F32,
    /// 32-element blocks: f16 scale `d`, 32 × i8.
    Q8_0,
    /// 32-element blocks: f16 `d`, f16 `s = d·Σq`, 32 × i8.
    Q8_1,
    /// 256-element blocks: f32 `d`, 256 × i8, 16 × i16 sums of 16-element groups.
    Q8_K,
}

impl ActType {
    /// Every activation type, in table order.
    pub const ALL: [ActType; 4] = [ActType::F32, ActType::Q8_0, ActType::Q8_1, ActType::Q8_K];

    /// Position in [`ActType::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Elements per block.
    pub const fn block_elems(self) -> usize {
        match self {
            ActType::F32 => 1,
            ActType::Q8_0 | ActType::Q8_1 => 32,
            ActType::Q8_K => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            ActType::F32 => 4,
            ActType::Q8_0 => 34,
            ActType::Q8_1 => 36,
            ActType::Q8_K => 4 + QK_K + 2 * (QK_K / 16),
        }
    }

    /// Bytes in a row of `n_elems` elements; `None` if not a whole number of blocks.
    pub const fn row_bytes(self, n_elems: usize) -> Option<usize> {
        row_bytes(n_elems, self.block_elems(), self.block_bytes())
    }

    /// ggml's name for the type.
    pub const fn name(self) -> &'static str {
        match self {
            ActType::F32 => "f32",
            ActType::Q8_0 => "q8_0",
            ActType::Q8_1 => "q8_1",
            ActType::Q8_K => "q8_K",
        }
    }
}

impl fmt::Display for ActType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const fn row_bytes(n_elems: usize, block_elems: usize, block_bytes: usize) -> Option<usize> {
    if !n_elems.is_multiple_of(block_elems) {
        return None;
    }
    (n_elems / block_elems).checked_mul(block_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_bytes_requires_whole_blocks() {
        assert_eq!(WeightType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(WeightType::Q4_K.row_bytes(896), None);
        assert_eq!(WeightType::Q8_0.row_bytes(64), Some(68));
        assert_eq!(WeightType::F16.row_bytes(3), Some(6));
        assert_eq!(ActType::Q8_K.row_bytes(256), Some(292));
        assert_eq!(ActType::Q8_1.row_bytes(33), None);
        assert_eq!(WeightType::F32.row_bytes(usize::MAX), None);
    }

    #[test]
    fn ggml_ids_round_trip() {
        for t in WeightType::ALL {
            assert_eq!(WeightType::from_ggml_type_id(t.ggml_type_id()), Some(t));
        }
        assert_eq!(WeightType::from_ggml_type_id(7), None); // q5_1: no kernel
    }

    #[test]
    fn indices_match_table_order() {
        for (i, t) in WeightType::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
        for (i, t) in ActType::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}
