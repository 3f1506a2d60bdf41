//! The Responses API's and the agents' model rounds: `kiln-responses`' [`ChatRunner`]
//! over [`Generator::chat`], streaming text and parsed tool calls, and its
//! `file_search` over the vector stores.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::chat::ChatCompletionRequest;
use kiln_api::Caller;
use kiln_constrain::{ToolCallParser, ToolEvent};
use kiln_engine::output::TextEvent;
use kiln_engine::FinishReason;
use kiln_host::{Generation, ModelKind};
use kiln_rag::{Hit, Search, VectorStores};
use kiln_responses::{ChatRunner, ChatTurn, Finish, GenError, TurnEvent, TurnUsage};
use tokio::sync::{mpsc, oneshot};

use crate::call::{Call, RequestClass};
use crate::chat::{ChatRequest, ChatStream};
use crate::error::GenerateError;
use crate::generator::Generator;

/// Runs chat rounds on the generator; searches `stores` for `file_search`, when the
/// server has vector stores.
pub struct Rounds {
    generator: Arc<Generator>,
    stores: Option<VectorStores>,
}

impl Rounds {
    pub fn new(generator: Arc<Generator>, stores: Option<VectorStores>) -> Self {
        Self { generator, stores }
    }
}

impl ChatRunner for Rounds {
    fn start(
        &self,
        caller: &Caller,
        request: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>> {
        let generator = self.generator.clone();
        let call = Call::new(caller.clone(), RequestClass::Interactive);
        Box::pin(async move {
            let started = generator
                .chat(ChatRequest::from_openai(&request), &call)
                .await
                .map_err(|e| GenError::classified(&e))?;
            let model = started.hosted.name.clone();
            let (tx, events) = mpsc::channel(64);
            let (metered, usage) = oneshot::channel();
            tokio::spawn(pump(started, generator, tx, metered));
            Ok(ChatTurn {
                model,
                events,
                usage,
            })
        })
    }

    fn check_model(&self, model: &str) -> Result<(), GenError> {
        let classified = |e: GenerateError| GenError::classified(&e);
        let (model, _) = self
            .generator
            .split_adapter(Some(model), None)
            .map_err(classified)?;
        self.generator
            .resolve_for(model, ModelKind::Generate)
            .map(drop)
            .map_err(classified)
    }

    fn file_search(
        &self,
        caller: &Caller,
        store_ids: Vec<String>,
        search: Search,
    ) -> BoxFuture<'static, Result<Vec<Hit>, GenError>> {
        let stores = self.stores.clone();
        let caller = caller.clone();
        Box::pin(async move {
            let Some(stores) = stores else {
                return Err(GenError {
                    kind: kiln_api::ErrorKind::Unavailable,
                    ..GenError::new(
                        "store_unavailable",
                        "vector stores need a data directory; start the server with --data-dir",
                    )
                });
            };
            stores
                .search(&caller, &store_ids, &search)
                .await
                .map_err(|e| GenError::classified(&e))
        })
    }
}

/// Forwards the generation's text and tool calls until it ends, the receiver goes away
/// (dropping the generation aborts it) or the shutdown deadline passes; then sends the
/// usage the generation meters as it is dropped. Tool calls come from `kiln-constrain`'s
/// parser, whose events are already the turn's shape.
async fn pump(
    started: ChatStream,
    generator: Arc<Generator>,
    tx: mpsc::Sender<TurnEvent>,
    metered: oneshot::Sender<TurnUsage>,
) {
    let ChatStream {
        mut generation,
        tools,
        ..
    } = started;
    let parser = tools.map(ToolCallParser::new);
    let last = forward(&mut generation, parser, &generator, &tx).await;
    let u = generation.usage();
    let usage = TurnUsage {
        prompt: u.prompt,
        cached: u.cached,
        completion: u.completion,
    };
    // The usage is metered here, with the same figures.
    drop(generation);
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
    generator: &Generator,
    tx: &mpsc::Sender<TurnEvent>,
) -> Option<Result<bool, GenError>> {
    let mut parsed = Vec::new();
    let mut cutoff = generator.cutoff();
    loop {
        let ev = tokio::select! {
            ev = gen.next() => ev,
            () = cutoff.passed() => {
                return Some(Err(GenError::classified(&GenerateError::ShutdownCut)))
            }
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
                Some(e) => Err(GenError::classified(&GenerateError::from(e))),
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
