//! A daily neuron quota per API key (Workers AI's free-tier model): a key may use so
//! many neurons per UTC day. What a key used today comes from the usage store, so a
//! restart does not reset it; this is the rule and the day's arithmetic.

use std::collections::HashMap;
use std::time::Duration;

const DAY_SECS: u64 = 86_400;

/// The UTC day `unix_secs` falls in (days since 1970-01-01).
pub fn day_of(unix_secs: u64) -> u64 {
    unix_secs / DAY_SECS
}

/// Time until the next UTC midnight.
pub fn until_tomorrow(unix_secs: u64) -> Duration {
    Duration::from_secs(DAY_SECS - unix_secs % DAY_SECS)
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quota {
    /// Neurons per key per day; `None`: no quota.
    pub default: Option<f64>,
    pub per_key: HashMap<String, f64>,
}

/// A key over its quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverQuota {
    pub limit: f64,
    pub used: f64,
    pub retry_after: Duration,
}

impl Quota {
    pub fn limit(&self, key_id: &str) -> Option<f64> {
        self.per_key.get(key_id).copied().or(self.default)
    }

    pub fn any(&self) -> bool {
        self.default.is_some() || !self.per_key.is_empty()
    }

    /// Whether a key that used `used` neurons today may make a request at `unix_secs`.
    pub fn check(&self, key_id: &str, used: f64, unix_secs: u64) -> Result<(), OverQuota> {
        match self.limit(key_id) {
            Some(limit) if used >= limit => Err(OverQuota {
                limit,
                used,
                retry_after: until_tomorrow(unix_secs),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_over_its_quota_waits_for_midnight() {
        let q = Quota {
            default: Some(100.0),
            per_key: [("big".to_string(), 1000.0)].into(),
        };
        let noon = 20_000 * DAY_SECS + 12 * 3600;
        assert!(q.check("k", 99.9, noon).is_ok());
        let e = q.check("k", 100.0, noon).expect_err("over");
        assert_eq!(e.retry_after, Duration::from_secs(12 * 3600));
        assert!(q.check("big", 500.0, noon).is_ok());
        assert!(Quota::default().check("k", 1e12, noon).is_ok());
        assert_eq!(day_of(noon), 20_000);
    }
}
