//! Every route of the API in one table, and what each one is: whether it runs a model
//! (so the rate limits count it), whether its answer may be cached, where its prompt is
//! (for the prompt firewall), whether a batch line may call it, what the router hashes
//! to place it, and how large its body may be.
//!
//! The node's router, `kiln route`'s, the gates, the Batch API and the error hints all
//! read this table, so they cannot drift apart. Paths are patterns: `{name}` is one
//! path segment, `{*name}` the rest of the path (at least one segment). Plain data: no
//! HTTP types, so the crates below the HTTP layer can read it too.

mod table;

pub use table::ENDPOINTS;

/// An HTTP method the API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    /// The method named `name` (as HTTP spells it), if the API serves it at all.
    pub fn parse(name: &str) -> Option<Method> {
        match name {
            "GET" => Some(Method::Get),
            "POST" => Some(Method::Post),
            "PUT" => Some(Method::Put),
            "DELETE" => Some(Method::Delete),
            _ => None,
        }
    }
}

/// How the prompt firewall finds the user's text in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// `messages`, as chat completions take them.
    Chat,
    /// `prompt`, as completions take it.
    Completion,
    /// `input`, as the Responses API (and an agent's turn) takes it.
    Responses,
    /// Workers AI's `prompt` or `messages`.
    WorkersAi,
}

/// The kinds of model an endpoint runs on the model a request names (for the hint
/// that a model of the wrong kind gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Generate,
    Embed,
    Classify,
}

/// What `kiln route` hashes to choose a node for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// The model the request names (its body's `model`, or the path's): the model's
    /// shard, warm nodes first.
    Model,
    /// The caller's key: state that lives on one node (responses, files, batches,
    /// vector indexes, queued requests).
    Caller,
    /// The agent's name in the path: the node the agent lives on.
    Agent,
    /// The router answers from what it knows of all nodes (the model catalogue).
    Router,
    /// Only a node serves it (its admin and scrape endpoints, a key's agent list):
    /// `kiln route` does not.
    NodeOnly,
    /// Only the router serves it (its observability of all nodes); nodes do not.
    RouterOnly,
}

/// How large a request body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLimit {
    /// The configured default (`--max-body-size`, 4 MiB).
    Default,
    /// An upload: the file store's own limit (`--max-file-size`).
    Upload,
    /// A fixed size in bytes, whatever the default.
    Bytes(usize),
}

/// What Cloudflare documents for a Vectorize write: 100 MB (and 5,000 vectors).
pub const VECTORIZE_WRITE_BYTES: usize = 100 * 1000 * 1000;

/// One route: a method on a path pattern, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    /// Runs a model, and so counts against the rate limits and the neuron quota.
    pub runs_model: bool,
    /// The model kinds it serves on the model the request names (empty: it names none,
    /// or runs one through stored state).
    pub serves: &'static [ModelKind],
    /// Its answer may come from the response cache.
    pub cacheable: bool,
    /// Where its prompt is, when it has one for the firewall.
    pub prompt: Option<Prompt>,
    /// A `/v1/batches` input line may call it.
    pub batchable: bool,
    pub pin: Pin,
    pub body: BodyLimit,
}

/// The endpoint `method` `path` (no query) is, if any.
pub fn find(method: Method, path: &str) -> Option<&'static Endpoint> {
    ENDPOINTS
        .iter()
        .find(|e| e.method == method && matches(e.path, path))
}

/// The endpoint a request is, by its method as HTTP spells it.
pub fn find_named(method: &str, path: &str) -> Option<&'static Endpoint> {
    Method::parse(method).and_then(|m| find(m, path))
}

/// Whether a request runs a model (and counts against the limits).
pub fn runs_model(method: &str, path: &str) -> bool {
    find_named(method, path).is_some_and(|e| e.runs_model)
}

/// The paths a batch line may call, in the table's order.
pub fn batch_paths() -> impl Iterator<Item = &'static str> {
    ENDPOINTS.iter().filter(|e| e.batchable).map(|e| e.path)
}

/// The endpoints that take a model of `kind` by name, as `POST /v1/embeddings or POST
/// /ai/run/{model}`, with `model` written into the path.
pub fn serving(kind: ModelKind, model: &str) -> String {
    let names: Vec<String> = ENDPOINTS
        .iter()
        .filter(|e| e.serves.contains(&kind))
        .map(|e| {
            let path = e
                .path
                .split_once('{')
                .map_or(e.path.to_string(), |(p, _)| format!("{p}{model}"));
            format!("{} {path}", e.method.as_str())
        })
        .collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Whether `path` matches `pattern` (`{x}` one non-empty segment, `{*x}` the rest).
pub fn matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with("{*") => {
                return !g.is_empty() || got.next().is_some();
            }
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests;
