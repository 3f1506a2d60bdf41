//! Listing an owner's files a page at a time, as OpenAI's `GET /v1/files` does: an
//! optional purpose, a cursor (the id of the last file of the previous page), a limit
//! and an order by creation time.
//!
//! Files are ordered by `(created_at, id)`, so a page boundary inside one second is
//! still exact: a cursor skips exactly the files up to and including itself.

use rusqlite::{params, Connection, OptionalExtension};

use crate::id::is_valid_id;
use crate::inner::{row_to_file, StoredFile, COLUMNS};

/// Which end of the list comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest first.
    Asc,
    /// Newest first (OpenAI's default).
    #[default]
    Desc,
}

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only files with this purpose.
    pub purpose: Option<String>,
    /// Only files after this one (an id from the previous page) in `order`. A cursor
    /// that names no file of the owner (deleted since, or never there) gives an empty
    /// page.
    pub after: Option<String>,
    /// Most files in the page.
    pub limit: usize,
    pub order: Order,
}

impl Default for ListQuery {
    /// Every purpose from the start, newest first, up to 10,000 (OpenAI's defaults).
    fn default() -> Self {
        Self {
            purpose: None,
            after: None,
            limit: 10_000,
            order: Order::Desc,
        }
    }
}

/// One page of files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    pub data: Vec<StoredFile>,
    /// Whether more files follow the last one in `data`.
    pub has_more: bool,
}

/// The page `query` asks for among `owner`'s files.
pub(crate) fn page(conn: &Connection, owner: &str, query: &ListQuery) -> rusqlite::Result<Page> {
    let cursor: Option<(i64, String)> = match &query.after {
        None => None,
        Some(after) => {
            let found = if is_valid_id(after) {
                conn.query_row(
                    "SELECT created_at, id FROM files WHERE id = ?1 AND owner = ?2",
                    params![after, owner],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?
            } else {
                None
            };
            let Some(found) = found else {
                return Ok(Page::default());
            };
            Some(found)
        }
    };
    let (cmp, dir) = match query.order {
        Order::Asc => (">", "ASC"),
        Order::Desc => ("<", "DESC"),
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM files
         WHERE owner = ?1
           AND (?2 IS NULL OR purpose = ?2)
           AND (?3 IS NULL OR (created_at, id) {cmp} (?3, ?4))
         ORDER BY created_at {dir}, id {dir}
         LIMIT ?5"
    );
    // One more than asked says whether more follow.
    let fetch = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
    let (after_at, after_id) = cursor.unzip();
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut data = stmt
        .query_map(
            params![owner, query.purpose, after_at, after_id, fetch],
            row_to_file,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let has_more = data.len() > query.limit;
    data.truncate(query.limit);
    Ok(Page { data, has_more })
}
