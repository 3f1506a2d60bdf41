//! The routing rules applied to one inference request: measure it
//! ([`crate::complexity`]) against the placement in force (which knows its model's
//! canonical id and task), then take the first rule of the table in force that matches
//! ([`crate::rules`]).

use serde_json::Value;

use crate::complexity::{path_task, Complexity};
use crate::placement::Resolved;
use crate::proxy::Inbound;
use crate::rules::Route;
use crate::state::RouterState;

/// The rule that decided a request's route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub rule: String,
    pub route: Route,
}

/// The rule that decides `req`'s route, if one matches.
pub fn decide(state: &RouterState, req: &Inbound) -> Option<Decision> {
    let rules = state.rules();
    if rules.is_empty() {
        return None;
    }
    let placement = state.placement();
    let resolved = match placement.resolve(req.model.as_deref()) {
        Resolved::Known(id) => Some(id),
        Resolved::Unknown(_) | Resolved::NoDefault => None,
    };
    let task = resolved
        .as_deref()
        .and_then(|m| placement.task_of(m))
        .or_else(|| path_task(&req.path));
    // Parsed only for size matchers; a body that is not JSON has no prompt to count.
    let body = rules
        .needs_body()
        .then(|| serde_json::from_slice::<Value>(&req.body).ok())
        .flatten();
    let measured = Complexity::of(
        task,
        [req.model.as_deref(), resolved.as_deref()],
        body.as_ref(),
    );
    let rule = rules.first_match(&measured)?;
    state
        .metrics()
        .rule_request(rule.name(), rule.route().as_str());
    Some(Decision {
        rule: rule.name().to_string(),
        route: rule.route(),
    })
}
