//! Batches cut short: cancelled, expired, or stopped by a restart and resumed by the
//! next service over the same directory. Same stores and scripted runner as
//! `service.rs`.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use kiln_api::batches::CreateBatch;
use kiln_batch::{BatchError, BatchStore, Batches, Limits};
use serde_json::json;

/// `n` lines `{prefix}-{i}` whose text is `{prefix} {i}`, stalling if `stall`.
fn lines(prefix: &str, range: std::ops::Range<usize>, stall: bool) -> Vec<String> {
    let extra = if stall {
        json!({"stall": true})
    } else {
        json!({})
    };
    range
        .map(|i| {
            chat_line(
                &format!("{prefix}-{i}"),
                &format!("{prefix} {i}"),
                extra.clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_keeps_what_ran_and_runs_nothing_more() {
    let env = Env::new();
    let script = Script::new();
    // Two lines at a time: the two stalled lines hold both, so the last six wait.
    let limits = Limits {
        concurrency: 2,
        ..Limits::default()
    };
    let b = env.service(&script, limits);
    let a = caller("a");
    let mut all = lines("early", 0..2, false);
    all.extend(lines("stuck", 2..4, true));
    all.extend(lines("late", 4..10, false));
    let file = env.upload("a", "batch", &jsonl(&all));
    let id = b.create(&a, create_req(&file)).expect("create").id;
    wait_batch(&b, &a, &id, |x| x.request_counts.completed == 2).await;
    eventually("both stalled lines to run", || script.stalled() == 2).await;

    let cancelling = b.cancel(&a, &id).expect("cancel");
    assert!(
        ["cancelling", "cancelled"].contains(&cancelling.status.as_str()),
        "{}",
        cancelling.status
    );
    assert!(cancelling.cancelling_at.is_some());
    let done = wait_status(&b, &a, &id, "cancelled").await;
    assert!(done.cancelled_at.is_some());
    assert_eq!(done.completed_at, None);
    let c = done.request_counts;
    assert_eq!((c.total, c.completed, c.failed), (10, 2, 0));
    let out = env.read_jsonl("a", done.output_file_id.as_deref().expect("output"));
    assert_eq!(custom_ids(&out), ["early-0", "early-1"]);
    assert_eq!(done.error_file_id, None, "lines never run are left out");

    // The stalled lines were dropped, and nothing ran after the cancel.
    eventually("the stalled lines to be dropped", || script.stalled() == 0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(script.total_calls(), 4);
    for i in 4..10 {
        assert_eq!(script.calls(&format!("late {i}")), 0);
    }
    let still = b.get(&a, &id).expect("get");
    assert_eq!(
        (still.status.as_str(), still.request_counts),
        ("cancelled", c)
    );

    // Only a batch still running can be cancelled.
    match b.cancel(&a, &id) {
        Err(BatchError::NotCancellable { status, .. }) => assert_eq!(status, "cancelled"),
        other => panic!("expected NotCancellable, got {other:?}"),
    }
    let file = env.upload("a", "batch", &jsonl(&lines("quick", 0..1, false)));
    let quick = b.create(&a, create_req(&file)).expect("create").id;
    wait_status(&b, &a, &quick, "completed").await;
    match b.cancel(&a, &quick) {
        Err(BatchError::NotCancellable { status, .. }) => assert_eq!(status, "completed"),
        other => panic!("expected NotCancellable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_its_window_expires_with_its_pending_lines_as_errors() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let mut all = lines("ran", 0..2, false);
    all.extend(lines("stuck", 2..5, true));
    let file = env.upload("a", "batch", &jsonl(&all));
    let req = CreateBatch {
        completion_window: "2s".into(),
        ..create_req(&file)
    };
    let created = b.create(&a, req).expect("create");
    assert_eq!(created.completion_window, "2s");
    assert_eq!(created.expires_at, Some(created.created_at + 2));
    let done = wait_batch(&b, &a, &created.id, |x| {
        !["validating", "in_progress", "finalizing"].contains(&x.status.as_str())
    })
    .await;
    assert_eq!(done.status, "expired");
    let expired_at = done.expired_at.expect("expired_at");
    assert!(expired_at >= created.created_at + 2);
    assert_eq!(done.request_counts.completed, 2);
    // The lines the window cut count as failed, as the error file lists them.
    assert_eq!(done.request_counts.failed, 3);

    let out = env.read_jsonl("a", done.output_file_id.as_deref().expect("output"));
    assert_eq!(custom_ids(&out), ["ran-0", "ran-1"]);
    let err = env.read_jsonl("a", done.error_file_id.as_deref().expect("errors"));
    assert_eq!(custom_ids(&err), ["stuck-2", "stuck-3", "stuck-4"]);
    for (line, cid) in err.iter().zip(["stuck-2", "stuck-3", "stuck-4"]) {
        assert_line_error(line, Some(cid), "batch_expired", None);
    }
    eventually("the stalled lines to be dropped", || script.stalled() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_a_batch_without_running_a_line_twice() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let mut all = lines("before", 0..8, false);
    all.extend(lines("after", 8..20, true));
    let file = env.upload("a", "batch", &jsonl(&all));
    let id = b.create(&a, create_req(&file)).expect("create").id;
    wait_batch(&b, &a, &id, |x| x.request_counts.completed == 8).await;
    eventually("the stalled lines to run", || script.stalled() == 12).await;

    b.stop();
    eventually("the stalled lines to be dropped", || script.stalled() == 0).await;
    let stopped = b.get(&a, &id).expect("get");
    assert_eq!(stopped.status, "in_progress");
    assert_eq!(stopped.request_counts.completed, 8);
    drop(b);

    // Reopen both stores in the same directory once the old service let go of them.
    let Env { dir, files } = env;
    drop(files);
    let deadline = Instant::now() + DEADLINE;
    let files = loop {
        match kiln_files::FileStore::open(dir.path(), kiln_files::Limits::default()) {
            Ok(f) => break Arc::new(f),
            Err(e) => assert!(Instant::now() < deadline, "the old service holds on: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    script.stall.store(false, Ordering::SeqCst);
    let store = BatchStore::open(&dir.path().join("batches.sqlite3")).expect("store");
    let b = Batches::new(store, files.clone(), script.runner(), Limits::default());
    assert_eq!(b.start().expect("start"), 1);
    let done = wait_status(&b, &a, &id, "completed").await;
    let c = done.request_counts;
    assert_eq!((c.total, c.completed, c.failed), (20, 20, 0));
    assert_eq!(
        done.usage.input_tokens,
        20 * 7,
        "tokens counted once a line"
    );

    let env = Env { dir, files };
    let out = env.read_jsonl("a", done.output_file_id.as_deref().expect("output"));
    let mut expected: Vec<_> = (0..8).map(|i| format!("before-{i}")).collect();
    expected.extend((8..20).map(|i| format!("after-{i}")));
    assert_eq!(custom_ids(&out), expected, "every line once, in order");
    for i in 0..8 {
        assert_eq!(
            script.calls(&format!("before {i}")),
            1,
            "line {i} ran again"
        );
    }
    for i in 8..20 {
        assert_eq!(script.calls(&format!("after {i}")), 2, "line {i}");
    }
}
