//! OpenAI-shaped samples (as the API and the official SDK send them) parse into Kiln's
//! types, and Kiln's responses serialize back to exactly the same JSON.

use kiln_api::chat::{
    ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ContentPart, MessageContent, Role,
};
use kiln_api::completions::{Completion, CompletionRequest, Prompt};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn sdk_chat_request_parses_with_nulls_and_unknown_fields() {
    let req: ChatCompletionRequest =
        serde_json::from_value(fixture("chat_request.json")).expect("parse");
    assert_eq!(req.messages.len(), 4);
    assert_eq!(req.messages[0].role, Role::Developer);
    assert_eq!(req.messages[0].role.template_name(), "system");
    assert_eq!(
        req.messages[1].content,
        Some(MessageContent::Parts(vec![ContentPart::Text {
            text: "Say hi".into()
        }]))
    );
    assert_eq!(req.messages[2].content, None);
    assert_eq!(req.messages[2].tool_calls.as_ref().map(Vec::len), Some(1));
    assert_eq!(req.frequency_penalty, None);
    assert_eq!(req.seed, Some(-7));
    assert_eq!(
        req.stop.map(|s| s.into_vec()),
        Some(vec!["\n".to_string(), "END".to_string()])
    );
    assert!(req.stream_options.is_some_and(|o| o.include_usage));
    assert_eq!(req.top_k, Some(40));
    assert_eq!(
        req.logit_bias.and_then(|b| b.get("50256").copied()),
        Some(-100.0)
    );
}

#[test]
fn chat_completion_round_trips_field_by_field() {
    let v = fixture("chat_completion.json");
    let parsed: ChatCompletion = serde_json::from_value(v.clone()).expect("parse");
    assert_eq!(serde_json::to_value(&parsed).expect("serialize"), v);
}

#[test]
fn chat_chunks_round_trip_including_null_and_absent_usage() {
    let Value::Array(chunks) = fixture("chat_chunks.json") else {
        panic!("array")
    };
    for v in chunks {
        let parsed: ChatCompletionChunk = serde_json::from_value(v.clone()).expect("parse");
        assert_eq!(serde_json::to_value(&parsed).expect("serialize"), v);
    }
}

#[test]
fn completion_round_trips_with_legacy_logprobs() {
    let v = fixture("completion.json");
    let parsed: Completion = serde_json::from_value(v.clone()).expect("parse");
    assert_eq!(serde_json::to_value(&parsed).expect("serialize"), v);
}

#[test]
fn completion_request_batch_of_token_ids() {
    let req: CompletionRequest = serde_json::from_str(
        r#"{"model": "m", "prompt": [[1, 2], [3]], "max_tokens": 4, "echo": true}"#,
    )
    .expect("parse");
    assert_eq!(req.prompt, Prompt::TokenBatches(vec![vec![1, 2], vec![3]]));
    assert_eq!(req.echo, Some(true));
}

#[test]
fn wrong_types_are_errors() {
    let bad =
        serde_json::from_str::<ChatCompletionRequest>(r#"{"messages": [], "temperature": "hot"}"#);
    assert!(bad.is_err());
    let bad_role = serde_json::from_str::<ChatCompletionRequest>(
        r#"{"messages": [{"role": "bot", "content": "x"}]}"#,
    );
    assert!(bad_role
        .expect_err("role")
        .to_string()
        .contains("unknown variant `bot`"));
}
