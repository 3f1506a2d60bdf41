//! The pack cache through real `kiln serve` processes: the first start repacks and keeps
//! the copy under its Kiln home; after a `kill -9` the next start maps it (no
//! repacking) and answers exactly as before; a damaged cache file is ignored, never
//! read, and replaced.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};

/// Qwen2.5-Coder-0.5B: q5_0, q8_0 and q6_K matrices, all packed.
const MODEL: &str = "qwen2.5-coder-0.5b-instruct";
const MAPPED: &str = "prepared weights mapped from the pack cache";

fn start(gguf: &Path, home: &Path) -> ServerProcess {
    ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_kiln")),
        &[
            "--model",
            &gguf.to_string_lossy(),
            "--kiln-home",
            &home.to_string_lossy(),
            "--kv-cache-memory",
            "64MiB",
        ],
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A greedy completion's text.
fn complete(server: &ServerProcess) -> String {
    let (_, models) = support::block_on(support::call(
        &server.base_url(),
        reqwest::Method::GET,
        "/v1/models",
        None,
        None,
    ));
    let id = models["data"][0]["id"]
        .as_str()
        .expect("a model id")
        .to_string();
    let body = json!({"model": id, "prompt": "fn fibonacci(n: u64) -> u64 {", "max_tokens": 24, "temperature": 0});
    let (status, out): (u16, Value) = support::block_on(support::call(
        &server.base_url(),
        reqwest::Method::POST,
        "/v1/completions",
        None,
        Some(&body),
    ));
    assert_eq!(status, 200, "{out}");
    out["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string()
}

/// The one finished pack file, once the background writer has renamed it into place.
fn wait_for_pack(home: &Path) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let packs: Vec<PathBuf> = std::fs::read_dir(home.join("packed"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "kpack"))
            .collect();
        if let [one] = &packs[..] {
            return one.clone();
        }
        assert!(packs.len() < 2, "one model, one pack: {packs:?}");
        assert!(Instant::now() < deadline, "no pack file written");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_restart_maps_the_packed_weights_and_answers_the_same() {
    let gguf = kiln_testkit::gguf(MODEL);
    let home = tempfile::tempdir().expect("home");

    let first = start(&gguf, home.path());
    assert!(!first.log_tail().contains(MAPPED), "nothing to map yet");
    let want = complete(&first);
    let pack = wait_for_pack(home.path());
    drop(first); // SIGKILL

    let second = start(&gguf, home.path());
    assert!(second.log_tail().contains(MAPPED), "{}", second.log_tail());
    assert_eq!(complete(&second), want);
    drop(second);

    // A damaged header: ignored (and said so), repacked, and replaced by a whole file.
    let mut bytes = std::fs::read(&pack).expect("read pack");
    bytes[60] ^= 0xff;
    std::fs::write(&pack, &bytes).expect("damage pack");
    let third = start(&gguf, home.path());
    let log = third.log_tail();
    assert!(!log.contains(MAPPED), "{log}");
    assert!(
        log.contains("ignoring an unusable pack cache file"),
        "{log}"
    );
    assert_eq!(complete(&third), want);
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read(&pack).expect("pack") != {
        let mut fixed = bytes.clone();
        fixed[60] ^= 0xff;
        fixed
    } {
        assert!(
            Instant::now() < deadline,
            "the damaged pack was not replaced"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
