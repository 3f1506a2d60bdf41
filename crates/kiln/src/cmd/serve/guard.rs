//! `kiln serve`'s gates: the prompt firewall (`--firewall`, `[firewall]`), rate limits
//! and the daily neuron quota (`--rate-limit-*`, `--daily-neuron-quota`), the response
//! cache (`--response-cache`, `[response_cache]`), and per-key overrides of each in the
//! config file's `api_keys` tables.
//!
//! The firewall is off unless something configures it; configured without a mode, it
//! logs.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kiln_guard::{Mode, PiiCategory, Policies, Policy, Quota, RateLimits, Turns};
use kiln_server::{CacheSettings, GuardSettings};
use serde::Deserialize;

use super::config::{FileConfig, KeyEntry, Size};

#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The prompt firewall in front of chat, completions, responses and /ai/run: off,
    /// log (score and record) or block (refuse with 403) [default: off, or log when
    /// anything else configures it]
    #[arg(long, value_name = "MODE", env = "KILN_FIREWALL")]
    firewall: Option<String>,

    /// In block mode, refuse prompts whose injection score (1 riskiest to 99) is below
    /// this [default: 20]
    #[arg(long, value_name = "1-99")]
    firewall_injection_threshold: Option<u8>,

    /// In block mode, refuse prompts holding this PII category (EMAIL_ADDRESS,
    /// PHONE_NUMBER, CREDIT_CARD, IBAN_CODE, US_SSN, IP_ADDRESS, API_KEY); repeatable
    #[arg(long = "firewall-block-pii", value_name = "CATEGORY")]
    firewall_block_pii: Vec<String>,

    /// The message of a blocked request's 403
    #[arg(long, value_name = "TEXT")]
    firewall_message: Option<String>,

    /// Which turns are scored: the last user turn, or all user-supplied ones
    /// [default: last]
    #[arg(long, value_name = "last|all")]
    firewall_turns: Option<String>,

    /// Requests per minute per API key on the routes that run a model
    #[arg(long, value_name = "N")]
    rate_limit_rpm: Option<u64>,

    /// Tokens (prompt and completion) per minute per API key
    #[arg(long, value_name = "N")]
    rate_limit_tpm: Option<u64>,

    /// Neurons per API key per UTC day; kept in the usage store, so restarts don't
    /// reset it
    #[arg(long, value_name = "NEURONS")]
    daily_neuron_quota: Option<f64>,

    /// Answer repeated deterministic requests (temperature 0 or a seed; embeddings)
    /// from memory
    #[arg(long)]
    response_cache: bool,

    /// How long a cached answer is kept [default: 300]
    #[arg(long, value_name = "SECONDS")]
    response_cache_ttl: Option<f64>,

    /// Memory the cache may hold [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    response_cache_memory: Option<Size>,
}

/// `[firewall]`, and the `firewall` table of a key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallFile {
    pub mode: Option<String>,
    pub injection_threshold: Option<u8>,
    pub block_pii: Option<Vec<String>>,
    pub message: Option<String>,
    pub turns: Option<String>,
}

/// `[response_cache]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFile {
    pub enabled: Option<bool>,
    /// Seconds.
    pub ttl: Option<f64>,
    pub memory: Option<Size>,
}

const DEFAULT_CACHE_TTL_S: f64 = 300.0;
const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

pub fn settings(args: &GuardArgs, file: &FileConfig) -> anyhow::Result<GuardSettings> {
    let table = file.firewall.clone().unwrap_or_default();
    let flags = FirewallFile {
        mode: args.firewall.clone(),
        injection_threshold: args.firewall_injection_threshold,
        block_pii: (!args.firewall_block_pii.is_empty()).then(|| args.firewall_block_pii.clone()),
        message: args.firewall_message.clone(),
        turns: args.firewall_turns.clone(),
    };
    let configured = file.firewall.is_some()
        || flags.injection_threshold.is_some()
        || flags.block_pii.is_some()
        || flags.message.is_some()
        || flags.turns.is_some();
    let base = Policy {
        mode: if configured { Mode::Log } else { Mode::Off },
        ..Policy::default()
    };
    let default =
        policy(&base, &table, "[firewall]").and_then(|p| policy(&p, &flags, "--firewall"))?;
    let mut firewall = Policies {
        default,
        per_key: HashMap::new(),
    };
    let rate_limits = RateLimits {
        requests_per_minute: positive(
            args.rate_limit_rpm.or(file.rate_limit_rpm),
            "--rate-limit-rpm",
        )?,
        tokens_per_minute: positive(
            args.rate_limit_tpm.or(file.rate_limit_tpm),
            "--rate-limit-tpm",
        )?,
    };
    let mut quota = Quota {
        default: quota_value(
            args.daily_neuron_quota.or(file.daily_neuron_quota),
            "--daily-neuron-quota",
        )?,
        per_key: HashMap::new(),
    };
    let mut key_rate_limits = HashMap::new();
    for entry in file.api_keys.iter().flatten() {
        let KeyEntry::Table(t) = entry else { continue };
        let id = kiln_api::key_id(&t.key);
        let at = format!("api_keys entry {}", t.label.as_deref().unwrap_or(&id));
        if let Some(fw) = &t.firewall {
            let mut base = firewall.default.clone();
            if base.mode == Mode::Off && fw.mode.is_none() {
                base.mode = Mode::Log;
            }
            firewall.per_key.insert(id.clone(), policy(&base, fw, &at)?);
        }
        if t.rate_limit_rpm.is_some() || t.rate_limit_tpm.is_some() {
            key_rate_limits.insert(
                id.clone(),
                RateLimits {
                    requests_per_minute: positive(t.rate_limit_rpm, &at)?
                        .or(rate_limits.requests_per_minute),
                    tokens_per_minute: positive(t.rate_limit_tpm, &at)?
                        .or(rate_limits.tokens_per_minute),
                },
            );
        }
        if let Some(q) = quota_value(t.daily_neuron_quota, &at)? {
            quota.per_key.insert(id, q);
        }
    }
    let cache_file = file.response_cache.clone().unwrap_or_default();
    let cache_on =
        args.response_cache || cache_file.enabled.unwrap_or(file.response_cache.is_some());
    let cache = if cache_on {
        let ttl = args
            .response_cache_ttl
            .or(cache_file.ttl)
            .unwrap_or(DEFAULT_CACHE_TTL_S);
        anyhow::ensure!(
            ttl.is_finite() && ttl > 0.0,
            "--response-cache-ttl must be a positive number of seconds"
        );
        let bytes = args
            .response_cache_memory
            .or(cache_file.memory)
            .map_or(DEFAULT_CACHE_BYTES, |s| s.0);
        anyhow::ensure!(bytes > 0, "--response-cache-memory must be more than 0");
        Some(CacheSettings {
            ttl: Duration::from_secs_f64(ttl),
            max_bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
        })
    } else {
        None
    };
    Ok(GuardSettings {
        firewall,
        rate_limits,
        key_rate_limits,
        quota,
        cache,
    })
}

/// `base` with what `f` sets, checked (`at` says where, for the error).
fn policy(base: &Policy, f: &FirewallFile, at: &str) -> anyhow::Result<Policy> {
    let mut p = base.clone();
    if let Some(m) = &f.mode {
        p.mode = Mode::parse(m).ok_or_else(|| {
            anyhow::anyhow!("{at}: the firewall mode must be off, log or block, not {m:?}")
        })?;
    }
    if let Some(t) = f.injection_threshold {
        anyhow::ensure!(
            (1..=99).contains(&t),
            "{at}: the injection threshold must be 1 to 99, not {t}"
        );
        p.injection_threshold = t;
    }
    if let Some(list) = &f.block_pii {
        p.block_pii = list
            .iter()
            .map(|c| {
                PiiCategory::parse(c).ok_or_else(|| {
                    let known: Vec<&str> = PiiCategory::ALL.iter().map(|c| c.as_str()).collect();
                    anyhow::anyhow!("{at}: unknown PII category {c:?}; use {}", known.join(", "))
                })
            })
            .collect::<anyhow::Result<BTreeSet<_>>>()?;
    }
    if let Some(m) = &f.message {
        anyhow::ensure!(
            !m.trim().is_empty(),
            "{at}: the block message must not be empty"
        );
        p.message.clone_from(m);
    }
    if let Some(t) = &f.turns {
        p.turns = match t.as_str() {
            "last" => Turns::LastUser,
            "all" => Turns::All,
            other => anyhow::bail!("{at}: the firewall turns must be last or all, not {other:?}"),
        };
    }
    Ok(p)
}

fn positive(v: Option<u64>, what: &str) -> anyhow::Result<Option<u64>> {
    anyhow::ensure!(v != Some(0), "{what}: a rate limit must be at least 1");
    Ok(v)
}

fn quota_value(v: Option<f64>, what: &str) -> anyhow::Result<Option<f64>> {
    if let Some(q) = v {
        anyhow::ensure!(
            q.is_finite() && q > 0.0,
            "{what}: the daily neuron quota must be a positive number"
        );
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        guard: GuardArgs,
    }

    fn parse(flags: &[&str], toml_text: &str) -> anyhow::Result<GuardSettings> {
        let cli = Cli::try_parse_from(std::iter::once("kiln").chain(flags.iter().copied()))?;
        let file: FileConfig = toml::from_str(toml_text)?;
        settings(&cli.guard, &file)
    }

    #[test]
    fn the_firewall_is_off_unless_configured_and_logs_when_it_is() {
        let s = parse(&[], "").expect("defaults");
        assert_eq!(s.firewall.default.mode, Mode::Off);
        assert!(s.cache.is_none() && s.rate_limits.is_unlimited() && !s.quota.any());
        let s = parse(&[], "[firewall]\nblock_pii = [\"credit_card\"]").expect("table");
        assert_eq!(s.firewall.default.mode, Mode::Log);
        let s = parse(&["--firewall-injection-threshold", "30"], "").expect("flag");
        assert_eq!(
            (
                s.firewall.default.mode,
                s.firewall.default.injection_threshold
            ),
            (Mode::Log, 30)
        );
        let s = parse(
            &["--firewall", "block", "--firewall-block-pii", "US_SSN"],
            "[firewall]\nmode = \"log\"",
        )
        .expect("flags win");
        assert_eq!(s.firewall.default.mode, Mode::Block);
        assert!(s.firewall.default.block_pii.contains(&PiiCategory::UsSsn));
    }

    #[test]
    fn keys_override_firewall_limits_and_quota() {
        let s = parse(
            &["--rate-limit-rpm", "60", "--daily-neuron-quota", "1000"],
            "api_keys = [\"plain\", { key = \"k\", label = \"team\", rate_limit_tpm = 500, daily_neuron_quota = 5,\n\
             firewall = { mode = \"block\", injection_threshold = 40 } }]\n[response_cache]\nttl = 10",
        )
        .expect("valid");
        let id = kiln_api::key_id("k");
        let p = s.firewall.for_key(&id);
        assert_eq!((p.mode, p.injection_threshold), (Mode::Block, 40));
        assert_eq!(s.firewall.for_key("other").mode, Mode::Off);
        let l = s.key_rate_limits[&id];
        assert_eq!(
            (l.requests_per_minute, l.tokens_per_minute),
            (Some(60), Some(500))
        );
        assert_eq!(s.quota.limit(&id), Some(5.0));
        assert_eq!(s.quota.limit("other"), Some(1000.0));
        assert_eq!(s.cache.map(|c| c.ttl), Some(Duration::from_secs(10)));
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        for (flags, file, says) in [
            (&["--firewall", "loud"][..], "", "off, log or block"),
            (
                &["--firewall-block-pii", "NAME"][..],
                "",
                "unknown PII category \"NAME\"",
            ),
            (&["--firewall-injection-threshold", "0"][..], "", "1 to 99"),
            (&["--rate-limit-rpm", "0"][..], "", "at least 1"),
            (&["--daily-neuron-quota=-3"][..], "", "positive"),
            (&[][..], "[firewall]\nturns = \"some\"", "last or all"),
            (
                &[][..],
                "api_keys = [{ key = \"k\", firewall = { mode = \"deny\" } }]",
                "api_keys entry",
            ),
        ] {
            let e = parse(flags, file).expect_err("refused");
            assert!(format!("{e:#}").contains(says), "{flags:?} {file}: {e:#}");
        }
        assert!(
            toml::from_str::<FileConfig>("[firewall]\nmodes = \"log\"").is_err(),
            "typos refused"
        );
    }
}
