//! Reading a `torch.save` checkpoint (the zip format) without PyTorch.
//!
//! The archive holds `<name>/data.pkl`, a pickle whose tensors are calls to
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` with each storage
//! a persistent id `('storage', <dtype>Storage, key, device, numel)`, and the raw
//! little-endian storages as `<name>/data/<key>`.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use kiln_formats::StDtype;

use super::pickle::{self, Value};
use crate::error::{Error, Result};

/// One tensor of a checkpoint, its bytes copied out of the archive.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawTensor {
    pub name: String,
    pub dtype: StDtype,
    /// Row-major, outermost first.
    pub shape: Vec<usize>,
    /// Little-endian elements, contiguous.
    pub data: Vec<u8>,
}

/// A checkpoint's pickled object and access to its storages.
pub(crate) struct Checkpoint {
    path: PathBuf,
    archive: zip::ZipArchive<File>,
    /// Archive folder holding `data.pkl` and `data/`, with its trailing `/`.
    prefix: String,
    root: Value,
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(Error::io(path))?;
        let bad = |what: &str, reason: String| Error::Checkpoint {
            path: path.to_path_buf(),
            what: what.into(),
            offset: None,
            reason,
        };
        let mut archive =
            zip::ZipArchive::new(file).map_err(|e| bad("zip archive", e.to_string()))?;
        let pkl_name = archive
            .file_names()
            .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
            .map(str::to_owned)
            .ok_or_else(|| {
                bad(
                    "zip archive",
                    "no <name>/data.pkl member (not a torch.save zip)".into(),
                )
            })?;
        let prefix = pkl_name.trim_end_matches("data.pkl").to_owned();
        if let Ok(order) = read_member(&mut archive, &format!("{prefix}byteorder")) {
            if order != b"little" {
                return Err(bad(
                    "byteorder",
                    format!("{:?} (only little-endian)", String::from_utf8_lossy(&order)),
                ));
            }
        }
        let pkl = read_member(&mut archive, &pkl_name).map_err(|e| bad(&pkl_name, e))?;
        let root = pickle::parse(&pkl).map_err(|e| Error::Checkpoint {
            path: path.to_path_buf(),
            what: pkl_name.clone(),
            offset: Some(e.offset),
            reason: e.reason,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            archive,
            prefix,
            root,
        })
    }

    /// The unpickled top-level object.
    pub fn root(&self) -> &Value {
        &self.root
    }

    fn error(&self, what: &str, reason: String) -> Error {
        Error::Checkpoint {
            path: self.path.clone(),
            what: what.into(),
            offset: None,
            reason,
        }
    }

    /// The tensors of the dict under `key` of the root object, in pickle order.
    pub fn state_dict(&mut self, key: &str) -> Result<Vec<RawTensor>> {
        let entries: Vec<(String, Value)> = self
            .root
            .get(key)
            .and_then(Value::as_dict)
            .ok_or_else(|| self.error(key, "missing, or not a dict".into()))?
            .iter()
            .map(|(k, v)| match k.as_str() {
                Some(name) => Ok((name.to_owned(), v.clone())),
                None => Err(self.error(key, format!("key {k:?} is not a string"))),
            })
            .collect::<Result<_>>()?;
        entries
            .into_iter()
            .map(|(name, value)| self.tensor(name, &value))
            .collect()
    }

    fn tensor(&mut self, name: String, value: &Value) -> Result<RawTensor> {
        let spec = TensorSpec::from_value(value).map_err(|reason| self.error(&name, reason))?;
        let member = format!("{}data/{}", self.prefix, spec.storage_key);
        let storage =
            read_member(&mut self.archive, &member).map_err(|e| self.error(&member, e))?;
        let size = usize::try_from(spec.dtype.size_bytes()).unwrap_or(usize::MAX);
        let numel: usize = spec.shape.iter().product();
        let range = spec
            .offset
            .checked_mul(size)
            .zip(numel.checked_mul(size))
            .and_then(|(start, len)| Some(start..start.checked_add(len)?))
            .filter(|r| r.end <= storage.len())
            .ok_or_else(|| {
                self.error(
                    &name,
                    format!(
                        "offset {} + {numel} elements exceed storage {} of {} bytes",
                        spec.offset,
                        spec.storage_key,
                        storage.len()
                    ),
                )
            })?;
        Ok(RawTensor {
            name,
            dtype: spec.dtype,
            shape: spec.shape,
            data: storage[range].to_vec(),
        })
    }
}

/// What `_rebuild_tensor_v2`'s arguments say about one tensor.
struct TensorSpec {
    storage_key: String,
    dtype: StDtype,
    offset: usize,
    shape: Vec<usize>,
}

impl TensorSpec {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        let Value::Call { func, args } = v else {
            return Err("not a tensor".into());
        };
        if !func.is_global("torch._utils", "_rebuild_tensor_v2") {
            return Err(format!(
                "rebuilt by {func:?}, expected torch._utils._rebuild_tensor_v2"
            ));
        }
        let args = args.as_tuple().ok_or("tensor arguments are not a tuple")?;
        let [Value::Persistent(pid), offset, size, stride, ..] = args else {
            return Err("tensor arguments are not (storage, offset, size, stride, ...)".into());
        };
        let pid = pid.as_tuple().ok_or("storage id is not a tuple")?;
        let [tag, Value::Global { module, name }, key, ..] = pid else {
            return Err("storage id is not ('storage', class, key, ...)".into());
        };
        if tag.as_str() != Some("storage") || module != "torch" {
            return Err(format!(
                "storage id ({tag:?}, {module}.{name}) is not a torch storage"
            ));
        }
        let dtype = match name.as_str() {
            "FloatStorage" => StDtype::F32,
            "BFloat16Storage" => StDtype::BF16,
            "HalfStorage" => StDtype::F16,
            other => {
                return Err(format!(
                    "storage type {other} (supported: Float, BFloat16, Half)"
                ))
            }
        };
        let dims = |v: &Value, what: &str| -> std::result::Result<Vec<usize>, String> {
            v.as_tuple()
                .ok_or_else(|| format!("{what} is not a tuple"))?
                .iter()
                .map(|d| {
                    d.as_int()
                        .and_then(|i| usize::try_from(i).ok())
                        .ok_or_else(|| format!("{what} has {d:?}"))
                })
                .collect()
        };
        let shape = dims(size, "size")?;
        let stride = dims(stride, "stride")?;
        // Only contiguous row-major tensors: what a saved state dict normally holds.
        let mut want = 1usize;
        for (&d, &s) in shape.iter().zip(&stride).rev() {
            if d > 1 && s != want {
                return Err(format!(
                    "strides {stride:?} of shape {shape:?} are not contiguous"
                ));
            }
            want = want.saturating_mul(d);
        }
        if shape.len() != stride.len() {
            return Err(format!(
                "size {shape:?} and stride {stride:?} differ in rank"
            ));
        }
        Ok(Self {
            storage_key: key
                .as_str()
                .ok_or("storage key is not a string")?
                .to_owned(),
            dtype,
            offset: offset
                .as_int()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or("storage offset is not a non-negative integer")?,
            shape,
        })
    }
}

/// The whole of archive member `name`.
fn read_member(
    archive: &mut zip::ZipArchive<File>,
    name: &str,
) -> std::result::Result<Vec<u8>, String> {
    let mut member = archive
        .by_name(name)
        .map_err(|e| format!("member {name}: {e}"))?;
    let mut out = Vec::with_capacity(usize::try_from(member.size()).unwrap_or(0).min(1 << 30));
    member
        .read_to_end(&mut out)
        .map_err(|e| format!("member {name}: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    /// `_rebuild_tensor_v2(('storage', torch.<storage>, '3', 'cpu', 6), 2, size, stride, ...)`.
    fn tensor(storage: &str, size: &[i64], stride: &[i64]) -> Value {
        let pid = Value::Tuple(vec![
            Value::Str("storage".into()),
            Value::Global {
                module: "torch".into(),
                name: storage.into(),
            },
            Value::Str("3".into()),
            Value::Str("cpu".into()),
            int(6),
        ]);
        Value::Call {
            func: Box::new(Value::Global {
                module: "torch._utils".into(),
                name: "_rebuild_tensor_v2".into(),
            }),
            args: Box::new(Value::Tuple(vec![
                Value::Persistent(Box::new(pid)),
                int(2),
                Value::Tuple(size.iter().copied().map(int).collect()),
                Value::Tuple(stride.iter().copied().map(int).collect()),
                Value::Bool(false),
            ])),
        }
    }

    #[test]
    fn reads_contiguous_tensors_and_refuses_others() {
        let spec = TensorSpec::from_value(&tensor("BFloat16Storage", &[2, 3], &[3, 1]))
            .expect("contiguous");
        assert_eq!(
            (
                spec.storage_key.as_str(),
                spec.dtype,
                spec.offset,
                spec.shape
            ),
            ("3", StDtype::BF16, 2, vec![2, 3])
        );
        // Size-1 dimensions may have any stride, as PyTorch leaves them.
        assert!(TensorSpec::from_value(&tensor("FloatStorage", &[1, 4], &[7, 1])).is_ok());
        let transposed = TensorSpec::from_value(&tensor("FloatStorage", &[2, 3], &[1, 2]));
        assert!(transposed
            .err()
            .is_some_and(|e| e.contains("not contiguous")));
        let ints = TensorSpec::from_value(&tensor("LongStorage", &[2], &[1]));
        assert!(ints.err().is_some_and(|e| e.contains("LongStorage")));
        assert!(TensorSpec::from_value(&Value::Int(1)).is_err());
    }
}
