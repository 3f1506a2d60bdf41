//! [`GrammarSpec`] → llguidance's top-level grammar.

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use crate::env::ConstraintEnv;
use crate::error::{Error, Result};
use crate::tools::grammar::tool_calls_lark;
use crate::GrammarSpec;

/// How strictly a JSON schema is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchemaMode {
    /// A keyword or `format` llguidance can't enforce is an error naming it (structured
    /// output must match the schema, as OpenAI's strict mode promises).
    Strict,
    /// Such keywords are dropped (tool schemas from agent frameworks often carry
    /// annotations and exotic formats; the call is still valid JSON of the right shape).
    Lenient,
}

/// llguidance's options for generated JSON (its `x-guidance` object).
///
/// Layout: one space after `:` and `,`, no other whitespace. Free whitespace would let a
/// model loop on newlines until `max_tokens`; this is Python's `json.dumps` layout, which
/// models have seen most. `oneOf` is read as `anyOf` (exact for the disjoint unions that
/// schema generators emit).
fn json_options(mode: SchemaMode) -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "coerce_one_of": true,
        "lenient": mode == SchemaMode::Lenient,
    })
}

/// `schema` with Kiln's JSON options, unless it sets llguidance's own `x-guidance`.
pub(crate) fn with_options(schema: &Value, mode: SchemaMode) -> Result<Value> {
    match schema {
        Value::Object(map) => {
            let mut map = map.clone();
            map.entry("x-guidance")
                .or_insert_with(|| json_options(mode));
            Ok(Value::Object(map))
        }
        // `true` is any JSON value; `false` is nothing.
        Value::Bool(true) => Ok(json!({"x-guidance": json_options(mode)})),
        Value::Bool(false) => Err(Error::Grammar("the schema `false` matches nothing".into())),
        other => Err(Error::Grammar(format!(
            "a JSON schema must be an object, not {}",
            json_kind(other)
        ))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A Lark string literal for `s`: llguidance reads Lark strings as JSON strings.
pub(crate) fn lark_literal(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

pub(crate) fn top_level(spec: &GrammarSpec, env: &ConstraintEnv) -> Result<TopLevelGrammar> {
    Ok(match spec {
        GrammarSpec::JsonSchema(schema) => {
            TopLevelGrammar::from_json_schema(with_options(schema, SchemaMode::Strict)?)
        }
        GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(with_options(
            &json!({"type": "object"}),
            SchemaMode::Strict,
        )?),
        GrammarSpec::Regex(rx) => {
            if rx.is_empty() {
                return Err(Error::Grammar("the regex is empty".into()));
            }
            TopLevelGrammar::from_regex(rx)
        }
        GrammarSpec::Choice(choices) => TopLevelGrammar::from_lark(choice_lark(choices)?),
        GrammarSpec::Lark(g) => {
            if g.trim().is_empty() {
                return Err(Error::Grammar("the grammar is empty".into()));
            }
            TopLevelGrammar::from_lark(g.clone())
        }
        GrammarSpec::ToolCalls(spec) => {
            TopLevelGrammar::from_lark(tool_calls_lark(spec, &|t| env.lark_text_or_token(t))?)
        }
    })
}

/// `start` is exactly one of `choices`.
fn choice_lark(choices: &[String]) -> Result<String> {
    if choices.is_empty() {
        return Err(Error::Grammar("the list of choices is empty".into()));
    }
    if choices.iter().any(String::is_empty) {
        return Err(Error::Grammar("a choice is the empty string".into()));
    }
    let alts: Vec<String> = choices.iter().map(|c| lark_literal(c)).collect();
    Ok(format!("start: {}\n", alts.join(" | ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_added_unless_given() {
        let s = with_options(&json!({"type": "string"}), SchemaMode::Strict).expect("object");
        assert_eq!(s["x-guidance"]["whitespace_flexible"], false);
        assert_eq!(s["x-guidance"]["lenient"], false);
        let s = with_options(
            &json!({"x-guidance": {"lenient": true}}),
            SchemaMode::Strict,
        )
        .expect("object");
        assert_eq!(s["x-guidance"], json!({"lenient": true}));
        let s = with_options(&json!(true), SchemaMode::Lenient).expect("true");
        assert_eq!(s["x-guidance"]["lenient"], true);
    }

    #[test]
    fn non_object_schemas_are_errors() {
        for bad in [json!(false), json!(3), json!("x"), json!([1])] {
            assert!(matches!(
                with_options(&bad, SchemaMode::Strict),
                Err(Error::Grammar(_))
            ));
        }
    }

    #[test]
    fn choices_become_escaped_literals() {
        let g = choice_lark(&["a\"b".into(), "c\\d\n".into()]).expect("valid");
        assert_eq!(g, "start: \"a\\\"b\" | \"c\\\\d\\n\"\n");
        assert!(choice_lark(&[]).is_err());
        assert!(choice_lark(&["".into()]).is_err());
    }
}
