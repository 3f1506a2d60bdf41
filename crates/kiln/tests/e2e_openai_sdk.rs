//! The official `openai` Python SDK against `kiln serve`: chat, completions, streaming
//! with usage, n=2, stop, seed reproducibility, logprobs, errors
//! (`python/openai_sdk_checks.py`).
//!
//! The SDK is installed with pip into a virtual environment under Cargo's target
//! directory on first run (`support::python`). If it can't be installed the test fails:
//! it never skips.

mod support;

use std::time::Duration;

use support::python::{run_script, show};
use support::*;

#[test]
fn openai_python_sdk_checks_pass() {
    support::python::venv_python();
    let server = start(&["--kv-cache-memory", "128MiB", "--max-model-len", "2048"]);
    let out = run_script(
        "openai_sdk_checks.py",
        &server.base_url(),
        MODEL,
        Duration::from_secs(600),
    );
    assert!(
        out.status.success(),
        "SDK checks failed:\n{}\n--- server\n{}",
        show(&out),
        server.log_tail()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("all openai SDK checks passed"), "{stdout}");
    eprintln!("{stdout}");
}
