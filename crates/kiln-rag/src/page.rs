//! OpenAI's list paging (`limit`, `order`, `after`, `before`) over rows ordered by
//! their `seq`.

pub use kiln_files::Order;
use rusqlite::types::Value as Sql;

/// What to list: at most `limit` rows after (or before) a cursor, an id from a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    pub order: Order,
    pub after: Option<String>,
    pub before: Option<String>,
}

impl Default for ListQuery {
    /// OpenAI's defaults: 20, newest first.
    fn default() -> Self {
        Self {
            limit: 20,
            order: Order::Desc,
            after: None,
            before: None,
        }
    }
}

/// The cursors of a query, resolved to `seq`s.
pub(crate) struct Bounds {
    after: Option<i64>,
    before: Option<i64>,
    order: Order,
}

impl ListQuery {
    /// The query's cursors as `seq`s (`find` looks an id up); `None` when a cursor
    /// names nothing (deleted since, or never there): the page is empty.
    pub(crate) fn bounds(
        &self,
        find: impl Fn(&str) -> rusqlite::Result<Option<i64>>,
    ) -> rusqlite::Result<Option<Bounds>> {
        let mut b = Bounds {
            after: None,
            before: None,
            order: self.order,
        };
        for (cursor, slot) in [(&self.after, &mut b.after), (&self.before, &mut b.before)] {
            if let Some(id) = cursor {
                match find(id)? {
                    Some(seq) => *slot = Some(seq),
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(b))
    }
}

impl Bounds {
    /// ` AND seq ...` conditions, their values appended to `args`.
    pub(crate) fn sql(&self, args: &mut Vec<Sql>) -> String {
        let (past, short) = match self.order {
            Order::Asc => (">", "<"),
            Order::Desc => ("<", ">"),
        };
        let mut out = String::new();
        if let Some(a) = self.after {
            out.push_str(&format!(" AND seq {past} ?"));
            args.push(Sql::Integer(a));
        }
        if let Some(b) = self.before {
            out.push_str(&format!(" AND seq {short} ?"));
            args.push(Sql::Integer(b));
        }
        out
    }
}
