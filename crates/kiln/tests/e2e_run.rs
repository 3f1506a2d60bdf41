//! `kiln run` as a real process: a catalogue name and the same model's GGUF path load
//! through the one loading path and give the same greedy text; a missing file or a model
//! of another task is a clear error, not a panic.

use std::path::Path;
use std::process::{Command, Output};

const MODEL: &str = "smollm2-135m-instruct";

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run kiln: {e}"))
}

/// Greedy text of `kiln run --model model --raw` on a fixed prompt.
fn run(model: &str) -> String {
    let out = kiln(&[
        "run",
        "--model",
        model,
        "--raw",
        "The capital of France is",
        "--max-tokens",
        "12",
        "--ignore-eos",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "kiln run --model {model} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", p.display()))
}

#[test]
fn a_gguf_path_runs_as_its_catalogue_name_does() {
    let gguf = kiln_testkit::gguf(MODEL);
    let by_name = run(MODEL);
    let by_path = run(path_str(&gguf));
    assert!(
        by_name.trim().len() > 4,
        "expected generated text, got {by_name:?}"
    );
    assert_eq!(by_name, by_path, "same file, same greedy output");
}

#[test]
fn a_missing_file_or_another_task_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let missing = dir.path().join("nothing-here.gguf");
    let out = kiln(&["run", "--model", path_str(&missing), "hi", "--quiet"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a missing file must fail");
    assert!(stderr.contains("no model file at"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = kiln(&["run", "--model", "all-minilm-l6-v2", "hi", "--quiet"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an embeddings model can't run text");
    assert!(stderr.contains("not a text-generation model"), "{stderr}");
}
