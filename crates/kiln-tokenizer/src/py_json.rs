//! JSON text exactly as Python's `json.dumps` writes it, which is what Hugging Face's
//! `tojson` template filter produces (separators `", "`/`": "`, no HTML escaping, floats
//! in Python's `repr`, optional indent and `ensure_ascii`).

use serde_json::Value;

/// `json.dumps` options the `tojson` filter exposes.
#[derive(Debug, Clone, Default)]
pub(crate) struct DumpOptions {
    /// Spaces per level; `None` writes everything on one line.
    pub(crate) indent: Option<String>,
    pub(crate) ensure_ascii: bool,
    pub(crate) sort_keys: bool,
    /// `(item, key)` separators; default `(", ", ": ")`, or `(",", ": ")` with an indent.
    pub(crate) separators: Option<(String, String)>,
}

pub(crate) fn dumps(value: &Value, opts: &DumpOptions) -> String {
    let (item_sep, key_sep) = opts.separators.clone().unwrap_or_else(|| {
        let item = if opts.indent.is_some() { "," } else { ", " };
        (item.to_string(), ": ".to_string())
    });
    let mut w = Writer {
        out: String::new(),
        opts,
        item_sep,
        key_sep,
    };
    w.value(value, 0);
    w.out
}

struct Writer<'o> {
    out: String,
    opts: &'o DumpOptions,
    item_sep: String,
    key_sep: String,
}

impl Writer<'_> {
    fn newline(&mut self, level: usize) {
        if let Some(indent) = &self.opts.indent {
            self.out.push('\n');
            for _ in 0..level {
                self.out.push_str(indent);
            }
        }
    }

    fn value(&mut self, v: &Value, level: usize) {
        match v {
            Value::Null => self.out.push_str("null"),
            Value::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => self.out.push_str(&i.to_string()),
                (_, Some(u), _) => self.out.push_str(&u.to_string()),
                (_, _, Some(f)) => self.out.push_str(&float_repr(f)),
                _ => self.out.push_str(&n.to_string()),
            },
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                if items.is_empty() {
                    self.out.push_str("[]");
                    return;
                }
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        let sep = self.item_sep.clone();
                        self.out.push_str(&sep);
                    }
                    self.newline(level + 1);
                    self.value(item, level + 1);
                }
                self.newline(level);
                self.out.push(']');
            }
            Value::Object(map) => {
                if map.is_empty() {
                    self.out.push_str("{}");
                    return;
                }
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.opts.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                self.out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        let sep = self.item_sep.clone();
                        self.out.push_str(&sep);
                    }
                    self.newline(level + 1);
                    self.string(k);
                    let sep = self.key_sep.clone();
                    self.out.push_str(&sep);
                    self.value(item, level + 1);
                }
                self.newline(level);
                self.out.push('}');
            }
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.opts.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// Python's `repr(float)`: shortest round-trip digits, fixed notation for decimal
/// exponents in `-4..16`, otherwise `d.ddde+XX`.
fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_json_dumps() {
        let v = json!({"name": "get_weather", "args": {"city": "Paris\n\"x\"", "n": [1, 2.5, true, null]}, "e": {}, "l": []});
        assert_eq!(
            dumps(&v, &DumpOptions::default()),
            r#"{"name": "get_weather", "args": {"city": "Paris\n\"x\"", "n": [1, 2.5, true, null]}, "e": {}, "l": []}"#
        );
        let indented = DumpOptions {
            indent: Some("  ".into()),
            ..Default::default()
        };
        assert_eq!(
            dumps(&json!({"a": [1, {"b": 2}]}), &indented),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}"
        );
        let ascii = DumpOptions {
            ensure_ascii: true,
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(
            dumps(&json!({"z": "é😀", "a": "<&>"}), &ascii),
            r#"{"a": "<&>", "z": "\u00e9\ud83d\ude00"}"#
        );
    }

    #[test]
    fn floats_use_python_repr() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
        ] {
            assert_eq!(float_repr(f), s);
        }
    }
}
