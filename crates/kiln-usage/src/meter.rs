//! The writer thread between request handlers and the database.
//!
//! [`Meter::record`] never blocks a request: it queues the record on a channel. The
//! writer thread wakes on the first record, takes everything else already queued, sums
//! it per (caller, model) and commits it in one transaction ("group commit"). So each
//! record is written through within milliseconds, and a burst of requests costs one
//! commit. A failed commit (disk full) keeps the sums in memory and is retried every
//! second and on the next record; nothing is dropped while the process lives.
//! [`Meter::flush`] waits until everything queued before it is committed; dropping the
//! meter (or [`Meter::close`]) commits what is left and joins the thread.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::{aggregate, UsageRecord, UsageRow, UsageStore};

/// How often a failed commit is retried when nothing else arrives.
const RETRY_EVERY: Duration = Duration::from_secs(1);

enum Msg {
    Record(UsageRecord),
    Flush(SyncSender<std::result::Result<(), String>>),
    Rows(SyncSender<std::result::Result<Vec<UsageRow>, String>>),
    Daily(String, SyncSender<std::result::Result<f64, String>>),
}

/// Queues usage records for a [`UsageStore`] on its own thread.
pub struct Meter {
    tx: Mutex<Option<Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
}

impl Meter {
    /// Starts the writer thread over `store`.
    pub fn start(store: UsageStore) -> Result<Self> {
        let path = store.path().to_path_buf();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kiln-usage".into())
            .spawn(move || writer(store, &rx))
            .map_err(Error::Thread)?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            path,
        })
    }

    /// Where the records go.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Queues `record`; never blocks. After [`close`](Self::close) the record can't be
    /// stored, which is logged.
    pub fn record(&self, record: UsageRecord) {
        let msg = Msg::Record(record);
        let unsent = match lock(&self.tx).as_ref() {
            Some(tx) => tx.send(msg).err().map(|e| e.0),
            None => Some(msg),
        };
        if let Some(Msg::Record(r)) = unsent {
            tracing::error!(
                key_id = %r.key_id,
                model = %r.model,
                requests = r.requests,
                "usage meter closed; this usage is not stored"
            );
        }
    }

    /// Waits until every record queued before this call is committed.
    pub fn flush(&self) -> Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Msg::Flush(tx))?;
        rx.recv()
            .map_err(|_| Error::Stopped)?
            .map_err(|reason| self.unflushed(reason))
    }

    /// Every stored row, including all records queued before this call.
    pub fn rows(&self) -> Result<Vec<UsageRow>> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Msg::Rows(tx))?;
        rx.recv()
            .map_err(|_| Error::Stopped)?
            .map_err(|reason| self.unflushed(reason))
    }

    /// Neurons `key_id` used today (UTC), including every record queued before this
    /// call: what a daily quota is checked against.
    pub fn neurons_today(&self, key_id: &str) -> Result<f64> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Msg::Daily(key_id.to_string(), tx))?;
        rx.recv()
            .map_err(|_| Error::Stopped)?
            .map_err(|reason| self.unflushed(reason))
    }

    /// Commits what is queued and stops the writer thread; later records are refused.
    pub fn close(&self) {
        drop(lock(&self.tx).take());
        if let Some(t) = lock(&self.thread).take() {
            if t.join().is_err() {
                tracing::error!("the usage writer thread panicked");
            }
        }
    }

    fn send(&self, msg: Msg) -> Result<()> {
        lock(&self.tx)
            .as_ref()
            .ok_or(Error::Stopped)?
            .send(msg)
            .map_err(|_| Error::Stopped)
    }

    fn unflushed(&self, reason: String) -> Error {
        Error::Unflushed {
            path: self.path.clone(),
            reason,
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sums not yet committed, per (caller, model).
#[derive(Default)]
struct Pending {
    records: Vec<UsageRecord>,
    index: HashMap<(String, String, bool), usize>,
}

impl Pending {
    fn commit(&mut self, store: &mut UsageStore) -> std::result::Result<(), String> {
        if self.records.is_empty() {
            return Ok(());
        }
        match store.add(&self.records) {
            Ok(()) => {
                self.records.clear();
                self.index.clear();
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    pending = self.records.len(),
                    error = %e,
                    "cannot write usage; keeping it in memory and retrying"
                );
                Err(e.to_string())
            }
        }
    }
}

fn writer(mut store: UsageStore, rx: &Receiver<Msg>) {
    let mut pending = Pending::default();
    loop {
        let first = if pending.records.is_empty() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(RETRY_EVERY)
        };
        let first = match first {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut waiting = Vec::new();
        for msg in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match msg {
                Msg::Record(r) => aggregate(&mut pending.records, &mut pending.index, r),
                other => waiting.push(other),
            }
        }
        let committed = pending.commit(&mut store);
        for msg in waiting {
            match msg {
                Msg::Record(_) => {}
                Msg::Flush(reply) => {
                    let _ = reply.send(committed.clone());
                }
                Msg::Rows(reply) => {
                    let rows = committed
                        .clone()
                        .and_then(|()| store.rows().map_err(|e| e.to_string()));
                    let _ = reply.send(rows);
                }
                Msg::Daily(key, reply) => {
                    let day = kiln_db::unix_now() / 86_400;
                    let used = committed
                        .clone()
                        .and_then(|()| store.neurons_on(&key, day).map_err(|e| e.to_string()));
                    let _ = reply.send(used);
                }
            }
        }
    }
    if let Err(reason) = pending.commit(&mut store) {
        tracing::error!(
            lost = pending.records.len(),
            %reason,
            "usage meter stopped with records it could not write"
        );
    }
}

/// The meter's locks guard plain handles; a poisoned one is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
