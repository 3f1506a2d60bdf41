//! Agents end to end on the default model, over HTTP against the real binary:
//!
//! - settings, a conversation that continues itself, state, scoping by key, a key's
//!   agents listed in pages, and the errors (unknown agent, bad name, malformed cron,
//!   cron with seconds or years, `at` in year 9999, tools of the wrong shape and an
//!   unserved model at `PUT` as a turn refuses them, background turns, 401 without a
//!   key before any 404);
//! - a schedule that fires, its turn streaming to the agent's event stream;
//! - (crashes and restarts are in `e2e_agents_restart.rs`);
//! - one agent's corrupt file is a clear 503 for it while another agent works.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};
use support::agents::*;
use support::*;

#[test]
fn an_agent_continues_its_conversation_and_keeps_its_state() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        put_agent(&base, "helper").await;
        let turn = |text: &str| json!({"input": text, "max_output_tokens": 12, "temperature": 0});
        let (status, first) = call(
            &base,
            Method::POST,
            "/v1/agents/helper/responses",
            Some(KEY),
            Some(&turn("My name is Ada.")),
        )
        .await;
        assert_eq!(status, 200, "{first}");
        assert!(
            matches!(first["status"].as_str(), Some("completed" | "incomplete")),
            "{first}"
        );
        assert_eq!(first["instructions"], "You are a terse assistant.");
        let (status, second) = call(
            &base,
            Method::POST,
            "/v1/agents/helper/responses",
            Some(KEY),
            Some(&turn("What is my name?")),
        )
        .await;
        assert_eq!(status, 200, "{second}");
        assert_eq!(second["previous_response_id"], first["id"], "{second}");
        assert!(
            second["usage"]["input_tokens"].as_u64() > first["usage"]["input_tokens"].as_u64(),
            "the conversation was not carried: {first} {second}"
        );
        let h = history(&base, "helper").await;
        assert_eq!(h.len(), 2);
        assert_eq!((&h[0]["id"], &h[1]["id"]), (&first["id"], &second["id"]));

        let (status, st) = call(
            &base,
            Method::GET,
            "/v1/agents/helper/state",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!((status, st), (200, json!({})));
        let doc = json!({"count": 1, "items": ["a", "b"]});
        let (status, _) = call(
            &base,
            Method::PUT,
            "/v1/agents/helper/state",
            Some(KEY),
            Some(&doc),
        )
        .await;
        assert_eq!(status, 200);
        let (status, st) = call(
            &base,
            Method::GET,
            "/v1/agents/helper/state",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!((status, st), (200, doc));

        // Another key sees no such agent; bad requests are named.
        let (status, e) = call(&base, Method::GET, "/v1/agents/helper", Some(OTHER), None).await;
        assert_eq!(status, 404, "{e}");
        let (status, e) = call(&base, Method::GET, "/v1/agents/nobody", Some(KEY), None).await;
        assert_eq!(status, 404, "{e}");
        let schedules = "/v1/agents/helper/schedules";
        for (method, path, body, param) in [
            (
                Method::PUT,
                "/v1/agents/bad.name",
                json!({"model": MODEL}),
                "name",
            ),
            (
                Method::POST,
                schedules,
                json!({"input": "hi", "cron": "61 * * * *"}),
                "cron",
            ),
            (
                Method::POST,
                schedules,
                json!({"input": "hi", "cron": "* * * * * *"}),
                "cron",
            ),
            (
                Method::POST,
                schedules,
                json!({"input": "hi", "cron": "0 0 * * * * 2030"}),
                "cron",
            ),
            (
                Method::POST,
                schedules,
                json!({"input": "hi", "at": "9999-12-31T23:59:59Z"}),
                "at",
            ),
            (
                Method::POST,
                schedules,
                json!({"input": "hi"}),
                "delay_seconds",
            ),
            (
                Method::PUT,
                "/v1/agents/helper",
                json!({"model": MODEL, "tools": [{"type": "function"}]}),
                "tools[0].name",
            ),
            (
                Method::POST,
                "/v1/agents/helper/responses",
                json!({"input": "hi", "background": true}),
                "background",
            ),
        ] {
            let (status, e) = call(&base, method, path, Some(KEY), Some(&body)).await;
            let got = (status, e["error"]["param"].as_str());
            assert_eq!(got, (400, Some(param)), "{path}: {e}");
        }

        // A model that isn't served is refused at PUT as a turn refuses it, and the
        // agent keeps its settings.
        let unserved = json!({"model": "no-such-model", "input": "hi"});
        let (turn_status, turn_e) = call(
            &base,
            Method::POST,
            "/v1/responses",
            Some(KEY),
            Some(&unserved),
        )
        .await;
        let (status, e) = call(
            &base,
            Method::PUT,
            "/v1/agents/helper",
            Some(KEY),
            Some(&json!({"model": "no-such-model"})),
        )
        .await;
        assert_eq!(e["error"]["code"], "model_not_found", "{e}");
        assert_eq!(
            (status, &e["error"]["code"], &e["error"]["param"]),
            (
                turn_status,
                &turn_e["error"]["code"],
                &turn_e["error"]["param"]
            ),
            "{e} {turn_e}"
        );
        let (_, a) = call(&base, Method::GET, "/v1/agents/helper", Some(KEY), None).await;
        assert_eq!(a["model"], MODEL, "{a}");

        // A key's agents in pages; another key sees none of them.
        put_agent(&base, "second").await;
        let list = |query: &'static str, key: &'static str| {
            let base = base.clone();
            async move {
                let (status, page) = call(
                    &base,
                    Method::GET,
                    &format!("/v1/agents{query}"),
                    Some(key),
                    None,
                )
                .await;
                assert_eq!(status, 200, "{query}: {page}");
                let ids: Vec<String> = page["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a["id"].as_str().map(str::to_string))
                    .collect();
                (ids, page)
            }
        };
        let (ids, page) = list("?limit=1", KEY).await;
        assert_eq!(ids, ["helper"], "{page}");
        assert_eq!(page["object"], "list");
        assert_eq!(
            (&page["first_id"], &page["last_id"], &page["has_more"]),
            (&json!("helper"), &json!("helper"), &json!(true)),
            "{page}"
        );
        let (ids, page) = list("?limit=1&after=helper", KEY).await;
        assert_eq!(
            (ids, &page["has_more"]),
            (vec!["second".into()], &json!(false))
        );
        assert_eq!(list("?order=desc", KEY).await.0, ["second", "helper"]);
        assert!(list("", OTHER).await.0.is_empty());
        let (status, e) = call(&base, Method::GET, "/v1/agents?limit=0", Some(KEY), None).await;
        assert_eq!((status, e["error"]["param"].as_str()), (400, Some("limit")));

        // Without a key every agents path is a 401, before any 404 or 405.
        for (method, path) in [
            (Method::GET, "/v1/agents"),
            (Method::GET, "/v1/agents/helper"),
            (Method::GET, "/v1/agents/helper/nope"),
            (Method::POST, "/v1/agents"),
        ] {
            let (status, e) = call(&base, method.clone(), path, None, None).await;
            assert_eq!(status, 401, "{method} {path}: {e}");
        }
        let (status, _) = call(
            &base,
            Method::GET,
            "/v1/agents/helper/nope",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!(status, 404);

        let (status, d) = call(&base, Method::DELETE, "/v1/agents/helper", Some(KEY), None).await;
        assert_eq!((status, &d["deleted"]), (200, &json!(true)), "{d}");
        let (status, _) = call(&base, Method::GET, "/v1/agents/helper", Some(KEY), None).await;
        assert_eq!(status, 404);
    });
}

#[test]
fn a_schedule_fires_and_its_turn_streams_to_the_event_stream() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        put_agent(&base, "alarm").await;
        let resp = client()
            .get(format!("{base}/v1/agents/alarm/events"))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("events");
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        let (status, s) = call(
            &base,
            Method::POST,
            "/v1/agents/alarm/schedules",
            Some(KEY),
            Some(&json!({"input": "Say hello.", "delay_seconds": 1})),
        )
        .await;
        assert_eq!(status, 200, "{s}");
        assert_eq!(s["type"], "delayed");
        assert!(
            s["id"].as_str().is_some_and(|i| i.starts_with("sched_")),
            "{s}"
        );
        let (status, list) = call(
            &base,
            Method::GET,
            "/v1/agents/alarm/schedules",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!(
            (status, list["data"].as_array().map(Vec::len)),
            (200, Some(1)),
            "{list}"
        );

        let mut text = String::new();
        let mut kinds = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let response_id = 'outer: loop {
            let chunk = tokio::time::timeout_at(deadline.into(), body.next())
                .await
                .unwrap_or_else(|_| {
                    let last = &kinds[kinds.len().saturating_sub(8)..];
                    panic!(
                        "no schedule completion in {} events; last: {last:?}",
                        kinds.len()
                    )
                })
                .expect("stream open")
                .expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = text.find("\n\n") {
                let frame: String = text.drain(..i + 2).collect();
                // Comments (keep-alives) carry no data.
                let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                let ev: Value =
                    serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {frame}"));
                kinds.push(ev["type"].as_str().unwrap_or("").to_string());
                if ev["type"] == "agent.schedule.completed" {
                    break 'outer ev["response_id"].as_str().unwrap_or("").to_string();
                }
                assert_ne!(ev["type"], "agent.schedule.failed", "{ev}");
            }
        };
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("agent.schedule.started"),
            "{kinds:?}"
        );
        assert!(
            kinds.iter().any(|k| k == "response.output_text.delta"),
            "{kinds:?}"
        );
        let h = history(&base, "alarm").await;
        assert_eq!(h.len(), 1);
        assert_eq!(h[0]["id"], response_id.as_str());
        let (_, list) = call(
            &base,
            Method::GET,
            "/v1/agents/alarm/schedules",
            Some(KEY),
            None,
        )
        .await;
        assert_eq!(list["data"], json!([]), "a fired one-shot schedule is done");
    });
}

#[test]
fn a_corrupt_agent_file_fails_alone() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        put_agent(&base, "healthy").await;
        put_agent(&base, "broken").await;
    });
    drop(server);
    // The agents' directory holds one folder, the owner key's.
    let owner = std::fs::read_dir(data.path().join("agents"))
        .expect("agents dir")
        .flatten()
        .next()
        .expect("owner dir")
        .path();
    let file = owner.join("broken.sqlite3");
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
    std::fs::write(
        &file,
        b"not a database at all, just bytes that are long enough",
    )
    .expect("write");
    let server = serve_on(data.path());
    let base = server.base_url();
    block_on(async {
        let (status, e) = call(&base, Method::GET, "/v1/agents/broken", Some(KEY), None).await;
        assert_eq!(status, 503, "{e}");
        let msg = e["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("broken"), "{e}");
        assert!(
            !msg.contains(&data.path().to_string_lossy().to_string()),
            "path leaked: {e}"
        );
        let (status, ok) = call(&base, Method::GET, "/v1/agents/healthy", Some(KEY), None).await;
        assert_eq!(status, 200, "{ok}");
    });
}
