//! Hand-built safetensors files: valid corner cases parse, malformed ones are rejected with
//! the right error, offset and field.

mod common;

use common::{assert_malformed, st_err};
use kiln_formats::{Error, SafetensorsFile, StDtype};

/// A file from a JSON header and a data section.
fn st(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// File offset of the first occurrence of `needle` in the header.
fn at(header: &str, needle: &str) -> u64 {
    8 + header.find(needle).expect("needle in header") as u64
}

const TWO: &str = r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}}"#;

#[test]
fn valid_file_and_views() {
    let data: Vec<u8> = (0..12).collect();
    let f = common::temp_file("t.safetensors", &st(TWO, &data));
    let s = SafetensorsFile::open(&f.path).expect("parses");
    assert_eq!(s.tensor_names().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(s.metadata().get("format").map(String::as_str), Some("pt"));
    let a = s.tensor("a").expect("a");
    assert_eq!(
        (a.dtype, a.shape, a.data),
        (StDtype::U8, &[2u64, 2][..], &data[..4])
    );
    let b = s.tensor("b").expect("b");
    assert_eq!(
        (b.dtype, b.n_elements(), b.data),
        (StDtype::F32, 2, &data[4..])
    );
    let err = s.tensor("c").expect_err("missing");
    assert!(
        matches!(&err, Error::MissingTensor { name, .. } if name == "c"),
        "{err}"
    );
}

#[test]
fn valid_corner_cases() {
    let cases = [
        (r#"{}"#, 0),
        (r#"{"__metadata__":{}}  "#, 0),
        (
            r#"{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}"#,
            8,
        ),
        (
            r#"{"z":{"dtype":"F16","shape":[0,3],"data_offsets":[0,0]},"y":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}"#,
            2,
        ),
        (
            r#"{"x":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3],"extra":1}}"#,
            3,
        ),
    ];
    for (header, data_len) in cases {
        let f = common::temp_file("t.safetensors", &st(header, &vec![0; data_len]));
        SafetensorsFile::open(&f.path).unwrap_or_else(|e| panic!("{header}: {e}"));
    }
}

#[test]
fn truncated_or_lying_header_length() {
    assert_malformed(&st_err(&[1, 0, 0]), 0, "header length");
    let mut bytes = st(TWO, &[0; 12]);
    bytes[..8].copy_from_slice(&200_000_000u64.to_le_bytes());
    let reason = assert_malformed(&st_err(&bytes), 0, "header length");
    assert!(
        reason.contains("exceeds the 100000000-byte limit"),
        "{reason}"
    );
    bytes[..8].copy_from_slice(&10_000u64.to_le_bytes());
    let reason = assert_malformed(&st_err(&bytes), 0, "header length");
    assert!(reason.contains("run past the end"), "{reason}");
    // Cut inside the header: its length now runs past the end.
    let bytes = st(TWO, &[0; 12]);
    assert_malformed(&st_err(&bytes[..40]), 0, "header length");
}

#[test]
fn invalid_json_points_at_the_bad_byte() {
    let header = r#"{"a":}"#;
    let reason = assert_malformed(&st_err(&st(header, &[])), at(header, "}"), "header");
    assert!(reason.contains("expected value"), "{reason}");
    let header = "{\"a\":\n  {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\n  x}";
    assert_malformed(&st_err(&st(header, &[0; 4])), at(header, "x}"), "header");
    assert_malformed(&st_err(&st("[1,2]", &[])), 8, "header");
    assert_malformed(&st_err(&st("\u{feff}{}", &[])), 8, "header");
}

#[test]
fn bad_entries() {
    let cases = [
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#,
            "tensor \"t\"",
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
            "tensor \"t\"",
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}"#,
            "tensor \"t\"",
        ),
        (
            r#"{"t":{"dtype":"F32","data_offsets":[0,4]}}"#,
            "tensor \"t\"",
        ),
        (
            r#"{"t":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            "tensor \"t\"",
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}"#,
            "tensor \"t\"",
        ),
        (r#"{"t":7}"#, "tensor \"t\""),
    ];
    for (header, field) in cases {
        let err = st_err(&st(header, &[0; 4]));
        let Error::Malformed {
            offset, field: f, ..
        } = &err.0
        else {
            panic!("{header}: {}", err.1);
        };
        assert_eq!(f, field, "{header}");
        // Somewhere inside the entry's value.
        assert!(
            *offset >= at(header, "\"t\":") + 4 && *offset < 8 + header.len() as u64,
            "{}",
            err.1
        );
    }
}

#[test]
fn unknown_dtype() {
    for dtype in ["F4", "Q8_0", "f32", ""] {
        let header = format!(r#"{{"t":{{"dtype":"{dtype}","shape":[1],"data_offsets":[0,1]}}}}"#);
        let err = st_err(&st(&header, &[0]));
        match &err.0 {
            Error::UnsupportedDtype {
                offset,
                tensor,
                dtype: d,
                ..
            } => {
                assert_eq!(
                    (*offset, tensor.as_str(), d.as_str()),
                    (at(&header, "{\"dtype"), "t", dtype)
                );
            }
            other => panic!("expected UnsupportedDtype, got {other:?}"),
        }
    }
}

#[test]
fn size_mismatches_and_bounds() {
    let cases = [
        // shape × dtype != span
        (
            r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            "data_offsets",
            "spans 4 bytes but shape [2] of F32 needs 8",
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#,
            "data_offsets",
            "begins after it ends",
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            "data_offsets",
            "ends past the 8-byte data section",
        ),
        (
            r#"{"t":{"dtype":"I64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
            "shape",
            "overflows",
        ),
        (
            r#"{"t":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}}"#,
            "data_offsets",
            "begins after it ends",
        ),
    ];
    for (header, part, want) in cases {
        let err = st_err(&st(header, &[0; 8]));
        let reason = assert_malformed(
            &err,
            at(header, "{\"dtype"),
            &format!("tensor \"t\" {part}"),
        );
        assert!(reason.contains(want), "{header}: {reason}");
    }
}

#[test]
fn tensors_must_tile_the_data_section() {
    let overlap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
    let reason = assert_malformed(
        &st_err(&st(overlap, &[0; 6])),
        at(
            overlap,
            "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2",
        ),
        "tensor \"b\" data_offsets",
    );
    assert!(
        reason.contains("[2, 6] overlap tensor \"a\", which ends at 4"),
        "{reason}"
    );

    let alias = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#;
    let reason = assert_malformed(
        &st_err(&st(alias, &[0; 4])),
        at(alias, "{\"dtype\":\"I32"),
        "tensor \"b\" data_offsets",
    );
    assert!(reason.contains("[0, 4] overlap tensor \"a\""), "{reason}");

    let gap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
    let reason = assert_malformed(
        &st_err(&st(gap, &[0; 6])),
        at(gap, "{\"dtype"),
        "tensor \"a\" data_offsets",
    );
    assert!(
        reason.contains("[2, 6] leave a gap after the start of the data section, which ends at 0"),
        "{reason}"
    );

    let header = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    let reason = assert_malformed(
        &st_err(&st(header, &[0; 7])),
        8 + header.len() as u64 + 4,
        "data section",
    );
    assert!(reason.contains("3 bytes after the last tensor"), "{reason}");
}

#[test]
fn duplicate_keys() {
    let dup = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    let reason = assert_malformed(
        &st_err(&st(dup, &[0; 4])),
        at(dup, "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2"),
        "tensor \"a\"",
    );
    assert!(reason.contains("duplicate tensor name"), "{reason}");

    let dup_meta = r#"{"__metadata__":{},"__metadata__":{}}"#;
    assert_malformed(
        &st_err(&st(dup_meta, &[])),
        at(dup_meta, "{}}"),
        "__metadata__",
    );
    let dup_in_meta = r#"{"__metadata__":{"k":"1","k":"2"}}"#;
    let reason = assert_malformed(
        &st_err(&st(dup_in_meta, &[])),
        at(dup_in_meta, "{\"k"),
        "__metadata__",
    );
    assert!(reason.contains("duplicate key \"k\""), "{reason}");
    let not_strings = r#"{"__metadata__":{"k":1}}"#;
    assert_malformed(
        &st_err(&st(not_strings, &[])),
        at(not_strings, "1}"),
        "__metadata__",
    );
}
