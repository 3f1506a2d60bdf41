//! Spawning a server under test: waiting for it, measuring its pid, stopping it, and
//! reporting one that dies. The stand-in server is Python's `http.server` serving a
//! directory with a `health` file, so `GET /health` answers 200.

use std::path::Path;
use std::time::Duration;

use kiln_bench::{block_on, procfs, Error, ServerCommand, SpawnedServer};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show as state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

fn command(dir: &Path, port: u16, command: String) -> ServerCommand {
    ServerCommand {
        command,
        base_url: format!("http://127.0.0.1:{port}"),
        log_path: dir.join("server.log"),
        startup_timeout: Duration::from_secs(60),
    }
}

#[test]
fn spawned_server_is_waited_for_measured_and_stopped() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("health"), "ok").expect("health file");
    let port = free_port();
    let cmd = command(
        dir.path(),
        port,
        format!(
            "python3 -m http.server {port} --bind 127.0.0.1 --directory '{}'",
            dir.path().display()
        ),
    );
    let server = block_on(SpawnedServer::start(&cmd))
        .expect("runtime")
        .expect("server starts");
    let pid = server.pid();
    // `exec` makes the measured pid the server itself, not a shell.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    assert!(stat.contains("(python3"), "{stat}");
    assert!(procfs::memory(pid).expect("status").rss > 0);
    server.stop();
    assert!(!alive(pid), "server {pid} still running after stop");
    let log = std::fs::read_to_string(dir.path().join("server.log")).expect("log");
    assert!(log.contains("GET /health"), "{log}");
}

#[test]
fn a_server_that_exits_is_reported_with_its_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cmd = command(
        dir.path(),
        free_port(),
        "sh -c 'echo model file missing >&2; exit 3'".to_owned(),
    );
    let err = block_on(SpawnedServer::start(&cmd))
        .expect("runtime")
        .expect_err("server dies");
    match err {
        Error::ServerExited {
            status, log_tail, ..
        } => {
            assert!(status.contains('3'), "{status}");
            assert!(log_tail.contains("model file missing"), "{log_tail}");
        }
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
fn a_silent_server_times_out_and_is_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = command(dir.path(), free_port(), "sleep 30".to_owned());
    cmd.startup_timeout = Duration::from_millis(500);
    let err = block_on(SpawnedServer::start(&cmd))
        .expect("runtime")
        .expect_err("never answers");
    assert!(matches!(err, Error::ServerTimeout { .. }), "{err}");
}
