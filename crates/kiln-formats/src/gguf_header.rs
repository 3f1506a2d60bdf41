//! Parsing and validation of a GGUF header: everything before the tensor data.
//!
//! Layout: magic, u32 version, u64 tensor count, u64 key/value count, the key/values, the
//! tensor directory, padding to the alignment, then the data section. Every count is
//! checked against the bytes that remain, and only a bounded reservation is made for it
//! before its items are actually read; every tensor's extent is checked against the file
//! (and against the other tensors) before a view can be made of it.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::gguf::TensorInfo;
use crate::metadata::{read_typed_value, MetaValue};
use crate::reader::{reserve_items, shortened, Quoted, Reader};
use crate::{Error, GgmlType, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ALIGNMENT: u64 = 1 << 20;
const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Offset of the tensor count field.
const TENSOR_COUNT_AT: usize = 8;
/// Smallest tensor info: name length (8), n_dims (4), one dim (8), type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: usize = 32;
/// Smallest key/value: key length (8), value type (4), a one-byte value.
const MIN_KV_BYTES: usize = 13;

/// What [`parse`] extracts from a header.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    pub by_name: HashMap<String, usize>,
}

pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Header> {
    let mut r = Reader::new(path, bytes);
    let magic = r.take(4, &"magic")?;
    if magic != MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(Error::BadMagic {
            path: path.to_path_buf(),
            found,
        });
    }
    let version = r.u32(&"version")?;
    if !(2..=3).contains(&version) {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
        });
    }
    let n_tensors_raw = r.u64(&"tensor_count")?;
    // Checked now for an early, clear error, and again once the metadata is read.
    r.check_count(
        n_tensors_raw,
        MIN_TENSOR_INFO_BYTES,
        TENSOR_COUNT_AT,
        &"tensor_count",
    )?;
    let n_kv = r.count(&"metadata_kv_count", MIN_KV_BYTES)?;

    let (metadata, alignment_at) = read_metadata(&mut r, n_kv)?;
    let alignment = alignment(&r, &metadata, alignment_at)?;

    let n_tensors = r.check_count(
        n_tensors_raw,
        MIN_TENSOR_INFO_BYTES,
        TENSOR_COUNT_AT,
        &"tensor_count",
    )?;
    let mut tensors = Vec::with_capacity(reserve_items::<TensorInfo>(n_tensors));
    let mut offset_fields = Vec::with_capacity(reserve_items::<usize>(n_tensors));
    let mut by_name = HashMap::with_capacity(reserve_items::<(String, usize)>(n_tensors));
    for i in 0..n_tensors {
        let name_at = r.pos();
        let (info, offset_at) = read_tensor_info(&mut r, i)?;
        if let Some(first) = by_name.insert(info.name.clone(), i) {
            return Err(r.malformed(
                name_at,
                &format_args!("tensor[{i}].name"),
                format!(
                    "duplicate tensor name {} (first is tensor[{first}])",
                    Quoted(&info.name)
                ),
            ));
        }
        tensors.push(info);
        offset_fields.push(offset_at);
    }

    let data_start = (r.pos() as u64).div_ceil(alignment) * alignment;
    place_tensors(&r, &mut tensors, &offset_fields, data_start, alignment)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        by_name,
    })
}

/// Reads the key/value pairs; also returns the offset of the alignment value, if present.
fn read_metadata(
    r: &mut Reader<'_>,
    n_kv: usize,
) -> Result<(BTreeMap<String, MetaValue>, Option<usize>)> {
    let mut metadata = BTreeMap::new();
    let mut alignment_at = None;
    for i in 0..n_kv {
        let key_at = r.pos();
        let key = r.string(&format_args!("metadata[{i}].key"))?;
        if key == ALIGNMENT_KEY {
            // The value follows its 4-byte type.
            alignment_at = Some(r.pos() + 4);
        }
        let value = read_typed_value(r, &format_args!("metadata[{}]", Quoted(key)))?;
        match metadata.entry(key.to_string()) {
            Entry::Vacant(e) => {
                e.insert(value);
            }
            Entry::Occupied(_) => {
                return Err(r.malformed(
                    key_at,
                    &format_args!("metadata[{i}].key"),
                    format!("duplicate key {}", Quoted(key)),
                ));
            }
        }
    }
    Ok((metadata, alignment_at))
}

fn alignment(
    r: &Reader<'_>,
    metadata: &BTreeMap<String, MetaValue>,
    at: Option<usize>,
) -> Result<u64> {
    let Some(value) = metadata.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let at = at.unwrap_or(0);
    match value.as_u64() {
        Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => Ok(a),
        Some(a) => Err(r.malformed(
            at,
            &ALIGNMENT_KEY,
            format!("{a} is not a power of two between 1 and {MAX_ALIGNMENT}"),
        )),
        None => Err(r.malformed(
            at,
            &ALIGNMENT_KEY,
            format!("expected an unsigned integer, found {}", value.type_name()),
        )),
    }
}

/// Reads one tensor info, validating its shape and type and computing its size; `offset`
/// is left relative to the data section. Also returns the offset field's position.
fn read_tensor_info(r: &mut Reader<'_>, i: usize) -> Result<(TensorInfo, usize)> {
    let name = r.string(&format_args!("tensor[{i}].name"))?;
    let quoted = Quoted(name);
    let field = |part: &str| format!("tensor {quoted} {part}");
    let dims_at = r.pos();
    let n_dims = r.u32(&format_args!("tensor {quoted} n_dims"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(r.malformed(
            dims_at,
            &field("n_dims"),
            format!("{n_dims} is outside 1..={MAX_DIMS}"),
        ));
    }
    let shape_at = r.pos();
    let mut shape = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        let dim_at = r.pos();
        let v = r.u64(&format_args!("tensor {quoted} dim[{d}]"))?;
        if v == 0 || v > i64::MAX as u64 {
            return Err(r.malformed(
                dim_at,
                &field(&format!("dim[{d}]")),
                format!("{v} is not a valid dimension"),
            ));
        }
        shape.push(v);
    }
    let type_at = r.pos();
    let type_id = r.u32(&format_args!("tensor {quoted} type"))?;
    let offset_at = r.pos();
    let offset = r.u64(&format_args!("tensor {quoted} offset"))?;

    let dtype = GgmlType::from_id(type_id).ok_or_else(|| Error::UnsupportedType {
        path: r.path().to_path_buf(),
        offset: type_at as u64,
        tensor: shortened(name),
        type_id,
    })?;
    let size = tensor_bytes(dtype, &shape)
        .map_err(|reason| r.malformed(shape_at, &field("shape"), reason))?;
    let info = TensorInfo {
        name: name.to_string(),
        dtype,
        shape,
        offset,
        size,
    };
    Ok((info, offset_at))
}

/// Bytes a tensor of this type and (ggml-order) shape takes.
fn tensor_bytes(dtype: GgmlType, shape: &[u64]) -> std::result::Result<u64, String> {
    let overflow = || format!("{shape:?} overflows the addressable size");
    let n_elems = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let row = shape.first().copied().unwrap_or(1);
    if !row.is_multiple_of(dtype.block_elems()) {
        return Err(format!(
            "row of {row} is not a multiple of the {dtype} block size {}",
            dtype.block_elems()
        ));
    }
    // `row` is at least 1: zero dimensions were rejected.
    dtype
        .row_bytes(row)
        .and_then(|row_bytes| row_bytes.checked_mul(n_elems / row.max(1)))
        .ok_or_else(overflow)
}

/// Turns relative offsets into absolute ones, checking alignment, bounds and overlap.
fn place_tensors(
    r: &Reader<'_>,
    tensors: &mut [TensorInfo],
    offset_fields: &[usize],
    data_start: u64,
    alignment: u64,
) -> Result<()> {
    let file_len = r.len() as u64;
    for (t, &at) in tensors.iter_mut().zip(offset_fields) {
        let field = format_args!("tensor {} offset", Quoted(&t.name));
        let rel = t.offset;
        if !rel.is_multiple_of(alignment) {
            return Err(r.malformed(at, &field, format!("{rel} is not aligned to {alignment}")));
        }
        let end = data_start
            .checked_add(rel)
            .and_then(|start| start.checked_add(t.size));
        match end {
            Some(end) if end <= file_len => t.offset = data_start + rel,
            _ => {
                return Err(r.malformed(
                    at,
                    &field,
                    format!(
                        "{} data bytes at data offset {rel} (file offset {data_start}+{rel}) \
                         run past the end of the {file_len}-byte file",
                        t.size
                    ),
                ))
            }
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    // Ties broken by directory order so the later of two aliasing tensors is blamed.
    order.sort_unstable_by_key(|&i| (tensors[i].offset, i));
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        if a.offset + a.size > b.offset {
            return Err(r.malformed(
                offset_fields[pair[1]],
                &format_args!("tensor {} offset", Quoted(&b.name)),
                format!(
                    "data [{}, {}) overlaps tensor {} at [{}, {})",
                    b.offset,
                    b.offset + b.size,
                    Quoted(&a.name),
                    a.offset,
                    a.offset + a.size
                ),
            ));
        }
    }
    Ok(())
}
