//! Shared helpers for kiln-encoder's integration tests.

#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

/// A fixture under `tests/fixtures/`, parsed.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn as_str(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

pub fn as_usize(v: &Value) -> usize {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}")) as usize
}

pub fn as_array(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

pub fn ids(v: &Value) -> Vec<u32> {
    as_array(v).iter().map(|x| as_usize(x) as u32).collect()
}

pub fn floats(v: &Value) -> Vec<f32> {
    as_array(v)
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) as f32)
        .collect()
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
