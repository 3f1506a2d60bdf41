//! What the firewall does with a verdict: off, log, or block below an injection
//! threshold or on listed PII categories; one policy for the server, and overrides per
//! API key.

use std::collections::{BTreeSet, HashMap};

use crate::pii::PiiCategory;
use crate::verdict::Verdict;

/// `--firewall off|log|block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Nothing is scored (the default: edge-first, no surprise cost).
    #[default]
    Off,
    /// Scored and recorded; nothing is refused.
    Log,
    /// Refused with 403 `prompt_blocked` when the policy says so.
    Block,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "log" => Some(Self::Log),
            "block" => Some(Self::Block),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Log => "log",
            Self::Block => "block",
        }
    }
}

/// Which turns of a conversation are scored for injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Turns {
    /// The last user turn (what the caller just sent).
    #[default]
    LastUser,
    /// Every user-supplied turn (user messages and tool results).
    All,
}

/// The default block message.
pub const BLOCK_MESSAGE: &str = "This request was blocked by the server's prompt firewall.";

/// The default injection threshold: below it, a prompt is blocked.
pub const INJECTION_THRESHOLD: u8 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// Blocked when the injection score is below this (1 to 99).
    pub injection_threshold: u8,
    /// Blocked when one of these is found.
    pub block_pii: BTreeSet<PiiCategory>,
    pub message: String,
    pub turns: Turns,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            injection_threshold: INJECTION_THRESHOLD,
            block_pii: BTreeSet::new(),
            message: BLOCK_MESSAGE.into(),
            turns: Turns::LastUser,
        }
    }
}

/// Why a prompt was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockReason {
    Injection { score: u8 },
    Pii { categories: Vec<PiiCategory> },
}

impl BlockReason {
    /// The label of blocks-by-reason metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Injection { .. } => "injection",
            Self::Pii { .. } => "pii",
        }
    }
}

impl Policy {
    /// Whether `v` is refused under this policy (only in block mode).
    pub fn decide(&self, v: &Verdict) -> Option<BlockReason> {
        if self.mode != Mode::Block {
            return None;
        }
        if let Some(score) = v.injection_score.filter(|s| *s < self.injection_threshold) {
            return Some(BlockReason::Injection { score });
        }
        let hit: Vec<PiiCategory> = v.pii.intersection(&self.block_pii).copied().collect();
        (!hit.is_empty()).then_some(BlockReason::Pii { categories: hit })
    }
}

/// The server's policy and the keys that override it (by key id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policies {
    pub default: Policy,
    pub per_key: HashMap<String, Policy>,
}

impl Policies {
    pub fn for_key(&self, key_id: &str) -> &Policy {
        self.per_key.get(key_id).unwrap_or(&self.default)
    }

    /// Whether any key's requests are scored.
    pub fn any_on(&self) -> bool {
        self.default.mode != Mode::Off || self.per_key.values().any(|p| p.mode != Mode::Off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(threshold: u8, pii: &[PiiCategory]) -> Policy {
        Policy {
            mode: Mode::Block,
            injection_threshold: threshold,
            block_pii: pii.iter().copied().collect(),
            ..Policy::default()
        }
    }

    #[test]
    fn block_mode_refuses_low_scores_and_listed_pii() {
        let risky = Verdict {
            injection_score: Some(5),
            pii: BTreeSet::new(),
        };
        let safe = Verdict {
            injection_score: Some(90),
            pii: [PiiCategory::EmailAddress].into(),
        };
        let p = block(20, &[PiiCategory::CreditCard]);
        assert_eq!(p.decide(&risky), Some(BlockReason::Injection { score: 5 }));
        assert_eq!(p.decide(&safe), None, "email is not listed");
        let p = block(20, &[PiiCategory::EmailAddress]);
        assert_eq!(p.decide(&safe).map(|r| r.label()), Some("pii"));
        let log = Policy {
            mode: Mode::Log,
            ..block(99, &[PiiCategory::EmailAddress])
        };
        assert_eq!(log.decide(&risky), None, "log mode never refuses");
        assert_eq!(
            block(20, &[]).decide(&Verdict {
                injection_score: Some(20),
                ..Verdict::default()
            }),
            None
        );
    }

    #[test]
    fn keys_override_the_default() {
        let mut ps = Policies::default();
        assert!(!ps.any_on());
        ps.per_key.insert("key_a".into(), block(50, &[]));
        assert!(ps.any_on());
        assert_eq!(ps.for_key("key_a").injection_threshold, 50);
        assert_eq!(ps.for_key("key_b").mode, Mode::Off);
    }
}
