//! A Python virtual environment for the end-to-end tests that drive `kiln serve` from
//! Python: the official `openai` SDK and `jsonschema`, installed with pip under Cargo's
//! target directory on first use. If they can't be installed the test fails: it never
//! skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the venv holds, beyond pip itself.
const PACKAGES: &[&str] = &["openai", "jsonschema"];

/// Runs `cmd` to completion with its output captured; panics when it runs past `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
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

/// Exit status, stdout and stderr of `out`, for a failure message.
pub fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The venv's `python`, with [`PACKAGES`] importable; made once under the target directory.
pub fn venv_python() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    let python = dir.join("bin").join("python");
    let imports = format!("import {}", PACKAGES.join(", "));
    let ready = |py: &Path| {
        py.exists()
            && run(
                Command::new(py).args(["-c", &imports]),
                Duration::from_secs(60),
            )
            .status
            .success()
    };
    if ready(&python) {
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
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PACKAGES),
        Duration::from_secs(600),
    );
    assert!(
        out.status.success(),
        "cannot install {PACKAGES:?} with pip (is the package registry reachable?):\n{}",
        show(&out)
    );
    assert!(ready(&python), "{PACKAGES:?} installed but not importable");
    python
}

/// Runs `tests/python/<script> <base>/v1 <model>` in the venv (no OpenAI settings from
/// the caller's environment leak in) and returns its output, whatever its status.
pub fn run_script(script: &str, base_url: &str, model: &str, limit: Duration) -> Output {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    run(
        Command::new(&python)
            .arg(&script)
            .arg(format!("{base_url}/v1"))
            .arg(model)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL"),
        limit,
    )
}
