//! The Responses API's and the agents' model rounds, run as chat completions:
//! `kiln-responses`' [`ChatRunner`] over [`routes::chat::start`], streaming text and
//! parsed tool calls, and its `file_search` over the vector stores; and setting both
//! services up on a server's state.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use kiln_agents::{Agents, ScheduleLimits};
use kiln_api::chat::ChatCompletionRequest;
use kiln_constrain::{ToolCallParser, ToolEvent};
use kiln_engine::output::TextEvent;
use kiln_engine::FinishReason;
use kiln_host::{Generation, ModelKind};
use kiln_http::OpenAiError;
use kiln_rag::{Hit, Search};
use kiln_responses::{
    ChatRunner, ChatTurn, Finish, GenError, Limits, ResponseStore, Responses, TurnEvent, TurnUsage,
};
use kiln_usage::Caller;
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::lease::CallContext;
use crate::routes::chat::{self, ChatStart};
use crate::state::{AppState, Inner};

/// Runs chat turns on the server's models. Holds the state weakly: the state owns the
/// Responses service, which owns this.
pub struct ServerChat(Weak<Inner>);

/// Serves the Responses API on `state` from `store` (call before serving, once; a
/// later call changes nothing): the service.
pub fn enable_responses(state: &AppState, store: ResponseStore, limits: Limits) -> Arc<Responses> {
    let chat = Arc::new(ServerChat(state.downgrade()));
    let responses = Responses::new(Arc::new(store), chat, limits);
    state.set_responses(responses.clone());
    responses
}

/// Serves agents on `state` from files under `dir` and starts their alarms (call on
/// the runtime, before serving): the schedules armed, or `None` if already set up.
pub fn enable_agents(
    state: &AppState,
    dir: PathBuf,
    limits: Limits,
    schedules: ScheduleLimits,
) -> Option<usize> {
    let chat = Arc::new(ServerChat(state.downgrade()));
    let agents = Agents::new(dir, chat, limits, schedules);
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
            class: Default::default(),
        };
        Box::pin(async move {
            let state = state.ok_or_else(|| gen_error(ApiError::ShuttingDown))?;
            let started = chat::start(&state, &request, &ctx)
                .await
                .map_err(gen_error)?;
            let model = started.hosted.name.clone();
            let (tx, events) = mpsc::channel(64);
            let (metered, usage) = oneshot::channel();
            tokio::spawn(pump(started, state, tx, metered));
            Ok(ChatTurn {
                model,
                events,
                usage,
            })
        })
    }

    fn check_model(&self, model: &str) -> Result<(), GenError> {
        let state = self
            .0
            .upgrade()
            .map(AppState::from_inner)
            .ok_or_else(|| gen_error(ApiError::ShuttingDown))?;
        let (model, _) = state.split_adapter(Some(model), None).map_err(gen_error)?;
        state
            .resolve_for(model, ModelKind::Generate)
            .map(drop)
            .map_err(gen_error)
    }

    fn file_search(
        &self,
        caller: &Caller,
        store_ids: Vec<String>,
        search: Search,
    ) -> BoxFuture<'static, Result<Vec<Hit>, GenError>> {
        let state = self.0.upgrade().map(AppState::from_inner);
        let caller = caller.clone();
        Box::pin(async move {
            let state = state.ok_or_else(|| gen_error(ApiError::ShuttingDown))?;
            let stores = state.vector_stores().map_err(gen_error)?.clone();
            stores
                .search(&caller, &store_ids, &search)
                .await
                .map_err(|e| gen_error(e.into()))
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
/// (dropping the generation aborts it) or the shutdown deadline passes; then sends the
/// usage the generation meters as it is dropped. Tool calls come from `kiln-constrain`'s
/// parser, whose events are already the turn's shape.
async fn pump(
    started: ChatStart,
    state: AppState,
    tx: mpsc::Sender<TurnEvent>,
    metered: oneshot::Sender<TurnUsage>,
) {
    let ChatStart {
        mut gen,
        parse_tools,
        ..
    } = started;
    let last = forward(&mut gen, parse_tools.map(ToolCallParser::new), &state, &tx).await;
    let u = gen.usage();
    let usage = TurnUsage {
        prompt: u.prompt,
        cached: u.cached,
        completion: u.completion,
    };
    // The usage is metered here, with the same figures.
    drop(gen);
    let _ = metered.send(usage);
    let last = match last {
        Some(Ok(length)) => TurnEvent::Finished(Finish { length, usage }),
        Some(Err(e)) => TurnEvent::Failed(e),
        None => return,
    };
    let _ = tx.send(last).await;
}

/// The generation's events as turn events, until it ends (`Some(Ok(cut by length))`),
/// fails or is cut by the shutdown deadline (`Some(Err)`), or the receiver goes away
/// (`None`).
async fn forward(
    gen: &mut Generation,
    mut parser: Option<ToolCallParser>,
    state: &AppState,
    tx: &mpsc::Sender<TurnEvent>,
) -> Option<Result<bool, GenError>> {
    let mut parsed = Vec::new();
    let mut cutoff = state.cutoff();
    loop {
        let ev = tokio::select! {
            ev = gen.next() => ev,
            () = cutoff.passed() => return Some(Err(gen_error(ApiError::ShutdownCut))),
            () = tx.closed() => return None,
        };
        let ev = ev?;
        let end = match ev.event {
            TextEvent::Delta { text, .. } => {
                match parser.as_mut() {
                    Some(p) => p.push(&text, &mut parsed),
                    None => parsed.push(ToolEvent::Text(text)),
                }
                None
            }
            TextEvent::Finished { reason, .. } => {
                if let Some(p) = parser.as_mut() {
                    p.finish(&mut parsed);
                }
                Some(reason)
            }
            TextEvent::Started { .. } | TextEvent::PromptLogprob { .. } => continue,
        };
        for ev in parsed.drain(..).filter_map(turn_event) {
            tx.send(ev).await.ok()?;
        }
        if let Some(reason) = end {
            return Some(match gen.failure(reason) {
                Some(e) => Err(gen_error(ApiError::from(e))),
                None => Ok(reason == FinishReason::Length),
            });
        }
    }
}

/// The turn's event for a parser event; empty pieces and call ends carry nothing.
fn turn_event(ev: ToolEvent) -> Option<TurnEvent> {
    match ev {
        ToolEvent::Text(text) if !text.is_empty() => Some(TurnEvent::Text(text)),
        ToolEvent::CallStart { index, name } => Some(TurnEvent::CallStart { index, name }),
        ToolEvent::Arguments { index, fragment } if !fragment.is_empty() => {
            Some(TurnEvent::CallArguments { index, fragment })
        }
        _ => None,
    }
}
