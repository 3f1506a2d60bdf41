use super::*;

#[test]
fn patterns_match_segments_and_tails() {
    assert!(matches("/v1/files/{id}", "/v1/files/file-1"));
    assert!(!matches("/v1/files/{id}", "/v1/files/"));
    assert!(!matches("/v1/files/{id}", "/v1/files/a/b"));
    assert!(!matches("/v1/files/{id}", "/v1/files"));
    assert!(matches("/ai/run/{*model}", "/ai/run/@cf/meta/llama"));
    assert!(matches("/ai/run/{*model}", "/ai/run/x"));
    assert!(!matches("/ai/run/{*model}", "/ai/run/"));
    assert!(!matches("/ai/run/{*model}", "/ai/run"));
    assert!(matches("/v1/models", "/v1/models"));
    assert!(!matches("/v1/models", "/v1/models/"));
}

#[test]
fn each_method_and_path_is_listed_once() {
    for (i, a) in ENDPOINTS.iter().enumerate() {
        for b in &ENDPOINTS[i + 1..] {
            assert!(
                a.method != b.method || a.path != b.path,
                "{} {} twice",
                a.method.as_str(),
                a.path
            );
        }
    }
}

#[test]
fn the_rate_limits_count_every_route_that_runs_a_model() {
    let counted: Vec<&str> = ENDPOINTS
        .iter()
        .filter(|e| e.runs_model)
        .map(|e| e.path)
        .collect();
    assert_eq!(
        counted,
        [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/ai/run/{*model}",
            "/v1/responses",
            "/v1/agents/{name}/responses",
            "/v1/vector_stores/{id}/search",
            "/v1/firewall/score",
        ]
    );
    assert!(runs_model("POST", "/v1/vector_stores/vs_1/search"));
    assert!(runs_model("POST", "/v1/agents/bob/responses"));
    assert!(!runs_model("GET", "/v1/agents/bob/responses"));
    assert!(!runs_model("POST", "/v1/files"));
    assert!(!runs_model("PATCH", "/v1/chat/completions"));
}

#[test]
fn what_runs_a_model_is_consistent() {
    for e in ENDPOINTS {
        let name = format!("{} {}", e.method.as_str(), e.path);
        if e.cacheable || e.batchable || e.prompt.is_some() || !e.serves.is_empty() {
            assert!(e.runs_model, "{name} runs no model");
        }
        if e.runs_model || e.body != BodyLimit::Default {
            assert_eq!(e.method, Method::Post, "{name} takes no body");
        }
    }
}

#[test]
fn batches_and_hints_name_the_routes_by_model() {
    assert_eq!(
        batch_paths().collect::<Vec<_>>(),
        ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
    );
    assert_eq!(
        serving(ModelKind::Generate, "m"),
        "POST /v1/chat/completions, POST /v1/completions or POST /ai/run/m"
    );
    assert_eq!(
        serving(ModelKind::Embed, "minilm"),
        "POST /v1/embeddings or POST /ai/run/minilm"
    );
    assert_eq!(serving(ModelKind::Classify, "g"), "POST /ai/run/g");
}

#[test]
fn vectorize_writes_take_what_cloudflare_documents() {
    for op in ["insert", "upsert"] {
        let e = find(Method::Post, &format!("/vectorize/v2/indexes/idx/{op}")).expect(op);
        assert_eq!(e.body, BodyLimit::Bytes(100_000_000));
    }
    let upload = find(Method::Post, "/v1/files").expect("upload");
    assert_eq!(upload.body, BodyLimit::Upload);
    let query = find(Method::Post, "/vectorize/v2/indexes/idx/query").expect("query");
    assert_eq!(query.body, BodyLimit::Default);
}

#[test]
fn the_firewall_finds_prompts_by_route() {
    let prompt = |m: Method, p: &str| find(m, p).and_then(|e| e.prompt);
    assert_eq!(
        prompt(Method::Post, "/v1/chat/completions"),
        Some(Prompt::Chat)
    );
    assert_eq!(
        prompt(Method::Post, "/v1/agents/bob/responses"),
        Some(Prompt::Responses)
    );
    assert_eq!(
        prompt(Method::Post, "/ai/run/@cf/x"),
        Some(Prompt::WorkersAi)
    );
    assert_eq!(prompt(Method::Post, "/v1/embeddings"), None);
    assert_eq!(prompt(Method::Get, "/v1/agents/bob/responses"), None);
}
