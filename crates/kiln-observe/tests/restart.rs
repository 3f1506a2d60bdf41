//! A restart keeps the events and rollups flushed before it: the ring and the open
//! minutes come back from SQLite, and numbering continues.

use kiln_observe::observer::now_ms;
use kiln_observe::{Event, FallbackInfo, Observer, ObserverConfig};

fn event(colo: &str, ms: f64, fallback: bool) -> Event {
    Event {
        time_ms: now_ms(),
        colo: colo.into(),
        node: format!("{colo}-1"),
        model: "m".into(),
        task: "chat".into(),
        status: 200,
        latency_ms: ms,
        neurons: Some(0.5),
        fallback: fallback.then(|| FallbackInfo {
            reason: "node_down".into(),
            from: Some("ams".into()),
            added_ms: 4.0,
        }),
        ..Event::default()
    }
}

#[test]
fn a_restart_keeps_events_and_rollups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let minute = (now_ms() / 60_000) as i64;
    {
        let o = Observer::open(dir.path(), ObserverConfig::default()).expect("open");
        for i in 0..30 {
            o.record(event(if i % 2 == 0 { "ams" } else { "fra" }, 10.0, i == 0));
        }
        o.flush().expect("flush");
    }
    let o = Observer::open(dir.path(), ObserverConfig::default()).expect("reopen");
    let events = o.events(None, 100);
    assert_eq!(events.len(), 30);
    assert_eq!(events.last().map(|e| e.seq), Some(29));
    assert_eq!(
        events[0].fallback.as_ref().map(|f| f.reason.as_str()),
        Some("node_down")
    );
    // Numbering and the open minute carry on.
    assert_eq!(o.record(event("ams", 20.0, false)), 30);
    let rollups = o.rollups(minute - 1, minute + 1).expect("rollups");
    let total: u64 = rollups.iter().map(|r| r.requests).sum();
    assert_eq!(total, 31, "{rollups:?}");
    let ams = rollups
        .iter()
        .filter(|r| r.colo == "ams")
        .map(|r| r.requests)
        .sum::<u64>();
    assert_eq!(ams, 16);
    let mut prom = String::new();
    o.render_prometheus(&mut prom);
    assert!(
        prom.contains("kiln_router:colo_events_total{colo=\"ams\"} 1"),
        "{prom}"
    );
}

#[test]
fn the_store_is_written_within_a_second_without_an_explicit_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let o = Observer::open(dir.path(), ObserverConfig::default()).expect("open");
        o.record(event("ams", 10.0, false));
        std::thread::sleep(std::time::Duration::from_millis(2500));
        // Dropped without a flush: only the background thread wrote.
    }
    let o = Observer::open(dir.path(), ObserverConfig::default()).expect("reopen");
    assert_eq!(o.events(None, 10).len(), 1);
}
