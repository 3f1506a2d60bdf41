//! Usage metering for Kiln: what each API key consumed on each model.
//!
//! A served request ends in one [`UsageRecord`]: its key's id (never the key itself:
//! `kiln_api::key_id` keeps a short SHA-256 prefix), the model, and its prompt, cached and
//! completion tokens with their compute units ([`neurons`]). A [`Meter`] hands records to
//! a writer thread that adds them to a [`UsageStore`] (SQLite) in one transaction per
//! batch, so a request's count is committed within milliseconds of its end, and
//! [`Meter::flush`] / dropping the meter commit whatever is queued.
//!
//! No HTTP here: the server turns requests into records and rows into JSON.

pub mod error;
mod meter;
mod neurons;
mod store;

pub use error::{Error, Result};
pub use meter::Meter;
pub use neurons::{neurons, DECODE_WEIGHT, FLOPS_PER_NEURON, FORMULA};
pub use store::{UsageRecord, UsageRow, UsageStore};
