//! Alarms: every agent's schedules in one due set, loaded from the agents' files at
//! start (so pending schedules survive a restart) and fired by one loop.
//!
//! A run's schedule row is advanced (or, for a one-shot, deleted) only after the turn's
//! response is stored, so a crash mid-run means the run happens again: at least once.
//! A failed run is retried with growing, jittered backoff.

use std::sync::Arc;
use std::time::Duration;

use kiln_api::agents::Schedule;
use kiln_api::responses::CreateResponse;
use kiln_api::Caller;
use kiln_responses::Created;
use serde_json::json;

use kiln_db::unix_now;

use crate::agents::Agents;
use crate::db::AgentDb;
use crate::schedule::{self, MAX_ATTEMPTS};
use crate::turns::Journal;

/// The longest the loop sleeps between looks at the idle agents.
const SWEEP: Duration = Duration::from_secs(30);

impl Agents {
    /// Loads every agent's schedules, re-runs the turns a crash cut (`turns.rs`), and
    /// starts the alarm loop (on the current runtime); returns how many runs that armed.
    /// An agent whose file can't be read is logged and skipped; the others run.
    pub fn start(self: &Arc<Self>) -> usize {
        let mut armed = 0;
        for (owner, name, path) in agent_files(self.dir()) {
            match AgentDb::open(&path).map(|db| db.schedules()) {
                Ok(Ok(list)) => {
                    for s in &list {
                        self.arm(&owner, &name, s);
                    }
                    armed += list.len();
                    armed += self.rerun_cut_turns(&owner, &name);
                }
                Ok(Err(e)) => tracing::error!(agent = %name, error = %e, "cannot read schedules"),
                Err(e) => tracing::error!(agent = %name, error = %e, "cannot open agent"),
            }
        }
        let this = Arc::clone(self);
        tokio::spawn(async move { this.alarm_loop().await });
        armed
    }

    async fn alarm_loop(self: Arc<Self>) {
        loop {
            let now = unix_now();
            let next = self.lock_due().first().cloned();
            match next {
                Some(due) if due.0 <= now => {
                    self.lock_due().remove(&due);
                    let this = Arc::clone(&self);
                    tokio::spawn(async move { this.fire(&due.1, &due.2, &due.3).await });
                    continue;
                }
                _ => {}
            }
            let wait = next.map_or(SWEEP, |d| Duration::from_secs(d.0 - now).min(SWEEP));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.wake.notified() => {}
            }
            self.evict_idle();
        }
    }

    /// Runs schedule `id` of agent `name` once and records how it went.
    async fn fire(self: Arc<Self>, owner: &str, name: &str, id: &str) {
        let live = match self.open(owner, name, false) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(agent = %name, schedule = %id, error = %e, "agent gone; schedule dropped");
                return;
            }
        };
        let Ok(Some(s)) = live.db.schedule(id) else {
            return;
        };
        live.publish(json!({"type": "agent.schedule.started", "schedule_id": id}));
        let caller = Caller {
            key_id: owner.into(),
            label: None,
        };
        let req = CreateResponse {
            input: Some(s.input.clone()),
            ..CreateResponse::default()
        };
        let turn = self.turn(&caller, name, req, Journal::BySchedule).await;
        let outcome = match turn {
            Ok(Created::Done(r)) if matches!(r.status.as_str(), "completed" | "incomplete") => {
                Ok(r.id)
            }
            Ok(Created::Done(r)) => Err(r
                .error
                .map_or_else(|| format!("the turn ended {}", r.status), |e| e.message)),
            Ok(_) => Err("the turn did not run to its end".into()),
            Err(e) => Err(e.to_string()),
        };
        let now = unix_now();
        let next = match &outcome {
            Ok(_) => after_success(&s, now),
            Err(error) => {
                tracing::warn!(agent = %name, schedule = %id, %error, "scheduled turn failed");
                after_failure(&s, error, now)
            }
        };
        let stored = match &next {
            Some(n) => live.db.put_schedule(n, now),
            None => live.db.delete_schedule(id).map(|_| ()),
        };
        match stored {
            Ok(()) => {
                if let Some(n) = &next {
                    self.arm(owner, name, n);
                }
            }
            // Not recorded: arm it again from what is stored, so it is not lost.
            Err(e) => {
                tracing::error!(agent = %name, schedule = %id, error = %e, "cannot record a run");
                let mut retry = s.clone();
                retry.next_run_at = now + schedule::backoff(1);
                self.arm(owner, name, &retry);
            }
        }
        // Published once recorded, so a subscriber that reads the schedules on this
        // event finds the retry (or the schedule gone).
        live.publish(match &outcome {
            Ok(response_id) => json!({"type": "agent.schedule.completed", "schedule_id": id,
                                      "response_id": response_id}),
            Err(error) => json!({"type": "agent.schedule.failed", "schedule_id": id,
                                 "error": error}),
        });
    }
}

/// What follows a successful run: a cron schedule's next time, or nothing.
fn after_success(s: &Schedule, now: u64) -> Option<Schedule> {
    let pattern = s.cron.as_deref()?;
    let next = schedule::next_cron(pattern, now).ok()?;
    Some(Schedule {
        next_run_at: next,
        attempts: 0,
        last_error: None,
        ..s.clone()
    })
}

/// What follows a failed run: a retry after backoff, until [`MAX_ATTEMPTS`]; then a
/// cron schedule waits for its next time and a one-shot is dropped.
fn after_failure(s: &Schedule, error: &str, now: u64) -> Option<Schedule> {
    let attempts = s.attempts + 1;
    if attempts < MAX_ATTEMPTS {
        return Some(Schedule {
            next_run_at: now + schedule::backoff(attempts),
            attempts,
            last_error: Some(error.into()),
            ..s.clone()
        });
    }
    tracing::error!(schedule = %s.id, attempts, "scheduled turn kept failing");
    let pattern = s.cron.as_deref()?;
    Some(Schedule {
        next_run_at: schedule::next_cron(pattern, now).ok()?,
        attempts: 0,
        last_error: Some(error.into()),
        ..s.clone()
    })
}

/// (owner, agent name, file) of every agent file under `dir`.
fn agent_files(dir: &std::path::Path) -> Vec<(String, String, std::path::PathBuf)> {
    let mut out = Vec::new();
    let Ok(owners) = std::fs::read_dir(dir) else {
        return out;
    };
    for owner in owners.flatten() {
        let Ok(files) = std::fs::read_dir(owner.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            if path.extension().is_some_and(|e| e == "sqlite3") {
                if let Some(stem) = path.file_stem() {
                    out.push((
                        owner.file_name().to_string_lossy().into_owned(),
                        stem.to_string_lossy().into_owned(),
                        path,
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn sched(cron: Option<&str>, attempts: u32) -> Schedule {
        Schedule {
            id: "s".into(),
            object: "agent.schedule".into(),
            kind: if cron.is_some() { "cron" } else { "delayed" }.into(),
            input: Value::String("hi".into()),
            cron: cron.map(str::to_string),
            next_run_at: 0,
            attempts,
            last_error: None,
        }
    }

    #[test]
    fn one_shots_end_and_crons_move_on() {
        assert!(after_success(&sched(None, 0), 100).is_none());
        let next = after_success(&sched(Some("* * * * *"), 2), 90).expect("cron");
        assert_eq!((next.next_run_at, next.attempts), (120, 0));
        let retry = after_failure(&sched(None, 0), "down", 100).expect("retry");
        assert_eq!(retry.attempts, 1);
        assert!(retry.next_run_at > 100);
        assert!(after_failure(&sched(None, MAX_ATTEMPTS - 1), "down", 100).is_none());
        let cron = after_failure(&sched(Some("* * * * *"), MAX_ATTEMPTS - 1), "x", 90).expect("c");
        assert_eq!((cron.next_run_at, cron.attempts), (120, 0));
    }
}
