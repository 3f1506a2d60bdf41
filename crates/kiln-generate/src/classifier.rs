//! The firewall's classifier: `kiln-guard`'s [`InjectionModel`] over the first
//! text-classification model served (NanoGuard). A batch holds several callers' texts,
//! so each caller is metered for its own (the classifier's neurons), not the batch.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::Caller;
use kiln_guard::{GuardError, InjectionModel};
use kiln_host::ModelKind;
use kiln_usage::UsageRecord;

use crate::error::GenerateError;
use crate::generator::{admit, Generator};

/// The class whose probability is the injection risk.
const INJECTION_LABEL: &str = "injection";

/// The generator as the firewall's injection classifier.
pub struct InjectionClassifier(pub Arc<Generator>);

fn model_error(e: GenerateError) -> GuardError {
    GuardError::Model(e.to_string())
}

impl InjectionModel for InjectionClassifier {
    fn injection(
        &self,
        items: Vec<(Caller, String)>,
    ) -> BoxFuture<'static, Result<Vec<f32>, GuardError>> {
        let generator = self.0.clone();
        Box::pin(async move {
            let hosted = generator
                .resolve_for(None, ModelKind::Classify)
                .map_err(model_error)?;
            let lease = generator
                .lease_unmetered(hosted)
                .await
                .map_err(model_error)?;
            let classifier = lease.classifier().map_err(|e| model_error(e.into()))?;
            let permit = admit(lease.hosted(), 1, false).map_err(model_error)?;
            let (model, parameters) = (lease.hosted().name.clone(), lease.model().parameters());
            let texts: Vec<String> = items.iter().map(|(_, t)| t.clone()).collect();
            let scored = classifier
                .run::<_, GenerateError, _>(lease, permit, move |m| {
                    let pieces = m
                        .classify_pieces(&texts, kiln_encoder::Precision::Int8)
                        .map_err(|e| {
                            GenerateError::Internal(format!("the classifier failed: {e}"))
                        })?;
                    let scored: Vec<(f32, usize)> = pieces
                        .iter()
                        .map(|ps| {
                            // The riskiest piece is the text's risk.
                            let p = ps
                                .iter()
                                .flat_map(|c| {
                                    c.scores.iter().filter(|s| s.label == INJECTION_LABEL)
                                })
                                .map(|s| s.score)
                                .fold(0f32, f32::max);
                            (p, ps.iter().map(|c| c.tokens).sum())
                        })
                        .collect();
                    let tokens = scored.iter().map(|s| s.1).sum();
                    Ok((scored, tokens))
                })
                .await
                .map_err(model_error)?;
            if let Some(meter) = generator.meter() {
                for ((caller, _), &(_, tokens)) in items.iter().zip(&scored) {
                    meter.record(UsageRecord {
                        key_id: caller.key_id.clone(),
                        label: caller.label.clone(),
                        model: model.clone(),
                        requests: 1,
                        prompt_tokens: tokens as u64,
                        cached_tokens: 0,
                        completion_tokens: 0,
                        neurons: kiln_usage::neurons(parameters, tokens as u64, 0, 0),
                        batch: false,
                    });
                }
            }
            Ok(scored.into_iter().map(|s| s.0).collect())
        })
    }
}
