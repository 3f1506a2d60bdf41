//! The agents of one server: each addressed by its owner's key and its name, kept live
//! while used and evicted when idle, with its turns run one at a time.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kiln_api::agents::{Agent, AgentConfig, Schedule, ScheduleRequest};
use kiln_api::responses::{CreateResponse, Response};
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_responses::{ChatRunner, Created, EventStream, Limits, Responses};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, Notify};

use crate::db::{AgentDb, AgentRow};
use crate::error::{AgentError, Result};
use crate::live::Live;
use crate::schedule::{self, ScheduleLimits};
use crate::turns::{InFlight, Journal};

/// Agents one API key may have.
pub const MAX_AGENTS_PER_KEY: usize = 1000;

/// Agents unused this long are closed (their files stay).
pub const IDLE: Duration = Duration::from_secs(300);

/// A due schedule: (unix seconds, owner, agent, schedule id).
pub(crate) type Due = (u64, String, String, String);

pub struct Agents {
    dir: PathBuf,
    /// [`MAX_AGENTS_PER_KEY`], lowered by tests.
    max_agents: usize,
    chat: Arc<dyn ChatRunner>,
    limits: Limits,
    schedule_limits: ScheduleLimits,
    live: Mutex<HashMap<(String, String), Arc<Live>>>,
    pub(crate) due: Mutex<BTreeSet<Due>>,
    pub(crate) wake: Notify,
}

impl Agents {
    /// Agents stored under `dir` (one subdirectory per owner key, one file per agent).
    pub fn new(
        dir: PathBuf,
        chat: Arc<dyn ChatRunner>,
        limits: Limits,
        schedule_limits: ScheduleLimits,
    ) -> Arc<Self> {
        Arc::new(Self {
            dir,
            max_agents: MAX_AGENTS_PER_KEY,
            chat,
            limits,
            schedule_limits,
            live: Mutex::new(HashMap::new()),
            due: Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
        })
    }

    fn path(&self, owner: &str, name: &str) -> PathBuf {
        self.dir.join(owner).join(format!("{name}.sqlite3"))
    }

    fn lock_live(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<Live>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_due(&self) -> MutexGuard<'_, BTreeSet<Due>> {
        self.due.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live agent `name` of `owner`; opened from its file if it has one, created
    /// when `create`.
    pub(crate) fn open(&self, owner: &str, name: &str, create: bool) -> Result<Arc<Live>> {
        check_name(name)?;
        let key = (owner.to_string(), name.to_string());
        if let Some(l) = self.lock_live().get(&key) {
            l.touch();
            return Ok(l.clone());
        }
        let path = self.path(owner, name);
        if !create && !path.exists() {
            return Err(AgentError::NotFound { name: name.into() });
        }
        let db = AgentDb::open(&path).map_err(|source| AgentError::Unavailable {
            name: name.into(),
            source: Box::new(source),
        })?;
        let db = Arc::new(db);
        let responses =
            Responses::new(db.responses.clone(), self.chat.clone(), self.limits.clone());
        let live = Arc::new(Live::new(db, responses));
        Ok(self.lock_live().entry(key).or_insert(live).clone())
    }

    fn existing(&self, caller: &Caller, name: &str) -> Result<(Arc<Live>, AgentRow)> {
        let live = self.open(&caller.key_id, name, false)?;
        let row = live
            .db
            .agent()?
            .ok_or_else(|| AgentError::NotFound { name: name.into() })?;
        Ok((live, row))
    }

    /// Creates or updates agent `name`.
    pub fn put(&self, caller: &Caller, name: &str, config: AgentConfig) -> Result<Agent> {
        if config.model.is_empty() {
            return Err(AgentError::invalid("model", "an agent needs a `model`"));
        }
        check_name(name)?;
        // What a turn would refuse is refused now, not at every scheduled turn.
        kiln_responses::check_tools(config.tools.as_deref().unwrap_or_default())?;
        if config.max_output_tokens == Some(0) {
            return Err(AgentError::invalid(
                "max_output_tokens",
                "`max_output_tokens` must be at least 1",
            ));
        }
        self.chat
            .check_model(&config.model)
            .map_err(kiln_responses::ResponsesError::Generate)?;
        if !self.path(&caller.key_id, name).exists() {
            let owned = std::fs::read_dir(self.dir.join(&caller.key_id))
                .map(|d| {
                    d.flatten()
                        .filter(|f| f.path().extension().is_some_and(|e| e == "sqlite3"))
                        .count()
                })
                .unwrap_or(0);
            if owned >= self.max_agents {
                return Err(AgentError::Limit(format!(
                    "this API key has {owned} agents, at the limit of {}; delete some first",
                    self.max_agents
                )));
            }
        }
        let live = self.open(&caller.key_id, name, true)?;
        let now = unix_now();
        let created_at = live.db.agent()?.map_or(now, |r| r.created_at);
        let row = AgentRow {
            name: name.into(),
            owner: caller.key_id.clone(),
            owner_label: caller.label.clone(),
            config,
            created_at,
            updated_at: now,
        };
        live.db.put_agent(&row)?;
        Ok(agent(&row))
    }

    pub fn get(&self, caller: &Caller, name: &str) -> Result<Agent> {
        Ok(agent(&self.existing(caller, name)?.1))
    }

    /// A page of `caller`'s agents in name order (`descending` reverses it), starting
    /// after the agent named `after`; and whether more follow.
    pub fn list(
        &self,
        caller: &Caller,
        after: Option<&str>,
        limit: usize,
        descending: bool,
    ) -> Result<(Vec<Agent>, bool)> {
        let mut names: Vec<String> = match std::fs::read_dir(self.dir.join(&caller.key_id)) {
            Ok(dir) => dir
                .flatten()
                .filter_map(|f| {
                    let path = f.path();
                    let stem = path.file_stem()?.to_str()?.to_string();
                    (path.extension()? == "sqlite3" && check_name(&stem).is_ok()).then_some(stem)
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort_unstable();
        if descending {
            names.reverse();
        }
        let start = match after {
            Some(a) => names.iter().position(|n| n == a).map_or(0, |i| i + 1),
            None => 0,
        };
        let mut page = Vec::with_capacity(limit.min(names.len()));
        let mut rest = names[start.min(names.len())..].iter();
        for name in rest.by_ref() {
            // A file that is not a readable agent (deleted meanwhile, corrupt) is skipped:
            // the list shows what can be used.
            if let Ok(a) = self.get(caller, name) {
                page.push(a);
                if page.len() == limit {
                    break;
                }
            }
        }
        Ok((page, rest.next().is_some()))
    }

    /// Deletes agent `name` and its file: settings, state, conversation, schedules.
    pub fn delete(&self, caller: &Caller, name: &str) -> Result<Value> {
        let (live, _) = self.existing(caller, name)?;
        let owner = caller.key_id.clone();
        self.lock_live().remove(&(owner.clone(), name.to_string()));
        self.lock_due()
            .retain(|(_, o, n, _)| !(o == &owner && n == name));
        drop(live);
        let path = self.path(&owner, name);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        Ok(json!({"id": name, "object": "agent.deleted", "deleted": true}))
    }

    /// A turn of agent `name` with a Responses-API body: the agent's model, instructions
    /// and tools unless the body gives its own, continuing its conversation. Journaled
    /// while it runs, so a crash does not lose it (`turns.rs`).
    pub async fn respond(
        self: &Arc<Self>,
        caller: &Caller,
        name: &str,
        req: CreateResponse,
    ) -> Result<Created> {
        self.turn(caller, name, req, Journal::Begin).await
    }

    /// [`respond`](Self::respond), journaled as `journal` says.
    pub(crate) async fn turn(
        self: &Arc<Self>,
        caller: &Caller,
        name: &str,
        req: CreateResponse,
        journal: Journal,
    ) -> Result<Created> {
        let (live, row) = self.existing(caller, name)?;
        if req.background.unwrap_or(false) {
            return Err(AgentError::invalid(
                "background",
                "an agent runs its turns in order; use a schedule to run one later",
            ));
        }
        if req.store == Some(false) {
            return Err(AgentError::invalid(
                "store",
                "an agent's turns are always stored",
            ));
        }
        if req.previous_response_id.is_some() {
            return Err(AgentError::invalid(
                "previous_response_id",
                "an agent continues its own conversation; leave previous_response_id out",
            ));
        }
        let stream = req.stream.unwrap_or(false);
        let journaled = match journal {
            Journal::Begin => Some(InFlight::begin(&live, &req)?),
            Journal::Held(j) => Some(j),
            Journal::BySchedule => None,
        };
        let guard = live.turn.clone().lock_owned().await;
        let mut req = req;
        req.model = req.model.or_else(|| Some(row.config.model.clone()));
        req.instructions = req.instructions.or_else(|| row.config.instructions.clone());
        req.tools = req.tools.or_else(|| row.config.tools.clone());
        req.max_output_tokens = req.max_output_tokens.or(row.config.max_output_tokens);
        req.previous_response_id = live.db.responses.latest(&row.owner)?;
        req.stream = Some(true);
        let owner = Caller {
            key_id: row.owner.clone(),
            label: row.owner_label.clone(),
        };
        let mut events = match live.responses.create(owner.clone(), req).await? {
            Created::Streaming(events) => events,
            other => return Ok(other),
        };
        if stream {
            let (tx, rx) = mpsc::channel(256);
            tokio::spawn(async move {
                let (_turn, _journaled) = (guard, journaled);
                while let Some(ev) = events.next().await {
                    live.publish(serde_json::to_value(&ev).unwrap_or(Value::Null));
                    // A client that went away stops the turn (dropping `events`).
                    if tx.send(ev).await.is_err() {
                        break;
                    }
                }
            });
            return Ok(Created::Streaming(EventStream::from_channel(rx)));
        }
        let mut id = None;
        while let Some(ev) = events.next().await {
            if ev.kind == "response.created" {
                id = ev.fields["response"]["id"].as_str().map(str::to_string);
            }
            live.publish(serde_json::to_value(&ev).unwrap_or(Value::Null));
        }
        drop((guard, journaled));
        let id = id.ok_or_else(|| AgentError::Corrupt("the turn sent no response".into()))?;
        Ok(Created::Done(live.responses.get(&owner, &id)?))
    }

    /// Agent `name`'s conversation, oldest first.
    pub fn history(&self, caller: &Caller, name: &str) -> Result<Vec<Response>> {
        let (live, row) = self.existing(caller, name)?;
        Ok(live.db.responses.all(&row.owner)?)
    }

    pub fn state(&self, caller: &Caller, name: &str) -> Result<Value> {
        self.existing(caller, name)?.0.db.state()
    }

    /// Replaces agent `name`'s state with `doc`, atomically, and tells its event streams.
    pub fn put_state(&self, caller: &Caller, name: &str, doc: Value) -> Result<Value> {
        let (live, _) = self.existing(caller, name)?;
        live.db.put_state(&doc, unix_now())?;
        live.publish(json!({"type": "agent.state.updated", "state": doc}));
        Ok(doc)
    }

    /// Adds a schedule to agent `name`.
    pub fn add_schedule(
        &self,
        caller: &Caller,
        name: &str,
        req: ScheduleRequest,
    ) -> Result<Schedule> {
        let (live, _) = self.existing(caller, name)?;
        if !(req.input.is_string() || req.input.is_array()) {
            return Err(AgentError::invalid(
                "input",
                "`input` must be a string or a list of items, as in the Responses API",
            ));
        }
        let now = unix_now();
        let (when, next) = schedule::parse(&req, now, &self.schedule_limits)?;
        let max = self.schedule_limits.max_per_agent;
        if live.db.schedules()?.len() >= max {
            return Err(AgentError::Limit(format!(
                "agent '{name}' has {max} schedules, the most one agent may have; delete \
                 some first"
            )));
        }
        let s = Schedule {
            id: kiln_responses::new_id("sched"),
            object: "agent.schedule".into(),
            kind: when.kind().into(),
            input: req.input,
            cron: match when {
                schedule::When::Cron(p) => Some(p),
                _ => None,
            },
            next_run_at: next,
            attempts: 0,
            last_error: None,
        };
        live.db.put_schedule(&s, now)?;
        self.arm(&caller.key_id, name, &s);
        Ok(s)
    }

    pub fn schedules(&self, caller: &Caller, name: &str) -> Result<Vec<Schedule>> {
        self.existing(caller, name)?.0.db.schedules()
    }

    pub fn delete_schedule(&self, caller: &Caller, name: &str, id: &str) -> Result<Value> {
        let (live, _) = self.existing(caller, name)?;
        if !live.db.delete_schedule(id)? {
            return Err(AgentError::ScheduleNotFound {
                name: name.into(),
                id: id.into(),
            });
        }
        self.lock_due()
            .retain(|(_, o, n, i)| !(o == &caller.key_id && n == name && i == id));
        Ok(json!({"id": id, "object": "agent.schedule.deleted", "deleted": true}))
    }

    /// Agent `name`'s events from now on.
    pub fn subscribe(&self, caller: &Caller, name: &str) -> Result<broadcast::Receiver<Value>> {
        Ok(self.existing(caller, name)?.0.subscribe())
    }

    /// Puts `s` in the due set and wakes the alarm loop.
    pub(crate) fn arm(&self, owner: &str, name: &str, s: &Schedule) {
        self.lock_due()
            .insert((s.next_run_at, owner.into(), name.into(), s.id.clone()));
        self.wake.notify_one();
    }

    /// Closes agents nothing has used for [`IDLE`].
    pub(crate) fn evict_idle(&self) {
        self.lock_live().retain(|_, l| !l.idle(IDLE));
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

fn agent(row: &AgentRow) -> Agent {
    Agent {
        id: row.name.clone(),
        object: "agent".into(),
        model: row.config.model.clone(),
        instructions: row.config.instructions.clone(),
        tools: row.config.tools.clone().unwrap_or_default(),
        max_output_tokens: row.config.max_output_tokens,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// Letters, digits, `-` and `_`, 1 to 64 of them: a file name everywhere.
fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(AgentError::invalid(
            "name",
            "an agent name is 1 to 64 letters, digits, '-' or '_'",
        ))
    }
}

#[cfg(test)]
#[path = "agents_tests.rs"]
mod tests;
