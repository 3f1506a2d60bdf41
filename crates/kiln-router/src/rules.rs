//! Routing by rule: the config file's `[[rules]]` table, which sends requests central
//! (to the upstream) or to the edge (the nodes) by their task, model, estimated prompt
//! tokens and `max_tokens` ([`crate::complexity`]). The first rule whose every matcher
//! matches decides; a rule without matchers matches everything; no match routes as if
//! there were no rules.
//!
//! A table is checked whole when it is read ([`Rules::new`]), so a router never runs a
//! half-valid one: names unique and label-safe, known tasks, bounds in order, at most
//! [`MAX_RULES`] rules, and a `central` rule only where an upstream is configured
//! ([`Rules::check_upstream`]).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::complexity::Complexity;
use crate::error::{Error, Result};

/// Most rules a table may have (each request walks the table until a match).
pub const MAX_RULES: usize = 256;
/// Longest rule name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Longest model pattern, in bytes.
pub const MAX_MODEL_LEN: usize = 256;
/// The tasks a rule may name: the catalogue's (a model card's `task`).
pub const TASKS: [&str; 3] = ["text-generation", "embeddings", "text-classification"];

/// Where a matching request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Straight to the upstream, without trying a node.
    Central,
    /// The nodes, as without rules (failure fallbacks and escalation still apply); it
    /// keeps later rules from matching.
    Edge,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Central => "central",
            Route::Edge => "edge",
        }
    }
}

/// One rule as the file writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    pub name: String,
    #[serde(default)]
    pub task: Option<String>,
    /// A model id, alias or requested name; a trailing `*` matches any suffix.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub min_prompt_tokens: Option<u64>,
    #[serde(default)]
    pub max_prompt_tokens: Option<u64>,
    #[serde(default)]
    pub min_max_tokens: Option<u64>,
    pub route: Option<Route>,
}

/// A model matcher: a name, or a prefix (`@cf/meta/*`); both ignore case.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ModelPattern {
    Exact(String),
    Prefix(String),
}

impl ModelPattern {
    fn matches(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        match self {
            ModelPattern::Exact(m) => name == *m,
            ModelPattern::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// One checked rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    name: String,
    task: Option<String>,
    model: Option<ModelPattern>,
    /// The file's pattern, as written (for `/nodes`).
    model_text: Option<String>,
    min_prompt_tokens: Option<u64>,
    max_prompt_tokens: Option<u64>,
    min_max_tokens: Option<u64>,
    route: Route,
}

impl Rule {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn route(&self) -> Route {
        self.route
    }

    /// Whether `c` meets every matcher (bounds are inclusive; a request without
    /// `max_tokens` never meets `min_max_tokens`).
    pub fn matches(&self, c: &Complexity<'_>) -> bool {
        self.task.as_deref().is_none_or(|t| c.task == Some(t))
            && self
                .model
                .as_ref()
                .is_none_or(|p| c.models.iter().flatten().any(|m| p.matches(m)))
            && self.min_prompt_tokens.is_none_or(|n| c.prompt_tokens >= n)
            && self.max_prompt_tokens.is_none_or(|n| c.prompt_tokens <= n)
            && self
                .min_max_tokens
                .is_none_or(|n| c.max_tokens.is_some_and(|m| m >= n))
    }

    /// Whether matching needs the request's body (a size matcher).
    fn needs_body(&self) -> bool {
        self.min_prompt_tokens.is_some()
            || self.max_prompt_tokens.is_some()
            || self.min_max_tokens.is_some()
    }

    fn check(n: usize, e: &RuleEntry) -> Result<Rule> {
        let bad = |reason: String| Error::Rule {
            rule: format!("#{n} `{}`", e.name),
            reason,
        };
        let name = e.name.trim();
        if name.is_empty() {
            return Err(bad("`name` is empty".into()));
        }
        if name.len() > MAX_NAME_LEN
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!(
                "`name` must be 1 to {MAX_NAME_LEN} letters, digits, `-`, `_` or `.`"
            )));
        }
        let route = e
            .route
            .ok_or_else(|| bad("`route` is missing: give \"central\" or \"edge\"".into()))?;
        if let Some(t) = &e.task {
            if !TASKS.contains(&t.as_str()) {
                return Err(bad(format!(
                    "unknown task `{t}` (expected one of {})",
                    TASKS.join(", ")
                )));
            }
        }
        let model = match e.model.as_deref().map(str::trim) {
            None => None,
            Some(m) if m.is_empty() || m.len() > MAX_MODEL_LEN => {
                return Err(bad(format!("`model` must be 1 to {MAX_MODEL_LEN} bytes")))
            }
            Some(m) => {
                let lower = m.to_ascii_lowercase();
                let (stem, prefix) = match lower.strip_suffix('*') {
                    Some(stem) => (stem, true),
                    None => (lower.as_str(), false),
                };
                if stem.contains('*') {
                    return Err(bad(format!(
                        "`model` {m:?}: `*` may only end the pattern (e.g. \"@cf/meta/*\")"
                    )));
                }
                Some(if prefix {
                    ModelPattern::Prefix(stem.to_string())
                } else {
                    ModelPattern::Exact(lower.clone())
                })
            }
        };
        if let (Some(lo), Some(hi)) = (e.min_prompt_tokens, e.max_prompt_tokens) {
            if lo > hi {
                return Err(bad(format!(
                    "min_prompt_tokens ({lo}) is over max_prompt_tokens ({hi})"
                )));
            }
        }
        Ok(Rule {
            name: name.to_string(),
            task: e.task.clone(),
            model,
            model_text: e.model.as_deref().map(|m| m.trim().to_string()),
            min_prompt_tokens: e.min_prompt_tokens,
            max_prompt_tokens: e.max_prompt_tokens,
            min_max_tokens: e.min_max_tokens,
            route,
        })
    }

    fn view(&self) -> Value {
        json!({
            "name": self.name,
            "task": self.task,
            "model": self.model_text,
            "min_prompt_tokens": self.min_prompt_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "min_max_tokens": self.min_max_tokens,
            "route": self.route.as_str(),
        })
    }
}

/// A checked rule table, in the file's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    rules: Vec<Rule>,
    /// Some rule has a size matcher, so requests' bodies must be read.
    needs_body: bool,
}

impl Rules {
    /// Checks `entries` (the file's `[[rules]]`) into a table.
    pub fn new(entries: &[RuleEntry]) -> Result<Self> {
        if entries.len() > MAX_RULES {
            return Err(Error::Rule {
                rule: "table".into(),
                reason: format!("{} rules, over the limit of {MAX_RULES}", entries.len()),
            });
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let rule = Rule::check(i + 1, e)?;
            if rules.iter().any(|r| r.name == rule.name) {
                return Err(Error::Rule {
                    rule: format!("#{} `{}`", i + 1, rule.name),
                    reason: "another rule has this name".into(),
                });
            }
            rules.push(rule);
        }
        let needs_body = rules.iter().any(Rule::needs_body);
        Ok(Self { rules, needs_body })
    }

    /// Fails if a rule routes central and there is no upstream to send it to.
    pub fn check_upstream(&self, has_upstream: bool) -> Result<()> {
        match self.rules.iter().find(|r| r.route == Route::Central) {
            Some(r) if !has_upstream => Err(Error::Rule {
                rule: format!("`{}`", r.name),
                reason: "routes central, but no upstream is configured (--upstream or [upstream])"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether matching needs the request body's sizes.
    pub fn needs_body(&self) -> bool {
        self.needs_body
    }

    /// The first rule `c` matches.
    pub fn first_match(&self, c: &Complexity<'_>) -> Option<&Rule> {
        self.rules.iter().find(|r| r.matches(c))
    }

    /// The table for `GET /nodes`.
    pub fn view(&self) -> Value {
        Value::Array(self.rules.iter().map(Rule::view).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, route: Route) -> RuleEntry {
        RuleEntry {
            name: name.into(),
            route: Some(route),
            ..RuleEntry::default()
        }
    }

    fn err(entries: &[RuleEntry]) -> String {
        Rules::new(entries).expect_err("invalid").to_string()
    }

    fn req<'a>(task: &'a str, model: &'a str, prompt: u64, max: Option<u64>) -> Complexity<'a> {
        Complexity {
            task: Some(task),
            models: [Some(model), None],
            prompt_tokens: prompt,
            max_tokens: max,
        }
    }

    #[test]
    fn the_first_matching_rule_wins_and_no_match_is_none() {
        let rules = Rules::new(&[
            RuleEntry {
                min_prompt_tokens: Some(1000),
                ..entry("long", Route::Central)
            },
            RuleEntry {
                task: Some("embeddings".into()),
                ..entry("embed-edge", Route::Edge)
            },
            RuleEntry {
                model: Some("@cf/meta/*".into()),
                ..entry("meta", Route::Central)
            },
            RuleEntry {
                min_max_tokens: Some(512),
                max_prompt_tokens: Some(10),
                ..entry("short-in-long-out", Route::Central)
            },
        ])
        .expect("valid");
        assert!(rules.needs_body());
        let first = |c: Complexity<'_>| rules.first_match(&c).map(|r| r.name().to_string());
        let gen = "text-generation";
        assert_eq!(first(req(gen, "m", 1000, None)).as_deref(), Some("long"));
        assert_eq!(first(req(gen, "m", 999, None)), None);
        // An embedding matches `embed-edge` before the model rule would.
        assert_eq!(
            first(req("embeddings", "@cf/meta/x", 5, None)).as_deref(),
            Some("embed-edge")
        );
        // Model prefixes ignore case; the canonical id counts as well as the asked name.
        assert_eq!(
            first(req(gen, "@CF/Meta/llama-3", 5, None)).as_deref(),
            Some("meta")
        );
        let by_id = Complexity {
            models: [Some("llama"), Some("@cf/meta/llama")],
            ..req(gen, "", 5, None)
        };
        assert_eq!(first(by_id).as_deref(), Some("meta"));
        // Every matcher of a rule must match; bounds are inclusive.
        assert_eq!(
            first(req(gen, "m", 10, Some(512))).as_deref(),
            Some("short-in-long-out")
        );
        assert_eq!(first(req(gen, "m", 11, Some(512))), None);
        assert_eq!(first(req(gen, "m", 10, Some(511))), None);
        assert_eq!(first(req(gen, "m", 10, None)), None);
    }

    #[test]
    fn a_rule_without_matchers_matches_everything() {
        let rules = Rules::new(&[entry("all", Route::Edge)]).expect("valid");
        assert!(!rules.needs_body());
        assert_eq!(
            rules.first_match(&Complexity::default()).map(Rule::route),
            Some(Route::Edge)
        );
        assert!(Rules::default()
            .first_match(&Complexity::default())
            .is_none());
    }

    #[test]
    fn an_exact_model_does_not_match_a_longer_name_and_tasks_must_be_known() {
        let rules = Rules::new(&[RuleEntry {
            model: Some("smollm2".into()),
            task: Some("text-generation".into()),
            ..entry("s", Route::Central)
        }])
        .expect("valid");
        let c = |m| req("text-generation", m, 0, None);
        assert!(rules.first_match(&c("SmolLM2")).is_some());
        assert!(rules.first_match(&c("smollm2-135m")).is_none());
        let unknown_task = Complexity {
            task: None,
            ..c("smollm2")
        };
        assert!(rules.first_match(&unknown_task).is_none());
    }

    #[test]
    fn invalid_tables_are_refused_with_the_rule_and_the_reason() {
        let e = err(&[entry(" ", Route::Edge)]);
        assert!(e.contains("#1") && e.contains("`name` is empty"), "{e}");
        let e = err(&[entry("has space", Route::Edge)]);
        assert!(e.contains("letters, digits"), "{e}");
        let e = err(&[entry(&"x".repeat(MAX_NAME_LEN + 1), Route::Edge)]);
        assert!(e.contains("1 to 64"), "{e}");
        let e = err(&[entry("a", Route::Edge), entry("a", Route::Central)]);
        assert!(e.contains("#2 `a`") && e.contains("another rule"), "{e}");
        let e = err(&[RuleEntry {
            task: Some("classification".into()),
            ..entry("t", Route::Edge)
        }]);
        assert!(
            e.contains("unknown task `classification`") && e.contains("text-classification"),
            "{e}"
        );
        let e = err(&[RuleEntry {
            min_prompt_tokens: Some(10),
            max_prompt_tokens: Some(9),
            ..entry("r", Route::Edge)
        }]);
        assert!(e.contains("min_prompt_tokens (10) is over"), "{e}");
        for pattern in ["@cf/*/llama", "@cf/**", "*x"] {
            let e = err(&[RuleEntry {
                model: Some(pattern.into()),
                ..entry("m", Route::Edge)
            }]);
            assert!(e.contains("may only end"), "{pattern}: {e}");
        }
        let e = err(&[RuleEntry {
            model: Some("  ".into()),
            ..entry("m", Route::Edge)
        }]);
        assert!(e.contains("`model` must be"), "{e}");
        let e = err(&[RuleEntry {
            route: None,
            ..entry("n", Route::Edge)
        }]);
        assert!(e.contains("`route` is missing"), "{e}");
        let many: Vec<RuleEntry> = (0..=MAX_RULES)
            .map(|i| entry(&format!("r{i}"), Route::Edge))
            .collect();
        assert!(err(&many).contains("over the limit of 256"));
        assert!(Rules::new(&many[..MAX_RULES]).is_ok());
    }

    #[test]
    fn central_rules_need_an_upstream() {
        let edge = Rules::new(&[entry("e", Route::Edge)]).expect("valid");
        edge.check_upstream(false).expect("edge needs none");
        let central =
            Rules::new(&[entry("e", Route::Edge), entry("c", Route::Central)]).expect("valid");
        central.check_upstream(true).expect("has one");
        let e = central.check_upstream(false).expect_err("none").to_string();
        assert!(e.contains("`c`") && e.contains("no upstream"), "{e}");
    }

    #[test]
    fn the_file_form_parses_and_refuses_unknown_fields() {
        #[derive(Deserialize)]
        struct File {
            rules: Vec<RuleEntry>,
        }
        let f: File = toml::from_str(
            r#"
            [[rules]]
            name = "long"
            min_prompt_tokens = 2000
            route = "central"
            [[rules]]
            name = "meta"
            model = "@cf/meta/*"
            route = "edge"
            "#,
        )
        .expect("parse");
        let rules = Rules::new(&f.rules).expect("valid");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules.view()[1]["model"], "@cf/meta/*");
        assert_eq!(rules.view()[0]["route"], "central");
        let typo = toml::from_str::<File>("[[rules]]\nname = \"x\"\nmin_prompt_token = 1");
        assert!(typo.is_err());
        let route = toml::from_str::<File>("[[rules]]\nname = \"x\"\nroute = \"cloud\"");
        assert!(route.is_err());
    }
}
