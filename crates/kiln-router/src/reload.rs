//! Hot reload of the routing rules: the config file is read once a second
//! ([`INTERVAL`]) and, when its bytes changed, its `[[rules]]` are checked and put in
//! force whole, for the requests that arrive from then on.
//!
//! A changed file that cannot be read, parsed or checked keeps the rules in force: a
//! warning names the error and `kiln_router:config_reload_errors_total` counts it once
//! per distinct content, so a bad edit never takes routing down and is not reported
//! every second. Only the rules are applied this way; the file's nodes and DNS names
//! are re-read by discovery, and every other setting needs a restart. Comparing bytes
//! rather than modification times also catches a rewrite within the file system's
//! time granularity and a Kubernetes ConfigMap's symlink swap.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use crate::config_file::FileConfig;
use crate::health;
use crate::state::RouterState;

/// How often the file is read.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// What one look at the file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Same bytes as last time, or rules equal to those in force.
    Unchanged,
    /// A new table of this many rules is in force.
    Applied(usize),
    /// The file changed but its rules were refused; the old ones stay.
    Refused(String),
}

/// Watches one config file for a router.
pub struct Reloader {
    path: PathBuf,
    /// The bytes last looked at, or the read error last reported.
    last: Option<Result<Vec<u8>, String>>,
}

impl Reloader {
    pub fn new(path: PathBuf) -> Self {
        Self { path, last: None }
    }

    /// Reads the file and, if it changed, puts its rules in force on `state`.
    pub fn check(&mut self, state: &RouterState) -> Outcome {
        let read = std::fs::read(&self.path).map_err(|e| e.to_string());
        if self.last.as_ref() == Some(&read) {
            return Outcome::Unchanged;
        }
        let outcome = match &read {
            Ok(bytes) => self.apply(state, bytes),
            Err(e) => Outcome::Refused(format!("cannot read it: {e}")),
        };
        self.last = Some(read);
        match &outcome {
            Outcome::Applied(n) => {
                state.metrics().config_reloads.inc();
                tracing::info!(path = %self.path.display(), rules = n, "routing rules reloaded");
            }
            Outcome::Refused(why) => {
                state.metrics().config_reload_errors.inc();
                tracing::warn!(
                    path = %self.path.display(),
                    "keeping the routing rules in force: {why}"
                );
            }
            Outcome::Unchanged => {}
        }
        outcome
    }

    fn apply(&self, state: &RouterState, bytes: &[u8]) -> Outcome {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Outcome::Refused("the file is not UTF-8".into());
        };
        let rules = FileConfig::parse(text)
            .map_err(|e| format!("invalid TOML: {e}"))
            .and_then(|f| f.rules().map_err(|e| e.to_string()))
            .and_then(|r| {
                let has_upstream = state.config().upstream.is_some();
                r.check_upstream(has_upstream).map_err(|e| e.to_string())?;
                Ok(r)
            });
        match rules {
            // An edit elsewhere in the file (or the first look, at start) leaves the
            // rules as they are: nothing to report.
            Ok(r) if *state.rules() == r => Outcome::Unchanged,
            Ok(r) => {
                let n = r.len();
                state.set_rules(r);
                Outcome::Applied(n)
            }
            Err(why) => Outcome::Refused(why),
        }
    }
}

/// Checks the file every [`INTERVAL`] until `stop`.
pub async fn run(state: RouterState, path: PathBuf, mut stop: watch::Receiver<bool>) {
    let mut reloader = Reloader::new(path);
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                reloader.check(&state);
            }
            () = health::stopped(&mut stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NodeSpec, RouterConfig, Upstream};

    const LONG: &str = "[[rules]]\nname = \"long\"\nmin_prompt_tokens = 100\nroute = \"central\"\n";
    const EDGE: &str = "[[rules]]\nname = \"embed\"\ntask = \"embeddings\"\nroute = \"edge\"\n";

    fn state(upstream: bool, file: &std::path::Path) -> RouterState {
        let rules = FileConfig::load(file)
            .and_then(|f| f.rules())
            .expect("start rules");
        RouterState::new(RouterConfig {
            nodes: vec![NodeSpec::parse("http://a:1").expect("node")],
            upstream: upstream.then(|| Upstream::new("http://central:1", None).expect("url")),
            config_file: Some(file.to_path_buf()),
            rules,
            ..RouterConfig::default()
        })
        .expect("state")
    }

    fn names(state: &RouterState) -> Vec<String> {
        let view = state.rules().view();
        let rules = view.as_array().cloned().unwrap_or_default();
        rules
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn a_changed_file_swaps_the_rules_and_a_bad_one_keeps_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("router.toml");
        std::fs::write(&path, LONG).expect("write");
        let state = state(true, &path);
        let mut r = Reloader::new(path.clone());
        // The first look finds the rules the router started with.
        assert_eq!(r.check(&state), Outcome::Unchanged);
        assert_eq!(names(&state), ["long"]);
        std::fs::write(&path, format!("{EDGE}{LONG}")).expect("write");
        assert_eq!(r.check(&state), Outcome::Applied(2));
        assert_eq!(names(&state), ["embed", "long"]);
        assert_eq!(r.check(&state), Outcome::Unchanged);
        // Broken TOML, then a table that fails its checks: the rules stay, each
        // reported once.
        std::fs::write(&path, "[[rules]\n").expect("write");
        assert!(matches!(r.check(&state), Outcome::Refused(e) if e.contains("invalid TOML")));
        assert_eq!(r.check(&state), Outcome::Unchanged);
        std::fs::write(&path, format!("{LONG}{LONG}")).expect("write");
        assert!(matches!(r.check(&state), Outcome::Refused(e) if e.contains("another rule")));
        assert_eq!(names(&state), ["embed", "long"]);
        assert_eq!(state.metrics().config_reload_errors.get(), 2);
        assert_eq!(state.metrics().config_reloads.get(), 1);
        // A file removed (mid-rename) keeps them too; the fixed file applies.
        std::fs::remove_file(&path).expect("rm");
        assert!(matches!(r.check(&state), Outcome::Refused(e) if e.contains("cannot read")));
        assert_eq!(r.check(&state), Outcome::Unchanged);
        std::fs::write(&path, "").expect("write");
        assert_eq!(r.check(&state), Outcome::Applied(0));
        assert!(state.rules().is_empty());
    }

    #[test]
    fn a_central_rule_without_an_upstream_is_refused_on_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("router.toml");
        std::fs::write(&path, EDGE).expect("write");
        let state = state(false, &path);
        let mut r = Reloader::new(path.clone());
        std::fs::write(&path, LONG).expect("write");
        assert!(matches!(r.check(&state), Outcome::Refused(e) if e.contains("no upstream")));
        assert_eq!(names(&state), ["embed"]);
    }
}
