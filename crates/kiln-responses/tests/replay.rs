//! Re-streaming responses (`Responses::replay`): a background response's events again,
//! whole or after `starting_after`, numbered as a stream numbers them; a background run
//! followed from the middle to its end; the bound on recorded events; bad input and
//! another key's response.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use kiln_api::chat::ChatCompletionRequest;
use kiln_api::responses::{CreateResponse, StreamEvent};
use kiln_api::Caller;
use kiln_responses::{
    ChatRunner, ChatTurn, Created, EventStream, Finish, GenError, Limits, ResponseStore, Responses,
    ResponsesError, TurnEvent, TurnUsage,
};
use serde_json::json;
use tokio::sync::Semaphore;

/// Answers with `PIECES`, each after a permit from `gate` when it has one.
struct Paced {
    gate: Option<Arc<Semaphore>>,
}

const PIECES: [&str; 3] = ["The ", "sea ", "is calm."];

impl ChatRunner for Paced {
    fn start(
        &self,
        _: &Caller,
        _: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let gate = self.gate.clone();
        Box::pin(async move {
            let (tx, events) = tokio::sync::mpsc::channel(8);
            tokio::spawn(async move {
                for p in PIECES {
                    if let Some(g) = &gate {
                        g.acquire().await.expect("gate").forget();
                    }
                    if tx.send(TurnEvent::Text(p.into())).await.is_err() {
                        return;
                    }
                }
                let usage = TurnUsage {
                    prompt: 1,
                    cached: 0,
                    completion: 3,
                };
                let done = TurnEvent::Finished(Finish {
                    length: false,
                    usage,
                });
                let _ = tx.send(done).await;
            });
            let (_, usage) = tokio::sync::oneshot::channel();
            Ok(ChatTurn {
                model: "paced".into(),
                events,
                usage,
            })
        })
    }
}

fn service(gate: Option<Arc<Semaphore>>, limits: Limits) -> Arc<Responses> {
    let store = Arc::new(ResponseStore::open_in_memory().expect("store"));
    Responses::new(store, Arc::new(Paced { gate }), limits)
}

fn caller(key: &str) -> Caller {
    Caller {
        key_id: key.into(),
        label: None,
    }
}

fn req(stream: bool, background: bool) -> CreateResponse {
    CreateResponse {
        input: Some(json!("How is the sea?")),
        stream: Some(stream),
        background: Some(background),
        ..CreateResponse::default()
    }
}

/// Every event of `s` until it ends (failing past a few seconds: a stream that never
/// ends is a bug).
async fn drain(s: &mut EventStream) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    while let Some(ev) = next(s).await {
        out.push(ev);
    }
    out
}

async fn next(s: &mut EventStream) -> Option<StreamEvent> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("the stream stalled")
}

fn replay(r: &Responses, key: &str, id: &str, after: Option<&str>) -> Vec<StreamEvent> {
    let mut s = r.replay(&caller(key), id, after).expect("replay");
    futures_util::FutureExt::now_or_never(drain(&mut s)).expect("a stored replay is ready")
}

fn kinds(events: &[StreamEvent]) -> Vec<(u64, &str)> {
    events
        .iter()
        .map(|e| (e.sequence_number, e.kind.as_str()))
        .collect()
}

#[tokio::test]
async fn a_background_response_restreams_exactly_and_resumes_after_any_event() {
    let r = service(None, Limits::default());
    let Ok(Created::Streaming(mut live)) = r.create(caller("a"), req(true, false)).await else {
        panic!("a streamed response");
    };
    let streamed = drain(&mut live).await;
    let Ok(Created::Background(queued)) = r.create(caller("a"), req(false, true)).await else {
        panic!("a background response");
    };
    r.background_idle().await;
    let all = replay(&r, "a", &queued.id, None);
    // Numbered and shaped as a live stream is.
    assert_eq!(kinds(&all), kinds(&streamed));
    let end = all.last().expect("events");
    assert_eq!(end.kind, "response.completed");
    assert_eq!(end.fields["response"]["id"], queued.id.as_str());
    for k in 0..all.len() + 2 {
        let tail: Vec<_> = all.iter().skip(k + 1).cloned().collect();
        assert_eq!(
            replay(&r, "a", &queued.id, Some(&k.to_string())),
            tail,
            "after {k}"
        );
    }
    let deltas: String = all
        .iter()
        .filter(|e| e.kind == "response.output_text.delta")
        .filter_map(|e| e.fields["delta"].as_str())
        .collect();
    assert_eq!(deltas, PIECES.concat());
}

#[tokio::test]
async fn a_foreground_response_keeps_no_events_and_is_not_restreamed() {
    let r = service(None, Limits::default());
    let Ok(Created::Streaming(mut live)) = r.create(caller("a"), req(true, false)).await else {
        panic!("a streamed response");
    };
    let streamed = drain(&mut live).await;
    let id = streamed[0].fields["response"]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let Ok(Created::Done(plain)) = r.create(caller("a"), req(false, false)).await else {
        panic!("a plain response");
    };
    for id in [id.as_str(), plain.id.as_str()] {
        let e = r.replay(&caller("a"), id, None).err().expect("refused");
        assert!(
            matches!(e, ResponsesError::Invalid { ref param, .. } if param == "stream"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_background_run_is_followed_from_the_middle_to_its_end() {
    let gate = Arc::new(Semaphore::new(0));
    let r = service(Some(gate.clone()), Limits::default());
    let Ok(Created::Background(queued)) = r.create(caller("a"), req(false, true)).await else {
        panic!("a background response");
    };
    let mut first = r.replay(&caller("a"), &queued.id, None).expect("follow");
    let mut seen = Vec::new();
    // response.created and in_progress come before the model's first text.
    for _ in 0..2 {
        seen.push(next(&mut first).await.expect("event"));
    }
    gate.add_permits(1);
    // The message opens (added, content part) and its first delta.
    for _ in 0..3 {
        seen.push(next(&mut first).await.expect("event"));
    }
    assert_eq!(seen[4].kind, "response.output_text.delta");
    let resume_at = seen[4].sequence_number;
    let mut resumed = r
        .replay(&caller("a"), &queued.id, Some(&resume_at.to_string()))
        .expect("resume");
    gate.add_permits(PIECES.len());
    seen.extend(drain(&mut first).await);
    let tail = drain(&mut resumed).await;
    assert_eq!(tail, seen[5..].to_vec());
    assert_eq!(
        tail.last().map(|e| e.kind.as_str()),
        Some("response.completed")
    );
    r.background_idle().await;
    let done = r.get(&caller("a"), &queued.id).expect("get");
    assert_eq!(done.status, "completed");
    assert_eq!(replay(&r, "a", &queued.id, None), seen);
}

#[tokio::test]
async fn a_deleted_background_run_ends_its_followers() {
    let gate = Arc::new(Semaphore::new(0));
    let r = service(Some(gate), Limits::default());
    let Ok(Created::Background(queued)) = r.create(caller("a"), req(false, true)).await else {
        panic!("a background response");
    };
    let mut follower = r.replay(&caller("a"), &queued.id, None).expect("follow");
    r.delete(&caller("a"), &queued.id).expect("delete");
    let events = drain(&mut follower).await;
    assert!(events.iter().all(|e| e.kind != "response.completed"));
}

#[tokio::test]
async fn bad_offsets_other_keys_and_unstored_responses_are_refused() {
    let r = service(None, Limits::default());
    let Ok(Created::Done(done)) = r.create(caller("a"), req(false, false)).await else {
        panic!("a plain response");
    };
    for bad in ["-1", "x", "1.5", ""] {
        let e = r
            .replay(&caller("a"), &done.id, Some(bad))
            .err()
            .expect("a bad starting_after");
        assert!(
            matches!(e, ResponsesError::Invalid { ref param, .. } if param == "starting_after"),
            "{bad}: {e}"
        );
    }
    let other = r.replay(&caller("b"), &done.id, None).err().expect("b");
    assert!(matches!(other, ResponsesError::NotFound { .. }), "{other}");
    let missing = r.replay(&caller("a"), "resp_nope", None).err().expect("id");
    assert!(
        matches!(missing, ResponsesError::NotFound { .. }),
        "{missing}"
    );
    let mut unstored = req(false, false);
    unstored.store = Some(false);
    let Ok(Created::Done(unstored)) = r.create(caller("a"), unstored).await else {
        panic!("an unstored response");
    };
    let e = r.replay(&caller("a"), &unstored.id, None).err().expect("x");
    assert!(matches!(e, ResponsesError::NotFound { .. }), "{e}");
}

#[tokio::test]
async fn events_past_the_bound_are_not_kept_but_the_response_is() {
    let r = service(
        None,
        Limits {
            max_event_bytes: 512,
            ..Limits::default()
        },
    );
    let Ok(Created::Background(done)) = r.create(caller("a"), req(false, true)).await else {
        panic!("a background response");
    };
    r.background_idle().await;
    assert_eq!(
        r.get(&caller("a"), &done.id).expect("get").status,
        "completed"
    );
    let e = r
        .replay(&caller("a"), &done.id, None)
        .err()
        .expect("no events");
    assert!(
        matches!(e, ResponsesError::Invalid { ref param, .. } if param == "stream"),
        "{e}"
    );
}

/// A run cut by a crash and started again numbers its events after every number an
/// earlier run could have used (the k-th rerun from k × 2³²), so a client resuming with
/// `starting_after` from a cut run gets the new run whole; the count survives the
/// response being written back while it runs, and another cut.
#[tokio::test]
async fn each_run_after_a_crash_numbers_its_events_after_the_last() {
    let store = Arc::new(ResponseStore::open_in_memory().expect("store"));
    let stalled = || {
        let gate = Some(Arc::new(Semaphore::new(0)));
        Responses::new(store.clone(), Arc::new(Paced { gate }), Limits::default())
    };
    let first = stalled();
    let Ok(Created::Background(queued)) = first.create(caller("a"), req(false, true)).await else {
        panic!("a background response");
    };
    // Two "crashes": each new service finds the run unfinished and starts it again.
    assert_eq!(stalled().resume().expect("resume"), 1);
    let last = Responses::new(
        store.clone(),
        Arc::new(Paced { gate: None }),
        Limits::default(),
    );
    assert_eq!(last.resume().expect("resume"), 1);
    last.background_idle().await;
    let all = replay(&last, "a", &queued.id, None);
    assert_eq!(
        all.first().map(|e| e.kind.as_str()),
        Some("response.created")
    );
    assert_eq!(all[0].sequence_number, 2 << 32, "the second rerun");
    assert_eq!(
        all.last().map(|e| e.kind.as_str()),
        Some("response.completed")
    );
    // A client that saw the first run's opening events gets the last run whole.
    assert_eq!(replay(&last, "a", &queued.id, Some("3")), all);
}
