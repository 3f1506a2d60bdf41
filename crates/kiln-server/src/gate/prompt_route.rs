//! Which routes carry a prompt for the firewall, and in which shape (`kiln-guard`
//! reads the texts out of it): the endpoint table's `prompt`.

use kiln_api::endpoints::{find, Method, Prompt};
use kiln_guard::PromptShape;

/// The prompt shape of a `POST` to `path` (prompts come only in bodies), or `None`
/// when the route runs no prompt (its body is read only then: uploads are not).
pub(crate) fn prompt_shape(path: &str) -> Option<PromptShape> {
    Some(match find(Method::Post, path)?.prompt? {
        Prompt::Chat => PromptShape::Chat,
        Prompt::Completion => PromptShape::Completion,
        Prompt::Responses => PromptShape::Responses,
        Prompt::WorkersAi => PromptShape::WorkersAi,
    })
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
