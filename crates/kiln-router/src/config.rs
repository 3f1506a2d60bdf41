//! Settings: [`RouterConfig`] (resolved, with defaults; the TOML file it can come from
//! is [`crate::config_file`]), and the node and DNS specs
//! (`http://10.0.0.1:8000@colo=ams`, `kiln-nodes.default.svc:8000@colo=ams`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kiln_http::{ConnectionLimits, CorsPolicy};

use crate::error::{Error, Result};
use crate::rules::Rules;

/// One node: its base URL and optional labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeSpec {
    /// Base URL without a trailing slash, e.g. `http://10.0.0.1:8000`.
    pub url: String,
    /// Stable identity on the ring (default: the URL's `host:port`). Naming nodes keeps
    /// placement fixed when their addresses change.
    pub name: Option<String>,
    /// Location label, e.g. `ams`.
    pub colo: Option<String>,
}

impl NodeSpec {
    /// Parses `URL[@key=value,...]` with keys `colo` and `name`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: &str| Error::NodeSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (url, labels) = split_labels(spec.trim());
        let url = normalize_url(url).map_err(|r| bad(&r))?;
        let mut node = NodeSpec {
            url,
            name: None,
            colo: None,
        };
        for (key, value) in labels.map_err(|r| bad(&r))? {
            match key {
                "colo" => node.colo = Some(value.to_string()),
                "name" => node.name = Some(value.to_string()),
                other => {
                    return Err(bad(&format!(
                        "unknown label `{other}` (expected colo, name)"
                    )))
                }
            }
        }
        Ok(node)
    }

    /// The node's identity: its name, else the URL's authority (`host:port`).
    pub fn id(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match reqwest::Url::parse(&self.url) {
            // `host_str` keeps an IPv6 address's brackets.
            Ok(u) => match (u.host_str(), u.port_or_known_default()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                _ => self.url.clone(),
            },
            Err(_) => self.url.clone(),
        }
    }
}

/// A DNS name whose addresses are nodes (e.g. a Kubernetes headless service).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSpec {
    /// `http` or `https`.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    pub colo: Option<String>,
}

impl DnsSpec {
    /// Parses `[http://]NAME:PORT[@colo=X]`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: &str| Error::DnsSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (target, labels) = split_labels(spec.trim());
        let (scheme, rest) = match target.split_once("://") {
            Some((s @ ("http" | "https"), rest)) => (s, rest),
            Some((s, _)) => return Err(bad(&format!("scheme `{s}` is not http or https"))),
            None => ("http", target),
        };
        let (host, port) = rest
            .trim_end_matches('/')
            .rsplit_once(':')
            .ok_or_else(|| bad("expected NAME:PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad(&format!("port `{port}` is not a number from 1 to 65535")))?;
        if host.is_empty() || port == 0 {
            return Err(bad("expected NAME:PORT"));
        }
        let mut dns = DnsSpec {
            scheme: scheme.to_string(),
            host: host.trim_matches(['[', ']']).to_string(),
            port,
            colo: None,
        };
        for (key, value) in labels.map_err(|r| bad(&r))? {
            match key {
                "colo" => dns.colo = Some(value.to_string()),
                other => return Err(bad(&format!("unknown label `{other}` (expected colo)"))),
            }
        }
        Ok(dns)
    }

    /// The node at one resolved address.
    pub fn node(&self, addr: SocketAddr) -> NodeSpec {
        NodeSpec {
            url: format!("{}://{addr}", self.scheme),
            name: None,
            colo: self.colo.clone(),
        }
    }
}

type Labels<'a> = std::result::Result<Vec<(&'a str, &'a str)>, String>;

/// Splits `target@k=v,k=v`; an `@` not followed by labels stays in the target.
fn split_labels(spec: &str) -> (&str, Labels<'_>) {
    let Some((target, labels)) = spec.rsplit_once('@') else {
        return (spec, Ok(Vec::new()));
    };
    if !labels.contains('=') {
        return (spec, Ok(Vec::new()));
    }
    let parsed = labels
        .split(',')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                Ok((k.trim(), v.trim()))
            }
            _ => Err(format!("label `{kv}` is not key=value")),
        })
        .collect();
    (target, parsed)
}

/// `http(s)://host[:port][/prefix]` without a trailing slash.
fn normalize_url(url: &str) -> std::result::Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not http or https", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("the URL may not have a query or fragment".into());
    }
    Ok(parsed.as_str().trim_end_matches('/').to_string())
}

/// The central OpenAI-compatible server that takes what no node can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Base URL; request paths are appended (a base ending in `/v1` is not doubled).
    pub url: String,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
}

impl Upstream {
    pub fn new(url: &str, api_key: Option<String>) -> Result<Self> {
        let url = normalize_url(url.trim()).map_err(|reason| Error::Setting {
            name: "upstream".into(),
            reason,
        })?;
        Ok(Self { url, api_key })
    }

    /// The upstream URL for a request path such as `/v1/chat/completions?x=1`.
    pub fn url_for(&self, path_and_query: &str) -> String {
        match (
            self.url.strip_suffix("/v1"),
            path_and_query.strip_prefix("/v1/"),
        ) {
            (Some(_), Some(rest)) => format!("{}/{rest}", self.url),
            _ => format!("{}{path_and_query}", self.url),
        }
    }
}

/// Everything the router runs with.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    pub addr: SocketAddr,
    /// Nodes given on the command line (fixed for the process's life).
    pub nodes: Vec<NodeSpec>,
    /// DNS names given on the command line, re-resolved every `discovery_interval`.
    pub dns: Vec<DnsSpec>,
    /// A TOML file whose `nodes` and `dns` are re-read every `discovery_interval`.
    pub config_file: Option<PathBuf>,
    /// Default shard size `k`.
    pub replicas: usize,
    /// Shard size per model (canonical name), overriding `replicas`.
    pub model_replicas: BTreeMap<String, usize>,
    /// Bounded loads: no node holds more than `ceil(load_factor * placements / nodes)`.
    pub load_factor: f64,
    /// Ring points per node.
    pub vnodes: u32,
    /// Most nodes one request is tried on.
    pub max_attempts: usize,
    pub health_interval: Duration,
    pub discovery_interval: Duration,
    pub connect_timeout: Duration,
    /// Longest silence while reading a node's response before it counts as failed.
    pub idle_timeout: Duration,
    /// First ejection after a passive failure; doubles per consecutive failure.
    pub eject_base: Duration,
    pub eject_max: Duration,
    pub upstream: Option<Upstream>,
    /// Keys clients must send; none means the router's API is open.
    pub api_keys: Vec<String>,
    /// Key sent to nodes (instead of the client's `Authorization`).
    pub node_api_key: Option<String>,
    /// Requests and tokens per minute per client key, enforced here for every node
    /// (nodes behind the router then need no limits of their own).
    pub rate_limits: kiln_guard::RateLimits,
    /// Model of requests that name none [default: the first model of the first node].
    pub default_model: Option<String>,
    pub body_limit: usize,
    /// Request head and body deadlines, and the cap on client connections.
    pub limits: ConnectionLimits,
    /// Browser origins allowed to call the router (CORS); none by default.
    pub cors: CorsPolicy,
    pub shutdown_timeout: Duration,
    /// Where the inference events and rollups are kept (`observe.sqlite3`); in memory only without one.
    pub data_dir: Option<PathBuf>,
    pub observe: kiln_observe::ObserverConfig,
    /// Edge classifications under this top-class confidence are re-run on the upstream.
    pub escalate_below: Option<f64>,
    /// The routing rules at start; with a `config_file`, its `[[rules]]` replace them
    /// whenever the file changes ([`crate::reload`]).
    pub rules: Rules,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            nodes: Vec::new(),
            dns: Vec::new(),
            config_file: None,
            replicas: 2,
            model_replicas: BTreeMap::new(),
            load_factor: 1.25,
            vnodes: 160,
            max_attempts: 3,
            health_interval: Duration::from_secs(2),
            discovery_interval: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(300),
            eject_base: Duration::from_secs(1),
            eject_max: Duration::from_secs(30),
            upstream: None,
            api_keys: Vec::new(),
            node_api_key: None,
            rate_limits: kiln_guard::RateLimits::default(),
            default_model: None,
            body_limit: 4 << 20,
            limits: ConnectionLimits::default(),
            cors: CorsPolicy::default(),
            shutdown_timeout: Duration::from_secs(30),
            data_dir: None,
            observe: kiln_observe::ObserverConfig::default(),
            escalate_below: None,
            rules: Rules::default(),
        }
    }
}

impl RouterConfig {
    /// Checks ranges and that there is somewhere to find nodes.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, reason: &str| {
            Err(Error::Setting {
                name: name.into(),
                reason: reason.into(),
            })
        };
        if self.nodes.is_empty() && self.dns.is_empty() && self.config_file.is_none() {
            return bad(
                "nodes",
                "no nodes: give --node URL, --dns NAME:PORT or a config file",
            );
        }
        if self.replicas == 0 || self.model_replicas.values().any(|&k| k == 0) {
            return bad("replicas", "must be at least 1");
        }
        if !(self.load_factor.is_finite() && self.load_factor >= 1.0) {
            return bad("load_factor", "must be a number >= 1.0");
        }
        if self.vnodes == 0 || self.vnodes > 4096 {
            return bad("vnodes", "must be from 1 to 4096");
        }
        if self.max_attempts == 0 {
            return bad("max_attempts", "must be at least 1");
        }
        for (name, d) in [
            ("health_interval", self.health_interval),
            ("discovery_interval", self.discovery_interval),
            ("connect_timeout", self.connect_timeout),
            ("idle_timeout", self.idle_timeout),
            ("eject_base", self.eject_base),
        ] {
            if d.is_zero() {
                return bad(name, "must be more than 0 seconds");
            }
        }
        if self.api_keys.iter().any(|k| k.trim().is_empty()) {
            return bad("api_keys", "keys must not be empty");
        }
        self.rules.check_upstream(self.upstream.is_some())
    }

    /// The shard size of `model` (canonical name).
    pub fn replicas_of(&self, model: &str) -> usize {
        self.model_replicas
            .get(model)
            .copied()
            .unwrap_or(self.replicas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_specs_with_labels() {
        let n = NodeSpec::parse("http://10.0.0.1:8000/@colo=ams,name=n1").expect("parse");
        assert_eq!(n.url, "http://10.0.0.1:8000");
        assert_eq!(n.colo.as_deref(), Some("ams"));
        assert_eq!(n.id(), "n1");
        let n = NodeSpec::parse("http://[::1]:9000").expect("parse");
        assert_eq!((n.id(), n.colo), ("[::1]:9000".to_string(), None));
        // An `@` of user info is not a label separator.
        let n = NodeSpec::parse("http://u:p@h:1").expect("parse");
        assert_eq!(n.url, "http://u:p@h:1");
        assert!(NodeSpec::parse("ftp://h:1").is_err());
        assert!(NodeSpec::parse("http://h:1@zone=x").is_err());
        assert!(NodeSpec::parse("not a url").is_err());
    }

    #[test]
    fn dns_specs() {
        let d = DnsSpec::parse("kiln-nodes.default.svc:8000@colo=fra").expect("parse");
        assert_eq!((d.host.as_str(), d.port), ("kiln-nodes.default.svc", 8000));
        assert_eq!(d.colo.as_deref(), Some("fra"));
        let node = d.node("10.1.2.3:8000".parse().expect("addr"));
        assert_eq!(node.url, "http://10.1.2.3:8000");
        assert_eq!(node.id(), "10.1.2.3:8000");
        let v6 = d.node("[fd00::1]:8000".parse().expect("addr"));
        assert_eq!(v6.url, "http://[fd00::1]:8000");
        assert!(DnsSpec::parse("no-port").is_err());
        assert!(DnsSpec::parse("h:0").is_err());
    }

    #[test]
    fn upstream_paths_do_not_double_v1() {
        let u = Upstream::new("https://api.example.com/v1/", None).expect("url");
        assert_eq!(
            u.url_for("/v1/chat/completions"),
            "https://api.example.com/v1/chat/completions"
        );
        let u = Upstream::new("http://central:8000", None).expect("url");
        assert_eq!(
            u.url_for("/ai/run/@cf/x"),
            "http://central:8000/ai/run/@cf/x"
        );
    }

    #[test]
    fn validation_names_the_setting() {
        let mut c = RouterConfig {
            nodes: vec![NodeSpec::parse("http://a:1").expect("node")],
            ..RouterConfig::default()
        };
        c.validate().expect("defaults are valid");
        c.load_factor = 0.5;
        let e = c.validate().expect_err("bad factor").to_string();
        assert!(e.contains("load_factor"), "{e}");
        assert!(RouterConfig::default().validate().is_err());
    }
}
