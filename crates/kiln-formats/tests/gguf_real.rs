//! The real default model parses and exposes what the model code needs.

use kiln_formats::{GgmlType, GgufFile};

#[test]
fn smollm2_header_and_tensors() {
    let path = kiln_testkit::model_file("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
    let f = GgufFile::open(&path).expect("real file parses");
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.tensor_infos().len(), 272);
    assert_eq!(
        f.require_str("general.architecture").expect("arch"),
        "llama"
    );
    assert_eq!(f.require_u64("llama.block_count").expect("blocks"), 30);
    assert_eq!(f.require_u64("llama.embedding_length").expect("d"), 576);
    assert_eq!(
        f.require_f64("llama.rope.freq_base").expect("rope"),
        100_000.0
    );
    assert_eq!(
        f.get_bool("tokenizer.ggml.add_bos_token").expect("bool"),
        Some(false)
    );
    let emb = f.tensor("token_embd.weight").expect("embeddings");
    assert_eq!(emb.dtype, GgmlType::Q8_0);
    // ggml order: 576 contiguous values per row, 49152 rows.
    assert_eq!(emb.shape, &[576, 49152]);
    assert_eq!((emb.row_len(), emb.n_rows()), (576, 49152));
    assert_eq!(emb.data.len(), 49152 * 576 / 32 * 34);
    let q = f.tensor("blk.0.attn_q.weight").expect("attn_q");
    assert_eq!(
        (q.dtype, q.data.len()),
        (GgmlType::Q4_1, 576 * 576 / 32 * 20)
    );
    let norm = f.tensor("output_norm.weight").expect("norm");
    assert_eq!((norm.dtype, norm.shape), (GgmlType::F32, &[576u64][..]));
    assert!(f.tensor("output.weight").is_err());
    let tokens = f
        .get_array("tokenizer.ggml.tokens")
        .expect("array")
        .expect("tokens");
    assert_eq!(tokens.len(), 49152);
    // The last tensor ends exactly at the end of the file.
    let end = f.tensor_infos().iter().map(|t| t.offset + t.size).max();
    assert_eq!(end, Some(std::fs::metadata(&path).expect("stat").len()));
}
