//! Reports built from known records: aggregates, B/A ratios, Markdown and SVG plots.

mod common;

use std::time::Duration;

use kiln_bench::{
    plot, ratios, save_runs, Comparison, LengthFilter, RequestRecord, RunConfig, RunReport,
    ServerUsage, Workload, WorkloadRequest, SAMPLER, WORKLOAD_FORMAT,
};

fn workload(n: usize) -> Workload {
    Workload {
        format: WORKLOAD_FORMAT.to_owned(),
        dataset: "test".to_owned(),
        tokenizer: "t".to_owned(),
        seed: 0,
        sampler: SAMPLER.to_owned(),
        filter: LengthFilter::default(),
        requests: (0..n)
            .map(|_| WorkloadRequest {
                prompt: "p".to_owned(),
                prompt_tokens: 10,
                output_tokens: 5,
            })
            .collect(),
    }
}

/// `n` requests of 5 tokens: TTFT `ttft`, then 4 gaps of `gap` ms.
fn report(label: &str, conc: usize, n: usize, ttft: f64, gap: f64, cpu: f64) -> RunReport {
    let records = (0..n)
        .map(|i| RequestRecord {
            index: i,
            prompt_tokens: 10,
            target_output_tokens: 5,
            sent_at_ms: 0.0,
            ttft_ms: Some(ttft),
            itl_ms: vec![gap; 4],
            e2e_ms: ttft + 4.0 * gap,
            content_chunks: 5,
            usage_prompt_tokens: Some(20),
            usage_completion_tokens: Some(5),
            failure: None,
            error: None,
        })
        .collect();
    let mut config = RunConfig::new(label, "http://127.0.0.1:1", "m");
    config.max_concurrency = Some(conc);
    let server = ServerUsage {
        pid: 1,
        cpu_seconds: cpu,
        peak_rss_bytes: 100 << 20,
        max_sampled_rss_bytes: 90 << 20,
    };
    RunReport::new(
        &workload(n),
        &config,
        "http://127.0.0.1:1",
        records,
        Duration::from_secs(2),
        Some(server),
        Some(0.1),
    )
}

#[test]
fn aggregates_of_known_records() {
    let r = report("a", 8, 10, 100.0, 10.0, 3.0);
    assert_eq!(r.completed, 10);
    assert_eq!(r.request_throughput, 5.0);
    assert_eq!(r.output_throughput, 25.0);
    assert_eq!(r.total_token_throughput, 75.0);
    assert_eq!(r.server_prompt_tokens, Some(200));
    assert_eq!(r.server_cpu_utilization, Some(1.5));
    assert_eq!(r.server_cpu_seconds_per_output_token, Some(3.0 / 50.0));
    let ttft = r.ttft_ms.expect("ttft");
    assert_eq!((ttft.mean, ttft.p50, ttft.p99), (100.0, 100.0, 100.0));
    assert_eq!(r.tpot_ms.expect("tpot").mean, 10.0);
    assert_eq!(r.e2e_ms.expect("e2e").p90, 140.0);
    assert_eq!(r.itl_ms.expect("itl").count, 40);
}

#[test]
fn ratios_are_b_over_a() {
    let a = report("a", 8, 10, 100.0, 10.0, 4.0);
    let b = report("b", 8, 10, 50.0, 20.0, 2.0);
    let rs = ratios(&a, &b);
    let get = |m: &str| rs.iter().find(|r| r.metric == m).and_then(|r| r.ratio);
    assert_eq!(get("ttft_ms.p50"), Some(0.5));
    assert_eq!(get("itl_ms.p99"), Some(2.0));
    assert_eq!(get("server.cpu_seconds"), Some(0.5));
    assert_eq!(get("output_throughput"), Some(1.0));
    assert_eq!(get("server.peak_rss_bytes"), Some(1.0));
    // failed is 0 in A, so its ratio is undefined rather than infinite.
    assert_eq!(get("failed"), None);

    let cmp = Comparison::new(vec![a.clone()], vec![b.clone()]);
    assert_eq!(cmp.a_label, "a");
    assert_eq!(cmp.pairs[0].max_concurrency, Some(8));
    let md = cmp.markdown();
    assert_eq!(md.lines().count(), 2 + 3, "{md}");
    assert!(
        md.contains("| 8 | a | 5.00 | 25 | 100 ms / 100 ms | 10 ms / 10 ms | 200% |"),
        "{md}"
    );
    assert!(
        md.contains("| 8 | **b / a** | 1.00× | 1.00× | 0.50× / 0.50× | 2.00× / 2.00× | 0.50× |"),
        "{md}"
    );
    assert!(cmp.ratio_text().contains("ttft_ms.p50"));
}

#[test]
fn plots_and_json_are_written() {
    let runs = vec![
        report("kiln", 1, 20, 30.0, 5.0, 1.0),
        report("kiln", 8, 20, 60.0, 8.0, 2.0),
        report("peer", 1, 20, 40.0, 10.0, 2.0),
        report("peer", 8, 20, 90.0, 30.0, 4.0),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let written = plot::draw_all(&dir.path().join("plots"), &runs).expect("plots");
    let names: Vec<String> = written
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        names,
        [
            "ttft_cdf.svg",
            "itl_cdf.svg",
            "e2e_cdf.svg",
            "throughput.svg"
        ]
    );
    for path in &written {
        let svg = std::fs::read_to_string(path).expect("svg");
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{}",
            path.display()
        );
        assert!(
            svg.contains("kiln") && svg.contains("peer"),
            "{} lacks a legend",
            path.display()
        );
    }
    // One concurrency per label: no throughput plot.
    let single = plot::draw_all(&dir.path().join("one"), &runs[..1]).expect("plots");
    assert_eq!(single.len(), 3);

    let json = dir.path().join("runs.json");
    save_runs(&json, &runs).expect("json");
    let back: Vec<RunReport> =
        serde_json::from_slice(&std::fs::read(&json).expect("read")).expect("parse");
    common::assert_json_close(&back, &runs);
    let one = dir.path().join("run.json");
    runs[0].save(&one).expect("json");
    common::assert_json_close(&RunReport::load(&one).expect("load"), &runs[0]);
}
