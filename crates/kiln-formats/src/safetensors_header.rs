//! Parsing and validation of a safetensors header.
//!
//! Layout: a u64 little-endian header length `n`, `n` bytes of JSON, then the data section.
//! The JSON object maps tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`
//! (offsets relative to the data section) plus an optional `"__metadata__"` map of strings.
//! As in the reference implementation, tensors must tile the data section exactly: sorted
//! by offset, the first begins at 0, each begins where the previous one ends and the last
//! ends at the end of the file. That rules out aliased tensors and hidden bytes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::reader::{cut, shortened, Quoted, Reader};
use crate::{Error, Result, StDtype};

/// The reference implementation's cap; real headers are kilobytes to a few megabytes.
pub(crate) const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Tensors of higher rank are rejected (real ones have at most 5 or so).
const MAX_RANK: usize = 16;
const METADATA_KEY: &str = "__metadata__";
const HEADER_AT: u64 = 8;

/// One validated tensor entry.
pub(crate) struct StTensor {
    pub name: String,
    pub dtype: StDtype,
    /// Row-major: `shape[0]` is the outermost dimension.
    pub shape: Vec<u64>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
    /// File offset of the entry's JSON value, for errors.
    pub entry_at: u64,
}

pub(crate) struct StHeader {
    /// Sorted by offset.
    pub tensors: Vec<StTensor>,
    pub by_name: HashMap<String, usize>,
    pub metadata: BTreeMap<String, String>,
}

/// A JSON object read as its entries in document order, so that duplicate keys are seen
/// rather than silently overwritten.
struct Entries<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct EntriesVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(EntriesVisitor(PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(expecting = "a tensor entry {\"dtype\", \"shape\", \"data_offsets\"}")]
struct RawEntry {
    dtype: String,
    #[serde(deserialize_with = "bounded_shape")]
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// A shape array, refused as soon as it exceeds [`MAX_RANK`] dimensions.
fn bounded_shape<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<u64>, D::Error> {
    struct ShapeVisitor;
    impl<'de> Visitor<'de> for ShapeVisitor {
        type Value = Vec<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "an array of at most {MAX_RANK} non-negative integers")
        }
        fn visit_seq<A: SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Vec<u64>, A::Error> {
            let mut dims = Vec::new();
            while let Some(d) = seq.next_element::<u64>()? {
                if dims.len() == MAX_RANK {
                    return Err(de::Error::custom(format!(
                        "shape has more than {MAX_RANK} dimensions"
                    )));
                }
                dims.push(d);
            }
            Ok(dims)
        }
    }
    d.deserialize_seq(ShapeVisitor)
}

/// Builds errors carrying the file's path.
struct Errors<'a> {
    path: &'a Path,
}

impl Errors<'_> {
    fn malformed(&self, offset: u64, field: impl fmt::Display, reason: impl Into<String>) -> Error {
        Error::Malformed {
            path: self.path.to_path_buf(),
            offset,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// A serde_json error inside `text`, which starts at file offset `base`.
    fn json(
        &self,
        base: u64,
        text: &[u8],
        field: impl fmt::Display,
        e: &serde_json::Error,
    ) -> Error {
        let full = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        // serde quotes offending strings in full; a corrupt header can make them huge.
        let reason = cut(full.strip_suffix(&position).unwrap_or(&full), 240);
        let at = byte_index(text, e.line(), e.column());
        self.malformed(base + at as u64, field, reason)
    }
}

/// Converts serde_json's 1-based line and column (counted in bytes) to an index in `text`.
fn byte_index(text: &[u8], line: usize, column: usize) -> usize {
    let line_start = match line {
        0 | 1 => 0,
        _ => text
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\n')
            .nth(line - 2)
            .map_or(text.len(), |(i, _)| i + 1),
    };
    (line_start + column.saturating_sub(1)).min(text.len())
}

pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<StHeader> {
    let errors = Errors { path };
    let mut r = Reader::new(path, bytes);
    let n = r.u64(&"header length")?;
    let file_len = bytes.len() as u64;
    if n > MAX_HEADER_BYTES {
        return Err(errors.malformed(
            0,
            "header length",
            format!("{n} bytes exceeds the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    // `n` is at most 100 MB, so it fits in usize everywhere this runs.
    let json = r.take(n as usize, &"header").map_err(|_| {
        errors.malformed(
            0,
            "header length",
            format!("{n} bytes run past the end of the {file_len}-byte file"),
        )
    })?;
    let data_start = HEADER_AT + n;
    let data_len = file_len - data_start;

    let entries: Entries<&RawValue> =
        serde_json::from_slice(json).map_err(|e| errors.json(HEADER_AT, json, "header", &e))?;

    let mut metadata = None;
    let mut tensors = Vec::with_capacity(entries.0.len());
    for (name, raw) in entries.0 {
        // The raw value borrows from `json`; its address gives its position in the file.
        let rel = (raw.get().as_ptr() as usize).wrapping_sub(json.as_ptr() as usize);
        let entry_at = HEADER_AT + rel.min(json.len()) as u64;
        if name == METADATA_KEY {
            if metadata.is_some() {
                return Err(errors.malformed(entry_at, METADATA_KEY, "duplicate key"));
            }
            metadata = Some(read_metadata(&errors, entry_at, raw)?);
            continue;
        }
        tensors.push(read_tensor(
            &errors, name, raw, entry_at, data_start, data_len,
        )?);
    }

    // Ties broken by document order so the later of two aliasing entries is the one blamed.
    tensors.sort_unstable_by_key(|t| (t.start, t.end, t.entry_at));
    let mut by_name = HashMap::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        if let Some(first) = by_name.insert(t.name.clone(), i) {
            return Err(errors.malformed(
                t.entry_at.max(tensors[first].entry_at),
                format_args!("tensor {}", Quoted(&t.name)),
                "duplicate tensor name",
            ));
        }
    }
    check_tiling(&errors, &tensors, data_start, file_len)?;
    Ok(StHeader {
        tensors,
        by_name,
        metadata: metadata.unwrap_or_default(),
    })
}

fn read_metadata(errors: &Errors<'_>, at: u64, raw: &RawValue) -> Result<BTreeMap<String, String>> {
    let text = raw.get().as_bytes();
    let entries: Entries<String> =
        serde_json::from_slice(text).map_err(|e| errors.json(at, text, METADATA_KEY, &e))?;
    let mut map = BTreeMap::new();
    for (k, v) in entries.0 {
        let shown = Quoted(&k).to_string();
        if map.insert(k, v).is_some() {
            return Err(errors.malformed(at, METADATA_KEY, format!("duplicate key {shown}")));
        }
    }
    Ok(map)
}

fn read_tensor(
    errors: &Errors<'_>,
    name: String,
    raw: &RawValue,
    at: u64,
    data_start: u64,
    data_len: u64,
) -> Result<StTensor> {
    let quoted = Quoted(&name);
    let text = raw.get().as_bytes();
    let entry: RawEntry = serde_json::from_slice(text)
        .map_err(|e| errors.json(at, text, format_args!("tensor {quoted}"), &e))?;
    let dtype = StDtype::from_name(&entry.dtype).ok_or_else(|| Error::UnsupportedDtype {
        path: errors.path.to_path_buf(),
        offset: at,
        tensor: shortened(&name),
        dtype: shortened(&entry.dtype),
    })?;
    let size = entry
        .shape
        .iter()
        .try_fold(dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            errors.malformed(
                at,
                format_args!("tensor {quoted} shape"),
                format!(
                    "{:?} of {dtype} overflows the addressable size",
                    entry.shape
                ),
            )
        })?;
    let [begin, end] = entry.data_offsets;
    let offsets_field = format_args!("tensor {quoted} data_offsets");
    if begin > end {
        return Err(errors.malformed(
            at,
            offsets_field,
            format!("[{begin}, {end}] begins after it ends"),
        ));
    }
    if end - begin != size {
        return Err(errors.malformed(
            at,
            offsets_field,
            format!(
                "[{begin}, {end}] spans {} bytes but shape {:?} of {dtype} needs {size}",
                end - begin,
                entry.shape
            ),
        ));
    }
    if end > data_len {
        return Err(errors.malformed(
            at,
            offsets_field,
            format!("[{begin}, {end}] ends past the {data_len}-byte data section"),
        ));
    }
    Ok(StTensor {
        name,
        dtype,
        shape: entry.shape,
        start: data_start + begin,
        end: data_start + end,
        entry_at: at,
    })
}

/// Checks that the (sorted) tensors cover the data section exactly, without overlap.
fn check_tiling(
    errors: &Errors<'_>,
    tensors: &[StTensor],
    data_start: u64,
    file_len: u64,
) -> Result<()> {
    let mut expected = data_start;
    let mut previous: Option<&StTensor> = None;
    for t in tensors {
        if t.start != expected {
            let after = previous.map_or("the start of the data section".to_string(), |p| {
                format!("tensor {}", Quoted(&p.name))
            });
            let what = if t.start < expected {
                "overlap"
            } else {
                "leave a gap after"
            };
            let rel = |o: u64| o - data_start;
            return Err(errors.malformed(
                t.entry_at,
                format_args!("tensor {} data_offsets", Quoted(&t.name)),
                format!(
                    "[{}, {}] {what} {after}, which ends at {}",
                    rel(t.start),
                    rel(t.end),
                    rel(expected)
                ),
            ));
        }
        expected = t.end;
        previous = Some(t);
    }
    if expected != file_len {
        return Err(errors.malformed(
            expected,
            "data section",
            format!(
                "{} bytes after the last tensor belong to none",
                file_len - expected
            ),
        ));
    }
    Ok(())
}
