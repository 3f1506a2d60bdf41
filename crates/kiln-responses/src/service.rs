//! The Responses API over a store: create (plain, streamed or in the background), get,
//! delete, list input items, cancel, and resuming background runs after a restart.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln_api::responses::{
    CreateResponse, Deleted, Item, ItemList, Response, StreamEvent, TextConfig,
};
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_mcp::McpSettings;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, Notify};

use crate::cancel::Cancel;
use crate::chat::ChatRunner;
use crate::error::{ResponsesError, Result};
use crate::events::Emitter;
use crate::ids::new_id;
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

/// A response's events. Dropping it stops the response at its next event.
pub struct EventStream {
    first: Option<StreamEvent>,
    rx: mpsc::Receiver<StreamEvent>,
}

impl EventStream {
    /// A stream of the events sent on `rx` (a caller relaying a response's events).
    pub fn from_channel(rx: mpsc::Receiver<StreamEvent>) -> Self {
        Self { first: None, rx }
    }

    pub async fn next(&mut self) -> Option<StreamEvent> {
        match self.first.take() {
            Some(ev) => Some(ev),
            None => self.rx.recv().await,
        }
    }
}

/// The Responses API of one store.
pub struct Responses {
    store: Arc<ResponseStore>,
    chat: Arc<dyn ChatRunner>,
    limits: Limits,
    /// Background responses running now, by id.
    running: Mutex<HashMap<String, Cancel>>,
    /// Background tasks not yet ended (a deleted response's task outlives its entry in
    /// `running`), and a wake-up for [`Responses::background_idle`].
    tasks: (AtomicUsize, Notify),
}

/// Counts a background task out of [`Responses::background_idle`] when dropped.
struct TaskEnd(Arc<Responses>);

impl Drop for TaskEnd {
    fn drop(&mut self) {
        self.0.tasks.0.fetch_sub(1, Ordering::AcqRel);
        self.0.tasks.1.notify_waiters();
    }
}

/// `input_items` paging: `limit` (1-100), `order` (`asc` or `desc`), `after`, `before`.
#[derive(Debug, Clone, Default)]
pub struct ItemsQuery {
    pub limit: Option<usize>,
    pub order: Option<String>,
    pub after: Option<String>,
    pub before: Option<String>,
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
                    self.spawn_background(t, s.request);
                }
                Err(e) => {
                    let r = turn::failed(s.response.clone(), "resume_failed", &e.to_string());
                    self.save(&s.caller, &s.request, &r, &s.input)?;
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
            self.save(&caller, &req, &queued, &turn.input)?;
            self.spawn_background(turn, req);
            return Ok(Created::Background(queued));
        }
        if !req.stream.unwrap_or(false) {
            let mut em = Emitter::new(None);
            let r = turn::run(&turn, &self.context(&turn), &mut em, &Cancel::default()).await?;
            if r.store {
                self.save(&caller, &req, &r, &turn.input)?;
            }
            return Ok(Created::Done(r));
        }
        let (tx, mut rx) = mpsc::channel(256);
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut em = Emitter::new(Some(tx));
            let r = turn::run(&turn, &this.context(&turn), &mut em, &Cancel::default()).await?;
            if r.store {
                if let Err(e) = this.save(&turn.caller, &req, &r, &turn.input) {
                    em.error("storage_failed", &e.to_string()).await;
                    return Ok(());
                }
            }
            turn::announce_end(&mut em, &r).await;
            Ok::<_, ResponsesError>(())
        });
        match rx.recv().await {
            Some(first) => Ok(Created::Streaming(EventStream {
                first: Some(first),
                rx,
            })),
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

    fn spawn_background(self: &Arc<Self>, turn: Turn, req: CreateResponse) {
        let cancel = Cancel::default();
        self.lock_running()
            .insert(turn.response.id.clone(), cancel.clone());
        let this = Arc::clone(self);
        self.tasks.0.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            // Counted out however the task ends.
            let _ended = TaskEnd(Arc::clone(&this));
            let mut em = Emitter::new(None);
            let r = match turn::run(&turn, &this.context(&turn), &mut em, &cancel).await {
                Ok(r) => r,
                Err(e) => turn::failed(turn.response.clone(), "generation_failed", &e.to_string()),
            };
            // Under the lock `delete` takes, so a response deleted while it ran is not
            // written back.
            let mut running = this.lock_running();
            if running.remove(&r.id).is_none() {
                return;
            }
            // Cut by the server's shutdown: left queued, so the next start runs it again.
            if r.error.as_ref().is_some_and(|e| e.code == SHUTDOWN_CODE) {
                return;
            }
            if let Err(e) = this.save(&turn.caller, &req, &r, &turn.input) {
                tracing::error!(id = %r.id, error = %e, "cannot store a background response");
            }
            drop(running);
        });
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cancel>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `r`; once it is finished the MCP credentials in its request are dropped
    /// (they were kept only to resume it).
    fn save(
        &self,
        caller: &Caller,
        req: &CreateResponse,
        r: &Response,
        input: &[Item],
    ) -> Result<()> {
        let mut request = req.clone();
        if !matches!(r.status.as_str(), "queued" | "in_progress") {
            request.tools = Some(tools::echoed(req.tools.as_deref()));
        }
        self.store.put(&Stored {
            caller: caller.clone(),
            request,
            response: r.clone(),
            input: input.to_vec(),
        })
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
        if background && req.stream.unwrap_or(false) {
            return Err(ResponsesError::invalid(
                "background",
                "a background response is polled with GET /v1/responses/{id}; `stream` with `background` is not supported",
            ));
        }
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

    fn stored(&self, caller: &Caller, id: &str) -> Result<Stored> {
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
        if let Some(c) = running.remove(id) {
            c.cancel();
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
        let running = self.lock_running().get(id).cloned();
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

    /// A page of `caller`'s response `id`'s input items.
    pub fn input_items(&self, caller: &Caller, id: &str, q: &ItemsQuery) -> Result<ItemList> {
        let mut items = self.stored(caller, id)?.input;
        match q.order.as_deref() {
            None | Some("desc") => items.reverse(),
            Some("asc") => {}
            Some(o) => {
                return Err(ResponsesError::invalid(
                    "order",
                    format!("`order` must be asc or desc, not '{o}'"),
                ))
            }
        }
        let limit = q.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ResponsesError::invalid(
                "limit",
                "`limit` must be between 1 and 100",
            ));
        }
        let position = |cursor: &str, param: &str| {
            items.iter().position(|i| i.id() == cursor).ok_or_else(|| {
                ResponsesError::invalid(param, format!("no input item '{cursor}' in this response"))
            })
        };
        let start = match &q.after {
            Some(a) => position(a, "after")? + 1,
            None => 0,
        };
        let end = match &q.before {
            Some(b) => position(b, "before")?,
            None => items.len(),
        };
        let window: Vec<Item> = items
            .get(start..end.max(start))
            .unwrap_or_default()
            .to_vec();
        let has_more = window.len() > limit;
        let data: Vec<Item> = window.into_iter().take(limit).collect();
        Ok(ItemList {
            object: "list".into(),
            first_id: data.first().map(|i| i.id().to_string()),
            last_id: data.last().map(|i| i.id().to_string()),
            has_more,
            data,
        })
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
