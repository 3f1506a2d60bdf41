//! Chat templates render exactly as Hugging Face `transformers` renders them.
//!
//! The SmolLM2 and Qwen2.5-Coder templates in `fixtures/templates` were extracted from the
//! models' GGUF files (a test below checks they still are the files' templates). The
//! expected strings were written from reading the templates and agree with `transformers`'
//! Jinja2 environment.

use kiln_formats::GgufFile;
use kiln_tokenizer::{
    ChatMessage, ChatRequestView, ChatTemplate, ContentPart, Error, MessageContent, Tokenizer,
};
use serde_json::json;

const SMOLLM2: &str = include_str!("fixtures/templates/smollm2.jinja");
const QWEN: &str = include_str!("fixtures/templates/qwen2.5-coder.jinja");

fn render(
    template: &ChatTemplate,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
) -> String {
    template
        .render(&ChatRequestView {
            messages,
            tools,
            add_generation_prompt,
            extra: None,
        })
        .expect("render")
}

fn smollm2() -> ChatTemplate {
    ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").expect("compile")
}

fn qwen() -> ChatTemplate {
    ChatTemplate::new(QWEN, "<|endoftext|>", "<|im_end|>").expect("compile")
}

#[test]
fn fixtures_are_the_models_templates() {
    for (model, expected) in [
        ("smollm2-135m-instruct", SMOLLM2),
        ("qwen2.5-coder-0.5b-instruct", QWEN),
    ] {
        let spec = kiln_catalog::find(model).expect("catalogue");
        let gguf = GgufFile::open(kiln_testkit::model_file(
            model,
            spec.primary_file().file_name,
        ))
        .expect("open");
        let tokenizer = Tokenizer::from_gguf(&gguf).expect("tokenizer");
        assert_eq!(tokenizer.chat_template(), Some(expected), "{model}");
    }
}

#[test]
fn smollm2_adds_its_default_system_prompt() {
    let out = render(&smollm2(), &[ChatMessage::new("user", "Hello")], None, true);
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn smollm2_keeps_a_given_system_prompt() {
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello!"),
        ChatMessage::new("user", "Bye"),
    ];
    assert_eq!(
        render(&smollm2(), &messages, None, false),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
    );
}

#[test]
fn typed_parts_are_joined_for_string_only_templates() {
    let message = ChatMessage {
        content: Some(MessageContent::Parts(vec![
            ContentPart::text("Part one"),
            ContentPart::text("Part two"),
        ])),
        ..ChatMessage::new("user", "")
    };
    let out = render(
        &smollm2(),
        &[ChatMessage::new("system", "S"), message],
        None,
        false,
    );
    assert_eq!(
        out,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nPart one\nPart two<|im_end|>\n"
    );
}

#[test]
fn qwen_without_tools_uses_its_default_system_prompt() {
    assert_eq!(
        render(&qwen(), &[ChatMessage::new("user", "hi")], None, true),
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}

const QWEN_TOOLS_PREAMBLE: &str = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
    You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
    {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \
    \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n\
    </tools>\n\nFor each function call, return a json object with function name and arguments within \
    <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n\
    </tool_call><|im_end|>\n";

fn weather_tools() -> serde_json::Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }
    }])
}

fn tool_call_message() -> ChatMessage {
    ChatMessage {
        content: None,
        // OpenAI sends arguments as a JSON string.
        tool_calls: Some(json!([{
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}
        }])),
        ..ChatMessage::new("assistant", "")
    }
}

fn tool_result(id: &str, content: &str) -> ChatMessage {
    ChatMessage {
        tool_call_id: Some(id.to_string()),
        ..ChatMessage::new("tool", content)
    }
}

#[test]
fn qwen_renders_tools_calls_and_results() {
    let messages = [
        ChatMessage::new("system", "You are a bot."),
        ChatMessage::new("user", "Weather in Paris?"),
        tool_call_message(),
        tool_result("call_1", "{\"temp\": 18}"),
        tool_result("call_2", "sunny"),
        ChatMessage::new("assistant", "It is 18°C and sunny."),
    ];
    let tools = weather_tools();
    let expected = format!(
        "<|im_start|>system\nYou are a bot.{QWEN_TOOLS_PREAMBLE}\
         <|im_start|>user\nWeather in Paris?<|im_end|>\n\
         <|im_start|>assistant\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}\n</tool_call><|im_end|>\n\
         <|im_start|>user\n<tool_response>\n{{\"temp\": 18}}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n\
         <|im_start|>assistant\nIt is 18°C and sunny.<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(render(&qwen(), &messages, Some(&tools), true), expected);
}

#[test]
fn qwen_tools_without_system_message_use_the_default_prompt() {
    let messages = [
        ChatMessage::new("user", "Weather in Paris?"),
        tool_call_message(),
    ];
    let tools = weather_tools();
    let expected = format!(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.{QWEN_TOOLS_PREAMBLE}\
         <|im_start|>user\nWeather in Paris?<|im_end|>\n\
         <|im_start|>assistant\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}\n</tool_call><|im_end|>\n"
    );
    assert_eq!(render(&qwen(), &messages, Some(&tools), false), expected);
}

#[test]
fn syntax_errors_name_the_line() {
    let err = ChatTemplate::new(
        "{% for m in messages %}\n{{ m.content }\n{% endfor %}",
        "",
        "",
    )
    .expect_err("the template does not compile");
    let Error::TemplateSyntax { detail } = &err else {
        panic!("expected a syntax error, got {err:?}");
    };
    assert!(
        detail.contains("syntax error") && detail.contains("chat_template:2"),
        "{detail}"
    );
    assert!(
        err.to_string()
            .starts_with("chat template does not compile: "),
        "{err}"
    );
}

#[test]
fn raise_exception_reports_the_templates_message() {
    let t = ChatTemplate::new(
        "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user message') }}{% endif %}ok",
        "",
        "",
    )
    .expect("compile");
    assert_eq!(
        render(&t, &[ChatMessage::new("user", "x")], None, false),
        "ok"
    );
    let err = t
        .render(&ChatRequestView {
            messages: &[ChatMessage::new("system", "x")],
            tools: None,
            add_generation_prompt: false,
            extra: None,
        })
        .expect_err("the template raises");
    match err {
        Error::TemplateRaised { message } => {
            assert_eq!(message, "Conversations must start with a user message")
        }
        other => panic!("expected TemplateRaised, got {other:?}"),
    }
}

#[test]
fn helpers_real_templates_use() {
    let source = "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}\
        [{{ m.content.strip().upper() }}|{% if m.content.startswith(' he') %}y{% else %}n{% endif %}]{% if loop.index >= 3 %}{% break %}{% endif %}\
        {% endfor %}{{ eos_token }}|{{ extra_value | tojson(indent=2) }}|{{ strftime_now('%Y') | length }}|{% if tools is none %}no tools{% endif %}";
    let t = ChatTemplate::new(source, "<s>", "</s>").expect("compile");
    let messages = [
        ChatMessage::new("system", "skip me"),
        ChatMessage::new("user", " hello "),
        ChatMessage::new("assistant", "yes"),
        ChatMessage::new("user", "never shown"),
    ];
    let extra = json!({"extra_value": {"a": [1, "é"]}, "bos_token": "overridden?"});
    let out = t
        .render(&ChatRequestView {
            messages: &messages,
            tools: None,
            add_generation_prompt: false,
            extra: extra.as_object(),
        })
        .expect("render");
    assert_eq!(
        out,
        "<s>[HELLO|y][YES|n]</s>|{\n  \"a\": [\n    1,\n    \"é\"\n  ]\n}|4|no tools"
    );
}

#[test]
fn strftime_now_rejects_bad_formats() {
    let t = ChatTemplate::new("{{ strftime_now('%Q') }}", "", "").expect("compile");
    let err = t
        .render(&ChatRequestView {
            messages: &[],
            tools: None,
            add_generation_prompt: false,
            extra: None,
        })
        .expect_err("%Q is not a strftime directive");
    assert!(
        err.to_string().contains("strftime_now: invalid format"),
        "{err}"
    );
}
