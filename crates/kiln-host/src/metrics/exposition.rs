//! Prometheus metrics in the text exposition format, names prefixed `kiln:` with vLLM's
//! meanings (`vllm:num_requests_running` → `kiln:num_requests_running`, ...).
//!
//! A small hand-written registry rather than the `prometheus` crate: half of the values
//! are the engine's own atomics ([`kiln_engine::StatsSnapshot`]), read when scraped,
//! which that crate would need custom collectors for; the rest are a few counters and
//! fixed-bucket histograms that are a handful of atomics each. No locks on the hot path.

use std::fmt::Write;

use kiln_engine::StatsSnapshot;

use super::{Histogram, ModelMetrics};
use crate::{Host, ModelKind};

/// Every hosted model's families, loaded or not; `now` (seconds since the epoch) stamps
/// the LoRA info sample.
pub fn render_host(host: &Host, now: f64) -> String {
    let loaded: Vec<_> = host.models().iter().map(|m| (m, m.loaded())).collect();
    let adapters = host.adapters();
    let samples: Vec<ModelSample<'_>> = loaded
        .iter()
        .map(|(hosted, model)| ModelSample {
            name: &hosted.name,
            ready: model.is_some(),
            memory_bytes: hosted.charge(),
            engine: model.as_ref().and_then(|m| m.engine_stats()),
            admitted: hosted.admission.in_flight(),
            metrics: &hosted.metrics,
            lora: (hosted.kind == Some(ModelKind::Generate)).then(|| LoraSample {
                max_lora: adapters.max_loaded(),
                running: adapters.loaded(&hosted.name),
                waiting: adapters.loading(&hosted.name),
                at: now,
            }),
        })
        .collect();
    render(&samples)
}

/// One model's values at scrape time.
pub struct ModelSample<'a> {
    pub name: &'a str,
    /// Loaded and serving.
    pub ready: bool,
    /// Bytes it holds against the model memory budget (0 while unloaded).
    pub memory_bytes: u64,
    /// `None` while the model loads.
    pub engine: Option<StatsSnapshot>,
    pub admitted: usize,
    pub metrics: &'a ModelMetrics,
    /// Adapters of a text model (`None` for other models).
    pub lora: Option<LoraSample>,
}

/// A text model's LoRA adapters, as endpoint pickers read them (vLLM's
/// `lora_requests_info`).
#[derive(Debug, Clone, Default)]
pub struct LoraSample {
    /// Most adapters kept loaded.
    pub max_lora: usize,
    /// Loaded and ready.
    pub running: Vec<String>,
    /// Being loaded, with requests waiting for them.
    pub waiting: Vec<String>,
    /// Seconds since the epoch: the sample's value, so a reader can take the newest.
    pub at: f64,
}

/// Speculative decoding's counters, with vLLM's names and meanings.
fn spec_decode(out: &mut String, models: &[ModelSample<'_>]) {
    type Pick = fn(&StatsSnapshot) -> u64;
    let families: [(&str, &str, Pick); 3] = [
        (
            "kiln:spec_decode_num_drafts_total",
            "Drafts verified (one per drafting sequence per step).",
            |s| s.spec_decode.drafts,
        ),
        (
            "kiln:spec_decode_num_draft_tokens_total",
            "Draft tokens verified.",
            |s| s.spec_decode.draft_tokens,
        ),
        (
            "kiln:spec_decode_num_accepted_tokens_total",
            "Draft tokens accepted.",
            |s| s.spec_decode.accepted_tokens,
        ),
    ];
    for (name, help, pick) in families {
        let values: Vec<_> = models
            .iter()
            .map(|m| (m, m.engine.as_ref().map_or(0.0, |s| pick(s) as f64)))
            .collect();
        counter(out, name, help, &values);
    }
    let name = "kiln:spec_decode_num_accepted_tokens_per_pos_total";
    header(
        out,
        name,
        "counter",
        "Drafts whose token at each position (from 0) was accepted.",
    );
    for m in models {
        let Some(s) = &m.engine else { continue };
        for (pos, &n) in s.spec_decode.accepted_per_pos.iter().enumerate() {
            let pos = pos.to_string();
            sample(out, name, m.name, &[("position", pos.as_str())], n as f64);
        }
    }
}

/// Renders every family, one sample per model, in the text format (version 0.0.4).
pub fn render(models: &[ModelSample<'_>]) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let engine = |f: fn(&StatsSnapshot) -> f64| {
        models
            .iter()
            .map(move |m| (m, m.engine.as_ref().map_or(0.0, f)))
            .collect::<Vec<_>>()
    };
    let server =
        |f: fn(&ModelSample<'_>) -> f64| models.iter().map(move |m| (m, f(m))).collect::<Vec<_>>();

    gauge(
        &mut out,
        "kiln:num_requests_running",
        "Sequences in the engine's running batch.",
        &engine(|s| s.num_running as f64),
    );
    gauge(
        &mut out,
        "kiln:num_requests_waiting",
        "Sequences waiting in the engine's queue.",
        &engine(|s| s.num_waiting as f64),
    );
    gauge(
        &mut out,
        "kiln:kv_cache_usage_perc",
        "Share of KV-cache blocks held by live sequences (1 = 100%).",
        &engine(|s| s.kv_usage),
    );
    gauge(
        &mut out,
        "kiln:kv_cache_blocks",
        "KV-cache blocks in the pool.",
        &engine(|s| s.num_kv_blocks as f64),
    );
    gauge(
        &mut out,
        "kiln:num_requests_admitted",
        "Sequences admitted by the server and not finished (running plus queued).",
        &server(|m| m.admitted as f64),
    );
    gauge(
        &mut out,
        "kiln:model_ready",
        "1 when the model is loaded and serving.",
        &server(|m| f64::from(u8::from(m.ready))),
    );
    gauge(
        &mut out,
        "kiln:model_loaded",
        "1 while the model is in memory (0 before its first request or once unloaded).",
        &server(|m| f64::from(u8::from(m.ready))),
    );
    gauge(
        &mut out,
        "kiln:model_memory_bytes",
        "Memory the model holds against --models-memory: weights file plus KV cache \
         while loading or loaded, else 0.",
        &server(|m| m.memory_bytes as f64),
    );
    counter(
        &mut out,
        "kiln:requests_warm_total",
        "Requests whose model was already loaded when they arrived.",
        &server(|m| m.metrics.requests_warm.get() as f64),
    );
    counter(
        &mut out,
        "kiln:requests_cold_total",
        "Requests that waited for their model to load.",
        &server(|m| m.metrics.requests_cold.get() as f64),
    );
    counter(
        &mut out,
        "kiln:model_unloads_total",
        "Times the model was unloaded to make room for another.",
        &server(|m| m.metrics.unloads.get() as f64),
    );
    counter(
        &mut out,
        "kiln:model_load_failures_total",
        "Loads of the model that failed.",
        &server(|m| m.metrics.load_failures.get() as f64),
    );
    header(
        &mut out,
        "kiln:lora_requests_info",
        "gauge",
        "LoRA adapters of each text model, in vLLM's labels for endpoint pickers: loaded \
         (running_lora_adapters), being loaded (waiting_lora_adapters), most kept \
         (max_lora); the value is the scrape's Unix time.",
    );
    for m in models {
        if let Some(l) = &m.lora {
            let max = l.max_lora.to_string();
            let (running, waiting) = (l.running.join(","), l.waiting.join(","));
            let labels = [
                ("max_lora", max.as_str()),
                ("running_lora_adapters", running.as_str()),
                ("waiting_lora_adapters", waiting.as_str()),
            ];
            sample(&mut out, "kiln:lora_requests_info", m.name, &labels, l.at);
        }
    }
    counter(
        &mut out,
        "kiln:non_finite_logits_total",
        "Sequences failed because the model's logits held a NaN or an infinity.",
        &server(|m| m.metrics.non_finite.get() as f64),
    );
    counter(
        &mut out,
        "kiln:lora_adapter_loads_total",
        "LoRA adapters loaded for the model (reloads after eviction included).",
        &server(|m| m.metrics.adapter_loads.get() as f64),
    );
    counter(
        &mut out,
        "kiln:prefix_cache_queries_total",
        "Prompt tokens looked up in the prefix cache.",
        &engine(|s| s.prefix_cache.queries as f64),
    );
    counter(
        &mut out,
        "kiln:prefix_cache_hits_total",
        "Prompt tokens found in the prefix cache.",
        &engine(|s| s.prefix_cache.hits as f64),
    );
    counter(
        &mut out,
        "kiln:prompt_tokens_total",
        "Prompt tokens of admitted sequences.",
        &server(|m| m.metrics.prompt_tokens.get() as f64),
    );
    counter(
        &mut out,
        "kiln:generation_tokens_total",
        "Tokens generated.",
        &engine(|s| s.generation_tokens as f64),
    );
    counter(
        &mut out,
        "kiln:num_preemptions_total",
        "Sequences preempted for lack of KV blocks.",
        &engine(|s| s.preemptions as f64),
    );
    spec_decode(&mut out, models);
    super::kv_disk::render(&mut out, models);

    header(
        &mut out,
        "kiln:request_success_total",
        "counter",
        "Finished sequences by finish reason.",
    );
    for m in models {
        for (reason, c) in [
            ("stop", &m.metrics.success_stop),
            ("length", &m.metrics.success_length),
            ("abort", &m.metrics.success_abort),
        ] {
            sample(
                &mut out,
                "kiln:request_success_total",
                m.name,
                &[("finished_reason", reason)],
                c.get() as f64,
            );
        }
    }
    header(
        &mut out,
        "kiln:requests_rejected_total",
        "counter",
        "Requests refused with 429, by reason.",
    );
    for m in models {
        for (reason, c) in [
            ("queue_full", &m.metrics.rejected_queue_full),
            ("busy", &m.metrics.rejected_busy),
        ] {
            sample(
                &mut out,
                "kiln:requests_rejected_total",
                m.name,
                &[("reason", reason)],
                c.get() as f64,
            );
        }
    }

    type Pick = fn(&ModelMetrics) -> &Histogram;
    let hist: [(&str, &str, Pick); 7] = [
        (
            "kiln:model_load_seconds",
            "Time to load the model (weights, tokenizer, KV cache, engine thread).",
            |m| &m.model_load,
        ),
        (
            "kiln:time_to_first_token_seconds",
            "Time from arrival to the first generated token.",
            |m| &m.time_to_first_token,
        ),
        (
            "kiln:inter_token_latency_seconds",
            "Time between consecutive tokens of a sequence.",
            |m| &m.inter_token_latency,
        ),
        (
            "kiln:e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            |m| &m.e2e_request_latency,
        ),
        (
            "kiln:request_queue_time_seconds",
            "Time waiting before first being scheduled.",
            |m| &m.request_queue_time,
        ),
        (
            "kiln:request_prefill_time_seconds",
            "Time from first scheduled to the first token.",
            |m| &m.request_prefill_time,
        ),
        (
            "kiln:request_decode_time_seconds",
            "Time from the first token to the last.",
            |m| &m.request_decode_time,
        ),
    ];
    for (name, help, pick) in hist {
        header(&mut out, name, "histogram", help);
        for m in models {
            histogram(&mut out, name, m.name, pick(m.metrics));
        }
    }

    // The step loop's own costs: where host overhead comes from.
    counter(
        &mut out,
        "kiln:engine_steps_total",
        "Engine steps run.",
        &engine(|s| s.steps as f64),
    );
    counter(
        &mut out,
        "kiln:engine_batched_tokens_total",
        "Tokens run through the model (prompt and generated).",
        &engine(|s| s.batched_tokens as f64),
    );
    counter(
        &mut out,
        "kiln:engine_schedule_seconds_total",
        "Step time spent scheduling and building batches.",
        &engine(|s| s.schedule_time.as_secs_f64()),
    );
    counter(
        &mut out,
        "kiln:engine_model_seconds_total",
        "Step time spent in the model's forward pass.",
        &engine(|s| s.model_time.as_secs_f64()),
    );
    counter(
        &mut out,
        "kiln:engine_update_seconds_total",
        "Step time spent sampling and updating state.",
        &engine(|s| s.update_time.as_secs_f64()),
    );
    counter(
        &mut out,
        "kiln:constrained_sequences_total",
        "Sequences generated under a constraint (JSON schema, grammar, tool calls).",
        &engine(|s| s.constrained_seqs as f64),
    );
    counter(
        &mut out,
        "kiln:engine_mask_seconds_total",
        "Time computing constraint token masks, on a thread beside the forward pass.",
        &engine(|s| s.mask_time.as_secs_f64()),
    );
    counter(
        &mut out,
        "kiln:engine_mask_wait_seconds_total",
        "Step time spent waiting for constraint masks after the forward pass (their cost \
         to the step's critical path; part of the model time).",
        &engine(|s| s.mask_wait_time.as_secs_f64()),
    );
    // The per-step profile: where step time goes, by phase.
    let phase = "kiln:engine_phase_seconds_total";
    header(
        &mut out,
        phase,
        "counter",
        "Step time by phase: schedule, matmul, attention, norm_rope_act, sampling, update, \
         and detokenize (on the consumers' threads).",
    );
    for m in models {
        for p in m
            .engine
            .as_ref()
            .map(StatsSnapshot::profile)
            .unwrap_or_default()
        {
            sample(
                &mut out,
                phase,
                m.name,
                &[("phase", p.phase)],
                p.time.as_secs_f64(),
            );
        }
    }
    gauge(
        &mut out,
        "kiln:engine_host_overhead_ratio",
        "Share of step time spent outside the model (schedule + update) since start.",
        &engine(StatsSnapshot::host_overhead),
    );
    out
}

pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(super) fn gauge(out: &mut String, name: &str, help: &str, values: &[(&ModelSample<'_>, f64)]) {
    family(out, name, "gauge", help, values);
}

pub(super) fn counter(
    out: &mut String,
    name: &str,
    help: &str,
    values: &[(&ModelSample<'_>, f64)],
) {
    family(out, name, "counter", help, values);
}

fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    values: &[(&ModelSample<'_>, f64)],
) {
    header(out, name, kind, help);
    for (m, v) in values {
        sample(out, name, m.name, &[], *v);
    }
}

pub(super) fn sample(
    out: &mut String,
    name: &str,
    model: &str,
    extra: &[(&str, &str)],
    value: f64,
) {
    let _ = write!(out, "{name}{{model_name=\"{}\"", escape(model));
    for (k, v) in extra {
        let _ = write!(out, ",{k}=\"{}\"", escape(v));
    }
    let _ = writeln!(out, "}} {}", number(value));
}

pub(super) fn histogram(out: &mut String, name: &str, model: &str, h: &Histogram) {
    let mut cumulative = 0u64;
    for (i, c) in h.bucket_counts().enumerate() {
        cumulative += c;
        let le = h
            .bounds()
            .get(i)
            .map_or_else(|| "+Inf".to_string(), |b| number(*b));
        sample(
            out,
            &format!("{name}_bucket"),
            model,
            &[("le", &le)],
            cumulative as f64,
        );
    }
    sample(out, &format!("{name}_sum"), model, &[], h.sum_seconds());
    sample(out, &format!("{name}_count"), model, &[], cumulative as f64);
}

fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let m = ModelMetrics::default();
        m.time_to_first_token.observe(Duration::from_millis(3));
        m.time_to_first_token.observe(Duration::from_secs(5000));
        let text = render(&[ModelSample {
            name: "a\"b",
            ready: true,
            memory_bytes: 0,
            engine: None,
            admitted: 0,
            metrics: &m,
            lora: None,
        }]);
        assert!(text.contains(
            "kiln:time_to_first_token_seconds_bucket{model_name=\"a\\\"b\",le=\"0.001\"} 0\n"
        ));
        assert!(text.contains(
            "kiln:time_to_first_token_seconds_bucket{model_name=\"a\\\"b\",le=\"0.005\"} 1\n"
        ));
        assert!(text.contains(
            "kiln:time_to_first_token_seconds_bucket{model_name=\"a\\\"b\",le=\"+Inf\"} 2\n"
        ));
        assert!(text.contains("kiln:time_to_first_token_seconds_count{model_name=\"a\\\"b\"} 2\n"));
        assert!(text.contains("# TYPE kiln:request_success_total counter\n"));
    }

    #[test]
    fn lora_info_has_vllm_labels_and_a_timestamp() {
        let m = ModelMetrics::default();
        let text = render(&[ModelSample {
            name: "qwen",
            ready: true,
            memory_bytes: 0,
            engine: None,
            admitted: 0,
            metrics: &m,
            lora: Some(LoraSample {
                max_lora: 8,
                running: vec!["a".into(), "b".into()],
                waiting: vec!["c".into()],
                at: 1_700_000_000.5,
            }),
        }]);
        assert!(
            text.contains(
                "kiln:lora_requests_info{model_name=\"qwen\",max_lora=\"8\",\
                 running_lora_adapters=\"a,b\",waiting_lora_adapters=\"c\"} 1700000000.5\n"
            ),
            "{text}"
        );
    }
}
