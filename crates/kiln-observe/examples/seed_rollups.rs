//! Fills a router data dir with a past day of traffic, for measuring the dashboard
//! against a full store (`scripts/bench/dashboard_paint.py`): events with past
//! timestamps recorded through [`Observer::record`] and flushed minute by minute, so
//! the store holds what a router that saw them would (a rollup per minute × colo ×
//! model, the latest events, with a fallback now and then).
//!
//! `cargo run --release -p kiln-observe --example seed_rollups DIR [COLOS] [MODELS] [HOURS] [PER_MINUTE]`
//! (defaults: 50 colos, 3 models, 24 h, 3 events per minute per colo × model)

use std::time::Instant;

use kiln_observe::observer::now_ms;
use kiln_observe::{Event, FallbackInfo, Observer, ObserverConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: seed_rollups DIR [COLOS] [MODELS] [HOURS] [PER_MINUTE]")?;
    let mut next = |d: u64| args.next().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (colos, models, hours, per_minute) = (next(50), next(3), next(24), next(3));
    std::fs::create_dir_all(&dir)?;
    let o = Observer::open(dir.as_ref(), ObserverConfig::default())?;
    let t = Instant::now();
    let now = now_ms() / 60_000;
    // The oldest minute still inside the retention, up to the one before this.
    let first = now + 1 - hours * 60;
    let mut i = 0u64;
    for minute in first..now {
        for c in 0..colos {
            for m in 0..models {
                for k in 0..per_minute {
                    i += 1;
                    // Each colo its own speed; some spread within the minute.
                    let latency = 40.0 + 15.0 * c as f64 + (i % 17) as f64 * 3.0;
                    o.record(Event {
                        time_ms: minute * 60_000 + k * 60_000 / per_minute,
                        colo: format!("c{c:02}"),
                        node: format!("c{c:02}-n{}", i % 2),
                        model: format!("model-{m}"),
                        task: "chat".into(),
                        status: if i.is_multiple_of(200) { 500 } else { 200 },
                        latency_ms: latency,
                        ttft_ms: Some(latency / 4.0),
                        tokens_in: Some(120),
                        tokens_out: Some(60),
                        neurons: Some(0.05),
                        fallback: i.is_multiple_of(97).then(|| FallbackInfo {
                            reason: "node_down".into(),
                            from: Some(format!("c{c:02}")),
                            added_ms: 12.0,
                        }),
                        tier: Some("edge".into()),
                        ..Event::default()
                    });
                }
            }
        }
        o.flush()?;
    }
    let rows = o.rollups(first as i64, now as i64)?.len();
    println!(
        "{i} events, {rows} rollups ({colos} colos × {models} models × {} minutes) in {:.1} s",
        now - first,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
