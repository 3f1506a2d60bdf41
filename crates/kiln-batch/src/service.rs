//! The batch service: create, read, list and cancel OpenAI batches; queue and poll
//! Workers AI requests; resume what a restart cut. Every call is scoped by the caller's
//! key: another key's batch is not found.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kiln_api::batches::{
    Batch, BatchUsage, CachedTokens, CreateBatch, QueueResults, QueueStatus, ReasoningTokens,
    RequestCounts,
};
use kiln_api::endpoints::batch_paths;
use kiln_api::files::List;
use kiln_api::Caller;
use kiln_files::FileStore;
use serde_json::Value;

use crate::drain::{spawn_driver, Shared};
use crate::error::{BatchError, Result};
use crate::finalize::queue_results;
use crate::ids::{new_id, new_uuid};
use crate::input::{check_reference, queue_line};
use crate::row::{BatchRow, Kind, Status, Times};
use crate::runner::{BatchRunner, LineUsage};
use crate::store::BatchStore;

/// Whether a batch may run on `endpoint`: the endpoint table's batchable routes.
fn batchable(endpoint: &str) -> bool {
    batch_paths().any(|p| p == endpoint)
}

/// Bounds of the batch service.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Lines in flight on this node, all batches together.
    pub concurrency: usize,
    /// Requests one batch file may hold.
    pub max_lines: u64,
    /// Requests one Workers AI queue request may hold.
    pub max_queued_requests: usize,
    /// Unfinished batches (and queued requests) per key.
    pub max_active_per_key: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            concurrency: 48,
            max_lines: 1_000_000,
            max_queued_requests: 10_000,
            max_active_per_key: 100,
        }
    }
}

/// A Workers AI queued request as polled: still waiting, or done.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    Pending(QueueStatus),
    Done(QueueResults),
}

pub struct Batches {
    shared: Arc<Shared>,
}

impl Batches {
    pub fn new(
        store: BatchStore,
        files: Arc<FileStore>,
        runner: Arc<dyn BatchRunner>,
        limits: Limits,
    ) -> Arc<Self> {
        let shared = Shared::new(Arc::new(store), files, runner, limits);
        Arc::new(Self {
            shared: Arc::new(shared),
        })
    }

    /// The files batches read and write.
    pub fn files(&self) -> &Arc<FileStore> {
        &self.shared.files
    }

    /// Starts a driver for every unfinished batch (call on the runtime, once): how many.
    pub fn start(&self) -> Result<usize> {
        let unfinished = self.shared.store.unfinished()?;
        for b in &unfinished {
            spawn_driver(&self.shared, &b.id);
        }
        Ok(unfinished.len())
    }

    /// Stops running lines (shutdown): what is not stored is run at the next start.
    pub fn stop(&self) {
        self.shared.stop();
    }

    /// `POST /v1/batches`: the batch, `validating`; its driver checks the file.
    pub fn create(&self, caller: &Caller, req: CreateBatch) -> Result<Batch> {
        if !batchable(&req.endpoint) {
            let m = format!(
                "`endpoint` must be one of {}",
                batch_paths().collect::<Vec<_>>().join(", ")
            );
            return Err(BatchError::invalid("endpoint", m));
        }
        let window = parse_window(&req.completion_window)?;
        check_metadata(req.metadata.as_ref())?;
        let file = self
            .shared
            .files
            .get(&caller.key_id, &req.input_file_id)?
            .ok_or_else(|| {
                let m = format!("no file with id '{}'", req.input_file_id);
                BatchError::invalid("input_file_id", m)
            })?;
        if file.purpose != "batch" {
            let m = format!(
                "the file's purpose is '{}'; a batch's input needs 'batch'",
                file.purpose
            );
            return Err(BatchError::invalid("input_file_id", m));
        }
        self.check_active(caller)?;
        let now = kiln_db::unix_now();
        let row = new_row(
            caller,
            Kind::OpenAi,
            req.endpoint,
            now,
            window,
            Status::Validating,
        );
        let row = BatchRow {
            input_file_id: Some(req.input_file_id),
            completion_window: req.completion_window,
            metadata: req.metadata,
            ..row
        };
        self.shared.store.insert(&row)?;
        spawn_driver(&self.shared, &row.id);
        Ok(to_api(&row))
    }

    pub fn get(&self, caller: &Caller, id: &str) -> Result<Batch> {
        Ok(to_api(&self.row(caller, Kind::OpenAi, id)?))
    }

    /// A page of the caller's batches, newest first.
    pub fn list(&self, caller: &Caller, after: Option<&str>, limit: usize) -> Result<List<Batch>> {
        let (rows, more) = self.shared.store.list(&caller.key_id, after, limit)?;
        Ok(List::page(rows.iter().map(to_api).collect(), more, |b| {
            &b.id
        }))
    }

    /// `POST /v1/batches/{id}/cancel`: `cancelling`, then `cancelled` once the lines in
    /// flight are stopped and the output written.
    pub fn cancel(&self, caller: &Caller, id: &str) -> Result<Batch> {
        let row = self.row(caller, Kind::OpenAi, id)?;
        let now = kiln_db::unix_now();
        let from = [Status::Validating, Status::InProgress];
        if !self
            .shared
            .store
            .set_status(id, &from, Status::Cancelling, now)?
        {
            if row.status == Status::Cancelling {
                return Ok(to_api(&row));
            }
            let status = self.row(caller, Kind::OpenAi, id)?.status;
            return Err(BatchError::NotCancellable {
                id: id.to_string(),
                status: status.as_str().into(),
            });
        }
        self.shared.interrupt(id);
        spawn_driver(&self.shared, id);
        self.get(caller, id)
    }

    /// Workers AI `queueRequest`: queues `requests` for `model` as one batch.
    pub fn queue(&self, caller: &Caller, model: &str, requests: &[Value]) -> Result<QueueStatus> {
        let max = self.shared.limits.max_queued_requests;
        if requests.is_empty() || requests.len() > max {
            let m = format!("`requests` must hold 1 to {max} requests");
            return Err(BatchError::invalid("requests", m));
        }
        for (i, r) in requests.iter().enumerate() {
            check_reference(i, r)?;
        }
        self.check_active(caller)?;
        let now = kiln_db::unix_now();
        let endpoint = format!("/ai/run/{model}");
        let mut row = new_row(
            caller,
            Kind::WorkersAi,
            endpoint,
            now,
            DEFAULT_WINDOW,
            Status::Validating,
        );
        row.id = new_uuid();
        let lines: Vec<_> = (0..).zip(requests).map(|(i, r)| queue_line(i, r)).collect();
        let store = &self.shared.store;
        store.insert(&row)?;
        store.add_lines(&row.id, &lines)?;
        store.set_status(&row.id, &[Status::Validating], Status::InProgress, now)?;
        spawn_driver(&self.shared, &row.id);
        Ok(QueueStatus {
            status: "queued".into(),
            request_id: row.id,
            model: model.to_string(),
        })
    }

    /// Workers AI's poll of a queued request: its status, or its answers once all ran.
    pub fn poll(&self, caller: &Caller, model: &str, request_id: &str) -> Result<Polled> {
        let row = self.row(caller, Kind::WorkersAi, request_id)?;
        if row.endpoint != format!("/ai/run/{model}") {
            return Err(BatchError::NotFound {
                what: "queued request for this model",
                id: request_id.to_string(),
            });
        }
        if row.status.is_finished() {
            return Ok(Polled::Done(queue_results(&self.shared.store, &row)?));
        }
        let started = self.shared.store.any_run(&row.id)?;
        Ok(Polled::Pending(QueueStatus {
            status: if started { "running" } else { "queued" }.into(),
            request_id: row.id,
            model: model.to_string(),
        }))
    }

    fn row(&self, caller: &Caller, kind: Kind, id: &str) -> Result<BatchRow> {
        let what = match kind {
            Kind::OpenAi => "batch",
            Kind::WorkersAi => "queued request",
        };
        self.shared
            .store
            .get(&caller.key_id, kind, id)?
            .ok_or_else(|| BatchError::NotFound {
                what,
                id: id.to_string(),
            })
    }

    fn check_active(&self, caller: &Caller) -> Result<()> {
        let limit = self.shared.limits.max_active_per_key;
        if self.shared.store.unfinished_of(&caller.key_id)? >= limit {
            return Err(BatchError::TooManyActive { limit });
        }
        Ok(())
    }
}

const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);
const MAX_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// `24h` (OpenAI's only value); Kiln also takes other counts of `s`, `m`, `h` or `d`
/// up to 30 days.
fn parse_window(w: &str) -> Result<Duration> {
    let bad = || {
        BatchError::invalid(
            "completion_window",
            format!("`completion_window` '{w}' is not a duration like \"24h\" (s, m, h or d, up to 30 days)"),
        )
    };
    let (n, unit) = w.split_at(w.len().saturating_sub(1));
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => return Err(bad()),
    };
    let d = Duration::from_secs(secs);
    if secs == 0 || d > MAX_WINDOW {
        return Err(bad());
    }
    Ok(d)
}

/// OpenAI's bounds: 16 pairs, keys up to 64 characters, values up to 512.
fn check_metadata(m: Option<&BTreeMap<String, String>>) -> Result<()> {
    let Some(m) = m else { return Ok(()) };
    if m.len() > 16 {
        return Err(BatchError::invalid(
            "metadata",
            "`metadata` holds at most 16 pairs",
        ));
    }
    for (k, v) in m {
        if k.chars().count() > 64 || v.chars().count() > 512 {
            let m = format!("metadata '{k}': keys are at most 64 characters, values 512");
            return Err(BatchError::invalid("metadata", m));
        }
    }
    Ok(())
}

fn new_row(
    caller: &Caller,
    kind: Kind,
    endpoint: String,
    now: u64,
    window: Duration,
    status: Status,
) -> BatchRow {
    BatchRow {
        id: new_id("batch"),
        caller: caller.clone(),
        kind,
        endpoint,
        input_file_id: None,
        completion_window: format!("{}h", window.as_secs() / 3600),
        metadata: None,
        status,
        times: Times {
            created_at: now,
            expires_at: now + window.as_secs(),
            ..Times::default()
        },
        errors: None,
        output_file_id: None,
        error_file_id: None,
        total: 0,
        completed: 0,
        failed: 0,
        usage: LineUsage::default(),
    }
}

fn to_api(b: &BatchRow) -> Batch {
    let t = &b.times;
    let u = b.usage;
    Batch {
        id: b.id.clone(),
        object: "batch".into(),
        endpoint: b.endpoint.clone(),
        errors: b.errors.clone(),
        input_file_id: b.input_file_id.clone().unwrap_or_default(),
        completion_window: b.completion_window.clone(),
        status: b.status.as_str().into(),
        output_file_id: b.output_file_id.clone(),
        error_file_id: b.error_file_id.clone(),
        created_at: t.created_at,
        in_progress_at: t.in_progress_at,
        expires_at: Some(t.expires_at),
        finalizing_at: t.finalizing_at,
        completed_at: t.completed_at,
        failed_at: t.failed_at,
        expired_at: t.expired_at,
        cancelling_at: t.cancelling_at,
        cancelled_at: t.cancelled_at,
        request_counts: RequestCounts {
            total: b.total,
            completed: b.completed,
            failed: b.failed,
        },
        metadata: b.metadata.clone(),
        usage: BatchUsage {
            input_tokens: u.prompt,
            input_tokens_details: CachedTokens {
                cached_tokens: u.cached,
            },
            output_tokens: u.completion,
            output_tokens_details: ReasoningTokens::default(),
            total_tokens: u.prompt + u.completion,
        },
    }
}
