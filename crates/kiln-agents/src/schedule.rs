//! When a schedule runs: after a delay, at a time, or on a cron pattern (UTC); and how
//! long to wait before retrying a failed run.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use croner::Cron;
use kiln_api::agents::ScheduleRequest;
use rand::Rng;

use crate::error::{AgentError, Result};

/// Failed runs of one firing before a one-shot schedule is dropped (a cron schedule
/// moves on to its next time).
pub const MAX_ATTEMPTS: u32 = 8;

/// How a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    Delayed,
    Scheduled,
    Cron(String),
}

impl When {
    pub fn kind(&self) -> &'static str {
        match self {
            When::Delayed => "delayed",
            When::Scheduled => "scheduled",
            When::Cron(_) => "cron",
        }
    }
}

/// The schedule `req` asks for, and its first run time (unix seconds), from `now`.
pub fn parse(req: &ScheduleRequest, now: u64) -> Result<(When, u64)> {
    match (req.delay_seconds, req.at.as_deref(), req.cron.as_deref()) {
        (Some(d), None, None) => {
            if !(d.is_finite() && (0.0..=366.0 * 86_400.0).contains(&d)) {
                return Err(AgentError::invalid(
                    "delay_seconds",
                    "`delay_seconds` must be a number of seconds from 0 to a year",
                ));
            }
            Ok((When::Delayed, now + d.ceil() as u64))
        }
        (None, Some(at), None) => {
            let t = DateTime::parse_from_rfc3339(at).map_err(|e| {
                AgentError::invalid("at", format!("`at` must be an RFC 3339 time: {e}"))
            })?;
            Ok((When::Scheduled, u64::try_from(t.timestamp()).unwrap_or(0)))
        }
        (None, None, Some(pattern)) => {
            let next = next_cron(pattern, now)?;
            Ok((When::Cron(pattern.to_string()), next))
        }
        _ => Err(AgentError::invalid(
            "delay_seconds",
            "give exactly one of `delay_seconds`, `at` (RFC 3339) or `cron`",
        )),
    }
}

/// The first time after `now` that `pattern` matches.
pub fn next_cron(pattern: &str, now: u64) -> Result<u64> {
    let cron = Cron::from_str(pattern).map_err(|e| {
        AgentError::invalid("cron", format!("invalid cron pattern '{pattern}': {e}"))
    })?;
    let from = Utc
        .timestamp_opt(i64::try_from(now).unwrap_or(i64::MAX), 0)
        .single()
        .ok_or_else(|| AgentError::invalid("cron", "the clock is out of range"))?;
    let next = cron.find_next_occurrence(&from, false).map_err(|e| {
        AgentError::invalid("cron", format!("cron pattern '{pattern}' never fires: {e}"))
    })?;
    Ok(u64::try_from(next.timestamp()).unwrap_or(0))
}

/// Seconds before retry `attempt` (1-based): 5 s doubling to at most 10 minutes,
/// jittered by ±25% so many agents failing together don't retry together.
pub fn backoff(attempt: u32) -> u64 {
    let base = 5u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(7))
        .min(600);
    let jitter = rand::rng().random_range(0.75..1.25);
    ((base as f64) * jitter).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(delay: Option<f64>, at: Option<&str>, cron: Option<&str>) -> ScheduleRequest {
        ScheduleRequest {
            input: json!("hi"),
            delay_seconds: delay,
            at: at.map(str::to_string),
            cron: cron.map(str::to_string),
        }
    }

    #[test]
    fn each_kind_parses_and_bad_ones_are_named() {
        assert_eq!(
            parse(&req(Some(2.5), None, None), 100).expect("delay"),
            (When::Delayed, 103)
        );
        let (w, t) = parse(&req(None, Some("2030-01-01T00:00:00Z"), None), 0).expect("at");
        assert_eq!((w, t), (When::Scheduled, 1_893_456_000));
        // Every minute: the next minute boundary after 90 s is 120 s.
        let (w, t) = parse(&req(None, None, Some("* * * * *")), 90).expect("cron");
        assert_eq!((w, t), (When::Cron("* * * * *".into()), 120));
        let e = parse(&req(None, None, Some("61 * * * *")), 0).expect_err("bad cron");
        assert!(
            matches!(e, AgentError::Invalid { ref param, .. } if param == "cron"),
            "{e}"
        );
        assert!(parse(&req(Some(1.0), None, Some("* * * * *")), 0).is_err());
        assert!(parse(&req(None, Some("tomorrow"), None), 0).is_err());
        assert!(parse(&req(Some(-1.0), None, None), 0).is_err());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!((4..=7).contains(&backoff(1)), "{}", backoff(1));
        assert!(backoff(4) >= 30);
        assert!(backoff(30) <= 750);
    }
}
