//! Property test over the real all-MiniLM-L6-v2 safetensors header: several mutations
//! per case aimed at what the reader validates (numbers in shapes and offsets, dtypes,
//! tensor names, the length prefix, JSON structure), plus random truncations. Opening
//! must return `Ok` or `Err`, never panic, keep every accepted view inside the file, and
//! allocate at most a small multiple of the header's size.

mod fuzz_support;

use std::fs::OpenOptions;
use std::path::Path;

use fuzz_support::{interesting, peak_alloc, Counting};
use kiln_formats::SafetensorsFile;
use proptest::prelude::*;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap may not exceed this multiple of the header bytes in the file (plus a fixed
/// allowance). The worst case is a metadata map of tiny distinct entries, whose B-tree
/// nodes take about twelve times their JSON.
const MAX_HEAP_PER_HEADER_BYTE: u64 = 16;
const HEAP_ALLOWANCE: u64 = 64 << 10;

const DTYPES: [&str; 10] = [
    "F16",
    "BF16",
    "I64",
    "U8",
    "BOOL",
    "F8_E4M3",
    "F4",
    "",
    "f32",
    "F32\\u0000",
];

struct Base {
    json: Vec<u8>,
    data_len: u64,
}

fn base() -> &'static Base {
    static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let dir = kiln_testkit::model_dir("all-minilm-l6-v2");
        let bytes = std::fs::read(dir.join("model.safetensors")).expect("read the real model");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        Base {
            json: bytes[8..8 + n].to_vec(),
            data_len: (bytes.len() - 8 - n) as u64,
        }
    })
}

/// Start and end of every run of ASCII digits.
fn numbers(json: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < json.len() {
        if json[i].is_ascii_digit() {
            let start = i;
            while i < json.len() && json[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// Ranges of the text between `prefix` and the next quote, e.g. dtype values.
fn quoted_after(json: &[u8], prefix: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for start in 0..json.len().saturating_sub(prefix.len()) {
        if json[start..].starts_with(prefix) {
            let from = start + prefix.len();
            if let Some(len) = json[from..].iter().position(|&b| b == b'"') {
                out.push((from, from + len));
            }
        }
    }
    out
}

fn pick<T: Copy>(items: &[T], seed: u64) -> Option<T> {
    (!items.is_empty()).then(|| items[(seed % items.len() as u64) as usize])
}

/// One mutation of the JSON text, decoded from random numbers so proptest can shrink it.
fn mutate(json: &mut Vec<u8>, (kind, a, b): (u8, u64, u64)) {
    match kind {
        0..=3 => {
            let Some((s, e)) = pick(&numbers(json), a) else {
                return;
            };
            let orig: u64 = std::str::from_utf8(&json[s..e])
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            let text = match b % 16 {
                0 => "18446744073709551616".to_string(),
                1 => "340282366920938463463374607431768211456".to_string(),
                2 => "-1".to_string(),
                3 => "1.5".to_string(),
                4 => "1e3".to_string(),
                _ => interesting(orig, base().data_len, (b >> 8) as u8, b >> 16).to_string(),
            };
            json.splice(s..e, text.into_bytes());
        }
        4 => {
            let Some((s, e)) = pick(&quoted_after(json, b"\"dtype\":\""), a) else {
                return;
            };
            let dtype = DTYPES[(b % DTYPES.len() as u64) as usize];
            json.splice(s..e, dtype.bytes());
        }
        5 => {
            // Rename a tensor after another (duplicates) or to a random byte string.
            let keys = quoted_after(json, b"},\"");
            let (Some((s, e)), Some((fs, fe))) = (pick(&keys, a), pick(&keys, b)) else {
                return;
            };
            let name = json[fs..fe].to_vec();
            json.splice(s..e, name);
        }
        6 => {
            let at = (b % json.len().max(1) as u64) as usize;
            let set = b"{}[]\":,\\ 0a-";
            if at < json.len() {
                json[at] = if a % 4 == 0 {
                    a as u8
                } else {
                    set[(a % set.len() as u64) as usize]
                };
            }
        }
        7 => {
            let at = (b % json.len().max(1) as u64) as usize;
            let end = (at + 1 + (a % 64) as usize).min(json.len());
            json.drain(at..end);
        }
        8 => {
            // Give a tensor another's data_offsets: equal sizes are common (biases, norms),
            // so this reaches the aliasing and gap checks.
            let offsets = quoted_after(json, b"\"data_offsets\":");
            let spans: Vec<(usize, usize)> = offsets
                .iter()
                .filter_map(|&(s, _)| Some((s, s + json[s..].iter().position(|&c| c == b']')? + 1)))
                .collect();
            let (Some((s, e)), Some((fs, fe))) = (pick(&spans, a), pick(&spans, b)) else {
                return;
            };
            let value = json[fs..fe].to_vec();
            json.splice(s..e, value);
        }
        9 => {
            // Drop a whole entry, leaving a hole in the data section.
            let ends: Vec<usize> = (0..json.len().saturating_sub(2))
                .filter(|&i| &json[i..i + 3] == b"},\"")
                .collect();
            if ends.len() >= 2 {
                let i = (a % (ends.len() as u64 - 1)) as usize;
                json.drain(ends[i] + 1..ends[i + 1] + 1);
            }
        }
        _ => {
            let at = (b % json.len().max(1) as u64) as usize;
            let end = (at + 1 + (a % 256) as usize).min(json.len());
            let copy = json[at..end].to_vec();
            let to = (a >> 16) as usize % (json.len() + 1);
            json.splice(to..to, copy);
        }
    }
}

fn write_case(path: &Path, bytes: &[u8], len: u64) {
    std::fs::write(path, bytes).expect("write case");
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("reopen case");
    file.set_len(len).expect("extend case");
}

proptest! {
    #![proptest_config(fuzz_support::config(600))]

    #[test]
    fn mutated_real_header_never_panics_or_overallocates(
        mutations in proptest::collection::vec((0u8..11, any::<u64>(), any::<u64>()), 0..5),
        length_lie in proptest::option::weighted(0.15, (any::<u8>(), any::<u64>())),
        cut in proptest::option::weighted(0.2, any::<u64>()),
    ) {
        let base = base();
        let mut json = base.json.clone();
        for m in &mutations {
            mutate(&mut json, *m);
        }
        let real_n = json.len() as u64;
        let full_len = 8 + real_n + base.data_len;
        let n = match length_lie {
            Some((pick, noise)) => interesting(real_n, full_len, pick, noise),
            None => real_n,
        };
        let mut bytes = n.to_le_bytes().to_vec();
        bytes.extend(&json);
        let len = match cut {
            Some(seed) => seed % (full_len + 1),
            None => full_len,
        };
        bytes.truncate(len.min(bytes.len() as u64) as usize);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("case.safetensors");
        write_case(&path, &bytes, len);

        let (result, peak) = peak_alloc(|| SafetensorsFile::open(&path));
        let limit = MAX_HEAP_PER_HEADER_BYTE * bytes.len() as u64 + HEAP_ALLOWANCE;
        prop_assert!(peak <= limit, "peak heap {peak} > {limit} for {} header bytes", bytes.len());
        match result {
            Ok(st) => {
                let mut covered = 0;
                for view in st.tensors() {
                    let view = view.expect("listed tensor has a view");
                    let size = view.n_elements() * view.dtype.size_bytes();
                    prop_assert_eq!(view.data.len() as u64, size);
                    covered += size;
                }
                // Accepted tensors tile the data section exactly.
                prop_assert_eq!(covered, len - 8 - n);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with(&path.display().to_string()), "{}", msg);
                prop_assert!(msg.len() < 1024, "overlong message: {}", msg);
            }
        }
    }
}

#[test]
fn unmutated_base_opens() {
    let base = base();
    let mut bytes = (base.json.len() as u64).to_le_bytes().to_vec();
    bytes.extend(&base.json);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("base.safetensors");
    write_case(&path, &bytes, bytes.len() as u64 + base.data_len);
    let (st, peak) = peak_alloc(|| SafetensorsFile::open(&path).expect("base opens"));
    assert_eq!(st.len(), 104);
    assert!(peak <= 4 * bytes.len() as u64, "peak heap {peak}");
}
