//! `deploy/k8s/gateway/inference-pool.yaml` against the schema of the Gateway API
//! Inference Extension's `InferencePool` (`inference.networking.k8s.io/v1`), written
//! out here as types that refuse unknown fields (the extension's CRDs are not in any
//! package this machine can install), and against the rest of the deployment: the pool
//! selects the node pods of `nodes.yaml` on their port, and points at the picker's
//! Service. That the picker's metric names are ones `kiln serve` exports is checked by
//! the deployment's end-to-end test (`e2e_router/deploy.rs`), against a running node.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct InferencePool {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: PoolSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolSpec {
    selector: Selector,
    /// Exactly one port (the CRD's `minItems: 1`, `maxItems: 1`).
    target_ports: Vec<Port>,
    endpoint_picker_ref: PickerRef,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Selector {
    match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Port {
    number: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PickerRef {
    name: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    port: Option<Port>,
    #[serde(default)]
    failure_mode: Option<FailureMode>,
}

#[derive(Debug, Deserialize)]
enum FailureMode {
    FailOpen,
    FailClose,
}

fn manifest(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/k8s")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a multi-document YAML file.
fn documents(text: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap_or_else(|e| panic!("YAML: {e}")))
        .collect()
}

fn of_kind<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> Vec<&'a serde_yaml::Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn pool(docs: &[serde_yaml::Value]) -> Result<InferencePool, serde_yaml::Error> {
    let pools = of_kind(docs, "InferencePool");
    assert_eq!(pools.len(), 1, "one InferencePool");
    serde_yaml::from_value(pools[0].clone())
}

#[test]
fn the_inference_pool_follows_the_crd_and_the_deployment() {
    let docs = documents(&manifest("gateway/inference-pool.yaml"));
    let pool = pool(&docs).unwrap_or_else(|e| panic!("InferencePool schema: {e}"));
    assert_eq!(pool.api_version, "inference.networking.k8s.io/v1");
    assert_eq!(pool.kind, "InferencePool");
    assert!(pool.metadata.namespace.is_none() && !pool.metadata.name.is_empty());
    assert_eq!(pool.metadata.labels["app.kubernetes.io/part-of"], "kiln");
    assert_eq!(pool.spec.target_ports.len(), 1, "the CRD allows one port");
    let picker = &pool.spec.endpoint_picker_ref;
    assert!(matches!(picker.kind.as_deref(), None | Some("Service")));
    assert!(matches!(picker.group.as_deref(), None | Some("")));
    assert!(matches!(
        picker.failure_mode,
        None | Some(FailureMode::FailClose | FailureMode::FailOpen)
    ));

    // The pool selects the node pods, on the port they serve.
    let nodes = documents(&manifest("nodes.yaml"));
    let node = of_kind(&nodes, "Deployment")[0];
    let pod_labels: BTreeMap<String, String> =
        serde_yaml::from_value(node["spec"]["template"]["metadata"]["labels"].clone())
            .expect("pod labels");
    for (k, v) in &pool.spec.selector.match_labels {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "selector {k}={v} misses the node pods"
        );
    }
    let node_port =
        node["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"].as_u64();
    assert_eq!(node_port, Some(u64::from(pool.spec.target_ports[0].number)));

    // It points at the picker's Service, on the port the picker listens on.
    let services = of_kind(&docs, "Service");
    let service = services
        .iter()
        .find(|s| s["metadata"]["name"] == picker.name.as_str())
        .unwrap_or_else(|| panic!("no Service {}", picker.name));
    let port = picker.port.as_ref().map_or(9002, |p| p.number);
    assert_eq!(
        service["spec"]["ports"][0]["port"].as_u64(),
        Some(u64::from(port))
    );
    let epp = of_kind(&docs, "Deployment")[0];
    let container = &epp["spec"]["template"]["spec"]["containers"][0];
    let name = "app.kubernetes.io/name";
    let pod_name = &epp["spec"]["template"]["metadata"]["labels"][name];
    assert!(pod_name.is_string() && service["spec"]["selector"][name] == *pod_name);
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("picker args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&format!("--pool-name={}", pool.metadata.name).as_str()));
    assert!(
        args.contains(&format!("--grpc-port={port}").as_str()),
        "{args:?}"
    );
    for flag in [
        "--total-queued-requests-metric=kiln:",
        "--kv-cache-usage-percentage-metric=kiln:",
        "--lora-info-metric=kiln:",
    ] {
        assert!(
            args.iter().any(|a| a.starts_with(flag)),
            "{flag} missing: {args:?}"
        );
    }
}

#[test]
fn the_schema_refuses_what_the_crd_refuses() {
    let text = manifest("gateway/inference-pool.yaml");
    for (from, to) in [
        ("targetPorts:", "targetPort:"),
        ("endpointPickerRef:", "extensionRef:"),
        ("failureMode: FailClose", "failureMode: Fail"),
        ("matchLabels:", "matchLabel:"),
    ] {
        let broken = text.replacen(from, to, 1);
        assert!(pool(&documents(&broken)).is_err(), "{to} was accepted");
    }
}
