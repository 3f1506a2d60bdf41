//! all-MiniLM-L6-v2 against sentence-transformers itself
//! (`scripts/fixtures/sentence_transformers_reference.py`).

mod common;

use common::{as_array, as_str, as_usize, fixture, floats, ids};
use kiln_encoder::{Embedder, Error};

fn embedder() -> Embedder {
    Embedder::load(kiln_testkit::model_dir("all-minilm-l6-v2")).expect("all-MiniLM-L6-v2 loads")
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn embeddings_match_sentence_transformers() {
    let fx = fixture("minilm_reference.json");
    let e = embedder();
    assert_eq!(e.dim(), as_usize(&fx["dim"]));
    assert_eq!(e.max_tokens(), as_usize(&fx["max_seq_length"]));
    assert!(e.normalizes());
    let cases = as_array(&fx["cases"]);
    assert!(cases.len() >= 20);
    let texts: Vec<&str> = cases.iter().map(|c| as_str(&c["text"])).collect();

    // Tokens: the same ids sentence-transformers fed its model, after its truncation.
    for (c, text) in cases.iter().zip(&texts) {
        assert_eq!(
            e.tokenize(text, true).expect("tokenizes"),
            ids(&c["input_ids"]),
            "{text:?}"
        );
        assert_eq!(
            e.count_tokens(text).expect("counts"),
            as_usize(&c["n_tokens"]),
            "{text:?}"
        );
    }

    // All sentences in one call: several per forward pass, long ones truncated.
    let out = e.embed(&texts, true).expect("embeds");
    assert_eq!(out.vectors.len(), texts.len());
    let mut worst = (f64::INFINITY, "");
    for ((c, text), (v, &n)) in cases
        .iter()
        .zip(&texts)
        .zip(out.vectors.iter().zip(&out.token_counts))
    {
        assert_eq!(n, as_array(&c["input_ids"]).len(), "{text:?}");
        assert_eq!(v.len(), e.dim());
        let cos = cosine(v, &floats(&c["embedding"]));
        if cos < worst.0 {
            worst = (cos, text);
        }
    }
    eprintln!(
        "minimum cosine to sentence-transformers: 1 - {:.2e} ({:?})",
        1.0 - worst.0,
        worst.1
    );
    assert!(worst.0 >= 0.9999, "cosine {} for {:?}", worst.0, worst.1);
    assert_eq!(out.total_tokens(), out.token_counts.iter().sum::<usize>());

    // Batching does not change a sentence's vector.
    let alone = e.embed(&[texts[3]], false).expect("embeds one");
    let diff = alone.vectors[0]
        .iter()
        .zip(&out.vectors[3])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-6, "batched vs alone differ by {diff}");
    let norm: f32 = alone.vectors[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
}

#[test]
fn over_long_inputs_are_typed_errors_unless_truncated() {
    let fx = fixture("minilm_reference.json");
    let e = embedder();
    let cases = as_array(&fx["cases"]);
    let (index, long) = cases
        .iter()
        .enumerate()
        .find(|(_, c)| as_usize(&c["n_tokens"]) > e.max_tokens())
        .expect("the fixture has an over-long sentence");
    let texts = ["short one", as_str(&long["text"])];
    match e.embed(&texts, false) {
        Err(Error::InputTooLong {
            index: 1,
            tokens,
            max,
        }) => {
            assert_eq!((tokens, max), (as_usize(&long["n_tokens"]), 256));
        }
        other => panic!("case {index}: expected InputTooLong, got {other:?}"),
    }
    let msg = e
        .tokenize(texts[1], false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("256") && msg.contains("truncation"), "{msg}");
    assert_eq!(
        e.embed(&texts, true).expect("truncates").token_counts[1],
        256
    );
    assert!(e
        .embed::<&str>(&[], false)
        .expect("no inputs")
        .vectors
        .is_empty());
}

#[test]
fn missing_files_are_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let msg = Embedder::load(dir.path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("config.json")
            && msg.contains("model.safetensors")
            && msg.contains("tokenizer.json"),
        "{msg}"
    );
}
