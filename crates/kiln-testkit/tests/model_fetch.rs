//! The helper other crates' tests rely on: the default model, located or fetched into the
//! cache named by KILN_HOME (or the default cache).

#[test]
fn default_model_file_is_in_the_cache() {
    let dir = kiln_testkit::model_dir("smollm2-135m-instruct");
    let file = kiln_testkit::model_file(
        "@kiln/smollm2-135m-instruct",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    );
    assert_eq!(file, dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"));
    let len = std::fs::metadata(&file)
        .map(|m| m.len())
        .unwrap_or_default();
    assert_eq!(len, 98_362_432);
    assert!(dir.ends_with("models/smollm2-135m-instruct"));
}
