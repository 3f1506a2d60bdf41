//! Ending a batch: the output file (lines answered 200) and the error file (the rest,
//! and on expiry the lines never run) in input order, then the final status. Files get
//! ids derived from the batch's, so a finalize cut by a crash and done again replaces
//! them instead of leaving copies.
//!
//! Once written they are the owner's files like any other, and deleting one is final:
//! the batch keeps its `output_file_id` / `error_file_id` (a download then answers 404,
//! as OpenAI's does) and its status, and nothing writes the file again, since a batch is
//! finalized only while it is not yet final, before those ids are reported. Deleting
//! the input file affects a batch only until it is validated (then it fails with
//! `invalid_file`); afterwards its lines live in the batch store.

use kiln_api::batches::{
    BatchError as ApiBatchError, BatchErrors, BatchLineError, BatchLineResponse, BatchOutputLine,
    QueueResponse, QueueResults, QueueUsage,
};
use kiln_files::{FileError, FileStore, Upload};
use serde_json::Value;

use crate::error::{BatchError, Result};
use crate::ids::output_file_id;
use crate::row::{BatchRow, Kind, LineRow, Status};
use crate::store::BatchStore;

/// Files a batch writes carry this purpose, as OpenAI's do.
pub const OUTPUT_PURPOSE: &str = "batch_output";

/// Writes the batch's files if it has any, then its final status: `Cancelled` from
/// `Cancelling`; `Expired` if lines are still pending past the window; else
/// `Completed`; `Failed` when the owner's file caps leave no room for the results.
pub(crate) fn finalize(
    store: &BatchStore,
    files: &FileStore,
    batch: &BatchRow,
    now: u64,
) -> Result<Status> {
    let pending = store.pending(&batch.id, None, 1)?;
    let status = match batch.status {
        Status::Cancelling => Status::Cancelled,
        _ if !pending.is_empty() && now >= batch.times.expires_at => Status::Expired,
        _ => Status::Completed,
    };
    let written = match batch.kind {
        Kind::OpenAi => write_files(store, files, batch, status == Status::Expired),
        Kind::WorkersAi => Ok((None, None)),
    };
    let (out, err) = match written {
        Ok(ids) => ids,
        // The owner's file caps leave no room for the results: say so, don't retry.
        Err(BatchError::Files(e @ (FileError::OwnerFull { .. } | FileError::TooLarge { .. }))) => {
            let errors = BatchErrors {
                object: "list".into(),
                data: vec![ApiBatchError {
                    code: "output_too_large".into(),
                    message: format!("the batch's results could not be stored: {e}"),
                    param: None,
                    line: None,
                }],
            };
            store.fail(&batch.id, &errors, now)?;
            return Ok(Status::Failed);
        }
        Err(e) => return Err(e),
    };
    store.finish(&batch.id, status, (out.as_deref(), err.as_deref()), now)?;
    Ok(status)
}

fn write_files(
    store: &BatchStore,
    files: &FileStore,
    batch: &BatchRow,
    expired: bool,
) -> Result<(Option<String>, Option<String>)> {
    let owner = &batch.caller.key_id;
    let mut out: Option<Upload> = None;
    let mut err: Option<Upload> = None;
    store.for_each_line(&batch.id, |row| {
        let Some((ok, line)) = output_line(row, expired) else {
            return Ok(());
        };
        let (slot, which) = if ok {
            (&mut out, "output")
        } else {
            (&mut err, "error")
        };
        let upload = match slot {
            Some(u) => u,
            None => {
                let id = output_file_id(&batch.id, if ok { "out" } else { "err" });
                let name = format!("{}_{which}.jsonl", batch.id);
                slot.insert(files.upload_as(&id, owner, &name, OUTPUT_PURPOSE)?)
            }
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        upload.write(text.as_bytes())?;
        Ok(())
    })?;
    let finish = |u: Option<Upload>| u.map(|u| u.finish().map(|f| f.id)).transpose();
    Ok((finish(out)?, finish(err)?))
}

/// A line of the output (`true`) or error file, or nothing for a line never run.
fn output_line(row: LineRow, expired: bool) -> Option<(bool, BatchOutputLine)> {
    let id = |r: &Option<String>| format!("batch_req_{}", r.as_deref().unwrap_or("none"));
    if let (true, Some(code)) = (row.done, row.status_code) {
        let body = row
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        let line = BatchOutputLine {
            id: id(&row.req_id),
            custom_id: row.custom_id,
            response: Some(BatchLineResponse {
                status_code: code,
                request_id: format!("req_{}", row.req_id.as_deref().unwrap_or("none")),
                body,
            }),
            error: None,
        };
        return Some((code == 200, line));
    }
    let error = match (row.done, row.error) {
        (true, Some((code, message))) => BatchLineError { code, message },
        (false, _) if expired => BatchLineError {
            code: "batch_expired".into(),
            message: "this request could not be run before the batch's completion window ended"
                .into(),
        },
        _ => return None,
    };
    let line = BatchOutputLine {
        id: format!("batch_req_line_{}", row.line),
        custom_id: row.custom_id,
        response: None,
        error: Some(error),
    };
    Some((false, line))
}

/// A finished Workers AI queue's answers, one per request in order.
pub(crate) fn queue_results(store: &BatchStore, batch: &BatchRow) -> Result<QueueResults> {
    let mut responses = Vec::new();
    store.for_each_line(&batch.id, |row| {
        let body: Value = row
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        let success = row.status_code == Some(200);
        let error = match (&row.error, success) {
            (Some((code, message)), _) => {
                Some(serde_json::json!({"code": code, "message": message}))
            }
            (None, false) if row.done => Some(body.get("errors").cloned().unwrap_or(body.clone())),
            (None, false) => {
                Some(serde_json::json!({"code": "not_run", "message": "the request was not run"}))
            }
            (None, true) => None,
        };
        responses.push(QueueResponse {
            id: row.line,
            result: if success {
                body.get("result").cloned().unwrap_or(body)
            } else {
                Value::Null
            },
            success,
            external_reference: row.custom_id,
            error,
        });
        Ok(())
    })?;
    let u = batch.usage;
    Ok(QueueResults {
        responses,
        usage: QueueUsage {
            prompt_tokens: u.prompt,
            completion_tokens: u.completion,
            total_tokens: u.prompt + u.completion,
        },
    })
}
