//! Killing a node during a bounded load run loses no request that had not started
//! streaming; the stream it breaks ends with an SSE error event.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// Session keys whose preferred node, among `ids`, is `ids[0]`.
fn keys_preferring_first(ids: &[&str], count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("session-{i}"))
        .filter(|k| kiln_router::affinity::rank(k, ids)[0] == 0)
        .take(count)
        .collect()
}

#[test]
fn killing_a_node_mid_run_loses_no_request_that_had_not_started() {
    serially(async {
        // n1 runs one sequence at a time, so what else is sent to it waits there unstarted.
        let mut fleet = vec![node(&[SMOLLM2], &["--max-num-seqs", "1"])];
        fleet.extend((0..2).map(|_| node(&[SMOLLM2], &["--max-num-seqs", "2"])));
        let mut args: Vec<String> = vec![
            "--replicas".into(),
            "3".into(),
            "--health-interval".into(),
            "0.3".into(),
        ];
        for (i, n) in fleet.iter().enumerate() {
            args.extend(["--node".into(), format!("{}@name=n{}", n.base_url(), i + 1)]);
        }
        let router = Router::start(&args).await;
        let url = format!("{}/v1/completions", router.url());
        let n1_url = fleet[0].base_url();

        // The load run: 6 workers, 4 requests each, streams and not.
        const WORKERS: usize = 6;
        const PER_WORKER: usize = 4;
        const TOKENS: u64 = 32;
        let request = |id: usize, stream: bool, max_tokens: u64| {
            json!({"model": SMOLLM2, "prompt": format!("Request {id}: count to ten."),
                "max_tokens": max_tokens, "ignore_eos": true, "stream": stream,
                "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
        };
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..PER_WORKER {
                    let stream = (w + i) % 4 != 0;
                    let body = request(w * PER_WORKER + i, stream, TOKENS);
                    out.push((stream, post(&url, &body, &[], |_, _| {}).await));
                }
                out
            }));
        }
        // A long stream pinned to n1 by its session holds n1's one slot ...
        let keys = keys_preferring_first(&["n1", "n2", "n3"], 3);
        let started = Arc::new(Mutex::new(false));
        let anchor = {
            let (url, key, started) = (url.clone(), keys[0].clone(), started.clone());
            let body = request(100, true, 2000);
            tokio::spawn(async move {
                post(&url, &body, &[("x-session-affinity", &key)], move |_, n| {
                    if n >= 1 {
                        *started.lock().unwrap_or_else(|p| p.into_inner()) = true;
                    }
                })
                .await
            })
        };
        wait_for(
            "the long stream to start on n1",
            Duration::from_secs(120),
            || async { started.lock().map(|s| *s).unwrap_or(false).then_some(()) },
        )
        .await;
        // ... so two more of n1's sessions wait in its queue, not started.
        let queued: Vec<_> = keys[1..]
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let (url, key) = (url.clone(), key.clone());
                let body = request(200 + i, true, TOKENS);
                tokio::spawn(async move {
                    post(&url, &body, &[("x-session-affinity", &key)], |_, _| {}).await
                })
            })
            .collect();
        wait_for(
            "two requests queued on n1",
            Duration::from_secs(60),
            || async {
                let text = client()
                    .get(format!("{n1_url}/metrics"))
                    .send()
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                let waiting = metric(
                    &text,
                    &format!("kiln:num_requests_waiting{{model_name=\"{SMOLLM2}\"}}"),
                );
                (waiting >= 2.0).then_some(())
            },
        )
        .await;
        let victim = fleet.remove(0);
        drop(victim); // SIGKILL, no goodbye

        // The stream under way on n1 ends with an error event after its output so far.
        let anchor = anchor.await.expect("anchor");
        assert_eq!((anchor.status, anchor.node.as_str()), (200, "n1"));
        let err = anchor
            .error_event()
            .unwrap_or_else(|| panic!("no error event: {anchor:?}"));
        assert_eq!(err["code"], "stream_interrupted", "{err}");
        let at = anchor
            .events
            .iter()
            .position(|e| e.contains("\"error\""))
            .unwrap_or(0);
        assert!(at >= 1, "the error came before any output: {anchor:?}");
        assert_eq!(
            anchor.events.len(),
            at + 2,
            "the error is followed by [DONE] only: {anchor:?}"
        );
        assert!(anchor.done());

        // Everything else completes: the queued requests on another node, the run in full.
        let mut runs: Vec<(bool, Reply)> = Vec::new();
        for q in queued {
            let r = q.await.expect("queued");
            assert_ne!(r.node, "n1", "{r:?}");
            runs.push((true, r));
        }
        for t in tasks {
            runs.extend(t.await.expect("worker"));
        }
        for (stream, reply) in &runs {
            assert_eq!(reply.status, 200, "a request failed: {reply:?}");
            if !stream {
                assert_eq!(
                    reply.json()["usage"]["completion_tokens"],
                    json!(TOKENS),
                    "{reply:?}"
                );
                continue;
            }
            assert!(
                reply.error_event().is_none(),
                "a request that had not started broke: {reply:?}"
            );
            assert!(reply.done(), "{reply:?}");
            // Complete: the usage chunk (just before [DONE]) counts every token.
            let usage: Value = serde_json::from_str(&reply.events[reply.events.len() - 2])
                .unwrap_or_else(|e| panic!("usage chunk: {e}: {reply:?}"));
            assert_eq!(
                usage["usage"]["completion_tokens"],
                json!(TOKENS),
                "{reply:?}"
            );
        }
        let text = router.metrics().await;
        let series = |name: &str| metric(&text, &format!("{name}{{node=\"n1\",colo=\"default\"}}"));
        eprintln!(
            "kill run: {} requests completed, 1 interrupted; n1: retries {}, ejections {}, stream errors {}",
            runs.len(),
            series("kiln_router:retries_total"),
            series("kiln_router:ejections_total"),
            series("kiln_router:stream_errors_total"),
        );
        assert_eq!(runs.len(), WORKERS * PER_WORKER + 2);
        assert_eq!(series("kiln_router:stream_errors_total"), 1.0);
        // The two that waited on n1 failed there before their first byte and moved on.
        assert!(series("kiln_router:retries_total") >= 2.0, "{text}");
        assert!(series("kiln_router:ejections_total") >= 1.0);
        drop(fleet);
    })
}
