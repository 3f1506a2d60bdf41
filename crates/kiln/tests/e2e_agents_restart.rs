//! Agents across crashes, over HTTP against the real binary: settings, state and a
//! pending schedule survive a `kill -9` and the schedule fires after the restart; a
//! client's turn cut mid-answer by `kill -9` runs again after the restart and lands in
//! the agent's history, once.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::json;
use support::agents::*;
use support::*;

#[test]
fn state_and_pending_schedules_survive_a_crash() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    let pending = block_on(async {
        put_agent(&base, "durable").await;
        let (status, _) = call(
            &base,
            Method::PUT,
            "/v1/agents/durable/state",
            Some(KEY),
            Some(&json!({"step": 7})),
        )
        .await;
        assert_eq!(status, 200);
        let (status, cron) = call(
            &base,
            Method::POST,
            "/v1/agents/durable/schedules",
            Some(KEY),
            Some(&json!({"input": "Report.", "cron": "0 0 1 1 *"})),
        )
        .await;
        assert_eq!(status, 200, "{cron}");
        let (status, s) = call(
            &base,
            Method::POST,
            "/v1/agents/durable/schedules",
            Some(KEY),
            Some(&json!({"input": "Say hello.", "delay_seconds": 3})),
        )
        .await;
        assert_eq!(status, 200, "{s}");
        (cron, s)
    });
    drop(server);

    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        let (status, st) = call(
            &base,
            Method::GET,
            "/v1/agents/durable/state",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!((status, st), (200, json!({"step": 7})));
        let (_, list) = call(
            &base,
            Method::GET,
            "/v1/agents/durable/schedules",
            Some(KEY),
            None,
        )
        .await;
        let ids: Vec<&str> = list["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str())
            .collect();
        assert!(
            ids.contains(&pending.0["id"].as_str().unwrap_or("")),
            "{list}"
        );
        // The delayed one fires after the restart.
        let deadline = Instant::now() + Duration::from_secs(120);
        while history(&base, "durable").await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "the pending schedule never fired"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (_, list) = call(
            &base,
            Method::GET,
            "/v1/agents/durable/schedules",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");
        let cron_id = pending.0["id"].as_str().unwrap_or("");
        // Deleted once; the second delete finds nothing.
        for want in [200, 404] {
            let (status, _) = call(
                &base,
                Method::DELETE,
                &format!("/v1/agents/durable/schedules/{cron_id}"),
                Some(KEY),
                None,
            )
            .await;
            assert_eq!(status, want);
        }
    });
}

#[test]
fn a_turn_cut_by_a_crash_runs_again_after_the_restart() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async move {
        put_agent(&base, "cut").await;
        let resp = client()
            .get(format!("{base}/v1/agents/cut/events"))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("events");
        let mut body = resp.bytes_stream();
        // A long answer, so it is still being written when the process dies; greedy,
        // so the re-run's answer is known to count.
        let turn = tokio::spawn(
            client()
                .post(format!("{base}/v1/agents/cut/responses"))
                .bearer_auth(KEY)
                .json(
                    &json!({"input": "Count from 1 to 300, one number per line.",
                              "max_output_tokens": 600, "temperature": 0}),
                )
                .send(),
        );
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !seen.contains("response.output_text.delta") {
            let chunk = tokio::time::timeout_at(deadline.into(), body.next())
                .await
                .expect("the turn starts writing")
                .expect("stream open")
                .expect("chunk");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(
            !seen.contains("response.completed"),
            "cut mid-answer: {seen}"
        );
        // SIGKILL mid-turn, its client still waiting (a client that leaves stops its
        // turn, and nothing runs it again).
        drop(server);
        let answered = turn.await.expect("the client's task");
        assert!(
            answered.is_err(),
            "the first server never answered: {answered:?}"
        );
    });

    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        let deadline = Instant::now() + Duration::from_secs(180);
        let h = loop {
            let h = history(&base, "cut").await;
            if !h.is_empty() {
                break h;
            }
            assert!(
                Instant::now() < deadline,
                "the cut turn never ran again: {}",
                server.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(h.len(), 1, "run again once: {h:?}");
        assert!(
            ["completed", "incomplete"].contains(&h[0]["status"].as_str().unwrap_or("")),
            "{}",
            h[0]
        );
        let text = h[0]["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        assert!(
            text.contains('1'),
            "the re-run answered the cut turn's input: {}",
            h[0]
        );
        assert!(
            server.log_tail().contains("re-ran a turn a crash cut"),
            "{}",
            server.log_tail()
        );
    });
    drop(server);

    // Ended: a third start runs nothing again.
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(history(&base, "cut").await.len(), 1);
    });
}
