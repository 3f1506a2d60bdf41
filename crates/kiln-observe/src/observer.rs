//! The router's observer: records events into the ring, the open minutes' rollups and
//! the Prometheus series, and flushes to the store once a second on its own thread.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::alerts::{self, Alert, AlertRules};
use crate::error::ObserveError;
use crate::event::Event;
use crate::labels::Labels;
use crate::prom::ColoSeries;
use crate::ring::Ring;
use crate::rollup::Rollup;
use crate::store::Store;

/// Limits on what the observer keeps.
#[derive(Debug, Clone)]
pub struct ObserverConfig {
    /// Events kept in memory (and at most this many in the store).
    pub ring: usize,
    /// Distinct colos with their own rollups and series; later ones are `other`.
    pub max_colos: usize,
    /// The same for models.
    pub max_models: usize,
    /// How long rollups and events are kept.
    pub retention: Duration,
    pub rules: AlertRules,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        Self {
            ring: 10_000,
            max_colos: 1024,
            max_models: 256,
            retention: Duration::from_secs(24 * 3600),
            rules: AlertRules::default(),
        }
    }
}

type Key = (i64, String, String);

#[derive(Default)]
struct Open {
    /// Minutes still being written to (with a store), or all within the retention.
    minutes: HashMap<Key, Rollup>,
    dirty: Vec<Key>,
    pending: Vec<Event>,
}

pub struct Observer {
    config: ObserverConfig,
    ring: Ring,
    colos: Labels,
    models: Labels,
    open: Mutex<Open>,
    store: Option<Mutex<Store>>,
    series: ColoSeries,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Rollups kept in memory without a store, at most (about a day of 20 colo × models).
const MAX_MEMORY_ROLLUPS: usize = 30_000;

impl Observer {
    /// An observer that keeps everything in memory.
    pub fn in_memory(config: ObserverConfig) -> Arc<Self> {
        Arc::new(Self::build(config, None, 0))
    }

    /// An observer over `dir/observe.sqlite3`: the last events and the open minutes
    /// come back from it, and a thread flushes to it every second.
    pub fn open(dir: &Path, config: ObserverConfig) -> Result<Arc<Self>, ObserveError> {
        let store = Store::open(dir)?;
        let events = store.latest_events(config.ring)?;
        let minute = (now_ms() / 60_000) as i64;
        let open = store.rollups(minute - 1, minute)?;
        let next = events.last().map_or(0, |e| e.seq + 1);
        let me = Self::build(config, Some(store), next);
        for e in events {
            me.ring.restore(e);
        }
        {
            let mut o = me.lock_open();
            for r in open {
                me.colos.bound(&r.colo);
                me.models.bound(&r.model);
                o.minutes
                    .insert((r.minute, r.colo.clone(), r.model.clone()), r);
            }
        }
        let me = Arc::new(me);
        let weak = Arc::downgrade(&me);
        std::thread::Builder::new()
            .name("kiln-observe-flush".into())
            .spawn(move || flush_loop(weak))
            .map_err(|e| ObserveError::Thread(e.to_string()))?;
        Ok(me)
    }

    fn build(config: ObserverConfig, store: Option<Store>, next_seq: u64) -> Self {
        Self {
            ring: Ring::new(config.ring, next_seq),
            colos: Labels::new(config.max_colos),
            models: Labels::new(config.max_models),
            open: Mutex::new(Open::default()),
            store: store.map(Mutex::new),
            series: ColoSeries::default(),
            config,
        }
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps one event; returns its sequence number.
    pub fn record(&self, e: Event) -> u64 {
        let colo = self.colos.bound(&e.colo);
        let model = self.models.bound(&e.model);
        let from = e
            .fallback
            .as_ref()
            .and_then(|f| f.from.as_deref())
            .map(|c| self.colos.bound(c));
        self.series.record(&e, &colo, from.as_deref(), &model);
        let (seq, e) = self.ring.push(e);
        let key = (e.minute(), colo, model);
        let mut o = self.lock_open();
        let r = o
            .minutes
            .entry(key.clone())
            .or_insert_with(|| Rollup::new(key.0, &key.1, &key.2));
        r.add(&e);
        if !o.dirty.contains(&key) {
            o.dirty.push(key);
        }
        if self.store.is_some() {
            o.pending.push(e);
        }
        seq
    }

    /// Writes what accumulated to the store (a no-op without one).
    pub fn flush(&self) -> Result<(), ObserveError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        // The store's lock first, so two flushes write in order.
        let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
        let (events, rollups) = {
            let mut o = self.lock_open();
            let events = std::mem::take(&mut o.pending);
            let dirty = std::mem::take(&mut o.dirty);
            let rollups: Vec<Rollup> = dirty
                .iter()
                .filter_map(|k| o.minutes.get(k).cloned())
                .collect();
            // Minutes before the last two are complete: the store has them now.
            let current = (now_ms() / 60_000) as i64;
            o.minutes.retain(|k, _| k.0 >= current - 1);
            (events, rollups)
        };
        let keep_from = now_ms().saturating_sub(self.config.retention.as_millis() as u64);
        let written = store.flush(&events, &rollups, keep_from, self.config.ring as u64);
        if written.is_err() {
            // Kept for the next flush (the rollups are re-read from memory if still
            // open; a closed minute's last update is lost with its write).
            let mut o = self.lock_open();
            o.pending.splice(0..0, events);
            for r in rollups {
                let key = (r.minute, r.colo, r.model);
                if !o.dirty.contains(&key) {
                    o.dirty.push(key);
                }
            }
        }
        written
    }

    /// Up to `limit` events after sequence number `after`, oldest first.
    pub fn events(&self, after: Option<u64>, limit: usize) -> Vec<Event> {
        self.ring.since(after, limit)
    }

    /// Rollups of minutes `from..=to` (epoch minutes), in minute order.
    pub fn rollups(&self, from: i64, to: i64) -> Result<Vec<Rollup>, ObserveError> {
        if let Some(store) = &self.store {
            self.flush()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            return store.rollups(from, to);
        }
        let mut o = self.lock_open();
        if o.minutes.len() > MAX_MEMORY_ROLLUPS {
            let keep_from =
                (now_ms() / 60_000) as i64 - (self.config.retention.as_secs() / 60) as i64;
            o.minutes.retain(|k, _| k.0 >= keep_from);
        }
        let mut out: Vec<Rollup> = o
            .minutes
            .values()
            .filter(|r| (from..=to).contains(&r.minute))
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.minute, &a.colo, &a.model).cmp(&(b.minute, &b.colo, &b.model)));
        Ok(out)
    }

    /// The alerts firing now.
    pub fn alerts(&self) -> Result<Vec<Alert>, ObserveError> {
        let rules = &self.config.rules;
        let now = (now_ms() / 60_000) as i64;
        let from = now - rules.window_minutes - rules.baseline_minutes;
        let rollups = self.rollups(from, now)?;
        Ok(alerts::evaluate(rules, &rollups, now))
    }

    /// The per-colo Prometheus series, appended to `out`.
    pub fn render_prometheus(&self, out: &mut String) {
        self.series.render(out);
    }

    pub fn rules(&self) -> &AlertRules {
        &self.config.rules
    }
}

fn flush_loop(observer: Weak<Observer>) {
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(o) = observer.upgrade() else { return };
        if let Err(e) = o.flush() {
            tracing::warn!("cannot write the observability database: {e}");
        }
    }
}
