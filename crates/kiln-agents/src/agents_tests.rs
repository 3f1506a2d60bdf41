//! Unit tests of `agents.rs` (no model: no turn runs).

use super::*;
use futures_util::future::BoxFuture;
use kiln_api::chat::ChatCompletionRequest;
use kiln_responses::{ChatTurn, GenError};

/// Never reached: these tests run no turns.
struct NoModel;

impl ChatRunner for NoModel {
    fn start(
        &self,
        _: &Caller,
        _: ChatCompletionRequest,
    ) -> BoxFuture<'static, std::result::Result<ChatTurn, GenError>> {
        Box::pin(async { Err(GenError::new("no_model", "no model in this test")) })
    }

    fn check_model(&self, model: &str) -> std::result::Result<(), GenError> {
        match model {
            "unserved" => Err(GenError::new("model_not_found", "no model 'unserved'")),
            _ => Ok(()),
        }
    }
}

/// Agents under `dir` with no model to run turns on.
fn agents_in(dir: &tempfile::TempDir, schedules: ScheduleLimits) -> Arc<Agents> {
    Agents::new(
        dir.path().to_path_buf(),
        Arc::new(NoModel),
        Limits::default(),
        schedules,
    )
}

#[test]
fn put_refuses_what_a_turn_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agents = agents_in(&dir, ScheduleLimits::default());
    let me = Caller::anonymous();
    let config = |model: &str, tools: Option<Value>, max: Option<u32>| AgentConfig {
        model: model.into(),
        tools: tools.map(|t| vec![t]),
        max_output_tokens: max,
        ..AgentConfig::default()
    };
    let e = agents
        .put(&me, "a", config("unserved", None, None))
        .expect_err("unserved model");
    assert!(
        matches!(e, AgentError::Responses(kiln_responses::ResponsesError::Generate(ref g))
            if g.code == "model_not_found"),
        "{e}"
    );
    for (tools, max, field) in [
        (Some(json!({"type": "web_search"})), None, "tools[0].type"),
        (Some(json!({"type": "function"})), None, "tools[0].name"),
        (Some(json!("f")), None, "tools[0].type"),
        (None, Some(0), "max_output_tokens"),
    ] {
        let e = agents
            .put(&me, "a", config("m", tools, max))
            .expect_err(field);
        let param = match e {
            AgentError::Invalid { ref param, .. } => param.clone(),
            AgentError::Responses(kiln_responses::ResponsesError::Invalid {
                ref param, ..
            }) => param.clone(),
            ref other => panic!("{field}: {other}"),
        };
        assert_eq!(param, field, "{e}");
    }
    // Nothing refused was stored.
    assert!(matches!(
        agents.get(&me, "a"),
        Err(AgentError::NotFound { .. })
    ));
    let tool = json!({"type": "function", "name": "f"});
    agents
        .put(&me, "a", config("m", Some(tool), Some(8)))
        .expect("a served model and a good tool");
}

#[test]
fn a_key_may_have_only_so_many_agents_and_names_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agents = agents_in(&dir, ScheduleLimits::default());
    Arc::get_mut(&mut agents).expect("unshared").max_agents = 2;
    let me = Caller::anonymous();
    let config = || AgentConfig {
        model: "m".into(),
        ..AgentConfig::default()
    };
    agents.put(&me, "a", config()).expect("first");
    agents.put(&me, "b", config()).expect("second");
    agents
        .put(&me, "a", config())
        .expect("an update is not a new agent");
    let e = agents.put(&me, "c", config()).expect_err("third");
    assert!(matches!(e, AgentError::Limit(_)), "{e}");
    let other = Caller {
        key_id: "key_other".into(),
        label: None,
    };
    agents
        .put(&other, "c", config())
        .expect("another key has its own count");
    for bad in ["", "a/b", "..", "a.b", &"x".repeat(65)] {
        let e = agents.put(&me, bad, config()).expect_err(bad);
        assert!(
            matches!(e, AgentError::Invalid { ref param, .. } if param == "name"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn an_agent_may_have_only_so_many_schedules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = ScheduleLimits {
        max_per_agent: 2,
        ..ScheduleLimits::default()
    };
    let agents = agents_in(&dir, limits);
    let me = Caller::anonymous();
    let config = AgentConfig {
        model: "m".into(),
        ..AgentConfig::default()
    };
    agents.put(&me, "a", config).expect("agent");
    let later = || ScheduleRequest {
        input: serde_json::json!("hi"),
        delay_seconds: Some(3600.0),
        at: None,
        cron: None,
    };
    agents.add_schedule(&me, "a", later()).expect("first");
    let second = agents.add_schedule(&me, "a", later()).expect("second");
    let e = agents.add_schedule(&me, "a", later()).expect_err("third");
    assert!(
        matches!(e, AgentError::Limit(ref m) if m.contains("2 schedules")),
        "{e}"
    );
    agents
        .delete_schedule(&me, "a", &second.id)
        .expect("delete");
    agents.add_schedule(&me, "a", later()).expect("room again");
}

#[test]
fn a_keys_agents_list_in_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agents = agents_in(&dir, ScheduleLimits::default());
    let me = Caller::anonymous();
    let config = || AgentConfig {
        model: "m".into(),
        ..AgentConfig::default()
    };
    for name in ["c", "a", "b"] {
        agents.put(&me, name, config()).expect("agent");
    }
    let ids = |page: &[Agent]| page.iter().map(|a| a.id.clone()).collect::<Vec<_>>();
    let (page, more) = agents.list(&me, None, 2, false).expect("first page");
    assert_eq!((ids(&page), more), (vec!["a".into(), "b".into()], true));
    let (page, more) = agents.list(&me, Some("b"), 2, false).expect("second page");
    assert_eq!((ids(&page), more), (vec!["c".into()], false));
    let (page, _) = agents.list(&me, None, 10, true).expect("descending");
    assert_eq!(ids(&page), ["c", "b", "a"]);
    let other = Caller {
        key_id: "key_other".into(),
        label: None,
    };
    assert!(agents
        .list(&other, None, 10, false)
        .expect("none")
        .0
        .is_empty());
}
