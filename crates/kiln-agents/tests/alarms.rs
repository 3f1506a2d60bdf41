//! The alarm loop with a scripted model: a failed scheduled turn is retried after its
//! backoff and then completes, and a turn cut short (a second service started on the
//! same files while the first is stuck mid-turn, as after a crash) runs again from the
//! schedule kept on disk: delivery at least once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use kiln_agents::{Agents, ScheduleLimits};
use kiln_api::agents::{AgentConfig, ScheduleRequest};
use kiln_api::chat::ChatCompletionRequest;
use kiln_api::Caller;
use kiln_responses::{ChatRunner, ChatTurn, Finish, GenError, Limits, TurnEvent, TurnUsage};
use serde_json::{json, Value};
use tokio::sync::broadcast;

/// Fails its first `fail` turns, stalls mid-answer if `stall`, else answers "done".
struct Model {
    fail: usize,
    stall: bool,
    turns: Arc<AtomicUsize>,
}

impl ChatRunner for Model {
    fn start(
        &self,
        _: &Caller,
        _: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let n = self.turns.fetch_add(1, Ordering::SeqCst);
        let (fail, stall) = (n < self.fail, self.stall);
        Box::pin(async move {
            if fail {
                return Err(GenError::new("model_down", "the model is down"));
            }
            let (tx, events) = tokio::sync::mpsc::channel(8);
            let (_metered, usage) = tokio::sync::oneshot::channel();
            if stall {
                let _ = tx.send(TurnEvent::Text("wor".into())).await;
                // The turn stays open until whoever runs it lets go.
                tokio::spawn(async move { tx.closed().await });
            } else {
                let finish = Finish {
                    length: false,
                    usage: TurnUsage {
                        prompt: 3,
                        cached: 0,
                        completion: 1,
                    },
                };
                for ev in [TurnEvent::Text("done".into()), TurnEvent::Finished(finish)] {
                    let _ = tx.send(ev).await;
                }
            }
            Ok(ChatTurn {
                model: "scripted".into(),
                events,
                usage,
            })
        })
    }
}

fn caller() -> Caller {
    Caller {
        key_id: "key_a".into(),
        label: None,
    }
}

fn agents(dir: &std::path::Path, fail: usize, stall: bool) -> (Arc<Agents>, Arc<AtomicUsize>) {
    let turns = Arc::new(AtomicUsize::new(0));
    let model = Model {
        fail,
        stall,
        turns: turns.clone(),
    };
    let a = Agents::new(
        dir.to_path_buf(),
        Arc::new(model),
        Limits::default(),
        ScheduleLimits::default(),
    );
    (a, turns)
}

/// Creates agent `bot` with a one-shot schedule due now; returns the schedule's id.
fn create_with_schedule(a: &Agents) -> String {
    let config = AgentConfig {
        model: "scripted".into(),
        instructions: None,
        tools: None,
        max_output_tokens: None,
    };
    a.put(&caller(), "bot", config).expect("agent");
    let req = ScheduleRequest {
        input: json!("run"),
        delay_seconds: Some(0.0),
        at: None,
        cron: None,
    };
    a.add_schedule(&caller(), "bot", req).expect("schedule").id
}

/// The next event of type `kind` (skipping others), within `limit`.
async fn next_of(rx: &mut broadcast::Receiver<Value>, kind: &str, limit: Duration) -> Value {
    let wanted = async {
        loop {
            match rx.recv().await {
                Ok(ev) if ev["type"] == kind => return ev,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    };
    tokio::time::timeout(limit, wanted)
        .await
        .unwrap_or_else(|_| panic!("no {kind} within {limit:?}"))
}

/// Whether `cond` holds within 10 s, polling the state it reads.
async fn eventually(cond: impl Fn() -> bool) -> bool {
    for _ in 0..1000 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scheduled_turn_is_retried_after_its_backoff_and_completes() {
    let dir = tempfile::tempdir().expect("tmp");
    let (a, turns) = agents(dir.path(), 1, false);
    let id = create_with_schedule(&a);
    let mut events = a.subscribe(&caller(), "bot").expect("events");
    a.start();
    let failed = next_of(
        &mut events,
        "agent.schedule.failed",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(failed["schedule_id"], id.as_str());
    let pending = a.schedules(&caller(), "bot").expect("schedules");
    assert_eq!(pending.len(), 1, "kept for its retry");
    assert_eq!(pending[0].attempts, 1);
    assert!(pending[0].last_error.is_some(), "{pending:?}");
    // The first retry comes 4-7 s later.
    let done = next_of(
        &mut events,
        "agent.schedule.completed",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(done["schedule_id"], id.as_str());
    assert_eq!(turns.load(Ordering::SeqCst), 2);
    // The event goes out once the run is recorded.
    assert!(
        a.schedules(&caller(), "bot").expect("schedules").is_empty(),
        "a one-shot schedule is gone once it ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_short_runs_again_from_the_schedule_on_disk() {
    let dir = tempfile::tempdir().expect("tmp");
    let (stuck, stuck_turns) = agents(dir.path(), 0, true);
    let id = create_with_schedule(&stuck);
    let mut events = stuck.subscribe(&caller(), "bot").expect("events");
    stuck.start();
    next_of(
        &mut events,
        "agent.schedule.started",
        Duration::from_secs(10),
    )
    .await;
    // The event goes out just before the model is asked: wait until it is, mid-answer.
    assert!(eventually(|| stuck_turns.load(Ordering::SeqCst) == 1).await);
    // Mid-turn, nothing was recorded: a new service finds the schedule still due.
    let (again, turns) = agents(dir.path(), 0, false);
    let mut events = again.subscribe(&caller(), "bot").expect("events");
    assert_eq!(
        again.start(),
        1,
        "the schedule is armed again from its file"
    );
    let done = next_of(
        &mut events,
        "agent.schedule.completed",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done["schedule_id"], id.as_str());
    assert_eq!(turns.load(Ordering::SeqCst), 1);
}
