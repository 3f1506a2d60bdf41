//! Which routes carry a prompt for the firewall, and in which shape (`kiln-guard`
//! reads the texts out of it).

use kiln_guard::PromptShape;

/// The prompt shape of `path`'s body, or `None` when the route runs no prompt (its body
/// is read only then: uploads are not).
pub(crate) fn prompt_shape(path: &str) -> Option<PromptShape> {
    match path {
        "/v1/chat/completions" => Some(PromptShape::Chat),
        "/v1/completions" => Some(PromptShape::Completion),
        "/v1/responses" => Some(PromptShape::Responses),
        _ if is_agent_turn(path) => Some(PromptShape::Responses),
        _ if path.starts_with("/ai/run/") => Some(PromptShape::WorkersAi),
        _ => None,
    }
}

fn is_agent_turn(path: &str) -> bool {
    path.strip_prefix("/v1/agents/")
        .and_then(|rest| rest.strip_suffix("/responses"))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_prompt_route_has_its_shape() {
        assert_eq!(
            prompt_shape("/v1/chat/completions"),
            Some(PromptShape::Chat)
        );
        assert_eq!(
            prompt_shape("/v1/completions"),
            Some(PromptShape::Completion)
        );
        assert_eq!(prompt_shape("/v1/responses"), Some(PromptShape::Responses));
        assert_eq!(
            prompt_shape("/v1/agents/bob/responses"),
            Some(PromptShape::Responses)
        );
        assert_eq!(prompt_shape("/ai/run/@cf/x"), Some(PromptShape::WorkersAi));
        assert_eq!(prompt_shape("/v1/embeddings"), None);
        assert_eq!(prompt_shape("/v1/agents/bob/state"), None);
    }
}
