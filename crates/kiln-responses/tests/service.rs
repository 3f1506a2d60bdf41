//! The Responses service over a real SQLite store, with a scripted model (each turn
//! answers "hello" in two pieces): chains, their bounds, per-key scope and caps,
//! deletion, input-item paging, and what can't be cancelled. The model's side is
//! covered end to end in `crates/kiln/tests/e2e_responses.rs`.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::chat::ChatCompletionRequest;
use kiln_api::responses::{CreateResponse, Response};
use kiln_api::Caller;
use kiln_responses::{
    ChatRunner, ChatTurn, Created, Finish, GenError, ItemsQuery, Limits, ResponseStore, Responses,
    ResponsesError, TurnEvent, TurnUsage,
};
use serde_json::json;

struct Scripted;

impl ChatRunner for Scripted {
    fn start(
        &self,
        _: &Caller,
        req: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let prompt = req.messages.len() as u64;
        Box::pin(async move {
            let (tx, events) = tokio::sync::mpsc::channel(8);
            for ev in [
                TurnEvent::Text("hel".into()),
                TurnEvent::Text("lo".into()),
                TurnEvent::Finished(Finish {
                    length: false,
                    usage: TurnUsage {
                        prompt,
                        cached: 0,
                        completion: 2,
                    },
                }),
            ] {
                let _ = tx.send(ev).await;
            }
            // No metered figure: the round keeps the one `Finished` reported.
            let (_, usage) = tokio::sync::oneshot::channel();
            Ok(ChatTurn {
                model: "scripted".into(),
                events,
                usage,
            })
        })
    }
}

/// Answers "hel" and then nothing, until the turn is dropped.
/// Adds a permit to `started` once its turn has sent its first text.
struct Stalls {
    started: Arc<tokio::sync::Semaphore>,
}

impl ChatRunner for Stalls {
    fn start(
        &self,
        _: &Caller,
        _: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let started = self.started.clone();
        Box::pin(async move {
            let (tx, events) = tokio::sync::mpsc::channel(8);
            let _ = tx.send(TurnEvent::Text("hel".into())).await;
            started.add_permits(1);
            // Meters what it produced once the turn is dropped, as the server does.
            let (metered, usage) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                tx.closed().await;
                let _ = metered.send(TurnUsage {
                    prompt: 7,
                    cached: 0,
                    completion: 1,
                });
            });
            Ok(ChatTurn {
                model: "stalls".into(),
                events,
                usage,
            })
        })
    }
}

fn service(limits: Limits) -> (Arc<Responses>, Arc<ResponseStore>) {
    let store = Arc::new(ResponseStore::open_in_memory().expect("store"));
    (
        Responses::new(store.clone(), Arc::new(Scripted), limits),
        store,
    )
}

fn caller(key: &str) -> Caller {
    Caller {
        key_id: key.into(),
        label: None,
    }
}

fn req(input: serde_json::Value, previous: Option<&str>) -> CreateResponse {
    CreateResponse {
        input: Some(input),
        previous_response_id: previous.map(str::to_string),
        ..CreateResponse::default()
    }
}

async fn create(r: &Arc<Responses>, key: &str, input: &str, prev: Option<&str>) -> Response {
    match r.create(caller(key), req(json!(input), prev)).await {
        Ok(Created::Done(resp)) => resp,
        Ok(_) => panic!("a plain request is answered whole"),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn chains_are_followed_and_scoped_to_their_key() {
    let (r, _) = service(Limits::default());
    let first = create(&r, "a", "one", None).await;
    assert_eq!(first.status, "completed");
    assert_eq!(first.model, "scripted");
    let second = create(&r, "a", "two", Some(&first.id)).await;
    // The scripted model reports one prompt token per message: the chain was rendered.
    let tokens = |x: &Response| x.usage.as_ref().map_or(0, |u| u.input_tokens);
    assert_eq!((tokens(&first), tokens(&second)), (1, 3));
    assert!(matches!(
        r.get(&caller("b"), &first.id),
        Err(ResponsesError::NotFound { .. })
    ));
    let e = r
        .create(caller("b"), req(json!("x"), Some(&first.id)))
        .await
        .err()
        .expect("another key's response");
    assert!(
        matches!(e, ResponsesError::NotFound { param: Some(ref p), .. } if p == "previous_response_id")
    );
    r.delete(&caller("a"), &first.id).expect("delete");
    assert!(r.get(&caller("a"), &first.id).is_err());
    let e = r
        .create(caller("a"), req(json!("x"), Some(&second.id)))
        .await
        .err()
        .expect("a chain with a deleted link");
    // A 400 that names the id the client sent and the deleted one, not a 404 for an
    // id the client never sent; the later response itself is still readable.
    let message = e.to_string();
    assert!(matches!(e, ResponsesError::Chain { .. }), "{e}");
    assert!(
        message.contains(&second.id) && message.contains(&first.id) && message.contains("deleted"),
        "{message}"
    );
    assert!(r.get(&caller("a"), &second.id).is_ok());
}

#[tokio::test]
async fn loops_and_over_long_chains_are_refused() {
    let (r, store) = service(Limits {
        max_chain: 3,
        ..Limits::default()
    });
    let a = create(&r, "k", "1", None).await;
    let b = create(&r, "k", "2", Some(&a.id)).await;
    let c = create(&r, "k", "3", Some(&b.id)).await;
    // Three responses back is the limit: the fourth link is refused.
    let d = create(&r, "k", "4", Some(&c.id)).await;
    let e = r
        .create(caller("k"), req(json!("5"), Some(&d.id)))
        .await
        .err()
        .expect("too long");
    assert!(matches!(e, ResponsesError::Chain { .. }), "{e}");
    // A loop can only come from a damaged store; it is still caught.
    let mut looped = store.get("k", &a.id).expect("get").expect("a");
    looped.response.previous_response_id = Some(b.id.clone());
    store.put(&looped).expect("put");
    let e = r
        .create(caller("k"), req(json!("6"), Some(&b.id)))
        .await
        .err()
        .expect("loop");
    assert!(
        matches!(e, ResponsesError::Chain { ref message } if message.contains("loops")),
        "{e}"
    );
}

#[tokio::test]
async fn a_key_is_capped_and_unstored_responses_do_not_count() {
    let (r, store) = service(Limits {
        max_stored_per_key: 2,
        ..Limits::default()
    });
    create(&r, "k", "1", None).await;
    let mut unstored = req(json!("x"), None);
    unstored.store = Some(false);
    for _ in 0..3 {
        assert!(r.create(caller("k"), unstored.clone()).await.is_ok());
    }
    create(&r, "k", "2", None).await;
    let e = r
        .create(caller("k"), req(json!("3"), None))
        .await
        .err()
        .expect("over the cap");
    assert!(matches!(e, ResponsesError::StorageLimit { .. }), "{e}");
    assert_eq!(store.footprint("k").expect("footprint").0, 2);
    assert!(r
        .create(caller("other"), req(json!("1"), None))
        .await
        .is_ok());
}

#[tokio::test]
async fn input_items_page_and_only_background_runs_cancel() {
    let (r, _) = service(Limits::default());
    let items = json!([
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}
    ]);
    let resp = match r.create(caller("k"), req(items, None)).await {
        Ok(Created::Done(x)) => x,
        _ => panic!("plain"),
    };
    let page = r
        .input_items(
            &caller("k"),
            &resp.id,
            &ItemsQuery {
                limit: Some(2),
                order: Some("asc".into()),
                ..ItemsQuery::default()
            },
        )
        .expect("page");
    assert_eq!(page.data.len(), 2);
    assert!(page.has_more);
    let rest = r
        .input_items(
            &caller("k"),
            &resp.id,
            &ItemsQuery {
                order: Some("asc".into()),
                after: page.last_id.clone(),
                ..ItemsQuery::default()
            },
        )
        .expect("rest");
    assert_eq!(rest.data.len(), 1);
    assert!(!rest.has_more);
    let e = r
        .cancel(&caller("k"), &resp.id)
        .await
        .expect_err("not background");
    assert!(matches!(e, ResponsesError::NotCancellable { .. }), "{e}");
    let e = r
        .input_items(
            &caller("k"),
            &resp.id,
            &ItemsQuery {
                limit: Some(0),
                ..ItemsQuery::default()
            },
        )
        .expect_err("limit 0");
    assert!(matches!(e, ResponsesError::Invalid { ref param, .. } if param == "limit"));
}

/// A service over [`Stalls`] with a background run of key `k` started and stalled
/// mid-answer: the service, its store and the queued response.
async fn stalled_background() -> (Arc<Responses>, Arc<ResponseStore>, Response) {
    let store = Arc::new(ResponseStore::open_in_memory().expect("store"));
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let stalls = Stalls {
        started: started.clone(),
    };
    let r = Responses::new(store.clone(), Arc::new(stalls), Limits::default());
    let mut background = req(json!("go"), None);
    background.background = Some(true);
    let queued = match r.create(caller("k"), background).await {
        Ok(Created::Background(x)) => x,
        _ => panic!("background"),
    };
    // Mid-answer: the turn has produced its first text and waits for more.
    let _ = started.acquire().await.expect("the turn starts");
    (r, store, queued)
}

#[tokio::test]
async fn a_background_run_deleted_while_running_stays_deleted() {
    let (r, store, queued) = stalled_background().await;
    r.delete(&caller("k"), &queued.id).expect("delete");
    // The cancelled run ends; it must not write the response back.
    tokio::time::timeout(std::time::Duration::from_secs(30), r.background_idle())
        .await
        .expect("the deleted run ends");
    assert!(matches!(
        r.get(&caller("k"), &queued.id),
        Err(ResponsesError::NotFound { .. })
    ));
    assert_eq!(store.footprint("k").expect("footprint"), (0, 0));
}

#[tokio::test]
async fn a_cut_run_stores_its_metered_usage_and_an_incomplete_message() {
    let (r, _store, queued) = stalled_background().await;
    r.cancel(&caller("k"), &queued.id).await.expect("cancel");
    let mut stored = r.get(&caller("k"), &queued.id).expect("stored");
    for _ in 0..100 {
        if stored.usage.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        stored = r.get(&caller("k"), &queued.id).expect("stored");
    }
    assert_eq!(stored.status, "cancelled");
    let usage = stored.usage.expect("usage of the cut run");
    // What `Stalls` metered when its turn was dropped, not zeros.
    assert_eq!((usage.input_tokens, usage.output_tokens), (7, 1));
    let statuses: Vec<_> = stored
        .output
        .iter()
        .filter_map(|i| match i {
            kiln_api::responses::Item::Message { status, .. } => status.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, ["incomplete"], "{:?}", stored.output);
}
