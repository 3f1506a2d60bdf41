//! Requests and tokens per minute per API key, as token buckets: a bucket holds up to
//! a minute's allowance and refills continuously. A request takes one request from its
//! key's bucket; tokens are taken when the response's usage is known, so a request is
//! admitted while its key's token bucket is above zero and may take it below (the next
//! requests then wait for the refill). The state answers OpenAI's `x-ratelimit-*`
//! headers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One key's allowance; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
}

impl RateLimits {
    pub fn is_unlimited(&self) -> bool {
        self.requests_per_minute.is_none() && self.tokens_per_minute.is_none()
    }
}

/// A bucket's state for the headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    pub limit: u64,
    /// Whole units left (never below zero here).
    pub remaining: u64,
    /// Until the bucket is full again.
    pub reset: Duration,
}

/// What an admitted request's headers say.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateStatus {
    pub requests: Option<BucketState>,
    pub tokens: Option<BucketState>,
}

impl RateStatus {
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers for the
    /// limits the key has, as names and values.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(6);
        let families = [
            (
                self.requests,
                [
                    "x-ratelimit-limit-requests",
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-reset-requests",
                ],
            ),
            (
                self.tokens,
                [
                    "x-ratelimit-limit-tokens",
                    "x-ratelimit-remaining-tokens",
                    "x-ratelimit-reset-tokens",
                ],
            ),
        ];
        for (bucket, [limit, remaining, reset]) in families {
            let Some(b) = bucket else { continue };
            out.push((limit, b.limit.to_string()));
            out.push((remaining, b.remaining.to_string()));
            out.push((reset, reset_text(b.reset)));
        }
        out
    }
}

/// A refused request: which limit, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limited {
    pub what: &'static str,
    pub limit: u64,
    pub retry_after: Duration,
    pub status: RateStatus,
}

impl Limited {
    /// What a client is told.
    pub fn message(&self) -> String {
        format!(
            "rate limit reached for {}: {} per minute for this API key; retry in {}",
            self.what,
            self.limit,
            reset_text(self.retry_after)
        )
    }

    /// Whole seconds for `Retry-After` (rounded up).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil() as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(limit: u64, now: Instant) -> Self {
        Self {
            level: limit as f64,
            at: now,
        }
    }

    fn refill(&mut self, limit: u64, now: Instant) {
        let per_sec = limit as f64 / 60.0;
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + dt * per_sec).min(limit as f64);
        self.at = now;
    }

    /// Time until the level reaches `target`.
    fn until(&self, limit: u64, target: f64) -> Duration {
        let per_sec = limit as f64 / 60.0;
        if self.level >= target || per_sec <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((target - self.level) / per_sec)
    }

    fn state(&self, limit: u64) -> BucketState {
        BucketState {
            limit,
            remaining: self.level.max(0.0).floor() as u64,
            reset: self.until(limit, limit as f64),
        }
    }
}

#[derive(Debug, Default)]
struct KeyBuckets {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// Every key's buckets.
#[derive(Debug, Default)]
pub struct Limiter {
    default: RateLimits,
    per_key: HashMap<String, RateLimits>,
    state: Mutex<HashMap<String, KeyBuckets>>,
}

impl Limiter {
    pub fn new(default: RateLimits, per_key: HashMap<String, RateLimits>) -> Self {
        Self {
            default,
            per_key,
            state: Mutex::new(HashMap::new()),
        }
    }

    pub fn limits(&self, key_id: &str) -> RateLimits {
        self.per_key.get(key_id).copied().unwrap_or(self.default)
    }

    /// Whether any key is limited.
    pub fn any(&self) -> bool {
        !self.default.is_unlimited() || self.per_key.values().any(|l| !l.is_unlimited())
    }

    /// Takes one request from `key_id`'s bucket, or says when to come back.
    pub fn admit(&self, key_id: &str) -> Result<RateStatus, Limited> {
        self.admit_at(key_id, Instant::now())
    }

    pub fn admit_at(&self, key_id: &str, now: Instant) -> Result<RateStatus, Limited> {
        let limits = self.limits(key_id);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let b = state.entry(key_id.to_string()).or_default();
        let mut status = RateStatus::default();
        let tokens = limits.tokens_per_minute.map(|limit| {
            let t = b.tokens.get_or_insert_with(|| Bucket::full(limit, now));
            t.refill(limit, now);
            (limit, *t)
        });
        if let Some((limit, t)) = tokens {
            status.tokens = Some(t.state(limit));
        }
        if let Some(limit) = limits.requests_per_minute {
            let r = b.requests.get_or_insert_with(|| Bucket::full(limit, now));
            r.refill(limit, now);
            if r.level < 1.0 {
                status.requests = Some(r.state(limit));
                return Err(Limited {
                    what: "requests",
                    limit,
                    retry_after: r.until(limit, 1.0),
                    status,
                });
            }
        }
        if let Some((limit, t)) = tokens {
            if t.level <= 0.0 {
                if let Some(r) = b.requests.as_ref() {
                    status.requests = limits.requests_per_minute.map(|l| r.state(l));
                }
                return Err(Limited {
                    what: "tokens",
                    limit,
                    retry_after: t.until(limit, 1.0),
                    status,
                });
            }
        }
        if let (Some(limit), Some(r)) = (limits.requests_per_minute, b.requests.as_mut()) {
            r.level -= 1.0;
            status.requests = Some(r.state(limit));
        }
        Ok(status)
    }

    /// Takes the tokens a response used from `key_id`'s bucket.
    pub fn consume_tokens(&self, key_id: &str, tokens: u64) {
        let Some(limit) = self.limits(key_id).tokens_per_minute else {
            return;
        };
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let t = state
            .entry(key_id.to_string())
            .or_default()
            .tokens
            .get_or_insert_with(|| Bucket::full(limit, now));
        t.refill(limit, now);
        t.level -= tokens as f64;
    }
}

/// A duration as OpenAI writes resets: `250ms`, `1.5s`, `6m0s`.
pub fn reset_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        let s = format!("{secs:.3}");
        return format!("{}s", s.trim_end_matches('0').trim_end_matches('.'));
    }
    let whole = d.as_secs();
    format!("{}m{}s", whole / 60, whole % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rpm: Option<u64>, tpm: Option<u64>) -> Limiter {
        Limiter::new(
            RateLimits {
                requests_per_minute: rpm,
                tokens_per_minute: tpm,
            },
            HashMap::new(),
        )
    }

    #[test]
    fn requests_per_minute_refill_continuously() {
        let l = limiter(Some(2), None);
        let t0 = Instant::now();
        let s = l.admit_at("k", t0).expect("first");
        assert_eq!(s.requests.map(|r| r.remaining), Some(1));
        l.admit_at("k", t0).expect("second");
        let e = l.admit_at("k", t0).expect_err("third");
        assert_eq!((e.what, e.limit), ("requests", 2));
        assert_eq!(
            e.retry_after,
            Duration::from_secs(30),
            "one request per 30 s"
        );
        l.admit_at("k", t0 + Duration::from_secs(30))
            .expect("refilled one");
        assert!(l.admit_at("other", t0).is_ok(), "keys are apart");
    }

    #[test]
    fn tokens_are_taken_after_the_fact() {
        let l = limiter(None, Some(600));
        let t0 = Instant::now();
        l.admit_at("k", t0).expect("admitted");
        l.consume_tokens("k", 700);
        let e = l.admit_at("k", Instant::now()).expect_err("in debt");
        assert_eq!(e.what, "tokens");
        // 101 tokens short at 10 tokens a second.
        assert!(
            e.retry_after > Duration::from_secs(9) && e.retry_after < Duration::from_secs(11),
            "{:?}",
            e.retry_after
        );
    }

    #[test]
    fn unlimited_keys_and_overrides() {
        let mut per_key = HashMap::new();
        per_key.insert(
            "vip".to_string(),
            RateLimits {
                requests_per_minute: Some(1),
                tokens_per_minute: None,
            },
        );
        let l = Limiter::new(RateLimits::default(), per_key);
        assert!(l.any());
        for _ in 0..100 {
            assert_eq!(l.admit("anyone").expect("unlimited"), RateStatus::default());
        }
        l.admit("vip").expect("one");
        assert!(l.admit("vip").is_err());
    }

    #[test]
    fn resets_read_like_openais() {
        assert_eq!(reset_text(Duration::from_millis(250)), "250ms");
        assert_eq!(reset_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(reset_text(Duration::from_secs(2)), "2s");
        assert_eq!(reset_text(Duration::from_secs(360)), "6m0s");
    }
}
