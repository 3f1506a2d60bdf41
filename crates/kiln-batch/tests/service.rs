//! The batch service over a real `FileStore` and `BatchStore` in a tempdir, with a
//! scripted runner (`common`): a batch's output and error files, validation, per-key
//! scope and paging, retries, Workers AI queued requests and the bound on lines in
//! flight. Cancel, expiry and restart are in `lifecycle.rs`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use kiln_api::batches::CreateBatch;
use kiln_batch::{BatchError, Limits, Polled};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_every_line_into_the_output_file_in_order() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let lines: Vec<_> = (0..50)
        .map(|i| chat_line(&format!("req-{i}"), &format!("text {i}"), json!({})))
        .collect();
    let file = env.upload("a", "batch", &jsonl(&lines));

    let mut meta = BTreeMap::new();
    meta.insert("job".to_string(), "nightly".to_string());
    let created = b
        .create(
            &a,
            CreateBatch {
                metadata: Some(meta.clone()),
                ..create_req(&file)
            },
        )
        .expect("create");
    assert_eq!(created.status, "validating");
    assert_eq!(created.object, "batch");
    assert!(created.id.starts_with("batch_"), "{}", created.id);
    assert_eq!(
        (created.endpoint.as_str(), created.input_file_id.as_str()),
        (CHAT, file.as_str())
    );
    assert_eq!(created.completion_window, "24h");
    assert_eq!(created.metadata.as_ref(), Some(&meta));

    let done = wait_status(&b, &a, &created.id, "completed").await;
    let counts = done.request_counts;
    assert_eq!((counts.total, counts.completed, counts.failed), (50, 50, 0));
    assert!(done.in_progress_at.is_some() && done.finalizing_at.is_some());
    assert!(done.completed_at.is_some());
    assert_eq!(done.error_file_id, None, "nothing failed");
    assert_eq!(done.errors, None);

    // Usage sums every line's: 7 prompt tokens (1 cached) and one per byte.
    let completion: u64 = (0..50).map(|i| format!("text {i}").len() as u64).sum();
    let u = done.usage;
    assert_eq!(u.input_tokens, 50 * 7);
    assert_eq!(u.input_tokens_details.cached_tokens, 50);
    assert_eq!(u.output_tokens, completion);
    assert_eq!(u.total_tokens, 50 * 7 + completion);

    let out_id = done.output_file_id.expect("an output file");
    let out = env.read_jsonl("a", &out_id);
    let expected: Vec<_> = (0..50).map(|i| format!("req-{i}")).collect();
    assert_eq!(custom_ids(&out), expected, "one line per request, in order");
    let mut ids = std::collections::HashSet::new();
    for (i, line) in out.iter().enumerate() {
        let body = assert_answered(line, &format!("req-{i}"), 200);
        assert_eq!(body, answer(CHAT, &format!("text {i}")));
        assert!(ids.insert(line["id"].clone()), "ids are unique");
    }
    // The output belongs to the caller only.
    assert!(env.files.get("b", &out_id).expect("get").is_none());

    // Each line ran once, as its caller, on the batch's endpoint, with its body.
    assert_eq!(script.total_calls(), 50);
    for (key, path, body) in script.seen.lock().expect("seen").iter() {
        assert_eq!((key.as_str(), path.as_str()), ("a", CHAT));
        assert_eq!(body["model"], "m");
    }
    for i in 0..50 {
        assert_eq!(script.calls(&format!("text {i}")), 1);
    }
}

/// A finished batch's files are its owner's to delete: the batch keeps its ids and
/// status, and a restart (which resumes unfinished batches) writes nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_output_file_stays_deleted_and_the_batch_keeps_its_ids() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let lines = [
        chat_line("ok", "fine", json!({})),
        chat_line("no", "refused", json!({"fail": true})),
    ];
    let file = env.upload("a", "batch", &jsonl(&lines));
    let id = b.create(&a, create_req(&file)).expect("create").id;
    let done = wait_status(&b, &a, &id, "completed").await;
    let out = done.output_file_id.clone().expect("output");
    let err = done.error_file_id.clone().expect("errors");
    for f in [&out, &err, &file] {
        assert!(env.files.delete("a", f).expect("delete"), "{f}");
    }
    let after = b.get(&a, &id).expect("the batch outlives its files");
    assert_eq!(after.status, "completed");
    assert_eq!(
        (
            after.output_file_id.as_deref(),
            after.error_file_id.as_deref()
        ),
        (Some(out.as_str()), Some(err.as_str()))
    );
    drop(b);
    let again = env.service(&script, Limits::default());
    assert_eq!(again.start().expect("start"), 0, "nothing to resume");
    tokio::time::sleep(Duration::from_millis(200)).await;
    for f in [&out, &err] {
        assert!(
            env.files.get("a", f).expect("get").is_none(),
            "{f} came back"
        );
    }
    assert_eq!(again.get(&a, &id).expect("get").status, "completed");
    assert_eq!(script.total_calls(), 2, "no line ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_and_refused_lines_go_to_the_error_file() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    let line = |cid: &str, method: &str, url: &str, body: &Value| {
        json!({"custom_id": cid, "method": method, "url": url, "body": body}).to_string()
    };
    let lines = vec![
        chat_line("ok-1", "one", json!({})), // 1
        "this is not json".to_string(),      // 2
        json!({"method": "POST", "url": CHAT, "body": body}).to_string(), // 3
        chat_line("ok-2", "two", json!({})), // 4
        chat_line("ok-1", "dup", json!({})), // 5
        line("bad-url", "POST", "/v1/embeddings", &body), // 6
        line("bad-method", "GET", CHAT, &body), // 7
        chat_line("bad-stream", "streams", json!({"stream": true})), // 8
        chat_line("refused", "no", json!({"fail": true})), // 9
        String::new(),                       // 10: blank, skipped
        chat_line("ok-3", "three", json!({"stream": false})), // 11
        chat_line(&"é".repeat(512), "longest", json!({})), // 12: 512 characters
        chat_line(&"x".repeat(513), "too long", json!({})), // 13
    ];
    let file = env.upload("a", "batch", &jsonl(&lines));
    let created = b.create(&a, create_req(&file)).expect("create");
    let done = wait_status(&b, &a, &created.id, "completed").await;
    let c = done.request_counts;
    assert_eq!((c.total, c.completed, c.failed), (12, 4, 8));
    assert_eq!(done.errors, None, "bad lines do not fail the batch");

    let out = env.read_jsonl("a", done.output_file_id.as_deref().expect("output"));
    let longest = "é".repeat(512);
    assert_eq!(custom_ids(&out), ["ok-1", "ok-2", "ok-3", longest.as_str()]);
    for (line, text) in out.iter().zip(["one", "two", "three"]) {
        let cid = line["custom_id"].as_str().expect("custom_id");
        assert_eq!(assert_answered(line, cid, 200), answer(CHAT, text));
    }

    let err = env.read_jsonl("a", done.error_file_id.as_deref().expect("errors"));
    assert_eq!(err.len(), 8, "{err:#?}");
    assert_line_error(&err[0], None, "invalid_json", Some(2));
    assert_line_error(&err[1], None, "missing_custom_id", Some(3));
    assert_line_error(&err[2], Some("ok-1"), "duplicate_custom_id", Some(5));
    assert_line_error(&err[3], Some("bad-url"), "mismatched_endpoint", Some(6));
    assert_line_error(&err[4], Some("bad-method"), "invalid_method", Some(7));
    assert_line_error(&err[5], Some("bad-stream"), "invalid_request", Some(8));
    let refused = assert_answered(&err[6], "refused", 400);
    assert_eq!(refused, fail_answer(CHAT, "no"));
    // Too long an id is not kept, even in the error file.
    assert_line_error(&err[7], None, "invalid_custom_id", Some(13));
    let message = err[7]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("513 characters long; at most 512"),
        "{message}"
    );

    // Only the lines that could run were run.
    assert_eq!(script.total_calls(), 5);
    assert_eq!(script.calls("too long"), 0);
    assert_eq!((script.calls("dup"), script.calls("streams")), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_no_request_fails_the_batch_and_bad_creates_are_refused() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");

    let bad = jsonl(&["{oops".to_string(), json!({"custom_id": "x"}).to_string()]);
    let file = env.upload("a", "batch", &bad);
    let id = b.create(&a, create_req(&file)).expect("create").id;
    let failed = wait_status(&b, &a, &id, "failed").await;
    assert!(failed.failed_at.is_some());
    assert_eq!((failed.output_file_id, failed.error_file_id), (None, None));
    let errors = failed.errors.expect("errors say why");
    assert_eq!(errors.object, "list");
    let found: Vec<_> = errors
        .data
        .iter()
        .map(|e| (e.code.as_str(), e.line))
        .collect();
    assert_eq!(
        found,
        [("invalid_json", Some(1)), ("invalid_method", Some(2))]
    );
    assert!(errors.data.iter().all(|e| !e.message.is_empty()));

    for empty in ["", "\n  \n"] {
        let file = env.upload("a", "batch", empty);
        let id = b.create(&a, create_req(&file)).expect("create").id;
        let failed = wait_status(&b, &a, &id, "failed").await;
        let errors = failed.errors.expect("errors").data;
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].code, "empty_file");
        assert_eq!(errors[0].param.as_deref(), Some("input_file_id"));
        assert!(errors[0].message.contains(&file), "{}", errors[0].message);
    }
    assert_eq!(script.total_calls(), 0);

    // More requests than a batch may hold.
    let small = env.service(
        &script,
        Limits {
            max_lines: 2,
            ..Limits::default()
        },
    );
    let three = (0..3).map(|i| chat_line(&format!("c{i}"), "t", json!({})));
    let file = env.upload("a", "batch", &jsonl(&three.collect::<Vec<_>>()));
    let id = small.create(&a, create_req(&file)).expect("create").id;
    let failed = wait_status(&small, &a, &id, "failed").await;
    let errors = failed.errors.expect("errors").data;
    assert_eq!(errors[0].code, "invalid_file");
    assert!(
        errors[0].message.contains("more than 2"),
        "{}",
        errors[0].message
    );
    assert_eq!(script.total_calls(), 0);

    let good = env.upload("a", "batch", &jsonl(&[chat_line("c", "t", json!({}))]));
    let user_data = env.upload("a", "user_data", &jsonl(&[chat_line("c", "t", json!({}))]));
    let other_key = env.upload("b", "batch", &jsonl(&[chat_line("c", "t", json!({}))]));
    let param = |req: CreateBatch| match b.create(&a, req) {
        Err(BatchError::Invalid { param, message }) => {
            assert!(!message.is_empty());
            param
        }
        other => panic!("expected Invalid, got {other:?}"),
    };
    let with = |f: &dyn Fn(&mut CreateBatch)| {
        let mut r = create_req(&good);
        f(&mut r);
        r
    };
    assert_eq!(
        param(with(&|r| r.endpoint = "/v1/responses".into())),
        "endpoint"
    );
    for w in ["", "24", "1w", "0h", "-1h", "31d", "h"] {
        let req = with(&|r| r.completion_window = w.into());
        assert_eq!(param(req), "completion_window", "window {w:?}");
    }
    let many: BTreeMap<_, _> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
    assert_eq!(
        param(with(&|r| r.metadata = Some(many.clone()))),
        "metadata"
    );
    for file in [
        "file-missing",
        "not-a-file-id",
        user_data.as_str(),
        other_key.as_str(),
    ] {
        let req = with(&|r| r.input_file_id = file.into());
        assert_eq!(param(req), "input_file_id", "file {file}");
    }
    let fine = b.create(&a, with(&|r| r.completion_window = "30d".into()));
    assert_eq!(
        fine.expect("30d is the longest window").completion_window,
        "30d"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_scoped_to_their_key_and_listed_newest_first() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let (a, other) = (caller("a"), caller("b"));
    let file = env.upload("a", "batch", &jsonl(&[chat_line("c", "t", json!({}))]));
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(b.create(&a, create_req(&file)).expect("create").id);
    }
    let theirs = env.upload("b", "batch", &jsonl(&[chat_line("c", "t", json!({}))]));
    let their_batch = b.create(&other, create_req(&theirs)).expect("create").id;
    // A queued request is not a batch: it is never listed.
    b.queue(&a, "m", &[json!({"prompt": "q"})]).expect("queue");

    for id in &made {
        let done = wait_status(&b, &a, id, "completed").await;
        assert!(matches!(
            b.get(&other, id),
            Err(BatchError::NotFound { .. })
        ));
        assert!(matches!(
            b.cancel(&other, id),
            Err(BatchError::NotFound { .. })
        ));
        // Nor can the other key read the output.
        let out = done.output_file_id.expect("output");
        assert!(env.files.open_content("b", &out).expect("open").is_none());
    }
    assert!(matches!(
        b.get(&a, &their_batch),
        Err(BatchError::NotFound { .. })
    ));

    let newest_first: Vec<_> = made.iter().rev().cloned().collect();
    let page = b.list(&a, None, 2).expect("list");
    assert_eq!(page.object, "list");
    let ids = |p: &kiln_api::files::List<kiln_api::batches::Batch>| {
        p.data.iter().map(|x| x.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&page), newest_first[..2]);
    assert!(page.has_more);
    assert_eq!(page.first_id.as_deref(), Some(newest_first[0].as_str()));
    assert_eq!(page.last_id.as_deref(), Some(newest_first[1].as_str()));
    let page2 = b.list(&a, page.last_id.as_deref(), 2).expect("list");
    assert_eq!(ids(&page2), newest_first[2..4]);
    assert!(page2.has_more);
    let page3 = b.list(&a, page2.last_id.as_deref(), 2).expect("list");
    assert_eq!(ids(&page3), newest_first[4..]);
    assert!(!page3.has_more);
    let all = b.list(&a, None, 100).expect("list");
    assert_eq!(ids(&all), newest_first);
    assert!(!all.has_more);

    let theirs = b.list(&other, None, 100).expect("list");
    assert_eq!(ids(&theirs), [their_batch]);
    // Another key's batch is no cursor.
    assert!(matches!(
        b.list(&other, Some(&made[0]), 10),
        Err(BatchError::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_the_server_is_too_busy_for_is_run_again() {
    let env = Env::new();
    let script = Script::with(|s| s.busy_times = 2);
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    let lines = [
        chat_line("busy", "busy line", json!({"busy": true})),
        chat_line("calm", "calm line", json!({})),
    ];
    let file = env.upload("a", "batch", &jsonl(&lines));
    let id = b.create(&a, create_req(&file)).expect("create").id;
    let done = wait_status(&b, &a, &id, "completed").await;
    let c = done.request_counts;
    assert_eq!((c.total, c.completed, c.failed), (2, 2, 0));
    assert_eq!(done.error_file_id, None, "a retried line is not an error");
    let out = env.read_jsonl("a", done.output_file_id.as_deref().expect("output"));
    assert_eq!(custom_ids(&out), ["busy", "calm"]);
    assert_eq!(
        assert_answered(&out[0], "busy", 200),
        answer(CHAT, "busy line")
    );
    assert_eq!(
        (script.calls("busy line"), script.calls("calm line")),
        (3, 1)
    );
    // Tokens are counted once, for the answer kept.
    assert_eq!(done.usage.input_tokens, 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_ai_queued_requests_are_polled_until_done() {
    let env = Env::new();
    let script = Script::new();
    let b = env.service(&script, Limits::default());
    let a = caller("a");
    script.set_gate(false);
    let requests = [
        json!({"prompt": "first", "external_reference": "a"}),
        json!({"prompt": "second"}),
        json!({"prompt": "third", "fail": true, "external_reference": "c"}),
        json!({"prompt": "fourth", "external_reference": 4}),
        // Can't run: failed at once, yet the queue has not started.
        json!({"prompt": "fifth", "stream": true}),
    ];
    // Too long a reference refuses the whole queue, naming the request.
    let mut long = requests.to_vec();
    long[3] = json!({"prompt": "fourth", "external_reference": "r".repeat(513)});
    match b.queue(&a, "m", &long) {
        Err(BatchError::Invalid { param, message }) => {
            assert_eq!(param, "requests[3].external_reference");
            assert!(message.contains("at most 512"), "{message}");
        }
        other => panic!("a 513-character reference was taken: {other:?}"),
    }
    let queued = b.queue(&a, "m", &requests).expect("queue");
    assert_eq!(
        (queued.status.as_str(), queued.model.as_str()),
        ("queued", "m")
    );
    let id = queued.request_id.clone();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    match b.poll(&a, "m", &id).expect("poll") {
        Polled::Pending(s) => {
            assert_eq!(
                (s.request_id.as_str(), s.model.as_str()),
                (id.as_str(), "m")
            );
            assert_eq!(s.status, "queued");
        }
        Polled::Done(r) => panic!("nothing ran yet: {r:?}"),
    }
    for (key, model) in [("b", "m"), ("a", "other-model")] {
        assert!(
            matches!(
                b.poll(&caller(key), model, &id),
                Err(BatchError::NotFound { .. })
            ),
            "{key} {model}"
        );
    }
    assert!(matches!(b.get(&a, &id), Err(BatchError::NotFound { .. })));

    script.set_gate(true);
    let deadline = std::time::Instant::now() + DEADLINE;
    let results = loop {
        match b.poll(&a, "m", &id).expect("poll") {
            Polled::Done(r) => break r,
            Polled::Pending(s) => assert!(["queued", "running"].contains(&s.status.as_str())),
        }
        assert!(std::time::Instant::now() < deadline, "never done");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let r = &results.responses;
    assert_eq!(r.len(), 5);
    let ids: Vec<_> = r.iter().map(|x| x.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    let refs: Vec<_> = r.iter().map(|x| x.external_reference.as_deref()).collect();
    assert_eq!(refs, [Some("a"), None, Some("c"), Some("4"), None]);
    let success: Vec<_> = r.iter().map(|x| x.success).collect();
    assert_eq!(success, [true, true, false, true, false]);
    let streamed = r[4].error.as_ref().expect("why it could not run");
    assert!(streamed.to_string().contains("streaming"), "{streamed}");
    for (x, text) in [(&r[0], "first"), (&r[1], "second"), (&r[3], "fourth")] {
        assert_eq!(x.result, answer("/ai/run/m", text)["result"]);
        assert_eq!(x.error, None);
    }
    assert_eq!(r[2].result, Value::Null);
    let error = r[2].error.as_ref().expect("why it failed");
    assert_eq!(error, &fail_answer("/ai/run/m", "third")["errors"]);

    // Usage sums the answered requests.
    let completion = ["first", "second", "fourth"]
        .map(str::len)
        .iter()
        .sum::<usize>();
    assert_eq!(results.usage.prompt_tokens, 21);
    assert_eq!(results.usage.completion_tokens, completion as u64);
    assert_eq!(results.usage.total_tokens, 21 + completion as u64);

    // The runner saw the model's path, without the references.
    let seen = script.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 4);
    for (key, path, body) in &seen {
        assert_eq!((key.as_str(), path.as_str()), ("a", "/ai/run/m"));
        assert!(body.get("external_reference").is_none(), "{body}");
    }
    // Done is done: polling again answers the same.
    assert_eq!(b.poll(&a, "m", &id).expect("poll"), Polled::Done(results));

    // A request that is no object (or streams) is never run, and says why.
    let odd = [
        json!("not an object"),
        json!({"prompt": "s", "stream": true}),
    ];
    let id = b.queue(&a, "m", &odd).expect("queue").request_id;
    let deadline = std::time::Instant::now() + DEADLINE;
    let r = loop {
        if let Polled::Done(r) = b.poll(&a, "m", &id).expect("poll") {
            break r.responses;
        }
        assert!(std::time::Instant::now() < deadline, "never done");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let codes: Vec<_> = r.iter().map(|x| (x.success, x.error.clone())).collect();
    assert_eq!(codes[0].1.as_ref().expect("why")["code"], "invalid_body");
    assert_eq!(codes[1].1.as_ref().expect("why")["code"], "invalid_request");
    assert!(r.iter().all(|x| !x.success && x.result == Value::Null));
    assert_eq!(script.total_calls(), 4, "neither ran");

    for bad in [vec![], vec![json!({"prompt": "x"}); 3]] {
        let small = env.service(
            &script,
            Limits {
                max_queued_requests: 2,
                ..Limits::default()
            },
        );
        match small.queue(&a, "m", &bad) {
            Err(BatchError::Invalid { param, .. }) => assert_eq!(param, "requests"),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_in_flight_never_pass_the_bound() {
    let env = Env::new();
    let script = Script::with(|s| s.delay = Duration::from_millis(15));
    let limits = Limits {
        concurrency: 3,
        ..Limits::default()
    };
    let b = env.service(&script, limits);
    let a = caller("a");
    // Two batches at once share the one bound.
    let mut ids = Vec::new();
    for batch in 0..2 {
        let lines: Vec<_> = (0..30)
            .map(|i| chat_line(&format!("r{i}"), &format!("b{batch} line {i}"), json!({})))
            .collect();
        let file = env.upload("a", "batch", &jsonl(&lines));
        ids.push(b.create(&a, create_req(&file)).expect("create").id);
    }
    for id in &ids {
        let done = wait_status(&b, &a, id, "completed").await;
        assert_eq!(done.request_counts.completed, 30);
    }
    assert_eq!(script.total_calls(), 60);
    let max = script.max_in_flight();
    assert!(max <= 3, "{max} lines ran at once");
    assert!(max >= 2, "lines ran one at a time ({max})");
}
