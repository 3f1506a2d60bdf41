//! The placement in force: the nodes (sorted by id), every model their catalogues list,
//! each model's shard and preference list (from [`crate::ring`]), and the names and
//! aliases requests may use. Rebuilt whenever membership or a catalogue changes;
//! requests read an immutable snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::config::RouterConfig;
use crate::nodes::Node;
use crate::ring::{assign, Demand, Ring};

/// One model's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPlace {
    pub replicas: usize,
    /// Node indices, best first.
    pub shard: Vec<usize>,
    /// The shard, then every other node serving the model, in ring order.
    pub preference: Vec<usize>,
}

/// What a request's `model` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A model some node lists (its canonical id).
    Known(String),
    /// A name no node lists.
    Unknown(String),
    /// No `model` given and no default is known yet.
    NoDefault,
}

#[derive(Debug, Default)]
pub struct Placement {
    pub nodes: Vec<Arc<Node>>,
    pub models: BTreeMap<String, ModelPlace>,
    /// Lower-cased id or alias → canonical id.
    names: HashMap<String, String>,
    /// Canonical id → the catalogue task its card gives (the first node's to list it).
    tasks: HashMap<String, String>,
    pub default_model: Option<String>,
    pub capacity: usize,
    load_factor: f64,
    vnodes: u32,
    /// The ring over every node, for state that lives on one node.
    ring: Option<Ring>,
}

impl Placement {
    /// Places every model the nodes' catalogues list.
    pub fn build(mut nodes: Vec<Arc<Node>>, config: &RouterConfig) -> Self {
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        nodes.dedup_by(|a, b| a.id == b.id);
        let catalogues: Vec<_> = nodes.iter().map(|n| n.catalogue()).collect();
        let mut names = HashMap::new();
        let mut tasks = HashMap::new();
        let mut ids: Vec<String> = Vec::new();
        for cards in catalogues.iter().flatten() {
            for m in cards.iter() {
                if !ids.contains(&m.id) {
                    ids.push(m.id.clone());
                }
                if let Some(task) = m.card.get("task").and_then(Value::as_str) {
                    tasks
                        .entry(m.id.clone())
                        .or_insert_with(|| task.to_string());
                }
                names
                    .entry(m.id.to_lowercase())
                    .or_insert_with(|| m.id.clone());
            }
        }
        // Aliases after every id, so an alias never shadows another model's id.
        for cards in catalogues.iter().flatten() {
            for m in cards.iter() {
                for a in &m.aliases {
                    names
                        .entry(a.to_lowercase())
                        .or_insert_with(|| m.id.clone());
                }
            }
        }
        let demands: Vec<Demand> = ids
            .iter()
            .map(|id| Demand {
                model: id.clone(),
                replicas: config.replicas_of(id),
                eligible: catalogues
                    .iter()
                    .map(|c| c.as_ref().is_some_and(|c| c.iter().any(|m| &m.id == id)))
                    .collect(),
            })
            .collect();
        let node_ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
        let ring = Ring::new(&node_ids, config.vnodes);
        let a = assign(&ring, &demands, config.load_factor);
        let models = demands
            .iter()
            .zip(a.shards.into_iter().zip(a.preference))
            .map(|(d, (shard, preference))| {
                (
                    d.model.clone(),
                    ModelPlace {
                        replicas: d.replicas,
                        shard,
                        preference,
                    },
                )
            })
            .collect();
        let mut placement = Self {
            nodes,
            models,
            names,
            tasks,
            default_model: None,
            capacity: a.capacity,
            load_factor: config.load_factor,
            vnodes: config.vnodes,
            ring: Some(ring),
        };
        placement.default_model = match &config.default_model {
            Some(name) => match placement.resolve(Some(name)) {
                Resolved::Known(id) => Some(id),
                _ => Some(name.clone()),
            },
            // A node's default is its first model; take the first node's.
            None => catalogues
                .iter()
                .flatten()
                .find_map(|c| c.first().map(|m| m.id.clone())),
        };
        placement
    }

    /// The node that keeps the state named `key` (an agent, a key's stored responses):
    /// the first node on the ring from `key`, whatever its health, so the state is
    /// never split between nodes; only a change of membership moves it.
    pub fn owner(&self, key: &str) -> Option<&Arc<Node>> {
        let first = *self.ring.as_ref()?.walk(key).first()?;
        self.nodes.get(first)
    }

    /// The canonical model a request's `model` field names (`@kiln/` prefix and case
    /// ignored, aliases followed), as a node would resolve it.
    pub fn resolve(&self, requested: Option<&str>) -> Resolved {
        let Some(name) = requested.map(str::trim).filter(|n| !n.is_empty()) else {
            return match &self.default_model {
                Some(d) => self.resolve(Some(d)),
                None => Resolved::NoDefault,
            };
        };
        let bare = name.strip_prefix("@kiln/").unwrap_or(name);
        [name, bare]
            .iter()
            .find_map(|n| self.names.get(&n.to_lowercase()))
            .map_or_else(
                || Resolved::Unknown(name.to_string()),
                |id| Resolved::Known(id.clone()),
            )
    }

    /// The catalogue task (`text-generation`, ...) of `model` (canonical id).
    pub fn task_of(&self, model: &str) -> Option<&str> {
        self.tasks.get(model).map(String::as_str)
    }

    /// Comma-separated model ids, for "does not exist" messages.
    pub fn served(&self) -> String {
        self.models.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Models whose shard includes node `i`.
    pub fn placements_of(&self, i: usize) -> usize {
        self.models
            .values()
            .filter(|m| m.shard.contains(&i))
            .count()
    }

    /// `(model, shard node ids)` for every model.
    pub fn shards(&self) -> Vec<(String, Vec<String>)> {
        self.models
            .iter()
            .map(|(m, p)| {
                (
                    m.clone(),
                    p.shard.iter().map(|&i| self.nodes[i].id.clone()).collect(),
                )
            })
            .collect()
    }

    /// Every model any node lists, once, in the order first met: the router's
    /// `/v1/models`. Each card is the one of a node that has the model loaded when
    /// there is one (so `ready`, `status` and `max_model_len` agree), else the first.
    pub fn union_cards(&self) -> Vec<Value> {
        let mut cards: Vec<(Value, bool)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for node in &self.nodes {
            for m in node.catalogue().iter().flat_map(|c| c.iter()) {
                match index.get(&m.id) {
                    Some(&i) if m.loaded && !cards[i].1 => cards[i] = (m.card.clone(), true),
                    Some(_) => {}
                    None => {
                        index.insert(m.id.clone(), cards.len());
                        cards.push((m.card.clone(), m.loaded));
                    }
                }
            }
        }
        cards.into_iter().map(|(card, _)| card).collect()
    }

    /// `GET /nodes`: the ring, each node's state, and each model's shard.
    pub fn view(&self, now: Instant) -> Value {
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut v = n.view(now);
                if let Some(o) = v.as_object_mut() {
                    o.insert("placements".into(), json!(self.placements_of(i)));
                }
                v
            })
            .collect();
        let ids = |list: &[usize]| -> Vec<&str> {
            list.iter().map(|&i| self.nodes[i].id.as_str()).collect()
        };
        let models: Vec<Value> = self
            .models
            .iter()
            .map(|(m, p)| {
                json!({
                    "model": m,
                    "replicas": p.replicas,
                    "shard": ids(&p.shard),
                    "preference": ids(&p.preference),
                })
            })
            .collect();
        json!({
            "nodes": nodes,
            "models": models,
            "default_model": self.default_model,
            "capacity": self.capacity,
            "load_factor": self.load_factor,
            "vnodes": self.vnodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeSpec;
    use crate::nodes::{CatalogueModel, Probe};

    fn node(name: &str, models: &[(&str, &[&str])]) -> Arc<Node> {
        let spec = NodeSpec::parse(&format!("http://{name}:1@name={name}")).expect("spec");
        let n = Node::new(spec, Arc::default());
        let catalogue = models
            .iter()
            .map(|(id, aliases)| {
                let card = json!({"id": id, "aliases": aliases, "ready": false, "task": "text-generation"});
                CatalogueModel::from_card(&card)
                    .expect("card")
            })
            .collect();
        n.record_probe(Probe {
            healthy: true,
            catalogue: Some(catalogue),
            ..Probe::default()
        });
        Arc::new(n)
    }

    #[test]
    fn resolves_ids_aliases_prefix_and_default() {
        let a = node(
            "a",
            &[
                ("smollm2-135m-instruct", &["smollm2"]),
                ("gemma3-270m", &[]),
            ],
        );
        let b = node("b", &[("gemma3-270m", &["gemma3"])]);
        let p = Placement::build(vec![b, a], &RouterConfig::default());
        assert_eq!(p.task_of("gemma3-270m"), Some("text-generation"));
        assert_eq!(p.task_of("gpt-4o"), None);
        assert_eq!(p.nodes[0].id, "a");
        let known = |s: &str| Resolved::Known(s.to_string());
        assert_eq!(
            p.resolve(Some("@kiln/SmolLM2")),
            known("smollm2-135m-instruct")
        );
        assert_eq!(p.resolve(Some("gemma3")), known("gemma3-270m"));
        assert_eq!(p.resolve(None), known("smollm2-135m-instruct"));
        assert_eq!(
            p.resolve(Some("gpt-4o")),
            Resolved::Unknown("gpt-4o".into())
        );
        // Only node a serves smollm2: its shard is [a] whatever k is.
        assert_eq!(p.models["smollm2-135m-instruct"].shard, vec![0]);
        assert_eq!(p.models["gemma3-270m"].shard.len(), 2);
        assert_eq!(p.served(), "gemma3-270m, smollm2-135m-instruct");
    }

    #[test]
    fn union_lists_each_model_once() {
        let a = node("a", &[("m1", &[]), ("m2", &[])]);
        let b = node("b", &[("m2", &[]), ("m3", &[])]);
        let p = Placement::build(vec![a, b], &RouterConfig::default());
        let cards = p.union_cards();
        let ids: Vec<&str> = cards.iter().filter_map(|c| c["id"].as_str()).collect();
        assert_eq!(ids, ["m1", "m2", "m3"]);
        assert_eq!(
            p.view(Instant::now())["models"].as_array().map(Vec::len),
            Some(3)
        );
    }
}
