//! `kiln serve --config PATH`: the TOML file, and sizes such as `"512MiB"`.
//!
//! Every key is optional and has the same meaning as the flag of the same name; flags
//! (and their environment variables) override the file.
//!
//! ```toml
//! host = "127.0.0.1"
//! port = 8000
//! # A name, or a table to pin the model (loaded at start, never unloaded).
//! models = ["smollm2-135m-instruct", { name = "gemma3-270m", pin = true }]
//! models_memory = "8GiB"
//! # A key, or a table giving the label its usage is reported under.
//! api_keys = ["sk-local-1", { key = "sk-team-a", label = "team-a" }]
//! admin_keys = ["sk-admin"]
//! usage_db = "/var/lib/kiln/usage.sqlite3"
//! data_dir = "/var/lib/kiln/data"
//! kv_cache_memory = "2GiB"
//! kv_disk_size = "8GiB"   # the prefix cache on disk, per model; 0: off
//! max_num_seqs = 64
//! max_num_batched_tokens = 512
//! max_model_len = 4096
//! speculative = "auto"   # or "off"
//! max_queued = 1024
//! shutdown_timeout = 30
//! max_body_size = "4MiB"
//! # Loopback/private/link-local addresses MCP servers may have (none by default);
//! # an api_keys table may add its own `outbound_allow`.
//! outbound_allow = ["mcp.internal", "10.20.0.0/16"]
//! # LoRA adapters: directories of adapter subdirectories, named ones, cache size.
//! lora_dirs = ["/var/lib/kiln/adapters"]
//! loras = { support-bot = "/srv/adapters/support-bot" }
//! max_loras = 8
//! # Where the node runs (`--colo`), with optional coordinates for the router's map.
//! colo = { name = "ams", lat = 52.31, lon = 4.76 }
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use kiln_http::HttpSettings;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub models: Option<Vec<ModelEntry>>,
    pub models_memory: Option<Size>,
    pub api_keys: Option<Vec<KeyEntry>>,
    pub admin_keys: Option<Vec<String>>,
    pub metrics_keys: Option<Vec<String>>,
    pub usage_db: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub max_stored_responses: Option<u64>,
    /// Seconds (`--agent-min-interval`).
    pub agent_min_interval: Option<u64>,
    pub agent_max_schedules: Option<usize>,
    /// Hosts or CIDR networks server-side fetches may reach (`--outbound-allow`).
    pub outbound_allow: Option<Vec<String>>,
    pub max_file_size: Option<Size>,
    /// Seconds.
    pub upload_timeout: Option<f64>,
    pub batch_concurrency: Option<usize>,
    pub vector_max_dimensions: Option<usize>,
    pub vector_max_top_k: Option<usize>,
    pub vector_max_metadata_bytes: Option<usize>,
    pub qdrant_url: Option<String>,
    pub qdrant_api_key: Option<String>,
    pub firewall: Option<super::guard::FirewallFile>,
    pub rate_limit_rpm: Option<u64>,
    pub rate_limit_tpm: Option<u64>,
    pub daily_neuron_quota: Option<f64>,
    pub response_cache: Option<super::guard::CacheFile>,
    pub batch_step_tokens: Option<usize>,
    pub kv_cache_memory: Option<Size>,
    pub kv_disk_size: Option<Size>,
    /// `f16`, `f32` or `q8_0`.
    pub kv_cache_dtype: Option<String>,
    pub max_num_seqs: Option<usize>,
    pub max_num_batched_tokens: Option<usize>,
    pub max_model_len: Option<usize>,
    pub speculative: Option<Speculative>,
    pub max_queued: Option<usize>,
    /// Seconds.
    pub shutdown_timeout: Option<f64>,
    pub max_body_size: Option<Size>,
    pub lora_dirs: Option<Vec<PathBuf>>,
    pub loras: Option<std::collections::BTreeMap<String, PathBuf>>,
    pub max_loras: Option<usize>,
    /// Connection limits and CORS.
    pub http: Option<HttpSettings>,
    /// Where the node runs (`--colo`): a name, or `{ name, lat, lon }`.
    pub colo: Option<ColoEntry>,
}

/// `colo = "ams"` or `colo = { name = "ams", lat = 52.31, lon = 4.76 }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ColoEntry {
    Name(String),
    Table {
        name: String,
        lat: Option<f64>,
        lon: Option<f64>,
    },
}

/// Longest colo name: it is a header value and a Prometheus label at the router.
const MAX_COLO_LEN: usize = 32;

/// The node's colo: the flag's name (with the file's coordinates if the file names the
/// same colo), else the file's.
pub fn colo(
    flag: Option<String>,
    file: Option<ColoEntry>,
) -> anyhow::Result<Option<kiln_server::Colo>> {
    let (file_name, lat, lon) = match file {
        None => (None, None, None),
        Some(ColoEntry::Name(n)) => (Some(n), None, None),
        Some(ColoEntry::Table { name, lat, lon }) => (Some(name), lat, lon),
    };
    let Some(name) = flag.clone().or(file_name.clone()) else {
        return Ok(None);
    };
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= MAX_COLO_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "invalid colo `{name}`: expected 1 to {MAX_COLO_LEN} letters, digits, `-` or `_`"
    );
    let same = file_name.as_deref() == Some(name.as_str());
    let (lat, lon) = if same { (lat, lon) } else { (None, None) };
    anyhow::ensure!(
        lat.is_none_or(|v| (-90.0..=90.0).contains(&v))
            && lon.is_none_or(|v| (-180.0..=180.0).contains(&v)),
        "invalid colo coordinates: lat must be within ±90 and lon within ±180"
    );
    Ok(Some(kiln_server::Colo { name, lat, lon }))
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
    }
}

/// `--speculative`: whether engines verify drafts from the sequences' own tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Speculative {
    Auto,
    Off,
}

impl From<Speculative> for kiln_engine::SpecMode {
    fn from(s: Speculative) -> Self {
        match s {
            Speculative::Auto => kiln_engine::SpecMode::Auto,
            Speculative::Off => kiln_engine::SpecMode::Off,
        }
    }
}

/// One entry of `models`: a name, or `{ name = "...", pin = true }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ModelEntry {
    Name(String),
    Table(ModelTable),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    name: String,
    #[serde(default)]
    pin: bool,
}

impl ModelEntry {
    pub fn name(&self) -> &str {
        match self {
            ModelEntry::Name(n) | ModelEntry::Table(ModelTable { name: n, .. }) => n,
        }
    }

    pub fn pin(&self) -> bool {
        matches!(self, ModelEntry::Table(ModelTable { pin: true, .. }))
    }
}

/// One entry of `api_keys`: a key, or `{ key = "...", label = "..." }` with this key's
/// limits and firewall overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KeyEntry {
    Key(String),
    Table(KeyTable),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyTable {
    pub key: String,
    pub label: Option<String>,
    /// This key's limits and firewall, over the server's.
    pub rate_limit_rpm: Option<u64>,
    pub rate_limit_tpm: Option<u64>,
    pub daily_neuron_quota: Option<f64>,
    pub firewall: Option<super::guard::FirewallFile>,
    /// Outbound exceptions for this key's server-side fetches, on top of the server's.
    pub outbound_allow: Option<Vec<String>>,
}

impl KeyEntry {
    pub fn into_parts(self) -> (String, Option<String>) {
        match self {
            KeyEntry::Key(k) => (k, None),
            KeyEntry::Table(KeyTable { key, label, .. }) => (key, label),
        }
    }
}

/// A size in bytes: an integer, or a string such as `"512MiB"`, `"2GiB"`, `"1.5G"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SizeRepr")]
pub struct Size(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Str(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = String;
    fn try_from(r: SizeRepr) -> Result<Self, String> {
        match r {
            SizeRepr::Int(n) => Ok(Size(n)),
            SizeRepr::Str(s) => parse_size(&s).map(Size),
        }
    }
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(Size)
    }
}

/// Parses `"4096"`, `"512MiB"`, `"2GiB"`, `"2G"` (binary: K/M/G/T and KiB... are powers of
/// 1024) or `"500MB"` (decimal: KB/MB/GB/TB are powers of 1000).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| {
        format!("invalid size {s:?}: expected a number with an optional unit such as MiB or GiB")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => return Err(format!("invalid size {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
    };
    let bytes = num * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
    }

    #[test]
    fn file_keys_and_typos() {
        let c: FileConfig = toml::from_str(
            "port = 9000\nmodels = [\"smollm2\"]\nkv_cache_memory = \"2GiB\"\nmax_body_size = 1024\napi_keys = [\"a\"]",
        )
        .expect("valid");
        assert_eq!(c.port, Some(9000));
        assert_eq!(c.kv_cache_memory, Some(Size(2 << 30)));
        assert_eq!(c.max_body_size, Some(Size(1024)));
        assert_eq!(
            c.models.as_deref(),
            Some(&[ModelEntry::Name("smollm2".into())][..])
        );
        let typo = toml::from_str::<FileConfig>("max_num_seq = 4").expect_err("unknown key");
        assert!(typo.to_string().contains("max_num_seq"), "{typo}");
    }

    #[test]
    fn pinned_models_and_labelled_keys() {
        let c: FileConfig = toml::from_str(
            "models = [\"a\", { name = \"b\", pin = true }, { name = \"c\" }]\n\
             api_keys = [\"k1\", { key = \"k2\", label = \"team\" }]\n\
             admin_keys = [\"adm\"]\nmodels_memory = \"1GiB\"\nusage_db = \"u.db\"\ndata_dir = \"d\"",
        )
        .expect("valid");
        let models = c.models.expect("models");
        let pins: Vec<(&str, bool)> = models.iter().map(|m| (m.name(), m.pin())).collect();
        assert_eq!(pins, [("a", false), ("b", true), ("c", false)]);
        let keys: Vec<_> = c
            .api_keys
            .expect("keys")
            .into_iter()
            .map(KeyEntry::into_parts)
            .collect();
        assert_eq!(
            keys,
            [("k1".into(), None), ("k2".into(), Some("team".into()))]
        );
        assert_eq!(c.models_memory, Some(Size(1 << 30)));
        assert_eq!(c.usage_db.as_deref(), Some(Path::new("u.db")));
        assert_eq!(c.data_dir.as_deref(), Some(Path::new("d")));
        let bad = toml::from_str::<FileConfig>("models = [{ name = \"a\", pinned = true }]");
        assert!(bad.is_err(), "a misspelt model key is an error");
    }

    #[test]
    fn http_table_and_metrics_keys() {
        let c: FileConfig = toml::from_str(
            "metrics_keys = [\"mk\"]\n[http]\nheader_timeout = 5\nbody_timeout = 60.5\n\
             max_connections = 100\ncors_origins = [\"https://app.example\"]",
        )
        .expect("valid");
        assert_eq!(c.metrics_keys.as_deref(), Some(&["mk".to_string()][..]));
        let http = c.http.expect("[http]");
        assert_eq!(
            (http.header_timeout, http.body_timeout),
            (Some(5.0), Some(60.5))
        );
        assert_eq!(http.max_connections, Some(100));
        let typo = toml::from_str::<FileConfig>("[http]\nbody_timout = 5");
        assert!(typo.is_err(), "a misspelt [http] key is an error");
    }
}
