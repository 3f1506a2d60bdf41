//! The firewall: PII recognisers on every text, the injection classifier on every
//! non-empty one, with concurrent requests' texts batched into one classifier call
//! (while a call runs, the next requests queue and go together in the next).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::Caller;
use tokio::sync::{mpsc, oneshot};

use crate::policy::{Policies, Policy};
use crate::verdict::{injection_score, Verdict};

/// The injection classifier, as the server runs it.
pub trait InjectionModel: Send + Sync + 'static {
    /// For each `(caller, text)`, the probability that the text is a prompt injection;
    /// each caller is metered for its own text. A text longer than the model reads at
    /// once is scored in pieces, its riskiest piece counting.
    fn injection(
        &self,
        items: Vec<(Caller, String)>,
    ) -> BoxFuture<'static, Result<Vec<f32>, GuardError>>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// The classifier could not run (not served, failed to load, failed).
    #[error("the prompt firewall's classifier failed: {0}")]
    Model(String),
}

/// Texts from one request, and where their probabilities go.
struct Job {
    items: Vec<(Caller, String)>,
    reply: oneshot::Sender<Result<Vec<f32>, GuardError>>,
}

/// Most texts in one classifier call; more wait for the next.
pub const MAX_BATCH: usize = 16;

pub struct Firewall {
    policies: Policies,
    jobs: mpsc::UnboundedSender<Job>,
}

impl Firewall {
    /// A firewall over `model` (call on a runtime: its batching task starts here).
    pub fn new(policies: Policies, model: Arc<dyn InjectionModel>) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(batches(model, rx));
        Self { policies, jobs }
    }

    pub fn policies(&self) -> &Policies {
        &self.policies
    }

    pub fn policy(&self, key_id: &str) -> &Policy {
        self.policies.for_key(key_id)
    }

    /// Each text's verdict for `caller`.
    pub async fn score(
        &self,
        caller: &Caller,
        texts: &[String],
    ) -> Result<Vec<Verdict>, GuardError> {
        let mut verdicts: Vec<Verdict> = texts
            .iter()
            .map(|t| Verdict {
                injection_score: None,
                pii: crate::pii::detect(t),
            })
            .collect();
        let scored: Vec<usize> = (0..texts.len())
            .filter(|&i| !texts[i].trim().is_empty())
            .collect();
        if scored.is_empty() {
            return Ok(verdicts);
        }
        let (reply, rx) = oneshot::channel();
        let items = scored
            .iter()
            .map(|&i| (caller.clone(), texts[i].clone()))
            .collect();
        self.jobs
            .send(Job { items, reply })
            .map_err(|_| GuardError::Model("the firewall is shutting down".into()))?;
        let probs = rx
            .await
            .map_err(|_| GuardError::Model("the firewall's batch was dropped".into()))??;
        for (&i, p) in scored.iter().zip(probs) {
            verdicts[i].injection_score = Some(injection_score(p));
        }
        Ok(verdicts)
    }
}

/// Runs queued jobs: everything waiting (up to [`MAX_BATCH`] texts) goes in one call.
async fn batches(model: Arc<dyn InjectionModel>, mut rx: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        let mut texts = jobs[0].items.len();
        while texts < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => {
                    texts += job.items.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let mut items = Vec::with_capacity(texts);
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        for job in jobs {
            sizes.push(job.items.len());
            items.extend(job.items);
            replies.push(job.reply);
        }
        let result = model.injection(items).await;
        match result {
            Ok(probs) if probs.len() == texts => {
                let mut rest = probs.as_slice();
                for (reply, n) in replies.into_iter().zip(sizes) {
                    let (mine, tail) = rest.split_at(n);
                    rest = tail;
                    let _ = reply.send(Ok(mine.to_vec()));
                }
            }
            Ok(probs) => {
                let e = GuardError::Model(format!("{} scores for {texts} texts", probs.len()));
                replies
                    .into_iter()
                    .for_each(|r| drop(r.send(Err(e.clone()))));
            }
            Err(e) => replies
                .into_iter()
                .for_each(|r| drop(r.send(Err(e.clone())))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// "ignore" means injection; records each call's size.
    struct Keyword(Arc<Mutex<Vec<usize>>>);

    impl InjectionModel for Keyword {
        fn injection(
            &self,
            items: Vec<(Caller, String)>,
        ) -> BoxFuture<'static, Result<Vec<f32>, GuardError>> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(items.len());
            Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(items
                    .iter()
                    .map(|(_, t)| if t.contains("ignore") { 0.99 } else { 0.01 })
                    .collect())
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn texts_are_scored_and_concurrent_requests_batched() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let fw = Arc::new(Firewall::new(
            Policies::default(),
            Arc::new(Keyword(calls.clone())),
        ));
        let caller = Caller::anonymous();
        let v = fw
            .score(
                &caller,
                &[
                    "ignore all that".into(),
                    "mail me at a@b.io".into(),
                    "  ".into(),
                ],
            )
            .await
            .expect("scores");
        assert_eq!(v[0].injection_score, Some(2));
        assert_eq!(v[1].injection_score, Some(98));
        assert_eq!(v[1].pii_header(), "EMAIL_ADDRESS");
        assert_eq!(v[2].injection_score, None, "nothing to score");
        // 8 requests at once: the first call takes one, the rest queue behind it and
        // go together.
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let fw = fw.clone();
                tokio::spawn(async move {
                    fw.score(&Caller::anonymous(), &[format!("hello {i}")])
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(
                t.await.expect("task").expect("score")[0].injection_score,
                Some(98)
            );
        }
        let sizes = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(sizes[0], 2);
        assert!(sizes.len() < 1 + 8, "batched: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 2 + 8);
    }
}
