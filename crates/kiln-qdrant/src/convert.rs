//! Kiln's vectors, filters and metrics to Qdrant's, and Qdrant's points back.

use std::collections::HashMap;

use kiln_vectors::{Filter, Match, Metric, Op, Scalar, VectorError, VectorRecord};
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::vector_output::Vector;
use qdrant_client::qdrant::vectors_output::VectorsOptions;
use qdrant_client::qdrant::{
    self, Condition, Distance, PointId, PointStruct, Range, RetrievedPoint, ScoredPoint,
    VectorsOutput,
};
use qdrant_client::Payload;
use serde_json::{json, Map, Value};

/// The payload keys a point carries besides its vector.
pub(crate) const ID: &str = "id";
pub(crate) const NAMESPACE: &str = "namespace";
pub(crate) const METADATA: &str = "metadata";

pub(crate) fn distance(m: Metric) -> Distance {
    match m {
        Metric::Cosine => Distance::Cosine,
        Metric::Euclidean => Distance::Euclid,
        Metric::DotProduct => Distance::Dot,
    }
}

/// The point id of vector `id`: its name-based (v5) UUID (Qdrant takes numbers or
/// UUIDs; Vectorize ids are strings up to 64 bytes).
pub(crate) fn point_id(id: &str) -> PointId {
    let u = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, id.as_bytes());
    PointId {
        point_id_options: Some(PointIdOptions::Uuid(u.to_string())),
    }
}

pub(crate) fn point(r: &VectorRecord) -> Result<PointStruct, VectorError> {
    let payload = Payload::try_from(json!({
        ID: r.id,
        NAMESPACE: r.namespace,
        METADATA: r.metadata.clone().map_or(Value::Null, Value::Object),
    }))
    .map_err(|e| VectorError::invalid("vectors", format!("metadata Qdrant can't store: {e}")))?;
    Ok(PointStruct::new(point_id(&r.id), r.values.clone(), payload))
}

/// A point's id, namespace and metadata from its payload.
fn unpack(
    payload: HashMap<String, qdrant::Value>,
) -> (String, Option<String>, Option<Map<String, Value>>) {
    let mut p: Map<String, Value> = payload
        .into_iter()
        .map(|(k, v)| (k, v.into_json()))
        .collect();
    let id = match p.remove(ID) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    let namespace = match p.remove(NAMESPACE) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let metadata = match p.remove(METADATA) {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    };
    (id, namespace, metadata)
}

fn dense(v: Option<VectorsOutput>) -> Option<Vec<f32>> {
    match v?.vectors_options? {
        VectorsOptions::Vector(out) => match out.into_vector() {
            Vector::Dense(d) => Some(d.data),
            _ => None,
        },
        VectorsOptions::Vectors(_) => None,
    }
}

pub(crate) fn record(p: RetrievedPoint) -> VectorRecord {
    let (id, namespace, metadata) = unpack(p.payload);
    VectorRecord {
        id,
        values: dense(p.vectors).unwrap_or_default(),
        namespace,
        metadata,
    }
}

/// A scored point as a match: Qdrant's cosine and dot scores are similarities and its
/// euclidean score a distance, as Vectorize reports them.
pub(crate) fn matched(p: ScoredPoint) -> Match {
    let (id, namespace, metadata) = unpack(p.payload);
    Match {
        id,
        score: p.score,
        namespace,
        values: dense(p.vectors),
        metadata,
    }
}

/// The Qdrant filter for a query's namespace and metadata filter.
pub(crate) fn query_filter(
    namespace: Option<&str>,
    filter: Option<&Filter>,
) -> Result<Option<qdrant::Filter>, VectorError> {
    let mut must = Vec::new();
    if let Some(ns) = namespace {
        must.push(Condition::matches(NAMESPACE, ns.to_string()));
    }
    if let Some(f) = filter {
        must.push(condition(f)?);
    }
    Ok((!must.is_empty()).then(|| qdrant::Filter::must(must)))
}

/// One filter node as a condition (nested nodes as nested filters).
pub(crate) fn condition(f: &Filter) -> Result<Condition, VectorError> {
    Ok(match f {
        Filter::And(parts) => {
            qdrant::Filter::must(parts.iter().map(condition).collect::<Result<Vec<_>, _>>()?).into()
        }
        Filter::Or(parts) => {
            qdrant::Filter::should(parts.iter().map(condition).collect::<Result<Vec<_>, _>>()?)
                .into()
        }
        Filter::Cmp { path, op, values } => {
            let key = format!("{METADATA}.{path}");
            match op {
                Op::Eq => equals(&key, &values[0]),
                // Vectorize's `$ne` and `$nin` also match vectors without the property,
                // as Qdrant's `must_not` does.
                Op::Ne => qdrant::Filter::must_not([equals(&key, &values[0])]).into(),
                Op::In => any_of(&key, values),
                Op::Nin => qdrant::Filter::must_not([any_of(&key, values)]).into(),
                Op::Lt | Op::Lte | Op::Gt | Op::Gte => {
                    let Scalar::Num(n) = values[0] else {
                        return Err(VectorError::invalid(
                            format!("filter.{path}"),
                            "indexes on qdrant compare strings by equality only; `$lt`, `$lte`, \
                             `$gt` and `$gte` take a number there",
                        ));
                    };
                    let n = Some(n);
                    let range = match op {
                        Op::Lt => Range {
                            lt: n,
                            ..Range::default()
                        },
                        Op::Lte => Range {
                            lte: n,
                            ..Range::default()
                        },
                        Op::Gt => Range {
                            gt: n,
                            ..Range::default()
                        },
                        _ => Range {
                            gte: n,
                            ..Range::default()
                        },
                    };
                    Condition::range(key, range)
                }
            }
        }
    })
}

/// `key` equal to `v`, of `v`'s type only (a number never equals a string).
fn equals(key: &str, v: &Scalar) -> Condition {
    match v {
        Scalar::Str(s) => Condition::matches(key, s.clone()),
        Scalar::Bool(b) => Condition::matches(key, *b),
        // A range of one point matches integers and floats alike.
        Scalar::Num(n) => Condition::range(
            key,
            Range {
                gte: Some(*n),
                lte: Some(*n),
                ..Range::default()
            },
        ),
        Scalar::Null => Condition::is_null(key),
    }
}

fn any_of(key: &str, values: &[Scalar]) -> Condition {
    let strings: Option<Vec<String>> = values
        .iter()
        .map(|v| match v {
            Scalar::Str(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    match strings {
        Some(s) => Condition::matches(key, s),
        None => {
            qdrant::Filter::should(values.iter().map(|v| equals(key, v)).collect::<Vec<_>>()).into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdrant_client::qdrant::condition::ConditionOneOf;

    #[test]
    fn ids_are_stable_uuids() {
        let a = point_id("doc-1");
        assert_eq!(a, point_id("doc-1"));
        assert_ne!(a, point_id("doc-2"));
        let Some(PointIdOptions::Uuid(u)) = a.point_id_options else {
            panic!("a uuid")
        };
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "5");
    }

    #[test]
    fn filters_become_qdrant_conditions() {
        let f = Filter::from_vectorize(
            &json!({"genre": "drama", "year": {"$gte": 2000}, "tag": {"$nin": ["a", "b"]}}),
        )
        .expect("filter");
        let q = query_filter(Some("ns"), Some(&f))
            .expect("ok")
            .expect("some");
        assert_eq!(q.must.len(), 2, "{q:?}");
        let text = format!("{q:?}");
        for expected in [
            "metadata.genre",
            "metadata.year",
            "metadata.tag",
            "gte: Some(2000.0)",
            "namespace",
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
        let Some(ConditionOneOf::Field(ns)) = &q.must[0].condition_one_of else {
            panic!("{q:?}")
        };
        assert_eq!(ns.key, "namespace");
        let s = Filter::from_vectorize(&json!({"name": {"$lt": "m"}})).expect("filter");
        assert!(query_filter(None, Some(&s)).is_err());
        assert!(query_filter(None, None).expect("ok").is_none());
    }
}
