//! The prefix cache's disk tier in Prometheus' text format, per model.

use kiln_engine::StatsSnapshot;

use super::exposition::{counter, gauge, ModelSample};

/// Appends the disk tier's families (zero for a model without a tier).
pub(super) fn render(out: &mut String, models: &[ModelSample<'_>]) {
    type Pick = fn(&StatsSnapshot) -> f64;
    let counters: [(&str, &str, Pick); 7] = [
        (
            "kiln:kv_disk_hit_tokens_total",
            "Prompt tokens whose KV blocks were read from the disk tier instead of computed.",
            |s| s.kv_disk.hit_tokens as f64,
        ),
        (
            "kiln:kv_disk_miss_tokens_total",
            "Prompt tokens looked up in the disk tier (past the RAM cache) and not found.",
            |s| s.kv_disk.miss_tokens as f64,
        ),
        (
            "kiln:kv_disk_read_bytes_total",
            "Bytes of KV blocks read from the disk tier.",
            |s| s.kv_disk.read_bytes as f64,
        ),
        (
            "kiln:kv_disk_written_bytes_total",
            "Bytes of KV block files written to the disk tier.",
            |s| s.kv_disk.written_bytes as f64,
        ),
        (
            "kiln:kv_disk_bad_blocks_total",
            "Block files that failed their checks (torn, corrupt or foreign); deleted, never used.",
            |s| s.kv_disk.bad_blocks as f64,
        ),
        (
            "kiln:kv_disk_skipped_blocks_total",
            "Blocks not written because the disk writer was behind or failed.",
            |s| s.kv_disk.skipped_blocks as f64,
        ),
        (
            "kiln:kv_disk_saved_seconds_total",
            "Forward-pass time the disk tier's hits saved (estimated at the mean per-token time of prefill steps).",
            |s| s.kv_disk.saved_time.as_secs_f64(),
        ),
    ];
    let values = |pick: Pick| -> Vec<_> {
        models
            .iter()
            .map(|m| (m, m.engine.as_ref().map_or(0.0, pick)))
            .collect()
    };
    for (name, help, pick) in counters {
        counter(out, name, help, &values(pick));
    }
    gauge(
        out,
        "kiln:kv_disk_stored_bytes",
        "Bytes of KV block files the disk tier holds.",
        &values(|s| s.kv_disk.stored_bytes as f64),
    );
}
