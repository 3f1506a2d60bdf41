//! OpenAI's Files API (`/v1/files`): the file object, its list and the delete answer.

use serde::{Deserialize, Serialize};

/// A stored file. `status` is always `processed`: a file is visible only once whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileObject {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: u64,
    pub expires_at: Option<u64>,
    pub filename: String,
    pub purpose: String,
    pub status: String,
    pub status_details: Option<String>,
}

/// `GET /v1/files` and `GET /v1/batches`: one page, oldest or newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct List<T> {
    pub object: String,
    pub data: Vec<T>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

impl<T> List<T> {
    /// A page of `data`, its ids read with `id`.
    pub fn page(data: Vec<T>, has_more: bool, id: impl Fn(&T) -> &str) -> Self {
        Self {
            object: "list".into(),
            first_id: data.first().map(|d| id(d).to_string()),
            last_id: data.last().map(|d| id(d).to_string()),
            data,
            has_more,
        }
    }
}

/// `DELETE /v1/files/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileDeleted {
    pub id: String,
    pub object: String,
    pub deleted: bool,
}
