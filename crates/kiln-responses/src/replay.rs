//! Re-streaming a response (`GET /v1/responses/{id}?stream=true`): a stored response's
//! recorded events, or a running background response's events so far and then live
//! ones until it ends, from after `starting_after`.
//!
//! As in OpenAI's API, this is for background responses (`background: true`). Their
//! events are recorded as the run emits them, not rebuilt from the stored output (the
//! text deltas cannot be rebuilt from the final text), numbered as a live stream
//! numbers them, so a client resuming with `starting_after = n` gets exactly the tail
//! after event `n`. Foreground responses record nothing: their storage stays the size
//! of their output, and re-streaming one is a 400 naming `stream`.
//!
//! A run cut by a crash is run again at the next start (events are kept in memory
//! only), and the new run may say something else. So the k-th run again numbers its
//! events from `k` × [`RERUN_STRIDE`]: a client resuming across the crash gets the new
//! run whole, from its `response.created`, never the tail of another run spliced onto
//! what it has.
//!
//! A log is bounded by [`Limits::max_event_bytes`](crate::Limits::max_event_bytes): a
//! run whose events pass it keeps none (followers get an `error` event and end) and
//! its response is read without `stream`.

use kiln_api::Caller;

use crate::error::{ResponsesError, Result};
use crate::event_log::EventStream;
use crate::service::Responses;

/// How far apart the sequence numbers of successive runs of one response start (no
/// run emits 2³² events; JSON clients read integers exactly up to 2⁵³).
pub(crate) const RERUN_STRIDE: u64 = 1 << 32;

/// `starting_after` as the client sent it: a non-negative integer.
pub fn starting_after(v: Option<&str>) -> Result<Option<u64>> {
    v.map(|s| {
        s.parse::<u64>().map_err(|_| {
            ResponsesError::invalid(
                "starting_after",
                format!("`starting_after` must be a non-negative integer, not '{s}'"),
            )
        })
    })
    .transpose()
}

impl Responses {
    /// `caller`'s response `id` as events after `starting_after` (the query value, a
    /// non-negative integer): recorded ones when it has ended, or its events so far
    /// and then live ones while it runs in the background. Another key's response, or
    /// one not stored, is not found.
    pub fn replay(
        &self,
        caller: &Caller,
        id: &str,
        starting_after: Option<&str>,
    ) -> Result<EventStream> {
        let after = self::starting_after(starting_after)?;
        let stored = self.stored(caller, id)?;
        if let Some(log) = self.running_log(id) {
            return Ok(log.follow(after));
        }
        if let Some(events) = self.store().events(&caller.key_id, id)? {
            return Ok(EventStream::replayed(events, after));
        }
        let status = stored.response.status;
        let why = if !stored.response.background {
            format!(
                "response '{id}' was not created with `background: true`; only background \
                 responses can be streamed again; retrieve it without `stream`"
            )
        } else if matches!(status.as_str(), "queued" | "in_progress") {
            format!("response '{id}' is {status} but not running yet; poll it without `stream`")
        } else {
            format!(
                "response '{id}' was stored without its events (they passed {} bytes, or an \
                 older server stored it); retrieve it without `stream`",
                self.limits().max_event_bytes
            )
        };
        Err(ResponsesError::invalid("stream", why))
    }
}
