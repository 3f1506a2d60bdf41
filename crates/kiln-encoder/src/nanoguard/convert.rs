//! One-time conversion of the package's PyTorch checkpoint and pickled tiktoken
//! tokenizer into `model.safetensors`, `tokenizer.json` and `config.json`.
//!
//! Inputs are checked against the sha256 of the files the conversion was written for
//! (so the pickle reader only ever sees those), and outputs against the sha256 of what
//! `scripts/fixtures/nanoguard_convert.py` writes from them with torch, safetensors and
//! tiktoken: a fresh checkout needs no Python, and gets exactly the reference's files.
//! Each output is written to a temporary name and renamed into place, `config.json`
//! last, so a directory with `config.json` holds a complete conversion.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::checkpoint::Checkpoint;
use super::config::NanoGuardConfig;
use super::pickle::{self, Value};
use super::st_write;
use super::tiktoken::TiktokenState;
use crate::error::{Error, Result};

/// A file with known size and sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownFile {
    pub file: &'static str,
    pub size: u64,
    pub sha256: &'static str,
}

/// The package's files the conversion reads (`metatronnanoguard==0.1.0`).
pub const SOURCES: [KnownFile; 2] = [
    KnownFile {
        file: "model.pt",
        size: 58_738_997,
        sha256: "80a6f31ce7ff6ccbeff0aa5867ae75ae4b33568b40e83bb5968ed6677ec1262e",
    },
    KnownFile {
        file: "tokenizer.pkl",
        size: 91_647,
        sha256: "e81fa2a4d6202a18d05a50dfe8eb101042512056b2d0492c929e8fea4fa02246",
    },
];

/// The files the conversion writes, as the reference script writes them
/// (`tests/fixtures/nanoguard_conversion.json`). `config.json`, written last, comes last.
pub const OUTPUTS: [KnownFile; 3] = [
    KnownFile {
        file: "model.safetensors",
        size: 58_731_520,
        sha256: "dfedc1e24ad7381e601774d0d4720cd29064eb741f469d4fdf8d64b19d17923c",
    },
    KnownFile {
        file: "tokenizer.json",
        size: 296_040,
        sha256: "31cc70050a758f96162861edc9cc6d02704eac9f59645fc508a4d41b318972b3",
    },
    KnownFile {
        file: "config.json",
        size: 277,
        sha256: "7f26391bc44205bc5e40436f9cd4feaf36e7b7b55b828ae996ead7895e58dbfa",
    },
];

// From the package's source (nanoguard/tokenizer.py, scanner.py, model.py).
const BOS_TOKEN: &str = "<|reserved_0|>";
const PAD_TOKEN: &str = "<|reserved_1|>";
const LABELS: [&str; 2] = ["safe", "injection"];
const ROPE_BASE: u32 = 10_000;

/// Whether `dir` holds this conversion's outputs: each with its size, and the two small
/// ones with their sha256 (a stale or interrupted conversion fails this; the 58 MB
/// weights are not rehashed on every load).
pub fn is_converted(dir: &Path) -> bool {
    OUTPUTS.iter().all(|f| {
        let path = dir.join(f.file);
        let size_ok = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == f.size);
        size_ok
            && (f.size > 1 << 20
                || std::fs::read(&path).is_ok_and(|d| hex::encode(Sha256::digest(&d)) == f.sha256))
    })
}

/// Converts `model.pt` and `tokenizer.pkl` in `source_dir` into [`OUTPUTS`] in `out_dir`.
///
/// Takes a fraction of a second; nothing is written unless every output matches the
/// reference conversion.
pub fn convert(source_dir: &Path, out_dir: &Path) -> Result<()> {
    for src in &SOURCES {
        check_source(&source_dir.join(src.file), src)?;
    }
    let model_path = source_dir.join(SOURCES[0].file);
    let tok_path = source_dir.join(SOURCES[1].file);
    let mut ckpt = Checkpoint::open(&model_path)?;
    let tensors = ckpt.state_dict("model_state_dict")?;

    let pkl = std::fs::read(&tok_path).map_err(Error::io(&tok_path))?;
    let bad_tokenizer = |offset: Option<u64>, reason: String| Error::Checkpoint {
        path: tok_path.clone(),
        what: "tiktoken encoding".into(),
        offset,
        reason,
    };
    let tok_value = pickle::parse(&pkl).map_err(|e| bad_tokenizer(Some(e.offset), e.reason))?;
    let tiktoken = TiktokenState::from_value(&tok_value).map_err(|r| bad_tokenizer(None, r))?;

    let cfg = config(ckpt.root(), &tiktoken).map_err(|reason| Error::Checkpoint {
        path: model_path.clone(),
        what: "checkpoint config".into(),
        offset: None,
        reason,
    })?;
    let bad_output = |reason: String| Error::Checkpoint {
        path: model_path.clone(),
        what: "converted output".into(),
        offset: None,
        reason,
    };
    let contents = [
        st_write::serialize(&tensors).map_err(bad_output)?,
        tiktoken
            .tokenizer_json(BOS_TOKEN)
            .map_err(|r| bad_tokenizer(None, r))?,
        serde_json::to_vec(&cfg).map_err(|e| bad_output(e.to_string()))?,
    ];
    for (known, data) in OUTPUTS.iter().zip(&contents) {
        let found = hex::encode(Sha256::digest(data));
        if found != known.sha256 {
            return Err(Error::ConversionMismatch {
                file: known.file,
                size: data.len(),
                expected: known.sha256,
                found,
            });
        }
    }
    std::fs::create_dir_all(out_dir).map_err(Error::io(out_dir))?;
    for (known, data) in OUTPUTS.iter().zip(&contents) {
        write_atomically(&out_dir.join(known.file), data)?;
    }
    Ok(())
}

/// The config from the checkpoint's `config` dict and the package's constants.
fn config(root: &Value, tok: &TiktokenState) -> std::result::Result<NanoGuardConfig, String> {
    let c = root
        .get("config")
        .ok_or("no \"config\" in the checkpoint")?;
    let int = |key: &str| {
        c.get(key)
            .and_then(Value::as_int)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| format!("config.{key} is missing or not a non-negative integer"))
    };
    let special = |name: &str| {
        tok.special_id(name)
            .ok_or_else(|| format!("tokenizer has no {name:?}"))
    };
    Ok(NanoGuardConfig {
        architecture: "nanoguard".into(),
        sequence_len: int("sequence_len")?,
        vocab_size: int("vocab_size")?,
        n_layer: int("n_layer")?,
        n_head: int("n_head")?,
        n_kv_head: int("n_kv_head")?,
        n_embd: int("n_embd")?,
        num_classes: int("num_classes")?,
        rope_base: ROPE_BASE,
        labels: LABELS.iter().map(|s| (*s).to_owned()).collect(),
        bos_token: BOS_TOKEN.into(),
        bos_token_id: special(BOS_TOKEN)?,
        pad_token: PAD_TOKEN.into(),
        pad_token_id: special(PAD_TOKEN)?,
    })
}

fn check_source(path: &Path, known: &KnownFile) -> Result<()> {
    let mut file = std::fs::File::open(path).map_err(Error::io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(Error::io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let found = hex::encode(hasher.finalize());
    if found == known.sha256 {
        Ok(())
    } else {
        Err(Error::SourceMismatch {
            path: path.to_path_buf(),
            expected: known.sha256,
            found,
        })
    }
}

fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    kiln_formats::write_atomically(path, data).map_err(Error::io(path))
}
