//! GGUF metadata values and their decoding.

use std::fmt::Display;

use crate::reader::{reserve_items, Reader, Suffixed};
use crate::Result;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(MetaArray),
}

/// A homogeneous metadata array, stored typed so large vocabularies stay compact.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
}

impl MetaValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// Any integer type, widened, if it is non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer or float type, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// GGUF value type ids.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// Nested arrays deeper than this are rejected (real files use none), which also bounds
/// recursion.
const MAX_ARRAY_DEPTH: u32 = 4;

fn read_bool(r: &mut Reader<'_>, field: &dyn Display) -> Result<bool> {
    let at = r.pos();
    match r.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(r.malformed(at, field, format!("bool byte {b} is neither 0 nor 1"))),
    }
}

/// Reads a u32 value type then the value; `field` names the value (e.g. `metadata["k"]`).
pub(crate) fn read_typed_value(r: &mut Reader<'_>, field: &dyn Display) -> Result<MetaValue> {
    let type_at = r.pos();
    let type_field = Suffixed(field, ".type");
    let type_id = r.u32(&type_field)?;
    Ok(match type_id {
        T_U8 => MetaValue::U8(r.u8(field)?),
        T_I8 => MetaValue::I8(r.u8(field)? as i8),
        T_U16 => MetaValue::U16(r.u16(field)?),
        T_I16 => MetaValue::I16(r.u16(field)? as i16),
        T_U32 => MetaValue::U32(r.u32(field)?),
        T_I32 => MetaValue::I32(r.u32(field)? as i32),
        T_U64 => MetaValue::U64(r.u64(field)?),
        T_I64 => MetaValue::I64(r.u64(field)? as i64),
        T_F32 => MetaValue::F32(r.f32(field)?),
        T_F64 => MetaValue::F64(r.f64(field)?),
        T_BOOL => MetaValue::Bool(read_bool(r, field)?),
        T_STRING => MetaValue::String(r.string(field)?.to_string()),
        T_ARRAY => MetaValue::Array(read_array(r, field, 0)?),
        other => {
            return Err(r.malformed(type_at, &type_field, format!("unknown value type {other}")));
        }
    })
}

/// Bytes an array item of this type takes at least (strings: their u64 length; arrays:
/// item type and count). `None` for unknown types.
fn min_item_bytes(type_id: u32) -> Option<usize> {
    Some(match type_id {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 | T_STRING => 8,
        T_ARRAY => 12,
        _ => return None,
    })
}

fn read_array(r: &mut Reader<'_>, field: &dyn Display, depth: u32) -> Result<MetaArray> {
    let type_at = r.pos();
    let type_field = Suffixed(field, " array item type");
    if depth >= MAX_ARRAY_DEPTH {
        return Err(r.malformed(type_at, &type_field, "arrays nested too deeply"));
    }
    let item_type = r.u32(&type_field)?;
    let min_bytes = min_item_bytes(item_type).ok_or_else(|| {
        r.malformed(
            type_at,
            &type_field,
            format!("unknown array item type {item_type}"),
        )
    })?;
    // Checked against the bytes that remain; only a bounded
    // reservation is made for it (see `reserve_items`).
    let n = r.count(&format_args!("{field} array count"), min_bytes)?;
    macro_rules! collect {
        ($variant:ident, $item:ty, |$i:ident| $read:expr) => {{
            let mut v = Vec::with_capacity(reserve_items::<$item>(n));
            for $i in 0..n {
                v.push($read);
            }
            MetaArray::$variant(v)
        }};
    }
    Ok(match item_type {
        T_U8 => collect!(U8, u8, |i| r.u8(&format_args!("{field}[{i}]"))?),
        T_I8 => collect!(I8, i8, |i| r.u8(&format_args!("{field}[{i}]"))? as i8),
        T_U16 => collect!(U16, u16, |i| r.u16(&format_args!("{field}[{i}]"))?),
        T_I16 => collect!(I16, i16, |i| r.u16(&format_args!("{field}[{i}]"))? as i16),
        T_U32 => collect!(U32, u32, |i| r.u32(&format_args!("{field}[{i}]"))?),
        T_I32 => collect!(I32, i32, |i| r.u32(&format_args!("{field}[{i}]"))? as i32),
        T_U64 => collect!(U64, u64, |i| r.u64(&format_args!("{field}[{i}]"))?),
        T_I64 => collect!(I64, i64, |i| r.u64(&format_args!("{field}[{i}]"))? as i64),
        T_F32 => collect!(F32, f32, |i| r.f32(&format_args!("{field}[{i}]"))?),
        T_F64 => collect!(F64, f64, |i| r.f64(&format_args!("{field}[{i}]"))?),
        T_BOOL => collect!(Bool, bool, |i| read_bool(r, &format_args!("{field}[{i}]"))?),
        T_STRING => collect!(String, String, |i| r
            .string(&format_args!("{field}[{i}]"))?
            .to_string()),
        _ => collect!(Array, MetaArray, |i| read_array(
            r,
            &format_args!("{field}[{i}]"),
            depth + 1
        )?),
    })
}
