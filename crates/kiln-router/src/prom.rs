//! Reading a node's load from its Prometheus `/metrics` text: the `kiln:` gauges
//! `num_requests_running`, `num_requests_waiting` and `kv_cache_usage_perc`, labelled
//! `model_name`.

use std::collections::BTreeMap;

/// One model's gauges on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelLoad {
    pub running: f64,
    pub waiting: f64,
    /// 0.0..=1.0
    pub kv_usage: f64,
}

/// A node's load at its last scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeLoad {
    /// Sequences running, all models together (they share the node's cores).
    pub running: f64,
    pub waiting: f64,
    /// The fullest KV cache of any model.
    pub kv_usage: f64,
    pub per_model: BTreeMap<String, ModelLoad>,
}

const RUNNING: &str = "kiln:num_requests_running";
const WAITING: &str = "kiln:num_requests_waiting";
const KV_USAGE: &str = "kiln:kv_cache_usage_perc";

/// Parses the exposition text; lines it does not need, and malformed ones, are skipped
/// (a scrape must never fail on a family the router does not know).
pub fn parse_load(text: &str) -> NodeLoad {
    let mut load = NodeLoad::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = parse_sample(line) else {
            continue;
        };
        if !value.is_finite() || ![RUNNING, WAITING, KV_USAGE].contains(&name) {
            continue;
        }
        let model = label(labels, "model_name").unwrap_or_default();
        let entry = load.per_model.entry(model).or_default();
        match name {
            RUNNING => {
                entry.running = value;
                load.running += value;
            }
            WAITING => {
                entry.waiting = value;
                load.waiting += value;
            }
            _ => {
                entry.kv_usage = value;
                load.kv_usage = load.kv_usage.max(value);
            }
        }
    }
    load
}

/// `name{labels} value [timestamp]` → (name, raw labels, value).
fn parse_sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => {
            let close = closing_brace(line, i)?;
            (&line[..i], (&line[i + 1..close], line[close + 1..].trim()))
        }
        Some(i) => (&line[..i], ("", line[i..].trim())),
        None => return None,
    };
    let (labels, rest) = rest;
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// The `}` closing the label set opened at `open`, skipping quoted values.
fn closing_brace(line: &str, open: usize) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in line[open + 1..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(open + 1 + i),
            _ => {}
        }
    }
    None
}

/// The unescaped value of label `key` in `a="x",b="y"`.
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let (k, after) = rest.split_once('=')?;
        let after = after.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => return None,
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end?;
        if k.trim().trim_start_matches(',').trim() == key {
            return Some(value);
        }
        rest = after[end + 1..].trim_start_matches([',', ' ']);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_models_and_keeps_the_fullest_cache() {
        let text = "\
# HELP kiln:num_requests_running Sequences in the engine's running batch.
# TYPE kiln:num_requests_running gauge
kiln:num_requests_running{model_name=\"a\"} 2
kiln:num_requests_running{model_name=\"b\"} 1
kiln:num_requests_waiting{model_name=\"a\"} 3
kiln:kv_cache_usage_perc{model_name=\"a\"} 0.25
kiln:kv_cache_usage_perc{model_name=\"b\"} 0.5
kiln:request_success_total{model_name=\"a\",finished_reason=\"stop\"} 7
kiln:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"+Inf\"} 7
garbage line
";
        let load = parse_load(text);
        assert_eq!((load.running, load.waiting, load.kv_usage), (3.0, 3.0, 0.5));
        assert_eq!(load.per_model["a"].waiting, 3.0);
        assert_eq!(load.per_model["b"].running, 1.0);
    }

    #[test]
    fn labels_with_escapes_and_braces() {
        let line = r#"kiln:num_requests_waiting{x="a}\"b",model_name="m\\1"} 4 1700000000"#;
        let (name, labels, value) = parse_sample(line).expect("sample");
        assert_eq!((name, value), ("kiln:num_requests_waiting", 4.0));
        assert_eq!(label(labels, "model_name").as_deref(), Some("m\\1"));
        assert_eq!(label(labels, "x").as_deref(), Some("a}\"b"));
        assert_eq!(label(labels, "nope"), None);
    }
}
