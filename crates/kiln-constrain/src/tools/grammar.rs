//! Tool calls as a Lark grammar (llguidance's dialect): each declared function's call
//! in the model's format, its arguments held to the function's schema by `%json`.
//!
//! The call object is spelled out exactly (`{"name": "f", "arguments": ` … `}`), so the
//! parser always finds the name before the arguments and can stream them.
//!
//! `auto` lets the model write any text until it opens a call. With a text tag (Qwen
//! 2.5's `<tool_call>` is an ordinary token) that is two lexemes: `TEXT`, any text not
//! containing the tag, or the lazy `pre`, text up to and including the first tag (a
//! lazy lexeme ends as soon as it matches, so the tag can't be read as text first).
//! With a control-token tag, text can never contain it, and `TEXT` is just any text.

use serde_json::Value;

use super::{ToolCallSpec, ToolDef, ToolFormat, ToolMode, CLOSE_TAG, OPEN_TAG};
use crate::error::{Error, Result};
use crate::grammar::{lark_literal, with_options, SchemaMode};

/// Between parallel Llama 3 JSON calls.
pub(crate) const LLAMA3_SEPARATOR: &str = "; ";

/// The Lark grammar of `spec`'s calls. `tag` spells a tag as a grammar item: a string
/// literal, or the control token of that text (`<[id]>`) when the vocabulary has one.
pub(crate) fn tool_calls_lark(spec: &ToolCallSpec, tag: &dyn Fn(&str) -> String) -> Result<String> {
    let tools = selected_tools(spec)?;
    let mut g = String::new();
    let mut alts = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let schema = with_options(&arguments_schema(&t.parameters), schema_mode(t))
            .map_err(|e| Error::Grammar(format!("function `{}` parameters: {e}", t.name)))?;
        let name = Value::String(t.name.clone()).to_string();
        let head = lark_literal(&format!(
            "{{\"name\": {name}, \"{}\": ",
            spec.format.arguments_key()
        ));
        g.push_str(&format!("args_{i}: %json {schema}\n"));
        g.push_str(&format!("object_{i}: {head} args_{i} \"}}\"\n"));
        alts.push(format!("object_{i}"));
    }
    g.push_str(&format!("object: {}\n", alts.join(" | ")));

    let (call, sep) = match spec.format {
        ToolFormat::Hermes => {
            let (open, close) = (tag(OPEN_TAG), tag(CLOSE_TAG));
            g.push_str(&format!("body: \"\\n\" object \"\\n\" {close}\n"));
            g.push_str(&format!("call: {open} body\n"));
            ("call", "\"\\n\"".to_string())
        }
        ToolFormat::Llama3Json => ("object", lark_literal(LLAMA3_SEPARATOR)),
    };
    // A named function is called once (as OpenAI and vLLM do): a small model told to
    // call it would otherwise repeat the call until `max_tokens`.
    let parallel = spec.parallel && !matches!(spec.mode, ToolMode::Named(_));
    let more = if parallel {
        format!(" ({sep} {call})*")
    } else {
        String::new()
    };
    let start = match (&spec.mode, spec.format) {
        (ToolMode::Required | ToolMode::Named(_), _) => format!("start: {call}{more}\n"),
        (ToolMode::Auto, ToolFormat::Hermes) => {
            let open = tag(OPEN_TAG);
            if open.starts_with('"') {
                // Text without the tag, text through the first tag and then calls, or
                // a bare call object (small models often drop the tags): text can't
                // open like a call object, and the lazy `pre` can't open with `{`
                // (two lexemes over the same bytes would keep EOS out).
                let rx = regex_escape(OPEN_TAG);
                format!(
                    "start: TEXT | pre body{more} | object\n\
                     TEXT: /(?s:.*)/ & ~/(?s:.*){rx}(?s:.*)/ & ~/\\s*\\{{\\s*\"name\"(?s:.*)/\n\
                     pre[lazy]: /([^{{](?s:.*))?{rx}/\n"
                )
            } else {
                format!("start: TEXT ({call}{more})?\nTEXT: /(?s:.*)/\n")
            }
        }
        // Text that doesn't open like a call object, or calls.
        (ToolMode::Auto, ToolFormat::Llama3Json) => format!(
            "start: TEXT | {call}{more}\n\
             TEXT: /(?s:.*)/ & ~/\\s*\\{{\\s*\"name\"(?s:.*)/\n"
        ),
    };
    Ok(format!("{start}{g}"))
}

/// The tools a call may name: all, or the one `Named`.
fn selected_tools(spec: &ToolCallSpec) -> Result<Vec<&ToolDef>> {
    if spec.tools.is_empty() {
        return Err(Error::Grammar("no tools are declared".into()));
    }
    let tools: Vec<&ToolDef> = match &spec.mode {
        ToolMode::Named(name) => spec.tools.iter().filter(|t| &t.name == name).collect(),
        ToolMode::Auto | ToolMode::Required => spec.tools.iter().collect(),
    };
    match (&spec.mode, tools.is_empty()) {
        (ToolMode::Named(name), true) => Err(Error::Grammar(format!(
            "the named function `{name}` is not among the declared tools"
        ))),
        _ => Ok(tools),
    }
}

/// Strict tools' schemas are held to exactly; others tolerate keywords llguidance
/// can't enforce.
pub(crate) fn schema_mode(t: &ToolDef) -> SchemaMode {
    if t.strict {
        SchemaMode::Strict
    } else {
        SchemaMode::Lenient
    }
}

/// The schema of a call's arguments: a function without parameters (no schema, `{}`, or
/// an object schema with no properties and nothing else) takes the empty object.
pub(crate) fn arguments_schema(parameters: &Value) -> Value {
    let empty_object =
        || serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false});
    match parameters {
        Value::Null => empty_object(),
        Value::Object(m) if m.is_empty() => empty_object(),
        Value::Object(m) => {
            let no_properties = m
                .get("properties")
                .is_none_or(|p| p.as_object().is_some_and(|p| p.is_empty()));
            let only_shape = m.keys().all(|k| {
                matches!(
                    k.as_str(),
                    "type" | "properties" | "required" | "title" | "description" | "$schema"
                )
            });
            if m.get("type") == Some(&Value::String("object".into())) && no_properties && only_shape
            {
                empty_object()
            } else {
                parameters.clone()
            }
        }
        other => other.clone(),
    }
}

/// `s` as a regex (inside Lark's `/.../`) matching exactly it.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$/#&~-".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, parameters: Value) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: None,
            parameters,
            strict: false,
        }
    }

    fn spec(mode: ToolMode, parallel: bool, format: ToolFormat) -> ToolCallSpec {
        ToolCallSpec {
            tools: vec![
                tool(
                    "a",
                    json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
                ),
                tool("b", Value::Null),
            ],
            mode,
            parallel,
            format,
        }
    }

    fn literal_tags(t: &str) -> String {
        lark_literal(t)
    }

    #[test]
    fn functions_without_parameters_take_the_empty_object() {
        let closed = json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(arguments_schema(&Value::Null), closed);
        assert_eq!(arguments_schema(&json!({})), closed);
        assert_eq!(
            arguments_schema(&json!({"type": "object", "properties": {}})),
            closed
        );
        let open = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(arguments_schema(&open), open);
    }

    #[test]
    fn required_is_only_calls_of_declared_functions() {
        let g = tool_calls_lark(
            &spec(ToolMode::Required, false, ToolFormat::Hermes),
            &literal_tags,
        )
        .expect("grammar");
        assert!(g.starts_with("start: call\n"), "{g}");
        assert!(g.contains(r#"object_0: "{\"name\": \"a\", \"arguments\": " args_0 "}""#));
        assert!(g.contains("object: object_0 | object_1\n"));
        assert!(g.contains("call: \"<tool_call>\" body\n"));
        let g = tool_calls_lark(
            &spec(ToolMode::Required, true, ToolFormat::Hermes),
            &literal_tags,
        )
        .expect("grammar");
        assert!(g.starts_with("start: call (\"\\n\" call)*\n"), "{g}");
    }

    #[test]
    fn named_keeps_only_that_function() {
        let g = tool_calls_lark(
            &spec(ToolMode::Named("b".into()), false, ToolFormat::Llama3Json),
            &literal_tags,
        )
        .expect("grammar");
        assert!(g.contains(r#""{\"name\": \"b\", \"parameters\": ""#));
        assert!(!g.contains(r#"\"a\""#));
        let missing = tool_calls_lark(
            &spec(ToolMode::Named("zzz".into()), false, ToolFormat::Hermes),
            &literal_tags,
        );
        match missing {
            Err(Error::Grammar(msg)) => assert!(msg.contains("zzz"), "{msg}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn auto_uses_a_lazy_prefix_for_text_tags_and_plain_text_for_token_tags() {
        let s = spec(ToolMode::Auto, false, ToolFormat::Hermes);
        let g = tool_calls_lark(&s, &literal_tags).expect("grammar");
        assert!(g.contains("pre[lazy]: /([^{](?s:.*))?<tool_call>/"), "{g}");
        let g = tool_calls_lark(&s, &|t: &str| {
            if t == OPEN_TAG {
                "<[7]>".into()
            } else {
                "<[8]>".into()
            }
        })
        .expect("grammar");
        assert!(
            g.starts_with("start: TEXT (call)?\nTEXT: /(?s:.*)/\n"),
            "{g}"
        );
        assert!(g.contains("call: <[7]> body\n"));
        assert!(g.contains("\"\\n\" <[8]>\n"));
    }

    #[test]
    fn no_tools_is_an_error() {
        let mut s = spec(ToolMode::Auto, false, ToolFormat::Hermes);
        s.tools.clear();
        assert!(tool_calls_lark(&s, &literal_tags).is_err());
    }
}
