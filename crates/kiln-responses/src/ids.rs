//! OpenAI-shaped ids: a prefix, `_`, and 48 random hex digits.

use rand::Rng;

pub fn new_id(prefix: &str) -> String {
    let mut rng = rand::rng();
    let a: u128 = rng.random();
    let b: u64 = rng.random();
    format!("{prefix}_{a:032x}{:016x}", b)
}
