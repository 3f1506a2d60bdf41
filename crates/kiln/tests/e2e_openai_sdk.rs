//! The official `openai` Python SDK against `kiln serve`: chat, completions, streaming
//! with usage, n=2, stop, seed reproducibility, logprobs, errors
//! (`python/openai_sdk_checks.py`).
//!
//! The SDK is installed with pip into a virtual environment under Cargo's target
//! directory on first run. If it can't be installed the test fails: it never skips.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::*;

fn run(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let pid = child.id();
    // Pipes are drained by `wait_with_output` on its own thread, so a chatty child can't
    // block on a full pipe; the time limit is enforced from here.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A venv with `openai` installed, made once under the target directory.
fn venv_python() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-sdk-venv");
    let python = dir.join("bin").join("python");
    let has_sdk = |py: &Path| {
        py.exists()
            && run(
                Command::new(py).args(["-c", "import openai"]),
                Duration::from_secs(60),
            )
            .status
            .success()
    };
    if has_sdk(&python) {
        return python;
    }
    let out = run(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&dir),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "cannot create a Python venv at {}:\n{}",
        dir.display(),
        show(&out)
    );
    let out = run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "openai",
        ]),
        Duration::from_secs(600),
    );
    assert!(
        out.status.success(),
        "cannot install the `openai` Python SDK with pip (is the package registry reachable?):\n{}",
        show(&out)
    );
    assert!(has_sdk(&python), "`openai` installed but not importable");
    python
}

#[test]
fn openai_python_sdk_checks_pass() {
    let python = venv_python();
    let server = start(&["--kv-cache-memory", "128MiB", "--max-model-len", "2048"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_checks.py");
    let out = run(
        Command::new(&python)
            .arg(&script)
            .arg(format!("{}/v1", server.base_url()))
            .arg(MODEL)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL"),
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
