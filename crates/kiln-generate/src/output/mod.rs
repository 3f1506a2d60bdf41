//! A generation's output in the API's vocabulary: tool calls parsed from the text
//! ([`tool_calls`]) and logprobs with their tokens' text ([`logprobs`]). Both need the
//! model's tokenizer or tool syntax, which stay below the HTTP server.

pub mod logprobs;
pub mod tool_calls;
