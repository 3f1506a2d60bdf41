//! A client's turn survives a crash: it is journaled in the agent's file before it runs
//! and removed when it ends, however it ends (stored, failed, or its client left, which
//! stops it). Only a process that dies mid-turn leaves the row, and the next start runs
//! that turn again: at least once, as scheduled turns are (a crash after its response
//! was stored and before the row went runs it twice). The re-run continues the
//! conversation as the cut turn would have (a foreground turn's response is only stored
//! when it ends), and goes to the agent's event stream and history; the client that sent
//! it lost its connection with the process.

use std::sync::Arc;

use kiln_api::responses::CreateResponse;
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_responses::Created;

use crate::agents::Agents;
use crate::error::Result;
use crate::live::Live;

/// How a turn is journaled.
pub(crate) enum Journal {
    /// A client's turn: journaled now.
    Begin,
    /// A re-run: its entry from before the crash, ended when it ends.
    Held(InFlight),
    /// A schedule's turn: its schedule row already makes it run again.
    BySchedule,
}

/// A journaled turn; dropping it ends the journal entry.
pub(crate) struct InFlight {
    live: Arc<Live>,
    id: String,
}

impl InFlight {
    /// Journals `req` (as the client sent it) for `live`'s agent.
    pub(crate) fn begin(live: &Arc<Live>, req: &CreateResponse) -> Result<Self> {
        let id = format!("turn_{:032x}", rand::random::<u128>());
        live.db.begin_turn(&id, req, unix_now())?;
        Ok(Self {
            live: Arc::clone(live),
            id,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Err(e) = self.live.db.end_turn(&self.id) {
            tracing::error!(turn = %self.id, error = %e, "cannot end a journaled turn; it will run again after a restart");
        }
    }
}

impl Agents {
    /// Runs again, in the background and in order, the turns a crash cut for agent
    /// `name` of `owner`; returns how many there were.
    pub(crate) fn rerun_cut_turns(self: &Arc<Self>, owner: &str, name: &str) -> usize {
        let live = match self.open(owner, name, false) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(agent = %name, error = %e, "cannot open an agent to resume its turns");
                return 0;
            }
        };
        let cut = match live.db.cut_turns() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(agent = %name, error = %e, "cannot read an agent's cut turns");
                return 0;
            }
        };
        let n = cut.len();
        if n == 0 {
            return 0;
        }
        let (this, owner, name) = (Arc::clone(self), owner.to_string(), name.to_string());
        tokio::spawn(async move {
            let caller = Caller {
                key_id: owner,
                label: None,
            };
            for (id, mut req) in cut {
                req.stream = Some(false);
                // The row stays until this run ends, so a crash now runs it again.
                let journaled = InFlight {
                    live: Arc::clone(&live),
                    id,
                };
                match this
                    .turn(&caller, &name, req, Journal::Held(journaled))
                    .await
                {
                    Ok(Created::Done(r)) => {
                        tracing::info!(agent = %name, response = %r.id, status = %r.status, "re-ran a turn a crash cut");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(agent = %name, error = %e, "a turn a crash cut failed again");
                    }
                }
            }
        });
        n
    }
}
