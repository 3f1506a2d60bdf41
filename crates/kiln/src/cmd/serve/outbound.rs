//! `--outbound-allow`, the config file's `outbound_allow` and each API key's own: the
//! exceptions to the outbound policy that every server-side fetch (MCP today) obeys.

use std::collections::HashMap;

use anyhow::Context;
use kiln_mcp::McpSettings;
use kiln_outbound::{Exception, OutboundPolicy};

use super::config::{FileConfig, KeyEntry};

/// The server's MCP settings, and those of the keys that add exceptions of their own
/// (by key id). Flags replace the file's list, as every other flag does.
pub fn mcp_settings(
    flags: &[String],
    file: &FileConfig,
) -> anyhow::Result<(McpSettings, HashMap<String, McpSettings>)> {
    let entries = if flags.is_empty() {
        file.outbound_allow.clone().unwrap_or_default()
    } else {
        flags.to_vec()
    };
    let node =
        OutboundPolicy::new(parse(&entries, "--outbound-allow")?).context("--outbound-allow")?;
    let mut per_key = HashMap::new();
    for entry in file.api_keys.iter().flatten() {
        let KeyEntry::Table(t) = entry else { continue };
        let Some(own) = &t.outbound_allow else {
            continue;
        };
        let id = kiln_api::key_id(&t.key);
        let at = format!(
            "api_keys entry {}: outbound_allow",
            t.label.as_deref().unwrap_or(&id)
        );
        let policy = node
            .with_exceptions(&parse(own, &at)?)
            .with_context(|| at.clone())?;
        per_key.insert(id, settings(policy));
    }
    Ok((settings(node), per_key))
}

fn settings(outbound: OutboundPolicy) -> McpSettings {
    McpSettings {
        outbound,
        ..McpSettings::default()
    }
}

fn parse(entries: &[String], at: &str) -> anyhow::Result<Vec<Exception>> {
    entries
        .iter()
        .map(|e| Exception::parse(e).with_context(|| at.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_file_and_keys_build_their_policies() {
        let file: FileConfig = toml::from_str(
            "outbound_allow = [\"10.0.0.0/8\"]\n\
             api_keys = [\"plain\", { key = \"k2\", outbound_allow = [\"127.0.0.1\"] }]",
        )
        .expect("config");
        let (node, keys) = mcp_settings(&[], &file).expect("settings");
        let ip = |s: &str| s.parse().expect("ip");
        assert!(node.outbound.check_ip("x", ip("10.1.1.1")).is_ok());
        assert!(node.outbound.check_ip("x", ip("127.0.0.1")).is_err());
        let k2 = &keys[&kiln_api::key_id("k2")];
        assert!(k2.outbound.check_ip("x", ip("127.0.0.1")).is_ok());
        assert!(k2.outbound.check_ip("x", ip("10.1.1.1")).is_ok());
        assert_eq!(keys.len(), 1);

        let (flagged, _) = mcp_settings(&["192.168.0.0/16".into()], &file).expect("flags");
        assert!(flagged.outbound.check_ip("x", ip("10.1.1.1")).is_err());
        assert!(flagged.outbound.check_ip("x", ip("192.168.3.4")).is_ok());

        let err = mcp_settings(&["10.0.0.0/40".into()], &file).expect_err("bad cidr");
        assert!(format!("{err:#}").contains("--outbound-allow"), "{err:#}");
    }
}
