//! Metadata filters: Vectorize's JSON form parsed into a tree, and the tree compiled to
//! a SQL condition over the vectors table.
//!
//! A property with a declared metadata index is compared on its column (an SQL index
//! serves it); any other is read from the stored JSON with a type check, so a string
//! never compares equal or ordered against a number. `$ne` and `$nin` also match
//! vectors that lack the property.

use rusqlite::types::Value as SqlValue;
use serde_json::Value;

use crate::error::{Result, VectorError};
use crate::record::MetaType;

/// Largest filter, as JSON bytes (Vectorize's limit).
pub const MAX_FILTER_BYTES: usize = 2048;
/// Longest property path.
const MAX_PATH_BYTES: usize = 512;

/// A value a filter compares against.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Str(String),
    Num(f64),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    In,
    Nin,
    Lt,
    Lte,
    Gt,
    Gte,
}

impl Op {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "$eq" => Self::Eq,
            "$ne" => Self::Ne,
            "$in" => Self::In,
            "$nin" => Self::Nin,
            "$lt" => Self::Lt,
            "$lte" => Self::Lte,
            "$gt" => Self::Gt,
            "$gte" => Self::Gte,
            _ => return None,
        })
    }

    fn is_range(self) -> bool {
        matches!(self, Self::Lt | Self::Lte | Self::Gt | Self::Gte)
    }

    fn negated(self) -> bool {
        matches!(self, Self::Ne | Self::Nin)
    }

    fn sql(self) -> &'static str {
        match self {
            Self::Lt => "<",
            Self::Lte => "<=",
            Self::Gt => ">",
            Self::Gte => ">=",
            _ => "=",
        }
    }
}

/// A filter over vectors' metadata.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    /// `path` (dotted for nested properties) compared by `op` with `values` (one value,
    /// or the list of `$in`/`$nin`).
    Cmp {
        path: String,
        op: Op,
        values: Vec<Scalar>,
    },
}

impl Filter {
    /// One comparison, checked: a valid path, one value (a list for `$in`/`$nin`), and a
    /// string or number for an ordering.
    pub fn cmp(path: &str, op: Op, values: Vec<Scalar>) -> Result<Self> {
        let at = format!("filter.{path}");
        check_path(path, &at)?;
        if matches!(op, Op::In | Op::Nin) {
            if values.is_empty() {
                return Err(VectorError::invalid(
                    at,
                    "`$in` and `$nin` need a non-empty list",
                ));
            }
        } else if values.len() != 1 {
            return Err(VectorError::invalid(
                at,
                "this operator compares with one value",
            ));
        }
        if op.is_range() && !matches!(values[0], Scalar::Str(_) | Scalar::Num(_)) {
            return Err(VectorError::invalid(
                at,
                "`$lt`, `$lte`, `$gt` and `$gte` compare with a number or a string",
            ));
        }
        Ok(Self::Cmp {
            path: path.to_string(),
            op,
            values,
        })
    }

    /// Vectorize's form: `{"genre": "drama", "year": {"$gte": 2000, "$lt": 2010}}`,
    /// properties ANDed, dotted keys for nested properties.
    pub fn from_vectorize(v: &Value) -> Result<Self> {
        let Value::Object(fields) = v else {
            return Err(VectorError::invalid(
                "filter",
                "`filter` must be a JSON object",
            ));
        };
        if v.to_string().len() > MAX_FILTER_BYTES {
            return Err(VectorError::invalid(
                "filter",
                format!("`filter` is larger than {MAX_FILTER_BYTES} bytes of JSON"),
            ));
        }
        let mut all = Vec::new();
        for (path, cond) in fields {
            let at = format!("filter.{path}");
            match cond {
                Value::Object(ops) => {
                    if ops.is_empty() {
                        return Err(VectorError::invalid(
                            at,
                            "an operator object needs an operator",
                        ));
                    }
                    for (name, operand) in ops {
                        let op = Op::parse(name).ok_or_else(|| {
                            VectorError::invalid(
                                &at,
                                format!(
                                    "unsupported filter operator '{name}'; use $eq, $ne, $in, \
                                     $nin, $lt, $lte, $gt or $gte (or a dotted key for a nested \
                                     property)"
                                ),
                            )
                        })?;
                        let values = match (op, operand) {
                            (Op::In | Op::Nin, Value::Array(list)) => {
                                list.iter().map(|x| scalar(x, &at)).collect::<Result<_>>()?
                            }
                            (Op::In | Op::Nin, _) => {
                                return Err(VectorError::invalid(
                                    at,
                                    format!("`{name}` takes a list of values"),
                                ))
                            }
                            (_, x) => vec![scalar(x, &at)?],
                        };
                        all.push(Self::cmp(path, op, values)?);
                    }
                }
                x => all.push(Self::cmp(path, Op::Eq, vec![scalar(x, &at)?])?),
            }
        }
        Ok(Self::And(all))
    }

    /// This filter as an SQL condition; `column` gives a property's indexed column and
    /// its type; placeholders are `?`, their values appended to `params` in order.
    pub(crate) fn to_sql(
        &self,
        column: &dyn Fn(&str) -> Option<(usize, MetaType)>,
        params: &mut Vec<SqlValue>,
    ) -> String {
        match self {
            Self::And(parts) | Self::Or(parts) if parts.is_empty() => {
                if matches!(self, Self::And(_)) {
                    "1"
                } else {
                    "0"
                }
                .to_string()
            }
            Self::And(parts) | Self::Or(parts) => {
                let joiner = if matches!(self, Self::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                let parts: Vec<String> = parts.iter().map(|p| p.to_sql(column, params)).collect();
                format!("({})", parts.join(joiner))
            }
            Self::Cmp { path, op, values } => match column(path) {
                Some((slot, ty)) => indexed(slot, ty, *op, values, params),
                None => unindexed(path, *op, values, params),
            },
        }
    }
}

fn scalar(v: &Value, at: &str) -> Result<Scalar> {
    Ok(match v {
        Value::String(s) => Scalar::Str(s.clone()),
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Null => Scalar::Null,
        Value::Number(n) => Scalar::Num(
            n.as_f64()
                .ok_or_else(|| VectorError::invalid(at, "a filter number must be finite"))?,
        ),
        _ => {
            return Err(VectorError::invalid(
                at,
                "filter values are strings, numbers, booleans or null; for a nested property \
                 use a dotted key",
            ))
        }
    })
}

fn check_path(path: &str, at: &str) -> Result<()> {
    let ok = !path.is_empty()
        && path.len() <= MAX_PATH_BYTES
        && !path.starts_with('$')
        && !path.contains('"')
        && path.split('.').all(|s| !s.is_empty());
    if ok {
        Ok(())
    } else {
        Err(VectorError::invalid(
            at,
            format!(
                "'{path}' is not a property path: use names separated by dots, at most \
                 {MAX_PATH_BYTES} bytes, without '\"' or a leading '$'"
            ),
        ))
    }
}

/// The value at a dotted property path of `meta`.
pub(crate) fn property<'a>(
    meta: &'a serde_json::Map<String, Value>,
    path: &str,
) -> Option<&'a Value> {
    let mut segs = path.split('.');
    let first = segs.next().and_then(|s| meta.get(s));
    segs.fold(first, |v, s| v.and_then(|v| v.get(s)))
}

/// The JSON path of a dotted property (`a.b` → `$."a"."b"`).
pub(crate) fn json_path(path: &str) -> String {
    let mut out = String::from("$");
    for seg in path.split('.') {
        out.push_str(".\"");
        out.push_str(seg);
        out.push('"');
    }
    out
}

/// The SQL value of `s` in a column of type `ty`, or `None` when it can't be there.
fn column_value(s: &Scalar, ty: MetaType) -> Option<SqlValue> {
    match (s, ty) {
        (Scalar::Str(v), MetaType::String) => Some(SqlValue::Text(v.clone())),
        (Scalar::Num(v), MetaType::Number) => Some(SqlValue::Real(*v)),
        (Scalar::Bool(v), MetaType::Boolean) => Some(SqlValue::Integer(i64::from(*v))),
        _ => None,
    }
}

fn indexed(
    slot: usize,
    ty: MetaType,
    op: Op,
    values: &[Scalar],
    params: &mut Vec<SqlValue>,
) -> String {
    let col = format!("m{slot}");
    if values == [Scalar::Null] && matches!(op, Op::Eq | Op::Ne) {
        return format!("{col} IS {}NULL", if op == Op::Eq { "" } else { "NOT " });
    }
    let mut vals: Vec<SqlValue> = values.iter().filter_map(|v| column_value(v, ty)).collect();
    if vals.is_empty() {
        // Nothing of this type is ever in the column.
        return if op.negated() { "1" } else { "0" }.into();
    }
    let cond = match op {
        Op::In | Op::Nin => format!("{col} IN ({})", vec!["?"; vals.len()].join(",")),
        Op::Ne | Op::Eq => format!("{col} = ?"),
        _ => format!("{col} {} ?", op.sql()),
    };
    params.append(&mut vals);
    if op.negated() {
        format!("({col} IS NULL OR NOT {cond})")
    } else {
        cond
    }
}

fn unindexed(path: &str, op: Op, values: &[Scalar], params: &mut Vec<SqlValue>) -> String {
    let jp = json_path(path);
    let mut one = |v: &Scalar, cmp: &str| -> String {
        params.push(SqlValue::Text(jp.clone()));
        match v {
            Scalar::Null => "json_type(metadata, ?) = 'null'".into(),
            Scalar::Bool(b) => format!("json_type(metadata, ?) = '{b}'"),
            Scalar::Str(s) => {
                params.push(SqlValue::Text(jp.clone()));
                params.push(SqlValue::Text(s.clone()));
                format!("(json_type(metadata, ?) = 'text' AND json_extract(metadata, ?) {cmp} ?)")
            }
            Scalar::Num(n) => {
                params.push(SqlValue::Text(jp.clone()));
                params.push(SqlValue::Real(*n));
                format!(
                    "(json_type(metadata, ?) IN ('integer', 'real') AND \
                     json_extract(metadata, ?) {cmp} ?)"
                )
            }
        }
    };
    let positive = match op {
        Op::In | Op::Nin => values
            .iter()
            .map(|v| one(v, "="))
            .collect::<Vec<_>>()
            .join(" OR "),
        _ => one(&values[0], op.sql()),
    };
    if op.negated() {
        format!("NOT COALESCE(({positive}), 0)")
    } else {
        format!("COALESCE(({positive}), 0)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_vectorize_filters() {
        let f = Filter::from_vectorize(&json!({"genre": "drama", "year": {"$gte": 2000}}))
            .expect("valid");
        let Filter::And(parts) = f else {
            panic!("an AND")
        };
        assert_eq!(parts.len(), 2);
        assert!(parts.contains(&Filter::Cmp {
            path: "genre".into(),
            op: Op::Eq,
            values: vec![Scalar::Str("drama".into())]
        }));
        for (bad, says) in [
            (
                json!({"x": {"$regex": "a"}}),
                "unsupported filter operator '$regex'",
            ),
            (json!({"x": {"$in": 3}}), "takes a list"),
            (json!({"x": {"$gt": true}}), "number or a string"),
            (json!({"x": {"y": 1}}), "unsupported filter operator 'y'"),
            (json!({"x": [1]}), "dotted key"),
            (json!({"a..b": 1}), "not a property path"),
            (json!([1]), "must be a JSON object"),
        ] {
            let e = Filter::from_vectorize(&bad).expect_err("invalid");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn json_paths_quote_each_segment() {
        assert_eq!(json_path("a.b"), "$.\"a\".\"b\"");
    }
}
