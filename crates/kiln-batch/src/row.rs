//! A batch and its lines as the store holds them, and how a row is read back.

use std::collections::BTreeMap;

use kiln_api::batches::BatchErrors;
use kiln_api::Caller;
use kiln_db::to_u64;
use rusqlite::Row;

use crate::error::{BatchError, Result};
use crate::runner::LineUsage;

/// Where a batch is. `Validating`, `InProgress`, `Finalizing` and `Cancelling` are
/// unfinished: a restart picks them up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Validating,
    InProgress,
    Finalizing,
    Completed,
    Failed,
    Cancelling,
    Cancelled,
    Expired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validating => "validating",
            Self::InProgress => "in_progress",
            Self::Finalizing => "finalizing",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelling => "cancelling",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            Self::Validating,
            Self::InProgress,
            Self::Finalizing,
            Self::Completed,
            Self::Failed,
            Self::Cancelling,
            Self::Cancelled,
            Self::Expired,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }

    /// The column that records when the batch reached this status.
    pub(crate) fn time_column(self) -> &'static str {
        match self {
            Self::Validating => "created_at",
            Self::InProgress => "in_progress_at",
            Self::Finalizing => "finalizing_at",
            Self::Completed => "completed_at",
            Self::Failed => "failed_at",
            Self::Cancelling => "cancelling_at",
            Self::Cancelled => "cancelled_at",
            Self::Expired => "expired_at",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Cancelled | Self::Expired
        )
    }
}

/// An OpenAI batch over a file, or a Workers AI queued request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    OpenAi,
    WorkersAi,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::WorkersAi => "workers_ai",
        }
    }
}

/// One batch as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRow {
    pub id: String,
    pub caller: Caller,
    pub kind: Kind,
    /// The path every line runs on (`/v1/chat/completions`, `/ai/run/{model}`, ...).
    pub endpoint: String,
    pub input_file_id: Option<String>,
    pub completion_window: String,
    pub metadata: Option<BTreeMap<String, String>>,
    pub status: Status,
    /// Unix seconds at each status reached, by [`Status::time_column`]'s order.
    pub times: Times,
    pub errors: Option<BatchErrors>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
    pub usage: LineUsage,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Times {
    pub created_at: u64,
    pub expires_at: u64,
    pub in_progress_at: Option<u64>,
    pub finalizing_at: Option<u64>,
    pub completed_at: Option<u64>,
    pub failed_at: Option<u64>,
    pub expired_at: Option<u64>,
    pub cancelling_at: Option<u64>,
    pub cancelled_at: Option<u64>,
}

/// A line as validated: a request to run, or why the line can't run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLine {
    pub line: u64,
    pub custom_id: Option<String>,
    pub request: std::result::Result<String, (String, String)>,
}

/// A line's stored state, for the output files and queue results.
#[derive(Debug, Clone, PartialEq)]
pub struct LineRow {
    pub line: u64,
    pub custom_id: Option<String>,
    pub done: bool,
    pub req_id: Option<String>,
    pub status_code: Option<u16>,
    pub response: Option<String>,
    pub error: Option<(String, String)>,
}

/// A line's result.
#[derive(Debug, Clone, PartialEq)]
pub struct LineResult {
    pub req_id: String,
    pub status_code: u16,
    pub response: String,
    pub usage: LineUsage,
}

pub(crate) fn read_row(r: &Row<'_>) -> rusqlite::Result<Result<BatchRow>> {
    let t =
        |i: usize| -> rusqlite::Result<Option<u64>> { Ok(r.get::<_, Option<i64>>(i)?.map(to_u64)) };
    let status: String = r.get(8)?;
    let kind: String = r.get(3)?;
    let metadata: Option<String> = r.get(7)?;
    let errors: Option<String> = r.get(18)?;
    let parsed = (|| -> Result<_> {
        let status = Status::parse(&status)
            .ok_or_else(|| BatchError::Corrupt(format!("status '{status}'")))?;
        let kind = match kind.as_str() {
            "openai" => Kind::OpenAi,
            "workers_ai" => Kind::WorkersAi,
            other => return Err(BatchError::Corrupt(format!("kind '{other}'"))),
        };
        let metadata = metadata
            .map(|m| serde_json::from_str(&m))
            .transpose()
            .map_err(|e| BatchError::Corrupt(e.to_string()))?;
        let errors = errors
            .map(|m| serde_json::from_str(&m))
            .transpose()
            .map_err(|e| BatchError::Corrupt(e.to_string()))?;
        Ok((status, kind, metadata, errors))
    })();
    let (status, kind, metadata, errors) = match parsed {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(BatchRow {
        id: r.get(0)?,
        caller: Caller {
            key_id: r.get(1)?,
            label: r.get(2)?,
        },
        kind,
        endpoint: r.get(4)?,
        input_file_id: r.get(5)?,
        completion_window: r.get(6)?,
        metadata,
        status,
        times: Times {
            created_at: to_u64(r.get(9)?),
            expires_at: to_u64(r.get(10)?),
            in_progress_at: t(11)?,
            finalizing_at: t(12)?,
            completed_at: t(13)?,
            failed_at: t(14)?,
            expired_at: t(15)?,
            cancelling_at: t(16)?,
            cancelled_at: t(17)?,
        },
        errors,
        output_file_id: r.get(19)?,
        error_file_id: r.get(20)?,
        total: to_u64(r.get(21)?),
        completed: to_u64(r.get(22)?),
        failed: to_u64(r.get(23)?),
        usage: LineUsage {
            prompt: to_u64(r.get(24)?),
            cached: to_u64(r.get(25)?),
            completion: to_u64(r.get(26)?),
        },
    }))
}
