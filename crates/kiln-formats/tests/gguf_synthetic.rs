//! Well-formed synthetic GGUF files: every value type, alignment, accessors and views.

mod common;

use kiln_formats::{Error, GgmlType, GgufFile, MetaArray, MetaValue};
use kiln_testkit::gguf_writer::{ggml, Array, GgufWriter, Value};

fn open(w: &GgufWriter) -> (common::TempFile, GgufFile) {
    let f = common::temp_file("t.gguf", &w.build().0);
    let g = GgufFile::open(&f.path).expect("valid file parses");
    (f, g)
}

#[test]
fn every_value_type_round_trips() {
    let mut w = GgufWriter::new();
    w.kv("u8", Value::U8(200))
        .kv("i8", Value::I8(-5))
        .kv("u16", Value::U16(60_000))
        .kv("i16", Value::I16(-30_000))
        .kv("u32", Value::U32(4_000_000_000))
        .kv("i32", Value::I32(-7))
        .kv("u64", Value::U64(1 << 40))
        .kv("i64", Value::I64(-(1 << 40)))
        .kv("f32", Value::F32(1.5))
        .kv("f64", Value::F64(-2.25))
        .kv("bool", Value::Bool(true))
        .kv("str", Value::str("héllo"))
        .kv("a_u8", Value::Array(Array::U8(vec![1, 2])))
        .kv("a_i32", Value::Array(Array::I32(vec![-1, 3])))
        .kv("a_u32", Value::Array(Array::U32(vec![9])))
        .kv("a_u64", Value::Array(Array::U64(vec![])))
        .kv("a_f32", Value::Array(Array::F32(vec![0.5, 0.25])))
        .kv("a_bool", Value::Array(Array::Bool(vec![false, true])))
        .kv("a_str", Value::Array(Array::strs(&["x", "", "yz"])))
        .kv(
            "a_nested",
            Value::Array(Array::Array(vec![Array::U8(vec![1]), Array::strs(&["q"])])),
        );
    let (_f, g) = open(&w);
    let m = g.metadata();
    assert_eq!(m.len(), 20);
    assert_eq!(m["u8"], MetaValue::U8(200));
    assert_eq!(m["i8"], MetaValue::I8(-5));
    assert_eq!(m["u16"], MetaValue::U16(60_000));
    assert_eq!(m["i16"], MetaValue::I16(-30_000));
    assert_eq!(m["u32"], MetaValue::U32(4_000_000_000));
    assert_eq!(m["i32"], MetaValue::I32(-7));
    assert_eq!(m["u64"], MetaValue::U64(1 << 40));
    assert_eq!(m["i64"], MetaValue::I64(-(1 << 40)));
    assert_eq!(m["f32"], MetaValue::F32(1.5));
    assert_eq!(m["f64"], MetaValue::F64(-2.25));
    assert_eq!(m["bool"], MetaValue::Bool(true));
    assert_eq!(m["str"], MetaValue::String("héllo".into()));
    assert_eq!(m["a_u8"], MetaValue::Array(MetaArray::U8(vec![1, 2])));
    assert_eq!(m["a_i32"], MetaValue::Array(MetaArray::I32(vec![-1, 3])));
    assert_eq!(m["a_u32"], MetaValue::Array(MetaArray::U32(vec![9])));
    assert_eq!(m["a_u64"], MetaValue::Array(MetaArray::U64(vec![])));
    assert_eq!(
        m["a_f32"],
        MetaValue::Array(MetaArray::F32(vec![0.5, 0.25]))
    );
    assert_eq!(
        m["a_bool"],
        MetaValue::Array(MetaArray::Bool(vec![false, true]))
    );
    let strs = MetaArray::String(vec!["x".into(), "".into(), "yz".into()]);
    assert_eq!(m["a_str"], MetaValue::Array(strs));
    let nested = MetaArray::Array(vec![
        MetaArray::U8(vec![1]),
        MetaArray::String(vec!["q".into()]),
    ]);
    assert_eq!(m["a_nested"], MetaValue::Array(nested));
}

#[test]
fn typed_accessors() {
    let mut w = GgufWriter::new();
    w.kv("n", Value::U32(30))
        .kv("neg", Value::I32(-1))
        .kv("eps", Value::F32(1e-5))
        .kv("name", Value::str("llama"))
        .kv("flag", Value::Bool(false))
        .kv("list", Value::Array(Array::U32(vec![1, 2, 3])));
    let (_f, g) = open(&w);
    assert_eq!(g.require_u64("n").expect("u64"), 30);
    assert_eq!(g.require_f64("n").expect("ints read as f64"), 30.0);
    assert!((g.require_f64("eps").expect("f64") - 1e-5).abs() < 1e-12);
    assert_eq!(g.require_str("name").expect("str"), "llama");
    assert_eq!(g.get_bool("flag").expect("bool"), Some(false));
    assert_eq!(
        g.get_array("list").expect("array").map(MetaArray::len),
        Some(3)
    );
    assert_eq!(g.get_u64("absent").expect("absent is fine"), None);
    assert!(g.get("absent").is_none());

    let err = g.require_u64("absent").expect_err("missing");
    assert!(
        matches!(&err, Error::MissingKey { key, .. } if key == "absent"),
        "{err}"
    );
    let err = g.get_u64("neg").expect_err("negative is not u64");
    assert!(
        matches!(&err, Error::WrongType { found: "i32", .. }),
        "{err}"
    );
    let err = g.require_str("n").expect_err("not a string");
    assert!(
        err.to_string()
            .contains("metadata key \"n\" is u32, expected string"),
        "{err}"
    );
}

#[test]
fn tensors_views_and_alignment() {
    for alignment in [32usize, 64, 1] {
        let mut w = GgufWriter::new();
        w.alignment = alignment;
        w.kv("general.alignment", Value::U32(alignment as u32));
        w.tensor_f32("a", &[3], &[1.0, 2.0, 3.0]);
        w.tensor("b", &[32, 3], ggml::Q4_1, (0..60).collect());
        w.tensor("c", &[4, 2, 2], ggml::F16, vec![1; 32]);
        let (bytes, layout) = w.build();
        assert_eq!(layout.data_start % alignment, 0);
        let f = common::temp_file("t.gguf", &bytes);
        let g = GgufFile::open(&f.path).expect("parses");
        assert_eq!(g.tensor_infos().len(), 3);
        let a = g.tensor("a").expect("a");
        assert_eq!(
            (a.dtype, a.shape, a.n_elements()),
            (GgmlType::F32, &[3u64][..], 3)
        );
        assert_eq!(a.data, &bytes[layout.tensor_data_at[0]..][..12]);
        let b = g.tensor("b").expect("b");
        assert_eq!((b.dtype, b.row_len(), b.n_rows()), (GgmlType::Q4_1, 32, 3));
        assert_eq!(b.data, &(0..60).collect::<Vec<u8>>()[..]);
        let c = g.tensor("c").expect("c");
        assert_eq!((c.n_elements(), c.n_rows(), c.data.len()), (16, 4, 32));
        assert_eq!(g.tensor_infos()[1].offset, layout.tensor_data_at[1] as u64);
        assert!(g.has_tensor("c") && !g.has_tensor("d"));
        let err = g.tensor("d").expect_err("missing");
        assert!(
            matches!(&err, Error::MissingTensor { name, .. } if name == "d"),
            "{err}"
        );
    }
}

#[test]
fn file_without_tensors() {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::str("none"));
    let (_f, g) = open(&w);
    assert!(g.tensor_infos().is_empty());
    assert_eq!(g.require_str("general.architecture").expect("str"), "none");
}

#[test]
fn missing_file_is_an_io_error() {
    let err = GgufFile::open("/nonexistent/kiln/x.gguf").expect_err("missing");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(
        err.to_string().starts_with("/nonexistent/kiln/x.gguf: "),
        "{err}"
    );
}
