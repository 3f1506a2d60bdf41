//! The engine's periodic stats line (vLLM's "Avg generation throughput ..." log): what a
//! node did over the last interval, speculative decoding's acceptance included, at info
//! level and only for intervals in which something ran.

use std::time::{Duration, Instant};

use crate::stats::{EngineStats, StatsSnapshot};

/// How often the line is written while the engine works.
const INTERVAL: Duration = Duration::from_secs(10);

pub(crate) struct StatsLog {
    since: Instant,
    last: StatsSnapshot,
}

impl StatsLog {
    pub(crate) fn new(stats: &EngineStats) -> Self {
        Self {
            since: Instant::now(),
            last: stats.snapshot(),
        }
    }

    /// Logs the interval's figures once it is over (called after every step).
    pub(crate) fn tick(&mut self, stats: &EngineStats) {
        let elapsed = self.since.elapsed();
        if elapsed < INTERVAL {
            return;
        }
        let now = stats.snapshot();
        let (a, b) = (&self.last, &now);
        if b.steps > a.steps {
            let secs = elapsed.as_secs_f64();
            let (drafted, accepted, drafts) = (
                b.spec_decode.draft_tokens - a.spec_decode.draft_tokens,
                b.spec_decode.accepted_tokens - a.spec_decode.accepted_tokens,
                b.spec_decode.drafts - a.spec_decode.drafts,
            );
            let queries = b.prefix_cache.queries - a.prefix_cache.queries;
            let hits = b.prefix_cache.hits - a.prefix_cache.hits;
            tracing::info!(
                generation_tokens_per_s = format!(
                    "{:.1}",
                    (b.generation_tokens - a.generation_tokens) as f64 / secs
                ),
                batched_tokens_per_s =
                    format!("{:.1}", (b.batched_tokens - a.batched_tokens) as f64 / secs),
                running = b.num_running,
                waiting = b.num_waiting,
                kv_cache_usage = format!("{:.1}%", b.kv_usage * 100.0),
                prefix_cache_hit_rate = format!("{:.1}%", ratio(hits, queries) * 100.0),
                draft_acceptance_rate = format!("{:.1}%", ratio(accepted, drafted) * 100.0),
                mean_acceptance_length = format!("{:.2}", 1.0 + ratio(accepted, drafts)),
                "engine stats"
            );
        }
        self.since = Instant::now();
        self.last = now;
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
