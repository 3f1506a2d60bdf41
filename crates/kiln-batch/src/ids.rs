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
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The id of a batch's output (`out`) or error (`err`) file.
pub fn output_file_id(batch_id: &str, which: &str) -> String {
    let tail = batch_id.strip_prefix("batch_").unwrap_or(batch_id);
    format!("file-{which}-{tail}")
}
