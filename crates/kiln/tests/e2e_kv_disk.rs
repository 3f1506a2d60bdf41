//! The prefix cache's disk tier through real `kiln serve` processes: after a `kill -9`
//! a conversation's next turn reads its prefix from disk and answers exactly as a
//! server that computed it; a changed model byte, chat template or KV dtype never finds
//! the old blocks; a corrupt block file is dropped, never used.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::{block_on, model_metric, post};

/// SmolLM2-135M: the smallest catalogue model, so the many starts stay quick.
const MODEL: &str = support::MODEL;

fn start(model: &str, data: &Path, extra: &[&str]) -> ServerProcess {
    let gguf = kiln_testkit::gguf(MODEL); // fetched once, before any start
    let model = if model == MODEL {
        gguf.to_string_lossy().into_owned()
    } else {
        model.to_string()
    };
    let data = data.to_string_lossy();
    let args = [
        &["--model", &model, "--data-dir", &data][..],
        &[
            "--kv-cache-memory",
            "64MiB",
            "--speculative",
            "off",
            "--no-pack-cache",
        ],
        extra,
    ]
    .concat();
    ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_kiln")),
        &args,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The model id the server lists (a path's file stem for a local GGUF).
fn model_id(server: &ServerProcess) -> String {
    let (_, models) = block_on(support::get(&server.base_url(), "/v1/models"));
    models["data"][0]["id"]
        .as_str()
        .expect("a model id")
        .to_string()
}

fn metric(server: &ServerProcess, name: &str) -> f64 {
    block_on(model_metric(&server.base_url(), &model_id(server), name))
}

/// Waits until the tier's writer has stored everything queued (written bytes stop
/// moving and are more than zero).
fn wait_for_writes(server: &ServerProcess) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = -1.0;
    loop {
        let now = metric(server, "kiln:kv_disk_written_bytes_total");
        if now > 0.0 && now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the disk tier wrote nothing");
        last = now;
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A long system prompt, so the conversation's prefix spans many blocks.
fn system_prompt() -> String {
    (0..40)
        .map(|i| format!("Rule {i}: answer in plain words and keep item {i} in mind."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A greedy chat turn: the reply, and the prompt tokens served from the prefix cache.
fn chat(server: &ServerProcess, messages: &[Value]) -> (String, u64) {
    let body = json!({"model": model_id(server), "messages": messages, "max_tokens": 20, "temperature": 0});
    let (status, out) = block_on(post(&server.base_url(), "/v1/chat/completions", &body));
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    let cached = out["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    (text.to_string(), cached.unwrap_or(0))
}

/// A greedy completion of a fixed prompt (no template: the same tokens for any
/// template): its text and cached prompt tokens.
fn complete(server: &ServerProcess) -> (String, u64) {
    let prompt = format!("{}\nThe rules above say:", system_prompt());
    let body =
        json!({"model": model_id(server), "prompt": prompt, "max_tokens": 16, "temperature": 0});
    let (status, out) = block_on(post(&server.base_url(), "/v1/completions", &body));
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    let cached = out["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    (text, cached.unwrap_or(0))
}

#[test]
fn a_conversation_resumes_from_disk_after_kill_9_with_identical_output() {
    let data = tempfile::tempdir().expect("data dir");
    let first = start(MODEL, data.path(), &[]);
    let mut messages = vec![
        json!({"role": "system", "content": system_prompt()}),
        json!({"role": "user", "content": "Name one rule."}),
    ];
    let (reply, _) = chat(&first, &messages);
    wait_for_writes(&first);
    drop(first); // SIGKILL: nothing is flushed at exit.

    messages.push(json!({"role": "assistant", "content": reply}));
    messages.push(json!({"role": "user", "content": "And another one?"}));
    let second = start(MODEL, data.path(), &[]);
    let (resumed, cached) = chat(&second, &messages);
    let hits = metric(&second, "kiln:kv_disk_hit_tokens_total");
    assert!(
        cached >= 400,
        "the turn's prefix came from disk: {cached} cached tokens"
    );
    assert_eq!(
        hits, cached as f64,
        "every cached token was a disk hit after the restart"
    );
    assert!(metric(&second, "kiln:kv_disk_read_bytes_total") > 0.0);
    drop(second);

    // The same turn computed from scratch, by a server with no disk tier.
    let cold_dir = tempfile::tempdir().expect("data dir");
    let cold = start(MODEL, cold_dir.path(), &["--kv-disk-size", "0"]);
    let (computed, cached) = chat(&cold, &messages);
    assert_eq!(cached, 0);
    assert_eq!(resumed, computed, "the disk's KV gives the computed answer");
    assert_eq!(
        metric(&cold, "kiln:kv_disk_written_bytes_total"),
        0.0,
        "off is off"
    );
}

/// A copy of the model's GGUF with the byte at `at` (found by `find`) changed.
fn altered_copy(dir: &Path, name: &str, edit: impl Fn(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(kiln_testkit::gguf(MODEL)).expect("read the model");
    edit(&mut bytes);
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).expect("write the copy");
    path
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| {
            panic!(
                "{:?} not in the model file",
                String::from_utf8_lossy(needle)
            )
        })
}

/// Runs the fixed completion on a server over `data`; asserts that it found nothing on
/// disk, and returns its text.
fn complete_without_disk_hits(model: &str, data: &Path, extra: &[&str]) -> String {
    let server = start(model, data, extra);
    let (text, cached) = complete(&server);
    assert_eq!(
        cached,
        0,
        "no block of another fingerprint is used: {}",
        server.log_tail()
    );
    assert_eq!(metric(&server, "kiln:kv_disk_hit_tokens_total"), 0.0);
    assert!(
        server
            .log_tail()
            .contains("ignoring blocks of another model"),
        "the other tier is reported: {}",
        server.log_tail()
    );
    wait_for_writes(&server);
    text
}

#[test]
fn changed_models_templates_and_kv_dtypes_never_read_old_blocks_nor_does_a_corrupt_file() {
    let data = tempfile::tempdir().expect("data dir");
    let models = tempfile::tempdir().expect("model copies");
    let original = altered_copy(models.path(), "original", |_| {});
    let original = original.to_string_lossy();

    let first = start(&original, data.path(), &[]);
    let (want, _) = complete(&first);
    wait_for_writes(&first);
    drop(first);
    let tiers: Vec<PathBuf> = std::fs::read_dir(data.path().join("kv"))
        .expect("kv dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    let [tier] = &tiers[..] else {
        panic!("one tier per fingerprint: {tiers:?}")
    };

    // The same file again: a disk hit, the same text.
    let again = start(&original, data.path(), &[]);
    let (text, cached) = complete(&again);
    assert!(cached > 0, "{}", again.log_tail());
    assert_eq!(text, want);
    drop(again);

    // One tensor byte changed (the file's last byte is tensor data).
    let weights = altered_copy(models.path(), "original-weights", |b| {
        *b.last_mut().expect("bytes") ^= 1;
    });
    // The same name for the server: only the content differs.
    let weights_dir = tempfile::tempdir().expect("dir");
    let renamed = weights_dir.path().join("original.gguf");
    std::fs::rename(&weights, &renamed).expect("rename");
    complete_without_disk_hits(&renamed.to_string_lossy(), data.path(), &[]);

    // One character of the chat template changed (completions use no template, so the
    // prompt's tokens are the same: only the fingerprint can tell).
    let template_dir = tempfile::tempdir().expect("dir");
    let template = altered_copy(template_dir.path(), "original", |b| {
        let at = find(b, b"<|im_start|>assistant");
        b[at + 2] = b'I';
    });
    complete_without_disk_hits(&template.to_string_lossy(), data.path(), &[]);

    // Another KV dtype.
    let q8 = complete_without_disk_hits(&original, data.path(), &["--kv-cache-dtype", "q8_0"]);
    assert!(!q8.is_empty());

    // A corrupt block file of the original's tier: dropped (and deleted), and the
    // answer is the computed one.
    let victim = std::fs::read_dir(tier)
        .expect("tier dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kvb"))
        .min()
        .expect("a block file");
    let mut bytes = std::fs::read(&victim).expect("block");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&victim, &bytes).expect("corrupt it");
    let after = start(&original, data.path(), &[]);
    let (text, _) = complete(&after);
    assert_eq!(text, want, "a corrupt block is recomputed, never used");
    assert!(metric(&after, "kiln:kv_disk_bad_blocks_total") >= 1.0);
    assert!(after
        .log_tail()
        .contains("ignoring and deleting a bad block file"));
    let now = std::fs::read(&victim).ok();
    assert_ne!(
        now.as_deref(),
        Some(&bytes[..]),
        "the corrupt file is gone or rewritten"
    );
}
