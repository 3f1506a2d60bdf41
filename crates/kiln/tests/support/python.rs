//! A Python virtual environment for the end-to-end tests that drive `kiln serve` from
//! Python: the official `openai` SDK, `jsonschema`, and the official `mcp` SDK with
//! `uvicorn` (an MCP server fixture), `websocket-client` (Chromium's DevTools protocol),
//! installed with pip under Cargo's target directory
//! on first use. If they can't be installed the test fails: it never
//! skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the venv holds, beyond pip itself (`websocket-client` drives Chromium over the
/// DevTools protocol).
const PACKAGES: &[&str] = &["openai", "jsonschema", "mcp", "uvicorn", "websocket-client"];
/// Their import names, where they differ.
const IMPORTS: &[&str] = &["openai", "jsonschema", "mcp", "uvicorn", "websocket"];

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

/// Asserts that a `tests/python` checks script passed: it exited 0 and its last line is
/// `all <label> checks passed`. Its stdout is printed either way; a failure shows its
/// output and `server_log`.
pub fn assert_checks_passed(out: &Output, label: &str, server_log: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{label} checks failed:\n{}\n--- server\n{server_log}",
        show(out)
    );
    let last = format!("all {label} checks passed");
    assert_eq!(stdout.lines().last(), Some(last.as_str()), "{stdout}");
}

/// The venv's `python`, with [`PACKAGES`] importable; made once under the target directory.
pub fn venv_python() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    let python = dir.join("bin").join("python");
    let imports = format!("import {}", IMPORTS.join(", "));
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
    run_script_with(script, base_url, model, &[], limit)
}

/// [`run_script`] with more arguments after the model.
pub fn run_script_with(
    script: &str,
    base_url: &str,
    model: &str,
    args: &[&str],
    limit: Duration,
) -> Output {
    let python = venv_python();
    run(
        Command::new(&python)
            .arg(script_path(script))
            .arg(format!("{base_url}/v1"))
            .arg(model)
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL"),
        limit,
    )
}

/// `tests/python/<script>`.
pub fn script_path(script: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script)
}

/// The MCP server fixture (`tests/python/mcp_server.py`) on a free port, requiring
/// `Authorization: Bearer <token>`; killed when dropped.
pub struct McpFixture {
    child: std::process::Child,
    pub url: String,
}

impl McpFixture {
    pub fn start(token: &str) -> Self {
        let python = venv_python();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free port: {e}"));
        let child = Command::new(&python)
            .arg(script_path("mcp_server.py"))
            .arg(port.to_string())
            .arg(token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the MCP fixture: {e}"));
        let mut fixture = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = fixture.child.try_wait() {
                panic!("the MCP fixture exited early: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the MCP fixture did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        fixture
    }
}

impl Drop for McpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
