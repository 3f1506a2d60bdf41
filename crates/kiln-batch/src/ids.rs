//! Ids: OpenAI's (`batch_…`, `batch_req_…`), Workers AI's (a UUID), and the output
//! files' (derived from the batch's, so finalizing again replaces them).

use rand::Rng;

/// `prefix` `_` and [`new_hex`].
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", new_hex())
}

/// 32 random hex digits.
pub fn new_hex() -> String {
    let a: u128 = rand::rng().random();
    format!("{a:032x}")
}

/// A random version-4 UUID, as Workers AI's request ids are.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The id of a batch's output (`out`) or error (`err`) file.
pub fn output_file_id(batch_id: &str, which: &str) -> String {
    let tail = batch_id.strip_prefix("batch_").unwrap_or(batch_id);
    format!("file-{which}-{tail}")
}
