//! A `kiln serve` process for end-to-end tests: started on a free loopback port, waited
//! for until `/ready`, and killed when dropped.
//!
//! The server is started with `--port 0`; the port it actually bound is read from its
//! `listening on http://…` log line, so there is no race for a "free" port. Its stderr
//! is kept (and echoed to the test's stderr) so a failure can show what the server said.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running server; killed (SIGKILL) on drop if still running.
pub struct ServerProcess {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
    /// The server's own data directory, when the caller gave none.
    _data_dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    /// Starts `bin serve --host 127.0.0.1 --port 0 <args>` and waits (up to `timeout`)
    /// until `/ready` answers 200.
    pub fn start(bin: &Path, args: &[&str], timeout: Duration) -> Result<Self, String> {
        Self::start_with(Command::new(bin), args, timeout)
    }

    /// Like [`Self::start`] with a command the caller prepared (a wrapper such as
    /// `sh -c 'ulimit -n 256; exec "$0" "$@"' kiln`, or extra environment); `serve` and
    /// the listen arguments are appended to it.
    ///
    /// Without `--data-dir` in `args`, the server gets a fresh one of its own (removed on
    /// drop), so servers started side by side never share stored state.
    pub fn start_with(mut cmd: Command, args: &[&str], timeout: Duration) -> Result<Self, String> {
        let bin = cmd.get_program().to_owned();
        let data_dir = match args.contains(&"--data-dir") {
            true => None,
            false => Some(tempfile::tempdir().map_err(|e| format!("data dir: {e}"))?),
        };
        let mut child = cmd
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .args(
                data_dir
                    .iter()
                    .flat_map(|d| [std::ffi::OsStr::new("--data-dir"), d.path().as_os_str()]),
            )
            // Settings the caller's environment may carry must not leak into the test.
            .env_remove("KILN_LOG_FORMAT")
            .env_remove("KILN_API_KEY")
            .env_remove("KILN_MODEL")
            .env_remove("KILN_PIN")
            .env_remove("KILN_MODELS_MEMORY")
            .env_remove("KILN_ADMIN_KEY")
            .env_remove("KILN_METRICS_KEY")
            .env_remove("KILN_USAGE_DB")
            .env_remove("KILN_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.to_string_lossy()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (port_tx, port_rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("[kiln serve] {line}");
                    if let Some(port) = listening_port(&line) {
                        let _ = port_tx.send(port);
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push(line);
                    }
                }
            });
        }
        let deadline = Instant::now() + timeout;
        let port = loop {
            if let Ok(p) = port_rx.recv_timeout(Duration::from_millis(100)) {
                break p;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "kiln serve exited early ({status}):\n{}",
                    tail(&log)
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!(
                    "kiln serve did not start listening in {timeout:?}:\n{}",
                    tail(&log)
                ));
            }
        };
        let mut server = ServerProcess {
            child,
            port,
            log,
            _data_dir: data_dir,
        };
        // `/ready` needs the metrics key when the server was given one.
        let key = args
            .iter()
            .position(|a| *a == "--metrics-key")
            .and_then(|i| args.get(i + 1).copied());
        loop {
            if matches!(server.get_as("/ready", key), Ok((200, _))) {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "kiln serve exited before ready ({status}):\n{}",
                    server.log_tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "kiln serve not ready in {timeout:?}:\n{}",
                    server.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM (graceful shutdown).
    pub fn terminate(&self) -> Result<(), String> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -TERM {} failed: {status}", self.child.id()))
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines the server logged.
    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// How many lines the server logged so far contain `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .map(|l| l.iter().filter(|line| line.contains(needle)).count())
            .unwrap_or(0)
    }

    /// A blocking `GET path` on a fresh connection: (status, body).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        self.get_as(path, None)
    }

    /// [`Self::get`] with `Authorization: Bearer <key>` if a key is given.
    pub fn get_as(&self, path: &str, key: Option<&str>) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let auth = key.map_or_else(String::new, |k| format!("Authorization: Bearer {k}\r\n"));
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
        )?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad response: {text}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn listening_port(line: &str) -> Option<u16> {
    let rest = &line[line.find("listening on http://")? + "listening on http://".len()..];
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':').next()?.trim_end_matches('"').parse().ok()
}

fn tail(log: &Mutex<Vec<String>>) -> String {
    let lines = log.lock().map(|l| l.clone()).unwrap_or_default();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_port_from_the_log_line() {
        let line =
            "2026-01-01T00:00:00Z  INFO kiln_server::serve: listening on http://127.0.0.1:43121";
        assert_eq!(super::listening_port(line), Some(43121));
        assert_eq!(super::listening_port("nothing here"), None);
    }
}
