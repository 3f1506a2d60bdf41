//! The real all-MiniLM-L6-v2 weights parse, and views hold the right bytes.

use kiln_formats::{SafetensorsFile, StDtype};

fn open_minilm() -> SafetensorsFile {
    let dir = kiln_testkit::model_dir("all-minilm-l6-v2");
    SafetensorsFile::open(dir.join("model.safetensors")).expect("real file parses")
}

fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn minilm_header() {
    let st = open_minilm();
    assert_eq!(st.len(), 104);
    assert_eq!(st.metadata().get("format").map(String::as_str), Some("pt"));
    let names: Vec<&str> = st.tensor_names().collect();
    // File order is data order.
    assert_eq!(names[0], "embeddings.position_ids");
    assert_eq!(names[103], "pooler.dense.weight");
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("encoder.layer."))
            .count(),
        96
    );
    let mut f32_count = 0;
    for view in st.tensors() {
        let view = view.expect("view");
        assert_eq!(
            view.data.len() as u64,
            view.n_elements() * view.dtype.size_bytes()
        );
        f32_count += usize::from(view.dtype == StDtype::F32);
    }
    assert_eq!(f32_count, 103);
}

#[test]
fn minilm_tensor_values() {
    let st = open_minilm();
    // Row-major: 30522 rows of 384 (GGUF would say [384, 30522]).
    let emb = st
        .tensor("embeddings.word_embeddings.weight")
        .expect("embeddings");
    assert_eq!((emb.dtype, emb.shape), (StDtype::F32, &[30522u64, 384][..]));
    assert_eq!(emb.data.len(), 30522 * 384 * 4);
    let row_101 = f32s(&emb.data[101 * 384 * 4..][..12]);
    assert_eq!(row_101, [-0.017_619_397, -0.007_600_549_6, 0.047_105_543]);

    let ln = st
        .tensor("embeddings.LayerNorm.weight")
        .expect("layer norm");
    assert_eq!(ln.shape, &[384]);
    assert_eq!(f32s(&ln.data[..8]), [0.598_928_33, 0.583_594_8]);

    let ids = st.tensor("embeddings.position_ids").expect("position ids");
    assert_eq!((ids.dtype, ids.shape), (StDtype::I64, &[1u64, 512][..]));
    let ids: Vec<i64> = ids
        .data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    assert_eq!(ids, (0..512).collect::<Vec<i64>>());

    let w = st
        .tensor("encoder.layer.5.output.dense.weight")
        .expect("dense");
    assert_eq!(w.shape, &[384, 1536]);
    assert!(st.has_tensor("pooler.dense.bias"));
    assert!(st.tensor("lm_head.weight").is_err());
}
