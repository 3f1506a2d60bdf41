//! Structured-output and tool fields → a compiled constraint for the engine.
//!
//! This module only maps the request's fields to `kiln-constrain`'s grammar specs and
//! its errors to 400s naming the field; grammars, tool formats and output parsing live in
//! `kiln-constrain`.

use std::sync::Arc;

use kiln_api::structured::{GuidedFields, ResponseFormat, StructuredOutputs, Tool};
use kiln_constrain::{GrammarSpec, ToolCallSpec, ToolDef, ToolFormat, ToolMode};
use kiln_engine::{ConstraintFactory, ServingModel};
use kiln_host::HostedModel;

use crate::error::GenerateError;
use crate::generator::blocking;

/// The grammar a request's output must follow, and the field it came from.
pub struct OutputGrammar {
    pub spec: GrammarSpec,
    pub param: &'static str,
}

/// The output constraint asked for by `response_format`, vLLM's `structured_outputs` or
/// its `guided_*` fields (at most one of them), if any.
pub fn output_grammar(
    response_format: Option<&ResponseFormat>,
    structured: Option<&StructuredOutputs>,
    guided: &GuidedFields,
) -> Result<Option<OutputGrammar>, GenerateError> {
    let mut found: Vec<OutputGrammar> = Vec::new();
    if let Some(rf) = response_format {
        if let Some(spec) = response_format_spec(rf)? {
            let param = match spec {
                GrammarSpec::JsonSchema(_) => "response_format.json_schema.schema",
                _ => "response_format",
            };
            found.push(OutputGrammar { spec, param });
        }
    }
    if let Some(so) = structured {
        let mut specs = Vec::new();
        if let Some(schema) = &so.json {
            specs.push(json_spec(schema, "structured_outputs.json")?);
        }
        if let Some(r) = &so.regex {
            specs.push(GrammarSpec::Regex(r.clone()));
        }
        if let Some(c) = &so.choice {
            specs.push(choice_spec(c, "structured_outputs.choice")?);
        }
        if let Some(g) = &so.grammar {
            specs.push(GrammarSpec::Lark(g.clone()));
        }
        if so.json_object == Some(true) {
            specs.push(GrammarSpec::JsonObject);
        }
        if specs.len() > 1 {
            return Err(GenerateError::invalid(
                "structured_outputs",
                "structured_outputs takes exactly one of json, regex, choice, grammar and json_object",
            ));
        }
        found.extend(specs.into_iter().map(|spec| OutputGrammar {
            spec,
            param: "structured_outputs",
        }));
    }
    if let Some(schema) = &guided.guided_json {
        found.push(OutputGrammar {
            spec: json_spec(schema, "guided_json")?,
            param: "guided_json",
        });
    }
    if let Some(r) = &guided.guided_regex {
        found.push(OutputGrammar {
            spec: GrammarSpec::Regex(r.clone()),
            param: "guided_regex",
        });
    }
    if let Some(c) = &guided.guided_choice {
        found.push(OutputGrammar {
            spec: choice_spec(c, "guided_choice")?,
            param: "guided_choice",
        });
    }
    if let Some(g) = &guided.guided_grammar {
        found.push(OutputGrammar {
            spec: GrammarSpec::Lark(g.clone()),
            param: "guided_grammar",
        });
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|g| g.param).collect();
        return Err(GenerateError::invalid(
            found[1].param,
            format!(
                "only one output constraint may be given, got {}",
                names.join(", ")
            ),
        ));
    }
    Ok(found.pop())
}

fn response_format_spec(rf: &ResponseFormat) -> Result<Option<GrammarSpec>, GenerateError> {
    match rf.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonObject)),
        "json_schema" => {
            let js = rf.json_schema.as_ref().ok_or_else(|| {
                GenerateError::invalid(
                    "response_format.json_schema",
                    "response_format of type `json_schema` needs a `json_schema` object",
                )
            })?;
            if js.name.is_empty() {
                return Err(GenerateError::invalid(
                    "response_format.json_schema.name",
                    "json_schema.name must not be empty",
                ));
            }
            match &js.schema {
                None => Ok(Some(GrammarSpec::JsonObject)),
                Some(schema) => json_spec(schema, "response_format.json_schema.schema").map(Some),
            }
        }
        other => Err(GenerateError::invalid(
            "response_format.type",
            format!(
                "response_format type `{other}` does not exist; use `text`, `json_object` or `json_schema`"
            ),
        )),
    }
}

/// A JSON schema given as an object (or, as vLLM allows, a string holding one).
fn json_spec(schema: &serde_json::Value, param: &str) -> Result<GrammarSpec, GenerateError> {
    let schema = match schema {
        serde_json::Value::String(s) => serde_json::from_str(s).map_err(|e| {
            GenerateError::invalid(param, format!("the JSON schema string is not JSON: {e}"))
        })?,
        serde_json::Value::Object(_) | serde_json::Value::Bool(_) => schema.clone(),
        _ => {
            return Err(GenerateError::invalid(
                param,
                "a JSON schema must be an object",
            ))
        }
    };
    Ok(GrammarSpec::JsonSchema(schema))
}

fn choice_spec(choices: &[String], param: &str) -> Result<GrammarSpec, GenerateError> {
    if choices.is_empty() {
        return Err(GenerateError::invalid(
            param,
            "the list of choices is empty",
        ));
    }
    Ok(GrammarSpec::Choice(choices.to_vec()))
}

/// What a request's `tools`, `tool_choice` and `parallel_tool_calls` ask for.
pub struct ToolRequest {
    /// The declared tools (rendered into the prompt unless `tool_choice` is `none`).
    pub defs: Vec<ToolDef>,
    /// The call grammar; `None` when `tool_choice` is `none` (plain text, no parsing).
    pub spec: Option<ToolCallSpec>,
}

/// Checks the tool fields; `None` when no tools are declared.
pub fn tool_request(
    tools: Option<&[Tool]>,
    tool_choice: Option<&serde_json::Value>,
    parallel: Option<bool>,
    format: ToolFormat,
) -> Result<Option<ToolRequest>, GenerateError> {
    let tools = tools.unwrap_or_default();
    if tools.is_empty() {
        return match tool_choice {
            None => Ok(None),
            Some(serde_json::Value::String(s)) if s == "none" => Ok(None),
            Some(_) => Err(GenerateError::invalid(
                "tool_choice",
                "tool_choice is only allowed when `tools` are declared",
            )),
        };
    }
    let mut defs = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(GenerateError::invalid(
                format!("tools[{i}].type"),
                format!("tool type `{}` is not supported; use `function`", t.kind),
            ));
        }
        let name = &t.function.name;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(GenerateError::invalid(
                format!("tools[{i}].function.name"),
                format!("function name `{name}` must be non-empty and use only a-z, A-Z, 0-9, `_` and `-`"),
            ));
        }
        if defs.iter().any(|d: &ToolDef| &d.name == name) {
            return Err(GenerateError::invalid(
                format!("tools[{i}].function.name"),
                format!("function `{name}` is declared twice"),
            ));
        }
        let parameters = match &t.function.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p) if p.is_object() => p.clone(),
            Some(_) => {
                return Err(GenerateError::invalid(
                    format!("tools[{i}].function.parameters"),
                    "function parameters must be a JSON schema object",
                ))
            }
        };
        defs.push(ToolDef {
            name: name.clone(),
            description: t.function.description.clone(),
            parameters,
            strict: t.function.strict.unwrap_or(false),
        });
    }
    let mode = match tool_choice {
        None => ToolMode::Auto,
        Some(serde_json::Value::String(s)) => match s.as_str() {
            "none" => {
                return Ok(Some(ToolRequest { defs, spec: None }));
            }
            "auto" => ToolMode::Auto,
            "required" => ToolMode::Required,
            other => {
                return Err(GenerateError::invalid(
                    "tool_choice",
                    format!(
                        "tool_choice `{other}` does not exist; use `none`, `auto`, `required` or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
                    ),
                ))
            }
        },
        Some(v) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(|n| n.as_str())
                .filter(|_| v.get("type").and_then(|t| t.as_str()) == Some("function"))
                .ok_or_else(|| {
                    GenerateError::invalid(
                        "tool_choice",
                        "tool_choice must be `none`, `auto`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
            if !defs.iter().any(|d| d.name == name) {
                return Err(GenerateError::invalid(
                    "tool_choice.function.name",
                    format!("tool_choice names function `{name}`, which is not in `tools`"),
                ));
            }
            ToolMode::Named(name.to_string())
        }
    };
    Ok(Some(ToolRequest {
        spec: Some(ToolCallSpec {
            tools: defs.clone(),
            mode,
            parallel: parallel.unwrap_or(true),
            format,
        }),
        defs,
    }))
}

/// The one grammar of a request: its output format or its tool calls (not both), with
/// the field it came from.
pub fn request_grammar(
    output: Option<OutputGrammar>,
    tools: Option<&ToolRequest>,
) -> Result<Option<(GrammarSpec, &'static str)>, GenerateError> {
    match (output, tools.and_then(|t| t.spec.clone())) {
        (Some(o), Some(_)) => Err(GenerateError::invalid(
            o.param,
            "an output format can't be combined with tool calls; send `tool_choice: \"none\"` or drop the output format",
        )),
        (Some(o), None) => Ok(Some((o.spec, o.param))),
        (None, Some(t)) => Ok(Some((GrammarSpec::ToolCalls(t), "tools"))),
        (None, None) => Ok(None),
    }
}

/// The tool-call format of `model` (from its chat template).
pub fn tool_format(model: &ServingModel) -> ToolFormat {
    ToolFormat::detect(model.tokenizer.chat_template())
}

/// Compiles `spec` for `model` on a blocking thread (building the model's token trie on
/// first use); a grammar the compiler rejects is a 400 on `param`.
pub async fn compile(
    hosted: &Arc<HostedModel>,
    model: &Arc<ServingModel>,
    spec: GrammarSpec,
    param: &'static str,
) -> Result<Arc<dyn ConstraintFactory>, GenerateError> {
    let (hosted, model) = (hosted.clone(), model.clone());
    blocking(move || {
        let env = hosted.constraint_env(&model)?;
        env.compile(&spec).map_err(|e| match e {
            kiln_constrain::Error::Grammar(msg) => {
                GenerateError::invalid(param, format!("invalid `{param}`: {msg}"))
            }
            other => GenerateError::Internal(other.to_string()),
        })
    })
    .await
}
