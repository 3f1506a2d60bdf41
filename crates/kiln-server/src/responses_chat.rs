//! The Responses API's and the agents' model rounds, run as chat completions:
//! `kiln-responses`' [`ChatRunner`] over [`routes::chat::start`], streaming text and
//! parsed tool calls; and setting both services up on a server's state.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use kiln_agents::Agents;
use kiln_api::chat::ChatCompletionRequest;
use kiln_engine::output::TextEvent;
use kiln_engine::FinishReason;
use kiln_http::OpenAiError;
use kiln_responses::{
    ChatRunner, ChatTurn, Finish, GenError, Limits, ResponseStore, Responses, TurnEvent, TurnUsage,
};
use kiln_usage::Caller;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::lease::CallContext;
use crate::routes::chat::{self, ChatStart};
use crate::state::{AppState, Inner};
use crate::tool_calls::{Piece, ToolStream};

/// Runs chat turns on the server's models. Holds the state weakly: the state owns the
/// Responses service, which owns this.
pub struct ServerChat(Weak<Inner>);

/// Serves the Responses API on `state` from `store` (call before serving); false if
/// it already was.
pub fn enable_responses(state: &AppState, store: ResponseStore, limits: Limits) -> bool {
    let chat = Arc::new(ServerChat(state.downgrade()));
    state.set_responses(Responses::new(Arc::new(store), chat, limits))
}

/// Serves agents on `state` from files under `dir` and starts their alarms (call on
/// the runtime, before serving): the schedules armed, or `None` if already set up.
pub fn enable_agents(state: &AppState, dir: PathBuf, limits: Limits) -> Option<usize> {
    let chat = Arc::new(ServerChat(state.downgrade()));
    let agents = Agents::new(dir, chat, limits);
    state.set_agents(agents.clone()).then(|| agents.start())
}

impl ChatRunner for ServerChat {
    fn start(
        &self,
        caller: &Caller,
        request: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let state = self.0.upgrade().map(AppState::from_inner);
        let ctx = CallContext {
            caller: caller.clone(),
            warmth: Default::default(),
        };
        Box::pin(async move {
            let state = state.ok_or_else(|| gen_error(ApiError::ShuttingDown))?;
            let started = chat::start(&state, &request, &ctx)
                .await
                .map_err(gen_error)?;
            let model = started.hosted.name.clone();
            let (tx, events) = mpsc::channel(64);
            tokio::spawn(pump(started, state, tx));
            Ok(ChatTurn { model, events })
        })
    }
}

/// The runner's error for `e`, which the route maps back to `e` itself.
pub fn gen_error(e: ApiError) -> GenError {
    GenError {
        code: e.code().into(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// Forwards the generation's text and tool calls until it ends, the receiver goes away
/// (dropping the generation aborts it) or the shutdown deadline passes.
async fn pump(started: ChatStart, state: AppState, tx: mpsc::Sender<TurnEvent>) {
    let ChatStart {
        mut gen,
        parse_tools,
        ..
    } = started;
    let mut tools = parse_tools.map(ToolStream::new);
    let mut cutoff = state.cutoff();
    loop {
        let ev = tokio::select! {
            ev = gen.next() => ev,
            () = cutoff.passed() => {
                let _ = tx.send(TurnEvent::Failed(gen_error(ApiError::ShutdownCut))).await;
                return;
            }
        };
        let Some(ev) = ev else { return };
        let (pieces, end) = match ev.event {
            TextEvent::Delta { text, .. } => match tools.as_mut() {
                Some(ts) => (ts.push(&text), None),
                None => (vec![Piece::Content(text)], None),
            },
            TextEvent::Finished { reason, .. } => {
                let rest = tools.as_mut().map(ToolStream::finish).unwrap_or_default();
                (rest, Some(reason))
            }
            TextEvent::Started { .. } | TextEvent::PromptLogprob { .. } => continue,
        };
        for p in pieces {
            if tx.send(piece_event(p)).await.is_err() {
                return;
            }
        }
        if let Some(reason) = end {
            let last = match gen.failure(reason) {
                Some(e) => TurnEvent::Failed(gen_error(ApiError::from(e))),
                None => {
                    let u = gen.usage();
                    TurnEvent::Finished(Finish {
                        length: reason == FinishReason::Length,
                        usage: TurnUsage {
                            prompt: u.prompt,
                            cached: u.cached,
                            completion: u.completion,
                        },
                    })
                }
            };
            drop(gen);
            let _ = tx.send(last).await;
            return;
        }
    }
}

fn piece_event(p: Piece) -> TurnEvent {
    match p {
        Piece::Content(text) => TurnEvent::Text(text),
        Piece::Call(call) => {
            let index = call.index as usize;
            match (call.function.name, call.function.arguments) {
                (Some(name), _) => TurnEvent::CallStart { index, name },
                (None, args) => TurnEvent::CallArguments {
                    index,
                    fragment: args.unwrap_or_default(),
                },
            }
        }
    }
}
