//! Property tests over the real SmolLM2 GGUF header: random truncations and several random
//! mutations per case, biased toward the length, count, type and offset fields. Opening
//! must return `Ok` or `Err`, never panic, and never allocate more than a small multiple
//! of the file's size.

mod fuzz_support;

use std::fs::OpenOptions;
use std::path::Path;

use fuzz_support::{interesting, peak_alloc, Counting};
use kiln_formats::GgufFile;
use proptest::prelude::*;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap while parsing may not exceed this multiple of the file's size, plus a fixed
/// allowance for the maps' and errors' small allocations. (A string takes 24 bytes of
/// `String` for its 8-byte length, and vectors grow by doubling.)
const MAX_HEAP_PER_FILE_BYTE: u64 = 8;
const HEAP_ALLOWANCE: u64 = 64 << 10;

/// Integer fields of the header worth aiming at, by kind.
#[derive(Default)]
struct Fields {
    /// (offset, width) per kind; see `KIND_NAMES`.
    kinds: [Vec<(usize, usize)>; 8],
}

const KIND_NAMES: [&str; 8] = [
    "counts",
    "key lengths",
    "value types",
    "string lengths",
    "array types and counts",
    "tensor name lengths",
    "n_dims and dims",
    "tensor types and offsets",
];

/// An independent, minimal walk of a well-formed GGUF header recording where its integer
/// fields are; returns them and the end of the tensor directory.
fn walk(b: &[u8]) -> (Fields, usize) {
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().expect("4 bytes"));
    let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().expect("8 bytes")) as usize;
    let mut f = Fields::default();
    f.kinds[0].extend([(8, 8), (16, 8)]);
    let (n_tensors, n_kv) = (u64_at(8), u64_at(16));
    let mut p = 24;
    let scalar = |t: u32| match t {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        other => panic!("real header has no value type {other}"),
    };
    for _ in 0..n_kv {
        f.kinds[1].push((p, 8));
        p += 8 + u64_at(p);
        f.kinds[2].push((p, 4));
        let t = u32_at(p);
        p += 4;
        match t {
            8 => {
                f.kinds[3].push((p, 8));
                p += 8 + u64_at(p);
            }
            9 => {
                let item = u32_at(p);
                f.kinds[4].extend([(p, 4), (p + 4, 8)]);
                let n = u64_at(p + 4);
                p += 12;
                for _ in 0..n {
                    if item == 8 {
                        f.kinds[3].push((p, 8));
                        p += 8 + u64_at(p);
                    } else {
                        p += scalar(item);
                    }
                }
            }
            t => p += scalar(t),
        }
    }
    for _ in 0..n_tensors {
        f.kinds[5].push((p, 8));
        p += 8 + u64_at(p);
        f.kinds[6].push((p, 4));
        let n_dims = u32_at(p) as usize;
        p += 4;
        for _ in 0..n_dims {
            f.kinds[6].push((p, 8));
            p += 8;
        }
        f.kinds[7].extend([(p, 4), (p + 4, 8)]);
        p += 12;
    }
    (f, p)
}

struct Base {
    header: Vec<u8>,
    file_len: u64,
    fields: Fields,
}

fn base() -> &'static Base {
    static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let path =
            kiln_testkit::model_file("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
        let bytes = std::fs::read(&path).expect("read the real model");
        let (fields, end) = walk(&bytes);
        for (kind, name) in fields.kinds.iter().zip(KIND_NAMES) {
            assert!(!kind.is_empty(), "the real header has {name}");
        }
        Base {
            header: bytes[..end].to_vec(),
            file_len: bytes.len() as u64,
            fields,
        }
    })
}

/// Writes `header` and extends the file sparsely to `len` bytes.
fn write_case(path: &Path, header: &[u8], len: u64) {
    std::fs::write(path, header).expect("write case");
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("reopen case");
    file.set_len(len).expect("extend case");
}

/// One mutation, decoded from random numbers so that proptest can shrink it.
fn mutate(bytes: &mut [u8], file_len: u64, (kind, a, b): (u8, u64, u64)) {
    let fields = &base().fields;
    if kind < 7 {
        let list = &fields.kinds[(a % 8) as usize];
        let (at, width) = list[((a >> 8) as usize) % list.len()];
        let mut orig = [0u8; 8];
        orig[..width].copy_from_slice(&bytes[at..at + width]);
        let v = interesting(u64::from_le_bytes(orig), file_len, (b >> 56) as u8, b);
        bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    } else {
        let at = (b % bytes.len() as u64) as usize;
        bytes[at] = if kind == 7 {
            a as u8
        } else {
            bytes[at] ^ (1 << (a % 8))
        };
    }
}

/// Where to cut: inside the header, at a field boundary, or inside the data.
fn cut_point(header_len: usize, file_len: u64, (mode, seed): (u8, u64)) -> u64 {
    match mode % 3 {
        0 => seed % (header_len as u64 + 1),
        1 => {
            let kinds = &base().fields.kinds;
            let list = &kinds[(seed % 8) as usize];
            list[((seed >> 8) as usize) % list.len()].0 as u64 + (seed >> 60)
        }
        _ => header_len as u64 + seed % (file_len - header_len as u64),
    }
}

/// Applies the mutations and cut, writes the case (with the sparse data section when
/// `with_data`), opens it and checks the outcome.
fn run_case(
    mutations: &[(u8, u64, u64)],
    cut: Option<(u8, u64)>,
    with_data: bool,
) -> Result<(), TestCaseError> {
    let base = base();
    let mut header = base.header.clone();
    for m in mutations {
        mutate(&mut header, base.file_len, *m);
    }
    let full_len = if with_data {
        base.file_len
    } else {
        header.len() as u64
    };
    let len = match cut {
        Some(c) => cut_point(header.len(), base.file_len, c).min(full_len),
        None => full_len,
    };
    header.truncate(len.min(header.len() as u64) as usize);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("case.gguf");
    write_case(&path, &header, len);

    let (result, peak) = peak_alloc(|| GgufFile::open(&path));
    let limit = MAX_HEAP_PER_FILE_BYTE * len + HEAP_ALLOWANCE;
    prop_assert!(
        peak <= limit,
        "peak heap {peak} > {limit} for a {len}-byte file"
    );
    match result {
        Ok(g) => {
            // Every view of an accepted file lies inside it.
            for info in g.tensor_infos() {
                let view = g.tensor(&info.name).expect("listed tensor has a view");
                prop_assert_eq!(view.data.len() as u64, info.size);
                prop_assert!(info.offset + info.size <= len);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&path.display().to_string()), "{}", msg);
            prop_assert!(msg.len() < 1024, "overlong message: {}", msg);
        }
    }
    Ok(())
}

fn mutations() -> impl Strategy<Value = Vec<(u8, u64, u64)>> {
    proptest::collection::vec((0u8..9, any::<u64>(), any::<u64>()), 0..5)
}

fn cut() -> impl Strategy<Value = Option<(u8, u64)>> {
    proptest::option::weighted(0.3, (any::<u8>(), any::<u64>()))
}

proptest! {
    #![proptest_config(fuzz_support::config(320))]

    /// The header alone, as the brief's "first N bytes" file: every byte the parser can
    /// read is header, so the heap bound is tight.
    #[test]
    fn mutated_header_alone(mutations in mutations(), cut in cut()) {
        run_case(&mutations, cut, false)?;
    }

    /// The header before the real-sized (sparse) data section: unmutated, it opens, so
    /// mutations reach the offset, overlap and view checks too.
    #[test]
    fn mutated_header_with_data(mutations in mutations(), cut in cut()) {
        run_case(&mutations, cut, true)?;
    }
}

#[test]
fn unmutated_base_opens_within_the_heap_bound() {
    let base = base();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("base.gguf");
    write_case(&path, &base.header, base.file_len);
    let (g, peak) = peak_alloc(|| GgufFile::open(&path).expect("base opens"));
    assert_eq!(g.tensor_infos().len(), 272);
    // Parsing the real header takes about twice its size in heap.
    assert!(peak <= 3 * base.header.len() as u64, "peak heap {peak}");
}

/// Counts are checked against the bytes that remain, which here are 64 MiB of zeros:
/// plausible enough to pass. Reserving for them in full would take 100+ MiB before the
/// first item fails; only a small fixed reservation is allowed.
#[test]
fn claimed_counts_reserve_a_bounded_amount() {
    use kiln_testkit::gguf_writer::{ty, Array, GgufWriter, Value};
    type Setup = fn(&mut GgufWriter);
    let cases: [(&str, Setup); 3] = [
        ("tensor_count", |w| w.tensor_count = Some(1 << 20)),
        ("metadata_kv_count", |w| w.kv_count = Some(1 << 20)),
        ("string array count", |w| {
            let raw = Array::Raw {
                item_type: ty::STRING,
                count: 1 << 22,
                payload: vec![],
            };
            w.kv("a", Value::Array(raw));
            w.kv_count = Some(1);
        }),
    ];
    for (what, setup) in cases {
        let mut w = GgufWriter::new();
        setup(&mut w);
        let (mut bytes, _) = w.build();
        // Make the first item fail: a name or key of length u64::MAX.
        bytes.extend(u64::MAX.to_le_bytes());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("counts.gguf");
        write_case(&path, &bytes, 64 << 20);
        let (result, peak) = peak_alloc(|| GgufFile::open(&path));
        let err = result.expect_err("first item is malformed");
        assert!(
            peak < 2 << 20,
            "{what}: peak heap {peak} before failing with {err}"
        );
    }
}
