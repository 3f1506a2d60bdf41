//! Durable agents without HTTP, modelled on Durable-Object agents: each agent is
//! addressed by its owner's API key and a name, and has its own SQLite file holding its
//! settings, a state document, its conversation (stored responses, continued
//! automatically) and its schedules.
//!
//! A live agent ([`live::Live`]) runs one turn at a time; it is closed when idle and
//! opened again from its file on the next request. Schedules fire from one alarm loop
//! ([`alarms`]) at least once, retried with backoff, and are re-armed after a restart;
//! a client's turn cut by a crash is run again at the next start (`turns.rs`).
//! Turns stream to every open event stream of the agent as they happen.

mod agents;
pub mod alarms;
mod db;
pub mod error;
pub mod live;
pub mod schedule;
mod turns;

pub use agents::{Agents, IDLE, MAX_AGENTS_PER_KEY};
pub use error::{AgentError, Result};
pub use schedule::ScheduleLimits;
