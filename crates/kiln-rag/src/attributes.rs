//! A file's `attributes` (OpenAI's limits: 16 pairs, keys up to 64 characters, string
//! values up to 512) and OpenAI's attribute `filters` compiled to the vector index's
//! filter tree.
//!
//! Attributes are stored as each chunk's metadata in the vector index, so a filter is
//! applied there, before top-K, like any Vectorize filter.

use kiln_vectors::{Filter, Op, Scalar};
use serde_json::{Map, Value};

use crate::error::{RagError, Result};

const MAX_PAIRS: usize = 16;
const MAX_KEY: usize = 64;
const MAX_STRING: usize = 512;
/// Deepest nesting of `and`/`or`.
const MAX_DEPTH: usize = 8;

/// `attributes` checked: an object of at most 16 strings, numbers and booleans.
pub fn attributes(v: Option<&Value>, param: &str) -> Result<Map<String, Value>> {
    let map = match v {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(RagError::invalid(param, "`attributes` must be an object")),
    };
    if map.len() > MAX_PAIRS {
        return Err(RagError::invalid(
            param,
            format!(
                "`attributes` has {} pairs; at most {MAX_PAIRS} are allowed",
                map.len()
            ),
        ));
    }
    for (k, v) in map {
        let at = format!("{param}.{k}");
        if k.is_empty()
            || k.chars().count() > MAX_KEY
            || k.contains(['.', '"'])
            || k.starts_with('$')
        {
            return Err(RagError::invalid(
                at,
                format!(
                    "attribute keys are 1 to {MAX_KEY} characters without '.', '\"' or a \
                     leading '$'"
                ),
            ));
        }
        match v {
            Value::String(s) if s.chars().count() > MAX_STRING => {
                return Err(RagError::invalid(
                    at,
                    format!("attribute strings are at most {MAX_STRING} characters"),
                ))
            }
            Value::String(_) | Value::Bool(_) => {}
            Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => {}
            _ => {
                return Err(RagError::invalid(
                    at,
                    "attribute values are strings, numbers or booleans",
                ))
            }
        }
    }
    Ok(map.clone())
}

/// A store's `metadata`: at most 16 pairs, keys up to 64 characters, string values up
/// to 512 characters (OpenAI's limits).
pub fn metadata(v: Option<&Map<String, Value>>, param: &str) -> Result<Map<String, Value>> {
    let Some(map) = v else {
        return Ok(Map::new());
    };
    if map.len() > MAX_PAIRS {
        return Err(RagError::invalid(
            param,
            format!(
                "`metadata` has {} pairs; at most {MAX_PAIRS} are allowed",
                map.len()
            ),
        ));
    }
    for (k, v) in map {
        let ok_key = !k.is_empty() && k.chars().count() <= MAX_KEY;
        let ok_value = v.as_str().is_some_and(|s| s.chars().count() <= MAX_STRING);
        if !ok_key || !ok_value {
            return Err(RagError::invalid(
                format!("{param}.{k}"),
                format!(
                    "metadata keys are 1 to {MAX_KEY} characters and values strings of at most \
                     {MAX_STRING}"
                ),
            ));
        }
    }
    Ok(map.clone())
}

/// OpenAI's `filters`: a comparison `{type: eq|ne|gt|gte|lt|lte|in|nin, key, value}`
/// or a compound `{type: and|or, filters: [...]}`.
pub fn filter(v: &Value, param: &str) -> Result<Filter> {
    compile(v, param, 0)
}

fn compile(v: &Value, at: &str, depth: usize) -> Result<Filter> {
    if depth > MAX_DEPTH {
        return Err(RagError::invalid(
            at,
            format!("filters nest at most {MAX_DEPTH} deep"),
        ));
    }
    let Value::Object(o) = v else {
        return Err(RagError::invalid(at, "a filter must be an object"));
    };
    let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
    let op = match kind {
        "and" | "or" => {
            let Some(Value::Array(parts)) = o.get("filters") else {
                return Err(RagError::invalid(
                    format!("{at}.filters"),
                    format!("an `{kind}` filter needs a `filters` list"),
                ));
            };
            let parts = parts
                .iter()
                .enumerate()
                .map(|(i, p)| compile(p, &format!("{at}.filters[{i}]"), depth + 1))
                .collect::<Result<Vec<_>>>()?;
            return Ok(if kind == "and" {
                Filter::And(parts)
            } else {
                Filter::Or(parts)
            });
        }
        "eq" => Op::Eq,
        "ne" => Op::Ne,
        "gt" => Op::Gt,
        "gte" => Op::Gte,
        "lt" => Op::Lt,
        "lte" => Op::Lte,
        "in" => Op::In,
        "nin" => Op::Nin,
        other => {
            return Err(RagError::invalid(
                format!("{at}.type"),
                format!(
                    "unsupported filter type '{other}'; use eq, ne, gt, gte, lt, lte, in, nin, and \
                     or or"
                ),
            ))
        }
    };
    let key = o
        .get("key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty() && !k.contains(['.', '"']) && !k.starts_with('$'))
        .ok_or_else(|| {
            RagError::invalid(
                format!("{at}.key"),
                "a comparison needs the attribute's `key`",
            )
        })?;
    let value_at = format!("{at}.value");
    let values = match (op, o.get("value")) {
        (Op::In | Op::Nin, Some(Value::Array(list))) if !list.is_empty() => list
            .iter()
            .map(|x| scalar(x, &value_at))
            .collect::<Result<Vec<_>>>()?,
        (Op::In | Op::Nin, _) => {
            return Err(RagError::invalid(
                value_at,
                "`in` and `nin` take a non-empty list",
            ))
        }
        (_, Some(x)) => vec![scalar(x, &value_at)?],
        (_, None) => return Err(RagError::invalid(value_at, "a comparison needs a `value`")),
    };
    if matches!(op, Op::Gt | Op::Gte | Op::Lt | Op::Lte)
        && !matches!(values[0], Scalar::Num(_) | Scalar::Str(_))
    {
        return Err(RagError::invalid(
            value_at,
            "`gt`, `gte`, `lt` and `lte` compare with a number or a string",
        ));
    }
    Filter::cmp(key, op, values).map_err(|e| RagError::invalid(format!("{at}.key"), e.to_string()))
}

fn scalar(v: &Value, at: &str) -> Result<Scalar> {
    match v {
        Value::String(s) => Ok(Scalar::Str(s.clone())),
        Value::Bool(b) => Ok(Scalar::Bool(*b)),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Scalar::Num)
            .ok_or_else(|| RagError::invalid(at, "a filter number must be finite")),
        _ => Err(RagError::invalid(
            at,
            "filter values are strings, numbers or booleans",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param_of(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(RagError::Invalid { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn attributes_follow_openai_limits() {
        let ok = attributes(
            Some(&json!({"author": "Ann", "year": 2024, "draft": false})),
            "attributes",
        );
        assert_eq!(ok.expect("ok").len(), 3);
        assert_eq!(
            param_of(attributes(Some(&json!([1])), "attributes")),
            "attributes"
        );
        assert_eq!(
            param_of(attributes(Some(&json!({"a": {"b": 1}})), "attributes")),
            "attributes.a"
        );
        assert_eq!(
            param_of(attributes(Some(&json!({"a.b": 1})), "attributes")),
            "attributes.a.b"
        );
        assert_eq!(
            param_of(attributes(
                Some(&json!({"s": "x".repeat(513)})),
                "attributes"
            )),
            "attributes.s"
        );
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(param_of(attributes(Some(&Value::Object(many)), "a")), "a");
    }

    #[test]
    fn filters_compile_to_the_index_tree() {
        let f = filter(
            &json!({"type": "and", "filters": [
                {"type": "eq", "key": "author", "value": "Ann"},
                {"type": "or", "filters": [
                    {"type": "gte", "key": "year", "value": 2020},
                    {"type": "in", "key": "tag", "value": ["a", "b"]}
                ]}
            ]}),
            "filters",
        )
        .expect("filter");
        let Filter::And(parts) = f else { panic!("and") };
        assert_eq!(parts.len(), 2);
        assert!(matches!(&parts[1], Filter::Or(p) if p.len() == 2));
        for (bad, param) in [
            (
                json!({"type": "like", "key": "a", "value": 1}),
                "filters.type",
            ),
            (json!({"type": "eq", "value": 1}), "filters.key"),
            (json!({"type": "eq", "key": "a"}), "filters.value"),
            (
                json!({"type": "in", "key": "a", "value": 1}),
                "filters.value",
            ),
            (
                json!({"type": "gt", "key": "a", "value": true}),
                "filters.value",
            ),
            (
                json!({"type": "and", "filters": [{"type": "eq", "key": "a", "value": [1]}]}),
                "filters.filters[0].value",
            ),
            (json!({"type": "or"}), "filters.filters"),
            (json!([]), "filters"),
        ] {
            assert_eq!(param_of(filter(&bad, "filters")), param, "{bad}");
        }
    }
}
