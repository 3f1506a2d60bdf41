//! Paging a response's input items (`GET /v1/responses/{id}/input_items`).

use kiln_api::responses::{Item, ItemList};
use kiln_api::Caller;

use crate::error::{ResponsesError, Result};
use crate::service::Responses;

/// `input_items` paging: `limit` (1-100), `order` (`asc` or `desc`), `after`, `before`.
#[derive(Debug, Clone, Default)]
pub struct ItemsQuery {
    pub limit: Option<usize>,
    pub order: Option<String>,
    pub after: Option<String>,
    pub before: Option<String>,
}

impl Responses {
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
