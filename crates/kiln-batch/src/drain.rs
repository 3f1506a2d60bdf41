//! Drivers: one task per unfinished batch takes it from `validating` to its end. Lines
//! run through the server's [`BatchRunner`] under one semaphore shared by every batch,
//! so at most `Limits::concurrency` lines are in flight on the node whatever the batches
//! hold (a fair semaphore: batches are served in the order they asked).
//!
//! A line is done once its result is stored; a line cut by cancel, expiry, shutdown or
//! a crash stays pending and is run again by whoever drives the batch next.

use std::collections::HashMap;
use std::io::BufReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln_api::batches::{BatchError as ApiBatchError, BatchErrors};
use kiln_api::Caller;
use kiln_files::FileStore;
use rand::Rng;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::error::{BatchError, Result};
use crate::finalize::finalize;
use crate::input::validate_file;
use crate::row::{BatchRow, Kind, LineResult, Status};
use crate::runner::BatchRunner;
use crate::service::Limits;
use crate::store::BatchStore;

/// Pending lines read per query.
const READ_AHEAD: usize = 64;
/// Retries of a line the server was too busy for, with backoff up to `MAX_BACKOFF`.
const MAX_RETRIES: u32 = 12;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Wait before a driver tries again after a storage error.
const ERROR_PAUSE: Duration = Duration::from_secs(5);

/// What every driver shares.
pub(crate) struct Shared {
    pub store: Arc<BatchStore>,
    pub files: Arc<FileStore>,
    pub runner: Arc<dyn BatchRunner>,
    pub limits: Limits,
    permits: Arc<Semaphore>,
    /// Running drivers by batch id, each with its cancel signal.
    drivers: Mutex<HashMap<String, watch::Sender<bool>>>,
    stopping: AtomicBool,
}

impl Shared {
    pub fn new(
        store: Arc<BatchStore>,
        files: Arc<FileStore>,
        runner: Arc<dyn BatchRunner>,
        limits: Limits,
    ) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limits.concurrency.max(1))),
            store,
            files,
            runner,
            limits,
            drivers: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
        }
    }

    fn drivers(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<bool>>> {
        self.drivers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops dispatching lines; lines in flight that fail are not stored.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        for tx in self.drivers().values() {
            let _ = tx.send(true);
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Tells the batch's driver to stop running lines (its status says why).
    pub fn interrupt(&self, id: &str) {
        if let Some(tx) = self.drivers().get(id) {
            let _ = tx.send(true);
        }
    }
}

/// Starts a driver for batch `id` unless one runs (call on a runtime).
pub(crate) fn spawn_driver(shared: &Arc<Shared>, id: &str) {
    if shared.is_stopping() {
        return;
    }
    let rx = {
        let mut drivers = shared.drivers();
        if drivers.contains_key(id) {
            return;
        }
        let (tx, rx) = watch::channel(false);
        drivers.insert(id.to_string(), tx);
        rx
    };
    let (shared, id) = (shared.clone(), id.to_string());
    tokio::spawn(async move {
        while let Err(e) = drive(&shared, &id, rx.clone()).await {
            tracing::error!(batch = %id, error = %e, "batch driver failed; trying again");
            tokio::time::sleep(ERROR_PAUSE).await;
            if shared.is_stopping() {
                break;
            }
        }
        shared.drivers().remove(&id);
    });
}

/// How a run over a batch's lines ended.
enum RunEnd {
    Done,
    Interrupted,
    Expired,
}

async fn drive(shared: &Arc<Shared>, id: &str, mut interrupt: watch::Receiver<bool>) -> Result<()> {
    loop {
        if shared.is_stopping() {
            return Ok(());
        }
        let Some(batch) = shared.store.get_any(id)? else {
            return Ok(());
        };
        match batch.status {
            Status::Validating => validate(shared, batch).await?,
            Status::InProgress => match run_lines(shared, &batch, &mut interrupt).await? {
                RunEnd::Done | RunEnd::Expired => {
                    let now = kiln_db::unix_now();
                    shared
                        .store
                        .set_status(id, &[Status::InProgress], Status::Finalizing, now)?;
                }
                // Cancelled (the status says so) or stopping: read the status again.
                RunEnd::Interrupted => {}
            },
            Status::Cancelling | Status::Finalizing => {
                let s = shared.clone();
                let status = tokio::task::spawn_blocking(move || {
                    finalize(&s.store, &s.files, &batch, kiln_db::unix_now())
                })
                .await
                .map_err(|e| BatchError::Corrupt(format!("finalizing stopped: {e}")))??;
                tracing::info!(batch = %id, status = status.as_str(), "batch ended");
            }
            _ => return Ok(()),
        }
    }
}

/// Checks the input file into lines, then starts the batch or fails it.
async fn validate(shared: &Arc<Shared>, batch: BatchRow) -> Result<()> {
    let s = shared.clone();
    tokio::task::spawn_blocking(move || validate_blocking(&s, &batch))
        .await
        .map_err(|e| BatchError::Corrupt(format!("validation stopped: {e}")))?
}

fn validate_blocking(shared: &Shared, batch: &BatchRow) -> Result<()> {
    let (store, now) = (&shared.store, kiln_db::unix_now());
    let fail = |code: &str, message: String, line: Option<u64>| {
        let errors = BatchErrors {
            object: "list".into(),
            data: vec![ApiBatchError {
                code: code.into(),
                message,
                param: line.is_none().then(|| "input_file_id".to_string()),
                line,
            }],
        };
        store.fail(&batch.id, &errors, now)
    };
    store.clear_lines(&batch.id)?;
    let file_id = match (batch.kind, &batch.input_file_id) {
        (Kind::OpenAi, Some(f)) => f,
        // A queued request cut before it was acknowledged: nobody holds its id.
        _ => {
            return fail(
                "interrupted",
                "the server stopped while queueing".into(),
                None,
            )
        }
    };
    let Some((_, file)) = shared.files.open_content(&batch.caller.key_id, file_id)? else {
        return fail(
            "invalid_file",
            format!("the input file '{file_id}' no longer exists"),
            None,
        );
    };
    let found = validate_file(
        store,
        &batch.id,
        &batch.endpoint,
        BufReader::new(file),
        shared.limits.max_lines,
    );
    match found {
        Err(BatchError::Invalid { message, .. }) => fail("invalid_file", message, None),
        Err(e) => Err(e),
        Ok(v) if v.valid == 0 => {
            let errors = BatchErrors {
                object: "list".into(),
                data: if v.first_errors.is_empty() {
                    vec![ApiBatchError {
                        code: "empty_file".into(),
                        message: format!("the input file '{file_id}' holds no requests"),
                        param: Some("input_file_id".into()),
                        line: None,
                    }]
                } else {
                    v.first_errors
                        .into_iter()
                        .map(|(line, code, message)| ApiBatchError {
                            code,
                            message,
                            param: None,
                            line: Some(line),
                        })
                        .collect()
                },
            };
            store.fail(&batch.id, &errors, now)
        }
        Ok(_) => {
            store.set_status(&batch.id, &[Status::Validating], Status::InProgress, now)?;
            Ok(())
        }
    }
}

/// Runs the batch's pending lines until none is left, the batch is interrupted
/// (cancel, shutdown) or its window ends. Lines still running when it returns are
/// aborted (the join set is dropped), their results never stored.
async fn run_lines(
    shared: &Arc<Shared>,
    batch: &BatchRow,
    interrupt: &mut watch::Receiver<bool>,
) -> Result<RunEnd> {
    let left = batch.times.expires_at.saturating_sub(kiln_db::unix_now());
    let expiry = tokio::time::Instant::now() + Duration::from_secs(left);
    let mut tasks = JoinSet::new();
    let mut cursor = None;
    loop {
        if *interrupt.borrow() || shared.is_stopping() {
            return Ok(RunEnd::Interrupted);
        }
        let next = shared.store.pending(&batch.id, cursor, READ_AHEAD)?;
        if next.is_empty() {
            // Everything read is dispatched: wait for the lines in flight.
            tokio::select! {
                done = tasks.join_next() => if done.is_none() {
                    // A line whose result could not be stored is pending again.
                    if shared.store.pending(&batch.id, None, 1)?.is_empty() {
                        return Ok(RunEnd::Done);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    cursor = None;
                },
                _ = interrupt.changed() => return Ok(RunEnd::Interrupted),
                () = tokio::time::sleep_until(expiry) => return Ok(RunEnd::Expired),
            }
            continue;
        }
        for (line, request) in next {
            let permit = tokio::select! {
                p = shared.permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return Ok(RunEnd::Interrupted),
                },
                _ = interrupt.changed() => return Ok(RunEnd::Interrupted),
                () = tokio::time::sleep_until(expiry) => return Ok(RunEnd::Expired),
            };
            cursor = Some(line);
            let job = Line {
                shared: shared.clone(),
                batch: batch.id.clone(),
                caller: batch.caller.clone(),
                endpoint: batch.endpoint.clone(),
                line,
            };
            tasks.spawn(job.run(request, permit));
            while tasks.try_join_next().is_some() {}
        }
    }
}

/// One line on its way through the runner.
struct Line {
    shared: Arc<Shared>,
    batch: String,
    caller: Caller,
    endpoint: String,
    line: u64,
}

impl Line {
    async fn run(self, request: String, _permit: OwnedSemaphorePermit) {
        let body: serde_json::Value = serde_json::from_str(&request).unwrap_or_default();
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        let outcome = loop {
            let out = self
                .shared
                .runner
                .run(&self.caller, &self.endpoint, body.clone())
                .await;
            if self.shared.is_stopping() && out.status != 200 {
                // Cut by the shutdown: the next start runs it again.
                return;
            }
            if !out.is_retryable() || attempt == MAX_RETRIES {
                break out;
            }
            attempt += 1;
            let jitter = rand::rng().random_range(0.5..1.0);
            tokio::time::sleep(backoff.mul_f64(jitter)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        let result = LineResult {
            req_id: crate::ids::new_hex(),
            status_code: outcome.status,
            usage: outcome.usage(),
            response: outcome.body.to_string(),
        };
        if let Err(e) = self.shared.store.record(&self.batch, self.line, &result) {
            tracing::error!(batch = %self.batch, line = self.line, error = %e, "storing a batch line failed");
        }
    }
}
