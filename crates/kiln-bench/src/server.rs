//! A server under test started by the benchmark: spawned from a shell command, waited
//! for until it answers, stopped after its runs.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::HttpClient;
use crate::error::{Error, Result};

/// How often readiness is probed while the server starts.
const PROBE_PERIOD: Duration = Duration::from_millis(250);
/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Bytes of the server's log shown when it fails to start.
const LOG_TAIL_BYTES: usize = 3000;

/// How to start a server.
#[derive(Debug, Clone)]
pub struct ServerCommand {
    /// A shell command line, run as `sh -c "exec <command>"` so that the process the
    /// benchmark measures is the server itself, not a shell.
    pub command: String,
    /// Where it will listen (`http://host:port`).
    pub base_url: String,
    /// Its stdout and stderr go here.
    pub log_path: PathBuf,
    /// How long to wait for `/health` or `/v1/models` to answer.
    pub startup_timeout: Duration,
}

/// A running server started by [`SpawnedServer::start`]; stopped on [`SpawnedServer::stop`]
/// or when dropped.
#[derive(Debug)]
pub struct SpawnedServer {
    child: Child,
    command: String,
}

impl SpawnedServer {
    /// Spawns the command in its own process group and waits until it answers
    /// `GET /health` or `GET /v1/models` with a 2xx status.
    pub async fn start(cmd: &ServerCommand) -> Result<Self> {
        let client = HttpClient::new(&cmd.base_url, None)?;
        let log = File::create(&cmd.log_path).map_err(Error::io(&cmd.log_path))?;
        let log_err = log.try_clone().map_err(Error::io(&cmd.log_path))?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {}", cmd.command))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                command: cmd.command.clone(),
                source,
            })?;
        let mut server = SpawnedServer {
            child,
            command: cmd.command.clone(),
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(Error::ServerExited {
                    command: cmd.command.clone(),
                    url: cmd.base_url.clone(),
                    status: status.to_string(),
                    log_tail: log_tail(&cmd.log_path),
                });
            }
            if client.answers("/health").await || client.answers("/v1/models").await {
                return Ok(server);
            }
            if started.elapsed() > cmd.startup_timeout {
                server.kill();
                return Err(Error::ServerTimeout {
                    url: cmd.base_url.clone(),
                    seconds: cmd.startup_timeout.as_secs(),
                });
            }
            tokio::time::sleep(PROBE_PERIOD).await;
        }
    }

    /// The server's process id (the shell `exec`s it, so this is the server itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The command line it was started with.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Sends SIGTERM to its process group, waits up to 10 s, then kills it.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // `kill` the program, not a libc call: no `unsafe` for one signal. The negative
        // pid names the process group, so helpers the server spawned go too.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_tail(path: &Path) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(LOG_TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}
