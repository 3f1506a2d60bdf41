//! What recording an inference event costs the router's request path: `Observer::record`
//! timed one call at a time at a steady 500 events/s over a store flushed every second,
//! with 200 colos × 4 models. Prints p50/p99/max in microseconds.
//!
//! `cargo run --release -p kiln-observe --example record_cost [SECONDS]`

use std::time::{Duration, Instant};

use kiln_observe::observer::now_ms;
use kiln_observe::{Event, FallbackInfo, Observer, ObserverConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir()?;
    let o = Observer::open(dir.path(), ObserverConfig::default())?;
    let period = Duration::from_micros(2000);
    let start = Instant::now();
    let mut took = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let e = Event {
            time_ms: now_ms(),
            colo: format!("c{}", i % 200),
            node: format!("n{}", i % 400),
            model: format!("m{}", i % 4),
            task: "chat".into(),
            status: 200,
            latency_ms: 20.0 + (i % 50) as f64,
            ttft_ms: Some(5.0),
            tokens_in: Some(30),
            tokens_out: Some(40),
            neurons: Some(0.01),
            fallback: i.is_multiple_of(50).then(|| FallbackInfo {
                reason: "node_down".into(),
                from: Some("c1".into()),
                added_ms: 3.0,
            }),
            ..Event::default()
        };
        let t = Instant::now();
        o.record(e);
        took.push(t.elapsed().as_secs_f64() * 1e6);
        i += 1;
        let next = start + period * i as u32;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    took.sort_by(f64::total_cmp);
    let q = |p: f64| took[((took.len() as f64 * p) as usize).min(took.len() - 1)];
    println!(
        "{} events at 500/s: record() p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        took.len(),
        q(0.5),
        q(0.99),
        took[took.len() - 1]
    );
    Ok(())
}
