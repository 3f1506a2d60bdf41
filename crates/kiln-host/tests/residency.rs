//! Residency on the real default model: loading on first use, sharing one load,
//! unloading the least recently used idle model for another under the memory budget,
//! and never unloading a model that is held or pinned.

use std::sync::Arc;

use kiln_engine::ServingOptions;
use kiln_host::{Host, HostError, HostedModel, LoraConfig, ModelSource, ModelStatus};

const MODEL: &str = "smollm2-135m-instruct";

/// A text model named `name` on the default model's file, with a small KV cache.
fn source(name: &str, pin: bool) -> ModelSource {
    let mut options = ServingOptions::detect();
    options.kv_cache_bytes = Some(8 << 20);
    options.max_model_len = Some(256);
    ModelSource {
        name: name.into(),
        aliases: Vec::new(),
        task: "text-generation".into(),
        path: kiln_testkit::gguf(MODEL),
        options,
        pin,
    }
}

/// A host over `names` (pinned where marked) with room for `fit` of them at once.
fn host(names: &[(&str, bool)], fit: f64) -> Host {
    let one = source("probe", false).estimated_bytes();
    let models = names
        .iter()
        .map(|&(n, pin)| HostedModel::from_source(source(n, pin), 16))
        .collect();
    let budget = (one as f64 * fit) as u64;
    Host::new(models, Some(budget), LoraConfig::default()).expect("host")
}

fn status(host: &Host, name: &str) -> ModelStatus {
    host.resolve(Some(name)).expect("known").status()
}

async fn lease(host: &Host, name: &str) -> Result<kiln_host::Lease, HostError> {
    host.lease(host.resolve(Some(name)).expect("known")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_loads_on_first_use_and_then_stays_warm() {
    let host = host(&[("a", false)], 1.5);
    assert_eq!(status(&host, "a"), ModelStatus::Unloaded);
    let first = lease(&host, "a").await.expect("loads");
    assert!(!first.warm());
    drop(first);
    let again = lease(&host, "a").await.expect("loaded");
    assert!(again.warm());
    assert_eq!(status(&host, "a"), ModelStatus::Loaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_arriving_during_a_load_share_it() {
    let host = Arc::new(host(&[("a", false)], 1.5));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move { lease(&host, "a").await.map(drop) })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("lease");
    }
    let a = host.resolve(Some("a")).expect("known");
    assert_eq!(
        a.metrics.model_load.count(),
        1,
        "one load for four requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_recently_used_idle_model_makes_room() {
    // Room for two of three.
    let host = host(&[("a", false), ("b", false), ("c", false)], 2.5);
    drop(lease(&host, "a").await.expect("a"));
    drop(lease(&host, "b").await.expect("b"));
    // `a` is used again: `b` is now the least recently used.
    drop(lease(&host, "a").await.expect("a again"));
    drop(lease(&host, "c").await.expect("c"));
    assert_eq!(status(&host, "b"), ModelStatus::Unloaded);
    assert_eq!(status(&host, "a"), ModelStatus::Loaded);
    assert_eq!(status(&host, "c"), ModelStatus::Loaded);
    let b = host.resolve(Some("b")).expect("known");
    assert_eq!(b.metrics.unloads.get(), 1);
    // And `b` comes back on demand, in place of the now least recently used `a`.
    let back = lease(&host, "b").await.expect("b reloads");
    assert!(!back.warm());
    assert_eq!(status(&host, "a"), ModelStatus::Unloaded);
    assert!(host.residency().used() <= host.residency().budget().unwrap_or(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_model_is_never_unloaded() {
    let host = host(&[("a", false), ("b", false)], 1.5);
    let held = lease(&host, "a").await.expect("a");
    let refused = lease(&host, "b").await;
    assert!(
        matches!(refused, Err(HostError::NoRoom { ref model, .. }) if model == "b"),
        "{:?}",
        refused.err()
    );
    assert_eq!(status(&host, "a"), ModelStatus::Loaded);
    drop(held);
    lease(&host, "b").await.expect("b fits once a is idle");
    assert_eq!(status(&host, "a"), ModelStatus::Unloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_is_never_unloaded() {
    let host = host(&[("a", true), ("b", false)], 1.5);
    host.load_pinned(|| false).await.expect("pinned loads");
    assert_eq!(status(&host, "a"), ModelStatus::Loaded);
    assert!(matches!(
        lease(&host, "b").await,
        Err(HostError::NoRoom { .. })
    ));
    assert_eq!(status(&host, "a"), ModelStatus::Loaded);
}
