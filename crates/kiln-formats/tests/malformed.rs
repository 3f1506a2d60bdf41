//! Deliberately malformed GGUF files: each is rejected with the specific error, naming the
//! right byte offset and field.

mod common;

use common::{assert_malformed, gguf_err, gguf_err_of};
use kiln_formats::Error;
use kiln_testkit::gguf_writer::{ggml, ty, Array, GgufWriter, Value};

/// A small valid file: three key/values, an F32 and a Q8_0 tensor.
fn base() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::str("llama"));
    w.kv(
        "tokenizer.ggml.tokens",
        Value::Array(Array::strs(&["a", "bc"])),
    );
    w.kv("answer", Value::U64(42));
    w.tensor_f32("norm.weight", &[4], &[1.0, 2.0, 3.0, 4.0]);
    w.tensor("tok.weight", &[32, 2], ggml::Q8_0, vec![7; 68]);
    w
}

fn u64_at(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn base_is_valid() {
    let f = common::temp_file("t.gguf", &base().build().0);
    let g = kiln_formats::GgufFile::open(&f.path).expect("base parses");
    assert_eq!(g.tensor("tok.weight").expect("tensor").data, &[7; 68][..]);
}

#[test]
fn bad_magic() {
    let mut w = base();
    w.magic = *b"GGML";
    let err = gguf_err_of(&w);
    assert!(
        matches!(err.0, Error::BadMagic { found, .. } if &found == b"GGML"),
        "{}",
        err.1
    );
    assert!(err.1.contains("at offset 0"), "{}", err.1);
}

#[test]
fn unsupported_versions() {
    for version in [0, 1, 4, u32::MAX] {
        let mut w = base();
        w.version = version;
        let err = gguf_err_of(&w);
        assert!(
            matches!(err.0, Error::UnsupportedVersion { version: v, .. } if v == version),
            "{}",
            err.1
        );
        assert!(err.1.contains("at offset 4"), "{}", err.1);
    }
}

#[test]
fn version_2_is_accepted() {
    let mut w = base();
    w.version = 2;
    let f = common::temp_file("t.gguf", &w.build().0);
    assert_eq!(
        kiln_formats::GgufFile::open(&f.path).expect("v2").version(),
        2
    );
}

#[test]
fn truncated_at_every_section_boundary() {
    let (bytes, l) = base().build();
    let mut cuts = vec![0, 2, 4, 6, 8, 12, 16, 20, 24];
    for i in 0..l.kv_at.len() {
        cuts.extend([
            l.kv_at[i],
            l.kv_at[i] + 4,
            l.kv_type_at[i],
            l.kv_type_at[i] + 4,
        ]);
    }
    for i in 0..l.tensor_info_at.len() {
        cuts.extend([
            l.tensor_info_at[i],
            l.tensor_n_dims_at[i],
            l.tensor_n_dims_at[i] + 4,
            l.tensor_type_at[i],
            l.tensor_offset_at[i],
            l.tensor_offset_at[i] + 7,
        ]);
    }
    cuts.extend([l.tensor_infos_end, l.data_start]);
    cuts.extend(l.tensor_data_at.iter().map(|&d| d + 1));
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        let err = gguf_err(&bytes[..cut]);
        let Error::Malformed { offset, reason, .. } = &err.0 else {
            panic!("cut at {cut}: expected Malformed, got {}", err.1);
        };
        // The error points at or before the cut, never past the data it had.
        assert!(*offset <= cut as u64, "cut at {cut}: {}", err.1);
        assert!(
            reason.contains("truncated file?")
                || reason.contains("cannot fit")
                || reason.contains("past the end"),
            "cut at {cut}: {}",
            err.1
        );
    }
}

#[test]
fn truncated_fields_are_named_exactly() {
    let (bytes, l) = base().build();
    let reason = assert_malformed(&gguf_err(&bytes[..2]), 0, "magic");
    assert!(
        reason.contains("needs 4 bytes but only 2 remain"),
        "{reason}"
    );
    assert_malformed(&gguf_err(&bytes[..6]), 4, "version");
    assert_malformed(&gguf_err(&bytes[..12]), 8, "tensor_count");
    // The tensor count is checked against what remains before the kv count is read.
    let reason = assert_malformed(&gguf_err(&bytes[..20]), 8, "tensor_count");
    assert!(
        reason.contains("count 2 (at least 32 bytes each) cannot fit in the 4 bytes"),
        "{reason}"
    );
    let (no_tensors, _) = GgufWriter::new().build();
    assert_malformed(&gguf_err(&no_tensors[..20]), 16, "metadata_kv_count");
    // Inside the last tensor info's offset field.
    let at = l.tensor_offset_at[1];
    let reason = assert_malformed(
        &gguf_err(&bytes[..at + 3]),
        at as u64,
        "tensor \"tok.weight\" offset",
    );
    assert!(reason.contains("truncated file?"), "{reason}");
    // Directory complete, data missing.
    let reason = assert_malformed(
        &gguf_err(&bytes[..l.tensor_data_at[1] + 10]),
        at as u64,
        "tensor \"tok.weight\" offset",
    );
    assert!(reason.contains("run past the end"), "{reason}");
}

#[test]
fn empty_file() {
    assert_malformed(&gguf_err(&[]), 0, "magic");
}

#[test]
fn huge_string_length() {
    let mut w = base();
    let mut payload = u64::MAX.to_le_bytes().to_vec();
    payload.extend(b"abc");
    w.kv(
        "general.name",
        Value::Raw {
            type_id: ty::STRING,
            payload,
        },
    );
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[3] as u64 + 4,
        "metadata[\"general.name\"]",
    );
    assert!(reason.contains("cannot fit"), "{reason}");
}

#[test]
fn huge_key_length() {
    let (mut bytes, l) = base().build();
    u64_at(&mut bytes, l.kv_at[1], 1 << 40);
    let reason = assert_malformed(&gguf_err(&bytes), l.kv_at[1] as u64, "metadata[1].key");
    assert!(reason.contains("count 1099511627776"), "{reason}");
}

#[test]
fn huge_array_count() {
    let mut w = base();
    let raw = Array::Raw {
        item_type: ty::U32,
        count: u64::MAX / 2,
        payload: vec![0; 16],
    };
    w.kv("ids", Value::Array(raw));
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[3] as u64 + 8,
        "metadata[\"ids\"] array count",
    );
    assert!(reason.contains("cannot fit"), "{reason}");
}

#[test]
fn string_array_count_beyond_remaining_bytes() {
    // 10 strings claimed, each needs at least its 8-byte length, but only 3 follow.
    let mut payload = Vec::new();
    for s in ["a", "b", "c"] {
        kiln_testkit::gguf_writer::encode_string(&mut payload, s.as_bytes());
    }
    let mut w = GgufWriter::new();
    w.kv(
        "t",
        Value::Array(Array::Raw {
            item_type: ty::STRING,
            count: 10,
            payload,
        }),
    );
    let (bytes, l) = w.build();
    assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[0] as u64 + 8,
        "metadata[\"t\"] array count",
    );
}

#[test]
fn huge_tensor_and_kv_counts() {
    let mut w = base();
    w.tensor_count = Some(u64::MAX);
    assert_malformed(&gguf_err_of(&w), 8, "tensor_count");
    let mut w = base();
    w.kv_count = Some(1 << 50);
    assert_malformed(&gguf_err_of(&w), 16, "metadata_kv_count");
}

#[test]
fn tensor_count_that_fits_the_file_but_not_the_directory() {
    // Plausible before the metadata is read, impossible after it.
    let mut w = base();
    w.kv("pad", Value::Array(Array::U8(vec![0; 4096])));
    w.tensor_count = Some(100);
    assert_malformed(&gguf_err_of(&w), 8, "tensor_count");
}

#[test]
fn n_dims_zero_and_five() {
    for (n_dims, dims) in [(0u32, vec![]), (5, vec![1, 1, 1, 1, 4])] {
        let mut w = base();
        let t = w.tensor("bad", &dims, ggml::F32, vec![0; 16]);
        t.n_dims = Some(n_dims);
        let (bytes, l) = w.build();
        let reason = assert_malformed(
            &gguf_err(&bytes),
            l.tensor_n_dims_at[2] as u64,
            "tensor \"bad\" n_dims",
        );
        assert!(
            reason.contains(&format!("{n_dims} is outside 1..=4")),
            "{reason}"
        );
    }
}

#[test]
fn dim_zero() {
    let mut w = base();
    w.tensor("bad", &[4, 0], ggml::F32, vec![]);
    let (bytes, l) = w.build();
    let at = l.tensor_n_dims_at[2] as u64 + 4 + 8;
    assert_malformed(&gguf_err(&bytes), at, "tensor \"bad\" dim[1]");
}

#[test]
fn dim_beyond_i64() {
    let mut w = base();
    w.tensor("bad", &[1 << 63], ggml::F32, vec![]);
    let (bytes, l) = w.build();
    assert_malformed(
        &gguf_err(&bytes),
        l.tensor_n_dims_at[2] as u64 + 4,
        "tensor \"bad\" dim[0]",
    );
}

#[test]
fn element_count_and_byte_size_overflow() {
    for dims in [vec![1 << 32, 1 << 32, 2], vec![1 << 62, 1]] {
        let mut w = base();
        w.tensor("big", &dims, ggml::F32, vec![]);
        let (bytes, l) = w.build();
        let reason = assert_malformed(
            &gguf_err(&bytes),
            l.tensor_n_dims_at[2] as u64 + 4,
            "tensor \"big\" shape",
        );
        assert!(reason.contains("overflows"), "{reason}");
    }
}

#[test]
fn row_not_a_whole_number_of_blocks() {
    let mut w = base();
    w.tensor("q", &[30, 2], ggml::Q8_0, vec![0; 68]);
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.tensor_n_dims_at[2] as u64 + 4,
        "tensor \"q\" shape",
    );
    assert!(reason.contains("block size 32"), "{reason}");
}

#[test]
fn unknown_ggml_type() {
    for type_id in [4, 5, 99, u32::MAX] {
        let mut w = base();
        w.tensor("odd", &[4], type_id, vec![0; 16]);
        let (bytes, l) = w.build();
        let err = gguf_err(&bytes);
        match &err.0 {
            Error::UnsupportedType {
                offset,
                tensor,
                type_id: t,
                ..
            } => {
                assert_eq!(
                    (*offset, tensor.as_str(), *t),
                    (l.tensor_type_at[2] as u64, "odd", type_id)
                );
            }
            other => panic!("expected UnsupportedType, got {other:?}"),
        }
        assert!(
            err.1
                .contains(&format!("at offset {}", l.tensor_type_at[2])),
            "{}",
            err.1
        );
    }
}

#[test]
fn misaligned_offset() {
    let mut w = base();
    w.tensors[1].offset = Some(33);
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.tensor_offset_at[1] as u64,
        "tensor \"tok.weight\" offset",
    );
    assert!(reason.contains("33 is not aligned to 32"), "{reason}");
}

#[test]
fn data_past_eof() {
    for offset in [1 << 20, u64::MAX - 31] {
        let mut w = base();
        w.tensors[0].offset = Some(offset);
        let (bytes, l) = w.build();
        let reason = assert_malformed(
            &gguf_err(&bytes),
            l.tensor_offset_at[0] as u64,
            "tensor \"norm.weight\" offset",
        );
        assert!(reason.contains("run past the end"), "{reason}");
    }
}

#[test]
fn overlapping_tensors() {
    let mut w = base();
    w.tensor_f32("alias", &[4], &[0.0; 4]).offset = Some(0);
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.tensor_offset_at[2] as u64,
        "tensor \"alias\" offset",
    );
    assert!(
        reason.contains("overlaps tensor \"norm.weight\""),
        "{reason}"
    );
}

#[test]
fn duplicate_tensor_names() {
    let mut w = base();
    w.tensor_f32("norm.weight", &[4], &[0.0; 4]);
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.tensor_info_at[2] as u64,
        "tensor[2].name",
    );
    assert!(
        reason.contains("duplicate tensor name \"norm.weight\" (first is tensor[0])"),
        "{reason}"
    );
}

#[test]
fn duplicate_keys() {
    let mut w = base();
    w.kv("answer", Value::U64(43));
    let (bytes, l) = w.build();
    let reason = assert_malformed(&gguf_err(&bytes), l.kv_at[3] as u64, "metadata[3].key");
    assert!(reason.contains("duplicate key \"answer\""), "{reason}");
}

#[test]
fn alignment_not_a_power_of_two() {
    for value in [
        Value::U32(0),
        Value::U32(3),
        Value::U32(48),
        Value::U64(1 << 40),
    ] {
        let mut w = base();
        w.kv("general.alignment", value.clone());
        let (bytes, l) = w.build();
        let reason = assert_malformed(
            &gguf_err(&bytes),
            l.kv_type_at[3] as u64 + 4,
            "general.alignment",
        );
        assert!(
            reason.contains("is not a power of two"),
            "{value:?}: {reason}"
        );
    }
    let mut w = base();
    w.kv("general.alignment", Value::str("32"));
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[3] as u64 + 4,
        "general.alignment",
    );
    assert!(reason.contains("found string"), "{reason}");
}

#[test]
fn invalid_utf8_key() {
    let mut w = base();
    w.kv_raw_key(&[b'k', 0xff, 0xfe], Value::U8(1));
    let (bytes, l) = w.build();
    let reason = assert_malformed(&gguf_err(&bytes), l.kv_at[3] as u64 + 8, "metadata[3].key");
    assert!(reason.contains("invalid UTF-8"), "{reason}");
}

#[test]
fn invalid_utf8_tensor_name() {
    let mut w = base();
    w.tensors[1].name = vec![0xc3, 0x28];
    let (bytes, l) = w.build();
    let at = l.tensor_info_at[1] as u64 + 8;
    assert_malformed(&gguf_err(&bytes), at, "tensor[1].name");
}

#[test]
fn bool_byte_two() {
    let mut w = base();
    w.kv(
        "flag",
        Value::Raw {
            type_id: ty::BOOL,
            payload: vec![2],
        },
    );
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[3] as u64 + 4,
        "metadata[\"flag\"]",
    );
    assert!(
        reason.contains("bool byte 2 is neither 0 nor 1"),
        "{reason}"
    );

    let mut w = base();
    let raw = Array::Raw {
        item_type: ty::BOOL,
        count: 2,
        payload: vec![1, 2],
    };
    w.kv("flags", Value::Array(raw));
    let (bytes, l) = w.build();
    // Item 1 follows the item type (4), the count (8) and item 0 (1).
    let at = l.kv_type_at[3] as u64 + 4 + 4 + 8 + 1;
    assert_malformed(&gguf_err(&bytes), at, "metadata[\"flags\"][1]");
}

#[test]
fn unknown_value_types() {
    let mut w = base();
    w.kv(
        "odd",
        Value::Raw {
            type_id: 13,
            payload: vec![0; 8],
        },
    );
    let (bytes, l) = w.build();
    let reason = assert_malformed(
        &gguf_err(&bytes),
        l.kv_type_at[3] as u64,
        "metadata[\"odd\"].type",
    );
    assert!(reason.contains("unknown value type 13"), "{reason}");

    let mut w = base();
    w.kv(
        "odd",
        Value::Array(Array::Raw {
            item_type: 77,
            count: 1,
            payload: vec![0; 8],
        }),
    );
    let (bytes, l) = w.build();
    let at = l.kv_type_at[3] as u64 + 4;
    let reason = assert_malformed(&gguf_err(&bytes), at, "metadata[\"odd\"] array item type");
    assert!(reason.contains("unknown array item type 77"), "{reason}");
}

#[test]
fn arrays_nested_too_deeply() {
    let mut a = Array::U8(vec![1]);
    for _ in 0..5 {
        a = Array::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.kv("deep", Value::Array(a));
    let (bytes, l) = w.build();
    // Depths 0..=3 are read; the fifth array header (each is 4 + 8 bytes) is refused.
    let at = l.kv_type_at[0] as u64 + 4 + 4 * 12;
    let reason = assert_malformed(
        &gguf_err(&bytes),
        at,
        "metadata[\"deep\"][0][0][0][0] array item type",
    );
    assert!(reason.contains("nested too deeply"), "{reason}");
}

#[test]
fn long_names_are_shortened_in_messages() {
    let name = "x".repeat(10_000);
    let mut w = base();
    w.tensor(&name, &[4], 99, vec![0; 16]);
    let err = gguf_err_of(&w);
    assert!(err.1.len() < 400, "{}", err.1);
    let mut w = base();
    w.kv(
        &name,
        Value::Raw {
            type_id: ty::BOOL,
            payload: vec![9],
        },
    );
    let err = gguf_err_of(&w);
    assert!(
        err.1.len() < 400 && err.1.contains("(10000 bytes)"),
        "{}",
        err.1
    );
}
