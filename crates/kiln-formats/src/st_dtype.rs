//! Element types of safetensors files.

/// A safetensors element type. Sub-byte float formats (F4, F6) are not accepted: their
/// byte sizes are not whole per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    BOOL,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl StDtype {
    const ALL: [StDtype; 16] = [
        StDtype::BOOL,
        StDtype::U8,
        StDtype::I8,
        StDtype::F8_E5M2,
        StDtype::F8_E4M3,
        StDtype::F8_E8M0,
        StDtype::I16,
        StDtype::U16,
        StDtype::F16,
        StDtype::BF16,
        StDtype::I32,
        StDtype::U32,
        StDtype::F32,
        StDtype::I64,
        StDtype::U64,
        StDtype::F64,
    ];

    /// Parses the dtype string of a header entry (case-sensitive, as written by the
    /// reference implementation).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The name used in safetensors headers.
    pub fn name(self) -> &'static str {
        use StDtype::*;
        match self {
            BOOL => "BOOL",
            U8 => "U8",
            I8 => "I8",
            F8_E5M2 => "F8_E5M2",
            F8_E4M3 => "F8_E4M3",
            F8_E8M0 => "F8_E8M0",
            I16 => "I16",
            U16 => "U16",
            F16 => "F16",
            BF16 => "BF16",
            I32 => "I32",
            U32 => "U32",
            F32 => "F32",
            I64 => "I64",
            U64 => "U64",
            F64 => "F64",
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        use StDtype::*;
        match self {
            BOOL | U8 | I8 | F8_E5M2 | F8_E4M3 | F8_E8M0 => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }
}

impl std::fmt::Display for StDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
