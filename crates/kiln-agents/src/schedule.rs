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

/// Furthest ahead a schedule may first run: a year (and a day for leap years).
pub const MAX_AHEAD_S: u64 = 366 * 86_400;

/// How far in the past an `at` time may be (clock skew between client and server); it
/// then runs at once.
pub const AT_SKEW_S: u64 = 60;

/// Occurrences of a cron pattern checked against the minimum interval: enough to see
/// every gap of a pattern that fires in bursts (`0,1 * * * *`) within its hour.
const CRON_GAPS_CHECKED: usize = 64;

/// Bounds on what one agent's schedules may ask for, so no client can make the server
/// run turns without pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleLimits {
    /// Shortest time between two runs of a repeating (cron) schedule, in seconds. A
    /// one-shot schedule runs once, so it is bounded by `max_per_agent` instead.
    pub min_interval_s: u64,
    /// Schedules one agent may have pending.
    pub max_per_agent: usize,
}

impl Default for ScheduleLimits {
    fn default() -> Self {
        Self {
            min_interval_s: 60,
            max_per_agent: 100,
        }
    }
}

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
pub fn parse(req: &ScheduleRequest, now: u64, limits: &ScheduleLimits) -> Result<(When, u64)> {
    match (req.delay_seconds, req.at.as_deref(), req.cron.as_deref()) {
        (Some(d), None, None) => {
            if !(d.is_finite() && (0.0..=MAX_AHEAD_S as f64).contains(&d)) {
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
            let t = t.timestamp();
            let (earliest, latest) = (now.saturating_sub(AT_SKEW_S), now + MAX_AHEAD_S);
            match u64::try_from(t) {
                Ok(t) if (earliest..=latest).contains(&t) => Ok((When::Scheduled, t.max(now))),
                _ => Err(AgentError::invalid(
                    "at",
                    format!(
                        "`at` must be between now (less {AT_SKEW_S} s of clock skew) and a \
                         year from now, as `delay_seconds` is; '{at}' is not"
                    ),
                )),
            }
        }
        (None, None, Some(pattern)) => {
            let cron = cron_pattern(pattern)?;
            let next = next_after(&cron, pattern, now)?;
            check_interval(&cron, pattern, next, limits.min_interval_s)?;
            Ok((When::Cron(pattern.to_string()), next))
        }
        _ => Err(AgentError::invalid(
            "delay_seconds",
            "give exactly one of `delay_seconds`, `at` (RFC 3339) or `cron`",
        )),
    }
}

/// A five-field UTC cron pattern (minute, hour, day of month, month, day of week).
/// Patterns with seconds or years (six or seven fields) are refused: the parser would
/// take them, and `* * * * * *` would run a turn every second.
fn cron_pattern(pattern: &str) -> Result<Cron> {
    let fields = pattern.split_whitespace().count();
    if fields != 5 {
        return Err(AgentError::invalid(
            "cron",
            format!(
                "`cron` must have exactly five fields (minute hour day-of-month month \
                 day-of-week, UTC); '{pattern}' has {fields}"
            ),
        ));
    }
    Cron::from_str(pattern)
        .map_err(|e| AgentError::invalid("cron", format!("invalid cron pattern '{pattern}': {e}")))
}

/// Refuses a pattern two of whose next runs come closer than `min_s` seconds.
fn check_interval(cron: &Cron, pattern: &str, first: u64, min_s: u64) -> Result<()> {
    let mut last = first;
    for _ in 0..CRON_GAPS_CHECKED {
        let Ok(next) = next_after(cron, pattern, last) else {
            return Ok(()); // fires no more: no interval to keep
        };
        if next - last < min_s {
            return Err(AgentError::invalid(
                "cron",
                format!(
                    "cron pattern '{pattern}' runs {} s apart; schedules may run at most \
                     once every {min_s} s",
                    next - last
                ),
            ));
        }
        last = next;
    }
    Ok(())
}

/// The first time after `now` that `pattern` matches.
pub fn next_cron(pattern: &str, now: u64) -> Result<u64> {
    next_after(&cron_pattern(pattern)?, pattern, now)
}

fn next_after(cron: &Cron, pattern: &str, now: u64) -> Result<u64> {
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

    fn parse(r: &ScheduleRequest, now: u64) -> Result<(When, u64)> {
        super::parse(r, now, &ScheduleLimits::default())
    }

    fn refused(r: Result<(When, u64)>, field: &str) -> String {
        match r {
            Err(AgentError::Invalid { param, message }) if param == field => message,
            other => panic!("expected a 400 on {field}, got {other:?}"),
        }
    }

    /// 2029-12-31T00:00:00Z, a day before the `at` below.
    const NOW: u64 = 1_893_369_600;

    #[test]
    fn each_kind_parses_and_bad_ones_are_named() {
        assert_eq!(
            parse(&req(Some(2.5), None, None), 100).expect("delay"),
            (When::Delayed, 103)
        );
        let (w, t) = parse(&req(None, Some("2030-01-01T00:00:00Z"), None), NOW).expect("at");
        assert_eq!((w, t), (When::Scheduled, 1_893_456_000));
        // Every minute: the next minute boundary after 90 s is 120 s.
        let (w, t) = parse(&req(None, None, Some("* * * * *")), 90).expect("cron");
        assert_eq!((w, t), (When::Cron("* * * * *".into()), 120));
        refused(parse(&req(None, None, Some("61 * * * *")), 0), "cron");
        assert!(parse(&req(Some(1.0), None, Some("* * * * *")), 0).is_err());
        refused(parse(&req(None, Some("tomorrow"), None), 0), "at");
        refused(parse(&req(Some(-1.0), None, None), 0), "delay_seconds");
    }

    #[test]
    fn cron_has_exactly_five_fields() {
        for pattern in ["* * * * * *", "0 * * * * * 2030", "* * * *", "@hourly"] {
            let message = refused(parse(&req(None, None, Some(pattern)), NOW), "cron");
            assert!(message.contains("five fields"), "{pattern}: {message}");
        }
        assert!(parse(&req(None, None, Some("30 4 * * 1-5")), NOW).is_ok());
    }

    #[test]
    fn cron_keeps_the_minimum_interval() {
        let limits = ScheduleLimits {
            min_interval_s: 300,
            ..ScheduleLimits::default()
        };
        let with = |p: &str| super::parse(&req(None, None, Some(p)), NOW, &limits);
        let message = refused(with("* * * * *"), "cron");
        assert!(
            message.contains("60 s apart") && message.contains("300 s"),
            "{message}"
        );
        // Bursts are seen too: two runs a minute apart, once an hour.
        refused(with("0,1 * * * *"), "cron");
        assert!(with("*/5 * * * *").is_ok());
        assert!(with("0 3 * * *").is_ok());
        // The default allows once a minute.
        assert!(parse(&req(None, None, Some("* * * * *")), NOW).is_ok());
    }

    #[test]
    fn at_is_bounded_like_delay_seconds() {
        let message = refused(
            parse(&req(None, Some("9999-12-31T23:59:59Z"), None), NOW),
            "at",
        );
        assert!(message.contains("a year"), "{message}");
        refused(
            parse(&req(None, Some("2020-01-01T00:00:00Z"), None), NOW),
            "at",
        );
        refused(
            parse(&req(None, Some("1969-01-01T00:00:00Z"), None), NOW),
            "at",
        );
        // A few seconds in the past is clock skew: it runs at once.
        let (_, t) = parse(&req(None, Some("2029-12-30T23:59:30Z"), None), NOW).expect("skew");
        assert_eq!(t, NOW);
        refused(
            parse(&req(Some(367.0 * 86_400.0), None, None), NOW),
            "delay_seconds",
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!((4..=7).contains(&backoff(1)), "{}", backoff(1));
        assert!(backoff(4) >= 30);
        assert!(backoff(30) <= 750);
    }
}
