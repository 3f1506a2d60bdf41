//! The real default model parses and exposes what the model code needs.

use kiln_formats::{GgmlType, GgufFile};

#[test]
fn smollm2_header_and_tensors() {
    let path = kiln_testkit::model_file("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
    let f = GgufFile::open(&path).expect("real file parses");
    assert_eq!(f.version(), 3);
    assert_eq!(f.require_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.require_u64("llama.block_count").unwrap(), 30);
    assert_eq!(f.require_u64("llama.embedding_length").unwrap(), 576);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.dtype, GgmlType::Q8_0);
    assert_eq!(emb.shape, &[576, 49152]);
    assert_eq!(emb.data.len(), 49152 * 576 / 32 * 34);
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dtype, GgmlType::Q4_1);
    assert!(f.tensor("output.weight").is_err());
    let tokens = f.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 49152);
}
