//! Shared test helpers.

#![allow(dead_code)]

pub mod fake_server;

use serde::Serialize;
use serde_json::Value;

/// Asserts two values serialise to the same JSON, floats equal to 1e-12 relative (a
/// JSON round trip may move a float by an ulp).
pub fn assert_json_close<T: Serialize>(a: &T, b: &T) {
    let a = serde_json::to_value(a).expect("serialises");
    let b = serde_json::to_value(b).expect("serialises");
    assert!(close(&a, &b), "JSON differs:\n{a}\n{b}");
}

fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| close(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}
