//! The Responses API over a store: create (plain, streamed or in the background), get,
//! delete, list input items, cancel, and resuming background runs after a restart.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln_api::responses::{CreateResponse, Deleted, Item, Response, StreamEvent, TextConfig};
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_mcp::McpSettings;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, Notify};

use crate::cancel::Cancel;
use crate::chat::ChatRunner;
use crate::error::{ResponsesError, Result};
use crate::event_log::{EventLog, EventStream};
use crate::events::Emitter;
use crate::ids::new_id;
use crate::replay::RERUN_STRIDE;
use crate::store::{ResponseStore, Stored};
use crate::turn::{self, RunContext, Turn};
use crate::{input, tools};

/// The error code of a model round cut by the server's shutdown deadline.
pub const SHUTDOWN_CODE: &str = "server_shutdown";

/// Bounds on what one key may store and one response may do.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Responses one API key may keep stored.
    pub max_stored_per_key: u64,
    /// Bytes (requests, responses and items as JSON) one API key may keep stored.
    pub max_bytes_per_key: u64,
    /// Longest `previous_response_id` chain followed.
    pub max_chain: usize,
    /// Most MCP calls executed in one response.
    pub max_tool_calls: u32,
    pub mcp: McpSettings,
    /// MCP settings of the API keys (by key id) that have their own outbound
    /// exceptions; the others use `mcp`.
    pub mcp_per_key: HashMap<String, McpSettings>,
    /// Bytes (as JSON) of one response's recorded events, kept to re-stream it: held
    /// in memory while it runs and stored with it. Past this a response keeps none.
    pub max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_stored_per_key: 10_000,
            max_bytes_per_key: 256 << 20,
            max_chain: 256,
            max_tool_calls: 16,
            mcp: McpSettings::default(),
            mcp_per_key: HashMap::new(),
            max_event_bytes: 8 << 20,
        }
    }
}

/// How a created response comes back.
pub enum Created {
    /// Run to its end (stored when `store`).
    Done(Response),
    /// Its events as they happen; the first is `response.created`.
    Streaming(EventStream),
    /// Queued; poll it with [`Responses::get`].
    Background(Response),
}

/// The Responses API of one store.
pub struct Responses {
    store: Arc<ResponseStore>,
    chat: Arc<dyn ChatRunner>,
    limits: Limits,
    /// Background responses running now, by id.
    running: Mutex<HashMap<String, Running>>,
    /// Background tasks not yet ended (a deleted response's task outlives its entry in
    /// `running`), and a wake-up for [`Responses::background_idle`].
    tasks: (AtomicUsize, Notify),
}

/// A background run: how to cancel it and its events so far.
struct Running {
    cancel: Cancel,
    log: Arc<EventLog>,
}

/// Counts a background task out of [`Responses::background_idle`] when dropped.
struct TaskEnd(Arc<Responses>);

/// Ends a background run's event log when its task ends, however it ends.
struct LogEnd(Arc<EventLog>);

impl Drop for LogEnd {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Drop for TaskEnd {
    fn drop(&mut self) {
        self.0.tasks.0.fetch_sub(1, Ordering::AcqRel);
        self.0.tasks.1.notify_waiters();
    }
}

impl Responses {
    pub fn new(store: Arc<ResponseStore>, chat: Arc<dyn ChatRunner>, limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            store,
            chat,
            limits,
            running: Mutex::new(HashMap::new()),
            tasks: (AtomicUsize::new(0), Notify::new()),
        })
    }

    /// Resolves once no background task runs: every background response has ended and
    /// stored (or, deleted, not stored) its result.
    pub async fn background_idle(&self) {
        loop {
            let notified = self.tasks.1.notified();
            if self.tasks.0.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    pub fn store(&self) -> &Arc<ResponseStore> {
        &self.store
    }

    /// Starts again every background response a restart cut short: at least once.
    pub fn resume(self: &Arc<Self>) -> Result<usize> {
        let unfinished = self.store.unfinished()?;
        let n = unfinished.len();
        for s in unfinished {
            match self.prepare(&s.caller, s.request.clone(), Some(&s.response)) {
                Ok(mut t) => {
                    t.input = s.input;
                    let reruns = self.store.count_rerun(&s.response.id)?;
                    let first = reruns.saturating_mul(RERUN_STRIDE);
                    let _log = self.spawn_background(t, s.request, first);
                }
                Err(e) => {
                    let r = turn::failed(s.response.clone(), "resume_failed", &e.to_string());
                    self.save(&s.caller, &s.request, &r, &s.input, None)?;
                }
            }
        }
        Ok(n)
    }

    /// Creates a response for `caller`.
    pub async fn create(self: &Arc<Self>, caller: Caller, req: CreateResponse) -> Result<Created> {
        let turn = self.prepare(&caller, req.clone(), None)?;
        if turn.response.background {
            let queued = turn.response.clone();
            self.save(&caller, &req, &queued, &turn.input, None)?;
            let stream = req.stream.unwrap_or(false);
            let log = self.spawn_background(turn, req, 0);
            // Streamed, the caller follows the run's log from its first event; leaving
            // stops only the following (the run goes on, and GET re-streams it).
            return Ok(match stream {
                true => Created::Streaming(log.follow(None)),
                false => Created::Background(queued),
            });
        }
        if !req.stream.unwrap_or(false) {
            let mut em = Emitter::new(None, self.log_for(&turn));
            let r = turn::run(&turn, &self.context(&turn), &mut em, &Cancel::default()).await?;
            self.finish(&turn, &req, &r, &mut em)?;
            return Ok(Created::Done(r));
        }
        let (tx, mut rx) = mpsc::channel(256);
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut em = Emitter::new(Some(tx), this.log_for(&turn));
            let r = turn::run(&turn, &this.context(&turn), &mut em, &Cancel::default()).await?;
            match this.finish(&turn, &req, &r, &mut em) {
                Ok(Some(end)) => em.deliver(end).await,
                Ok(None) => {}
                Err(e) => em.error("storage_failed", &e.to_string()).await,
            }
            Ok::<_, ResponsesError>(())
        });
        match rx.recv().await {
            Some(first) => Ok(Created::Streaming(EventStream::starting_with(first, rx))),
            // Nothing was sent: the turn ended before its first round started.
            None => match task.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(())) => Err(ResponsesError::Corrupt("the response ended unseen".into())),
                Err(e) => Err(ResponsesError::Corrupt(format!(
                    "the response task failed: {e}"
                ))),
            },
        }
    }

    /// What `turn` runs with: the caller's own MCP settings if it has them.
    fn context(&self, turn: &Turn) -> RunContext<'_> {
        let key = &turn.caller.key_id;
        RunContext {
            chat: self.chat.as_ref(),
            mcp: self.limits.mcp_per_key.get(key).unwrap_or(&self.limits.mcp),
            max_tool_calls: self.limits.max_tool_calls,
        }
    }

    /// A log for `turn`'s events when it is a stored background response: those are
    /// what a client re-streams and resumes (as OpenAI's API has it). Foreground
    /// responses keep none, so storing them costs no more than their output.
    fn log_for(&self, turn: &Turn) -> Option<Arc<EventLog>> {
        let max = self.limits.max_event_bytes;
        (turn.response.store && turn.response.background).then(|| EventLog::new(max))
    }

    /// Stores `r` (when `store`) with its events, the terminal one included; that
    /// event, for the caller to deliver once the response can be read.
    fn finish(
        &self,
        turn: &Turn,
        req: &CreateResponse,
        r: &Response,
        em: &mut Emitter,
    ) -> Result<Option<StreamEvent>> {
        let end = turn::terminal(em, r);
        if r.store {
            let events = em.recorded().map(|mut e| {
                e.extend(end.clone());
                e
            });
            self.save(&turn.caller, req, r, &turn.input, events.as_deref())?;
        }
        Ok(end)
    }

    /// Runs `turn` on a task of its own, its events numbered from `first_seq`; returns
    /// the log they go to.
    fn spawn_background(
        self: &Arc<Self>,
        turn: Turn,
        req: CreateResponse,
        first_seq: u64,
    ) -> Arc<EventLog> {
        let cancel = Cancel::default();
        let log = EventLog::new(self.limits.max_event_bytes);
        let run = Running {
            cancel: cancel.clone(),
            log: Arc::clone(&log),
        };
        self.lock_running().insert(turn.response.id.clone(), run);
        let this = Arc::clone(self);
        self.tasks.0.fetch_add(1, Ordering::AcqRel);
        let followed = Arc::clone(&log);
        tokio::spawn(async move {
            // Counted out, and its followers ended, however the task ends.
            let _ended = TaskEnd(Arc::clone(&this));
            let _log_end = LogEnd(Arc::clone(&log));
            let mut em = Emitter::new(None, Some(log)).numbered_from(first_seq);
            let r = match turn::run(&turn, &this.context(&turn), &mut em, &cancel).await {
                Ok(r) => r,
                Err(e) => turn::failed(turn.response.clone(), "generation_failed", &e.to_string()),
            };
            // Under the lock `delete` takes, so a response deleted while it ran is not
            // written back.
            let end = {
                let mut running = this.lock_running();
                if running.remove(&r.id).is_none() {
                    return;
                }
                // Cut by the server's shutdown: left queued, so the next start runs it
                // again.
                if r.error.as_ref().is_some_and(|e| e.code == SHUTDOWN_CODE) {
                    return;
                }
                this.finish(&turn, &req, &r, &mut em)
            };
            match end {
                Ok(Some(end)) => em.deliver(end).await,
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(id = %r.id, error = %e, "cannot store a background response");
                }
            }
        });
        followed
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The event log of `id`'s background run, while it runs.
    pub(crate) fn running_log(&self, id: &str) -> Option<Arc<EventLog>> {
        self.lock_running().get(id).map(|r| Arc::clone(&r.log))
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Writes `r`; once it is finished the MCP credentials in its request are dropped
    /// (they were kept only to resume it).
    fn save(
        &self,
        caller: &Caller,
        req: &CreateResponse,
        r: &Response,
        input: &[Item],
        events: Option<&[StreamEvent]>,
    ) -> Result<()> {
        let mut request = req.clone();
        if !matches!(r.status.as_str(), "queued" | "in_progress") {
            request.tools = Some(tools::echoed(req.tools.as_deref()));
        }
        let stored = Stored {
            caller: caller.clone(),
            request,
            response: r.clone(),
            input: input.to_vec(),
        };
        self.store.put_with_events(&stored, events)
    }

    /// Checks `req` and gathers what running it needs. `resumed` is the stored response
    /// of a background run being started again (its id and time are kept).
    fn prepare(
        &self,
        caller: &Caller,
        req: CreateResponse,
        resumed: Option<&Response>,
    ) -> Result<Turn> {
        let background = req.background.unwrap_or(false);
        let store = req.store.unwrap_or(true);
        if background && !store {
            return Err(ResponsesError::invalid(
                "store",
                "a background response must be stored (`store: true`)",
            ));
        }
        if let Some(t) = req
            .truncation
            .as_deref()
            .filter(|t| *t != "disabled" && *t != "auto")
        {
            return Err(ResponsesError::invalid(
                "truncation",
                format!("unsupported truncation '{t}'; expected disabled or auto"),
            ));
        }
        if req.max_output_tokens == Some(0) {
            return Err(ResponsesError::invalid(
                "max_output_tokens",
                "`max_output_tokens` must be at least 1",
            ));
        }
        let input = input::parse(req.input.as_ref())?;
        let tool_set = tools::parse(req.tools.as_deref())?;
        let tool_choice = tools::tool_choice(req.tool_choice.as_ref())?;
        let format = tools::response_format(&req)?;
        let search_results = include(req.include.as_deref())?;
        if let Some(m) = &req.metadata {
            check_metadata(m)?;
        }
        let history = self.history(&caller.key_id, req.previous_response_id.as_deref())?;
        if store && resumed.is_none() {
            self.check_room(&caller.key_id)?;
        }
        let response = Response {
            id: resumed.map_or_else(|| new_id("resp"), |r| r.id.clone()),
            object: "response".into(),
            created_at: resumed.map_or_else(unix_now, |r| r.created_at),
            status: if background { "queued" } else { "in_progress" }.into(),
            background,
            error: None,
            incomplete_details: None,
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            max_tool_calls: req.max_tool_calls,
            model: req.model.clone().unwrap_or_default(),
            output: Vec::new(),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            previous_response_id: req.previous_response_id.clone(),
            store,
            temperature: req.temperature,
            top_p: req.top_p,
            text: req.text.clone().unwrap_or_else(|| TextConfig {
                format: Some(kiln_api::responses::TextFormat {
                    kind: "text".into(),
                    name: None,
                    description: None,
                    schema: None,
                    strict: None,
                }),
            }),
            tool_choice: req
                .tool_choice
                .clone()
                .unwrap_or_else(|| Value::String("auto".into())),
            tools: tools::echoed(req.tools.as_deref()),
            truncation: req.truncation.clone().unwrap_or_else(|| "disabled".into()),
            usage: None,
            user: req.user.clone(),
            metadata: req.metadata.clone().unwrap_or_default(),
        };
        Ok(Turn {
            caller: caller.clone(),
            response,
            history,
            input,
            tools: tool_set,
            tool_choice,
            format,
            search_results,
        })
    }

    /// The items of the chain ending at `previous`, oldest first.
    fn history(&self, key_id: &str, previous: Option<&str>) -> Result<Vec<Item>> {
        let mut chain: Vec<Stored> = Vec::new();
        let mut seen = HashSet::new();
        let mut next = previous.map(str::to_string);
        while let Some(id) = next {
            if !seen.insert(id.clone()) {
                return Err(ResponsesError::Chain {
                    message: format!("the previous_response_id chain loops at '{id}'"),
                });
            }
            if chain.len() >= self.limits.max_chain {
                return Err(ResponsesError::Chain {
                    message: format!(
                        "the previous_response_id chain is longer than {} responses; start a new conversation",
                        self.limits.max_chain
                    ),
                });
            }
            let s = self.store.get(key_id, &id)?.ok_or_else(|| match previous {
                // A deleted ancestor: name the id the client sent, and why it can't
                // be continued (its conversation is no longer whole).
                Some(asked) if asked != id => ResponsesError::Chain {
                    message: format!(
                        "previous_response_id '{asked}' cannot be continued: an earlier \
                             response of its conversation, '{id}', was deleted; start a new \
                             conversation (the response itself can still be read)"
                    ),
                },
                _ => ResponsesError::NotFound {
                    id: id.clone(),
                    param: Some("previous_response_id".into()),
                },
            })?;
            if matches!(s.response.status.as_str(), "queued" | "in_progress") {
                return Err(ResponsesError::invalid(
                    "previous_response_id",
                    format!(
                        "response '{id}' is still {}; wait for it to finish",
                        s.response.status
                    ),
                ));
            }
            next = s.response.previous_response_id.clone();
            chain.push(s);
        }
        Ok(chain
            .into_iter()
            .rev()
            .flat_map(|s| s.input.into_iter().chain(s.response.output))
            .collect())
    }

    fn check_room(&self, key_id: &str) -> Result<()> {
        let (n, bytes) = self.store.footprint(key_id)?;
        if n >= self.limits.max_stored_per_key {
            return Err(ResponsesError::StorageLimit {
                what: n.to_string(),
                limit: self.limits.max_stored_per_key.to_string(),
            });
        }
        if bytes >= self.limits.max_bytes_per_key {
            return Err(ResponsesError::StorageLimit {
                what: format!("{bytes} bytes of"),
                limit: format!("{} bytes", self.limits.max_bytes_per_key),
            });
        }
        Ok(())
    }

    /// `caller`'s response `id`.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Response> {
        Ok(self.stored(caller, id)?.response)
    }

    pub(crate) fn stored(&self, caller: &Caller, id: &str) -> Result<Stored> {
        self.store
            .get(&caller.key_id, id)?
            .ok_or_else(|| ResponsesError::NotFound {
                id: id.to_string(),
                param: None,
            })
    }

    /// Deletes `caller`'s response `id` (cancelling it first if it is running; a run
    /// deleted this way is never stored again).
    pub fn delete(&self, caller: &Caller, id: &str) -> Result<Deleted> {
        self.stored(caller, id)?;
        // Held until the row is gone: a background run ending now finds its entry
        // removed and stores nothing.
        let mut running = self.lock_running();
        if let Some(run) = running.remove(id) {
            run.cancel.cancel();
        }
        let deleted = self.store.delete(&caller.key_id, id)?;
        drop(running);
        if !deleted {
            return Err(ResponsesError::NotFound {
                id: id.to_string(),
                param: None,
            });
        }
        Ok(Deleted {
            id: id.to_string(),
            object: "response.deleted".into(),
            deleted: true,
        })
    }

    /// Cancels `caller`'s background response `id`; the response as it ended.
    pub async fn cancel(&self, caller: &Caller, id: &str) -> Result<Response> {
        let r = self.get(caller, id)?;
        if r.status == "cancelled" {
            return Ok(r);
        }
        let running = self.lock_running().get(id).map(|r| r.cancel.clone());
        let Some(cancel) = running.filter(|_| r.background) else {
            return Err(ResponsesError::NotCancellable {
                id: id.to_string(),
                status: r.status,
            });
        };
        cancel.cancel();
        // The run stores its final state as soon as it sees the flag.
        for _ in 0..500 {
            let r = self.get(caller, id)?;
            if !matches!(r.status.as_str(), "queued" | "in_progress") {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.get(caller, id)
    }
}

/// `include`: whether `file_search_call.results` is asked for. Other extras are refused
/// rather than silently left out.
fn include(v: Option<&[String]>) -> Result<bool> {
    let mut results = false;
    for (i, what) in v.unwrap_or_default().iter().enumerate() {
        match what.as_str() {
            "file_search_call.results" => results = true,
            other => {
                return Err(ResponsesError::invalid(
                    format!("include[{i}]"),
                    format!("`include` value '{other}' is not supported; this server includes file_search_call.results"),
                ))
            }
        }
    }
    Ok(results)
}

/// OpenAI's bounds: at most 16 pairs, keys up to 64 characters, string values up to 512.
fn check_metadata(m: &Map<String, Value>) -> Result<()> {
    if m.len() > 16 {
        return Err(ResponsesError::invalid(
            "metadata",
            "at most 16 metadata pairs",
        ));
    }
    for (k, v) in m {
        let ok = k.chars().count() <= 64 && v.as_str().is_some_and(|s| s.chars().count() <= 512);
        if !ok {
            return Err(ResponsesError::invalid(
                format!("metadata.{k}"),
                "metadata keys are at most 64 characters and values strings of at most 512",
            ));
        }
    }
    Ok(())
}
