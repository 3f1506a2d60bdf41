//! The store and the meter on real SQLite files: sums, persistence across reopening,
//! group commit through the writer thread, and refusal of a newer schema.

use kiln_usage::{neurons, Meter, UsageRecord, UsageStore};

/// Callers as the server names them (a key's id; `anonymous` without keys): the store
/// takes any id.
const ANONYMOUS: &str = "anonymous";

fn key_id(key: &str) -> String {
    format!("key_{key}")
}

fn rec(key: &str, model: &str, prompt: u64, cached: u64, completion: u64) -> UsageRecord {
    UsageRecord {
        key_id: key.to_string(),
        label: None,
        model: model.to_string(),
        requests: 1,
        prompt_tokens: prompt,
        cached_tokens: cached,
        completion_tokens: completion,
        neurons: neurons(135_000_000, prompt, cached, completion),
        batch: false,
    }
}

#[test]
fn batch_usage_is_kept_apart_from_interactive_usage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("usage.sqlite3");
    let alice = key_id("sk-alice");
    {
        let mut store = UsageStore::open(&path).expect("open");
        let mut batch = rec(&alice, "m1", 10, 0, 5);
        batch.batch = true;
        store
            .add(&[rec(&alice, "m1", 1, 0, 1), batch.clone(), batch])
            .expect("add");
    }
    let rows = UsageStore::open(&path)
        .expect("reopen")
        .rows()
        .expect("rows");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(!rows[0].totals.batch);
    assert_eq!(rows[0].totals.prompt_tokens, 1);
    assert!(rows[1].totals.batch);
    assert_eq!(
        (rows[1].totals.requests, rows[1].totals.prompt_tokens),
        (2, 20)
    );
}

#[test]
fn rows_sum_per_caller_and_model_and_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested/dir/usage.sqlite3");
    let alice = key_id("sk-alice");
    {
        let mut store = UsageStore::open(&path).expect("open");
        store
            .add(&[rec(&alice, "m1", 10, 2, 5), rec(ANONYMOUS, "m1", 7, 0, 1)])
            .expect("add");
        let mut labelled = rec(&alice, "m1", 3, 0, 4);
        labelled.label = Some("team-a".into());
        store
            .add(&[labelled, rec(&alice, "m2", 1, 0, 1)])
            .expect("add");
    }
    let store = UsageStore::open(&path).expect("reopen");
    let rows = store.rows().expect("rows");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let a1 = rows
        .iter()
        .find(|r| r.totals.key_id == alice && r.totals.model == "m1")
        .expect("alice m1");
    assert_eq!(a1.totals.requests, 2);
    assert_eq!(
        (
            a1.totals.prompt_tokens,
            a1.totals.cached_tokens,
            a1.totals.completion_tokens
        ),
        (13, 2, 9)
    );
    assert_eq!(a1.totals.label.as_deref(), Some("team-a"));
    let want = neurons(135_000_000, 13, 2, 9);
    assert!((a1.totals.neurons - want).abs() <= want * 1e-12, "{a1:?}");
    assert!(a1.first_at <= a1.last_at && a1.first_at > 0);
    let anon = rows
        .iter()
        .find(|r| r.totals.key_id == ANONYMOUS)
        .expect("anonymous");
    assert_eq!(anon.totals.requests, 1);
    assert_eq!(anon.totals.label, None);
}

#[test]
fn meter_commits_everything_queued_before_a_flush_and_on_drop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("usage.sqlite3");
    let meter = Meter::start(UsageStore::open(&path).expect("open")).expect("meter");
    for i in 0..500u64 {
        meter.record(rec("k", if i % 2 == 0 { "even" } else { "odd" }, i, 0, 1));
    }
    let rows = meter.rows().expect("rows");
    let total: u64 = rows.iter().map(|r| r.totals.requests).sum();
    assert_eq!(total, 500);
    let prompt: u64 = rows.iter().map(|r| r.totals.prompt_tokens).sum();
    assert_eq!(prompt, (0..500).sum::<u64>());

    // Records queued and never flushed are committed when the meter is dropped.
    for _ in 0..25 {
        meter.record(rec("k", "late", 1, 0, 1));
    }
    drop(meter);
    let store = UsageStore::open(&path).expect("reopen");
    let late = store
        .rows()
        .expect("rows")
        .into_iter()
        .find(|r| r.totals.model == "late")
        .expect("late row");
    assert_eq!(late.totals.requests, 25);
}

#[test]
fn closed_meter_refuses_reads_and_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("usage.sqlite3");
    let meter = Meter::start(UsageStore::open(&path).expect("open")).expect("meter");
    meter.close();
    assert!(matches!(meter.flush(), Err(kiln_usage::Error::Stopped)));
    drop(meter);

    // A file written by a future version is refused, naming the file.
    rusqlite::Connection::open(&path)
        .and_then(|c| c.execute_batch("PRAGMA user_version = 99;"))
        .expect("bump the schema version");
    let err = UsageStore::open(&path).err().expect("newer schema refused");
    assert!(
        matches!(
            err,
            kiln_usage::Error::Db(kiln_db::DbError::SchemaTooNew { found: 99, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("usage.sqlite3"), "{err}");
}

#[test]
fn servers_opening_a_new_file_together_all_succeed() {
    for round in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(format!("usage-{round}.sqlite3"));
        let opened: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| UsageStore::open(&path).map(|_| ())))
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        for r in opened {
            r.expect("no panic").expect("open");
        }
    }
}

#[test]
fn todays_neurons_per_key_count_queued_records_and_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("usage.sqlite3");
    let meter = Meter::start(UsageStore::open(&path).expect("open")).expect("meter");
    let a = rec("key_a", "m", 1000, 0, 10);
    let mut b = rec("key_a", "other", 500, 0, 0);
    b.batch = true;
    meter.record(a.clone());
    meter.record(b.clone());
    meter.record(rec("key_b", "m", 7, 0, 0));
    let today = meter.neurons_today("key_a").expect("today");
    assert!((today - (a.neurons + b.neurons)).abs() < 1e-6, "{today}");
    assert_eq!(meter.neurons_today("nobody").expect("today"), 0.0);
    drop(meter);
    let store = UsageStore::open(&path).expect("reopen");
    let day = kiln_db::unix_now() / 86_400;
    let again = store.neurons_on("key_a", day).expect("read");
    assert!((again - today).abs() < 1e-6, "{again} vs {today}");
    assert_eq!(store.neurons_on("key_a", day - 1).expect("read"), 0.0);
}
