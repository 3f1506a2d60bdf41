//! Constrained decoding for Kiln: JSON schemas, JSON objects, regexes, choices, Lark
//! grammars and tool calls, compiled with `llguidance` into the engine's per-sequence
//! [`kiln_engine::Constraint`].
//!
//! The engine knows only that small trait, so `llguidance` (a fast-moving crate) stays
//! pinned behind this one crate. [`ConstraintEnv`] is built once per model: a token trie
//! over Kiln's own tokenizer. [`ConstraintEnv::compile`] compiles a [`GrammarSpec`] once
//! per request (a bad schema is an [`Error::Grammar`] naming the problem); every
//! sequence then starts its own matcher. [`tools`] knows the models' tool-call formats:
//! grammars for the calls, the parser that reads them out of the text (streamed or
//! whole, with the same result), and prompts for templates without a tools section.
//!
//! Conventions every grammar shares:
//! - every end-of-generation id of the tokenizer is EOS to the grammar: where the
//!   grammar may end all of them are allowed, and any of them ends it;
//! - control tokens are never text: a grammar names them (`<|im_end|>`, `<[id]>`);
//! - generated JSON is laid out like Python's `json.dumps` (`", "` and `": "`, no other
//!   whitespace), so a model can't loop on whitespace;
//! - ids past the tokenizer's vocabulary (padding in the logits) are never allowed;
//! - llguidance's per-token work is capped (lexer fuel, Earley items), so a pathological
//!   grammar fails its sequence instead of stalling the engine.

mod env;
mod error;
mod grammar;
mod matcher;
pub mod tools;

pub use env::ConstraintEnv;
pub use error::{Error, Result};
pub use matcher::{LlgConstraint, LlgFactory};
pub use tools::{
    generic_tool_messages, openai_tool_json, parse_complete, template_renders_tools,
    tool_system_prompt, ParsedCall, ParsedOutput, ToolCallParser, ToolCallSpec, ToolDef, ToolEvent,
    ToolFormat, ToolMode,
};

/// What the output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// JSON valid against this schema (OpenAI's `json_schema`).
    JsonSchema(serde_json::Value),
    /// Any JSON object (`json_object`).
    JsonObject,
    /// The whole output matches this regex.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// Tool calls in the model's format.
    ToolCalls(ToolCallSpec),
}
