//! The router's TOML config file ([`FileConfig`]): every setting optional, the nodes
//! in either form, the upstream, per-model settings and the routing rules (checked
//! into a [`Rules`] table by [`FileConfig::rules`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_http::HttpSettings;
use serde::Deserialize;

use crate::config::{DnsSpec, NodeSpec};
use crate::error::{Error, Result};
use crate::rules::{RuleEntry, Rules};

/// A node in the file: `"URL@colo=X"` or `{ url, colo, name }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NodeEntry {
    Spec(String),
    Table {
        url: String,
        #[serde(default)]
        colo: Option<String>,
        #[serde(default)]
        name: Option<String>,
    },
}

impl NodeEntry {
    pub fn to_spec(&self) -> Result<NodeSpec> {
        match self {
            NodeEntry::Spec(s) => NodeSpec::parse(s),
            NodeEntry::Table { url, colo, name } => {
                let mut spec = NodeSpec::parse(url)?;
                spec.colo = colo.clone().or(spec.colo);
                spec.name = name.clone().or(spec.name);
                Ok(spec)
            }
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEntry {
    pub url: String,
    #[serde(default)]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    #[serde(default)]
    pub replicas: Option<usize>,
}

/// The TOML file: every setting optional (durations in seconds).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub nodes: Option<Vec<NodeEntry>>,
    pub dns: Option<Vec<String>>,
    pub replicas: Option<usize>,
    pub load_factor: Option<f64>,
    pub vnodes: Option<u32>,
    pub max_attempts: Option<usize>,
    pub health_interval: Option<f64>,
    pub discovery_interval: Option<f64>,
    pub connect_timeout: Option<f64>,
    pub idle_timeout: Option<f64>,
    pub shutdown_timeout: Option<f64>,
    pub upstream: Option<UpstreamEntry>,
    pub api_keys: Option<Vec<String>>,
    pub node_api_key: Option<String>,
    pub rate_limit_rpm: Option<u64>,
    pub rate_limit_tpm: Option<u64>,
    pub default_model: Option<String>,
    pub max_body_size: Option<ByteSize>,
    pub data_dir: Option<PathBuf>,
    pub escalate_below: Option<f64>,
    pub models: Option<BTreeMap<String, ModelEntry>>,
    /// Connection limits and CORS.
    pub http: Option<HttpSettings>,
    /// Routing rules, first match wins (re-read while the router runs).
    pub rules: Option<Vec<RuleEntry>>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|message| Error::ConfigParse {
            path: path.to_path_buf(),
            message,
        })
    }

    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim().to_string())
    }

    /// The file's nodes and DNS names, parsed.
    pub fn membership(&self) -> Result<(Vec<NodeSpec>, Vec<DnsSpec>)> {
        let nodes = self
            .nodes
            .iter()
            .flatten()
            .map(NodeEntry::to_spec)
            .collect::<Result<_>>()?;
        let dns = self
            .dns
            .iter()
            .flatten()
            .map(|d| DnsSpec::parse(d))
            .collect::<Result<_>>()?;
        Ok((nodes, dns))
    }

    /// The file's routing rules, checked (an empty table without `[[rules]]`).
    pub fn rules(&self) -> Result<Rules> {
        Rules::new(self.rules.as_deref().unwrap_or_default())
    }
}

/// A byte count: a number, or a string such as `"4MiB"`, `"512KiB"`, `"1GB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{s}` is not a size such as 4MiB or 1048576"))?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            other => return Err(format!("unknown size unit `{other}` in `{s}`")),
        };
        n.checked_mul(scale)
            .map(ByteSize)
            .ok_or_else(|| format!("`{s}` is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Seconds from a setting, checked.
pub fn seconds(name: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| Error::Setting {
        name: name.into(),
        reason: format!("{secs} is not a number of seconds >= 0"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_config_parses_both_node_forms_and_rejects_unknown_keys() {
        let f = FileConfig::parse(
            r#"
            replicas = 3
            nodes = ["http://a:1@colo=ams", { url = "http://b:2", colo = "fra", name = "b" }]
            dns = ["svc:8000@colo=ams"]
            [upstream]
            url = "http://central:8000"
            [models."qwen2.5-coder-0.5b-instruct"]
            replicas = 1
            "#,
        )
        .expect("parse");
        let (nodes, dns) = f.membership().expect("membership");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].id(), "b");
        assert_eq!(nodes[1].colo.as_deref(), Some("fra"));
        assert_eq!(dns[0].port, 8000);
        let err = FileConfig::parse("replica = 3").expect_err("unknown key");
        assert!(err.contains("replica"), "{err}");
        assert!(f.rules().expect("no rules").is_empty());
    }

    #[test]
    fn rules_tables_are_read_and_checked() {
        let text = r#"
            [upstream]
            url = "http://central:8000"
            [[rules]]
            name = "long-prompts"
            min_prompt_tokens = 2000
            route = "central"
            "#;
        let rules = FileConfig::parse(text)
            .expect("parse")
            .rules()
            .expect("valid");
        assert_eq!(rules.len(), 1);
        let dup = format!("{text}\n[[rules]]\nname = \"long-prompts\"\nroute = \"edge\"");
        let e = FileConfig::parse(&dup)
            .expect("parse")
            .rules()
            .expect_err("duplicate");
        assert!(e.to_string().contains("#2 `long-prompts`"), "{e}");
    }

    #[test]
    fn sizes() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("4MiB"), Ok(4 << 20));
        assert_eq!(p("1000"), Ok(1000));
        assert_eq!(p("2 kb"), Ok(2000));
        assert!(p("4XB").is_err() && p("MiB").is_err());
        let f = FileConfig::parse("max_body_size = \"1KiB\"").expect("parse");
        assert_eq!(f.max_body_size, Some(ByteSize(1024)));
    }

    #[test]
    fn http_table() {
        let f =
            FileConfig::parse("[http]\nbody_timeout = 5\ncors_origins = [\"*\"]").expect("parse");
        let http = f.http.expect("[http]");
        assert_eq!(http.body_timeout, Some(5.0));
        assert_eq!(http.cors_origins.as_deref(), Some(&["*".to_string()][..]));
        assert!(FileConfig::parse("[http]\nmax_conections = 5").is_err());
    }
}
