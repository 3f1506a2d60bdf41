//! Retry with jittered exponential backoff, for idempotent operations only
//! (connect, `tools/list`); tool calls are never retried.

use std::{future::Future, time::Duration};

use rand::Rng;

/// No single wait exceeds this, however large `attempts` is.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// Delay before retry number `retry` (1-based): `base * 2^(retry-1)`, capped, then
/// scaled by a random factor in [0.5, 1.0] so that many clients that failed
/// together don't retry together.
pub(crate) fn backoff_delay(base: Duration, retry: u32) -> Duration {
    let exponent = retry.saturating_sub(1).min(16);
    let ceiling = base.saturating_mul(1u32 << exponent).min(MAX_DELAY);
    ceiling.mul_f64(rand::rng().random_range(0.5..=1.0))
}

/// Runs `op` up to `attempts` times (at least once) while it fails with an error
/// that `is_transient` accepts. On failure returns the last error and the number
/// of tries made.
pub(crate) async fn retry<T, E, F, Fut>(
    attempts: u32,
    base: Duration,
    mut op: F,
    is_transient: impl Fn(&E) -> bool,
) -> Result<T, (E, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let attempts = attempts.max(1);
    let mut tries = 0;
    loop {
        tries += 1;
        match op().await {
            Ok(value) => return Ok(value),
            Err(error) if tries < attempts && is_transient(&error) => {
                let delay = backoff_delay(base, tries);
                tracing::debug!(%error, try_number = tries, ?delay, "transient MCP failure, retrying");
                tokio::time::sleep(delay).await;
            }
            Err(error) => return Err((error, tries)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_grows_and_stays_within_jitter_bounds() {
        let base = Duration::from_millis(100);
        for retry in 1..=4 {
            let ceiling = base * (1 << (retry - 1));
            for _ in 0..50 {
                let d = backoff_delay(base, retry);
                assert!(d >= ceiling / 2 && d <= ceiling, "retry {retry}: {d:?}");
            }
        }
        assert!(backoff_delay(Duration::from_secs(5), 30) <= MAX_DELAY);
    }

    #[tokio::test]
    async fn stops_on_permanent_error_and_counts_tries() {
        let mut calls = 0;
        let result: Result<(), (String, u32)> = retry(
            5,
            Duration::from_millis(1),
            || {
                calls += 1;
                let n = calls;
                async move {
                    Err(if n < 3 {
                        "transient".to_owned()
                    } else {
                        "fatal".to_owned()
                    })
                }
            },
            |e: &String| e == "transient",
        )
        .await;
        assert_eq!(result, Err(("fatal".to_owned(), 3)));
    }

    #[tokio::test]
    async fn gives_up_after_attempts() {
        let result: Result<(), (&str, u32)> = retry(
            3,
            Duration::from_millis(1),
            || async { Err("down") },
            |_| true,
        )
        .await;
        assert_eq!(result, Err(("down", 3)));
    }
}
