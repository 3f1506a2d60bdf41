//! Kernels against the `gguf` Python package on real model rows.
//!
//! Fixtures (`tests/fixtures/dequant/`, written by `scripts/fixtures/kernel_dequant.py`)
//! hold raw GGUF rows of every weight type and `gguf.quants.dequantize`'s output for
//! them. Every ISA's `dequantize_row` must reproduce that output bit for bit: both sides
//! do the same f32 operations in the same order (e.g. q4_K is `(d·sc)·q − dmin·m`, q6_K
//! `(d·sc)·q`), and f16/bf16 widening is exact, so there is no rounding slack to allow.
//!
//! `vec_dot` is then checked against f64 dots of the reference weights:
//! - with the dequantized quantized activation x̂: only f32 summation error (and, for
//!   q4_1, the f16 rounding in q8_1's stored block sum) separates the two;
//! - with the original activation x: the difference is `Σ w·(x − x̂)`, bounded by the
//!   activation quantization error, |x − x̂| ≤ d/2 plus the f16 rounding of d.

mod common;

use std::path::{Path, PathBuf};

use common::{dequantize, dequantize_act, magnitude, quant_ranges, quantize, scalar, tables};
use kiln_kernels::{ActType, WeightType};

struct Fixture {
    name: String,
    ty: WeightType,
    n: usize,
    rows: usize,
    source: String,
    raw: Vec<u8>,
    expected: Vec<f32>,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dequant")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixtures() -> Vec<Fixture> {
    let index: serde_json::Value = serde_json::from_slice(&read(&dir().join("index.json")))
        .unwrap_or_else(|e| panic!("index.json: {e}"));
    let list = index["fixtures"]
        .as_array()
        .unwrap_or_else(|| panic!("no fixture list"));
    list.iter()
        .map(|f| {
            let field = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{f}: no {k}"));
            let text = |k: &str| f[k].as_str().unwrap_or_else(|| panic!("{f}: no {k}"));
            let name = text("name").to_owned();
            let id = field("ggml_type_id") as u32;
            let ty = WeightType::from_ggml_type_id(id)
                .unwrap_or_else(|| panic!("{name}: no kernel for ggml type {id}"));
            let (n, rows) = (field("n_per_row") as usize, field("rows") as usize);
            let raw = read(&dir().join(format!("{name}.bin")));
            let expected: Vec<f32> = read(&dir().join(format!("{name}.f32")))
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let row_bytes = ty.row_bytes(n).unwrap_or_else(|| panic!("{name}: n={n}"));
            assert_eq!(raw.len(), rows * row_bytes, "{name}: raw size");
            assert_eq!(expected.len(), rows * n, "{name}: expected size");
            Fixture {
                name,
                ty,
                n,
                rows,
                source: text("source").to_owned(),
                raw,
                expected,
            }
        })
        .collect()
}

impl Fixture {
    fn row(&self, r: usize) -> (&[u8], &[f32]) {
        let rb = self.raw.len() / self.rows;
        (
            &self.raw[r * rb..(r + 1) * rb],
            &self.expected[r * self.n..(r + 1) * self.n],
        )
    }
}

#[test]
fn fixtures_cover_every_weight_type() {
    let fx = fixtures();
    for ty in WeightType::ALL {
        assert!(fx.iter().any(|f| f.ty == ty), "no fixture for {ty}");
    }
    // The types the shipped models use come from real model rows, not synthetic data.
    for ty in [
        WeightType::Q4_1,
        WeightType::Q8_0,
        WeightType::Q5_0,
        WeightType::Q4_K,
        WeightType::Q6_K,
        WeightType::F32,
    ] {
        assert!(
            fx.iter().any(|f| f.ty == ty && f.source.contains(".gguf:")),
            "no real-model fixture for {ty}"
        );
    }
}

#[test]
fn dequantize_is_bit_exact_with_gguf_py() {
    for f in fixtures() {
        for t in tables() {
            for r in 0..f.rows {
                let (raw, want) = f.row(r);
                let got = dequantize(t, f.ty, raw, f.n);
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits(),
                        "{} ({}) {} row {r} elem {i}: got {g:e} want {w:e}",
                        f.name,
                        f.source,
                        t.isa()
                    );
                }
            }
        }
    }
}

/// A deterministic activation row with varied magnitudes across blocks.
fn activation(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = (i * 7 + seed * 13) as f32;
            (t * 0.37).sin() * (1.0 + ((i / 32 + seed) % 5) as f32) * 0.25
        })
        .collect()
}

/// Per-element bound on |x − x̂| for activation type `act`, from each block's scale.
fn act_error_bound(act: ActType, x: &[f32]) -> Vec<f64> {
    let be = act.block_elems();
    x.chunks_exact(be)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = f64::from(amax) / 127.0;
            let e = match act {
                ActType::F32 => 0.0,
                // Rounding to the grid (d/2) plus |q| ≤ 127 times f16's rounding of d.
                ActType::Q8_0 | ActType::Q8_1 => d * (0.5 + 127.0 * 2f64.powi(-11)),
                // f32 scale: rounding of 1/iscale is negligible beside d/2.
                ActType::Q8_K => d * (0.5 + 1e-4),
            };
            std::iter::repeat_n(e, be)
        })
        .collect()
}

#[test]
fn vec_dot_matches_reference_weights() {
    for f in fixtures() {
        let act = f.ty.act_type();
        for r in 0..f.rows {
            let (raw, w) = f.row(r);
            let x = activation(f.n, r);
            let a = quantize(scalar(), act, &x);
            let xq = dequantize_act(act, &a, f.n);

            let err_x = act_error_bound(act, &x);
            for (i, (&xi, &qi)) in x.iter().zip(&xq).enumerate() {
                let e = f64::from((xi - qi).abs());
                assert!(
                    e <= err_x[i],
                    "{act} quantization error {e} > bound {}",
                    err_x[i]
                );
            }

            let dot = |v: &[f32]| -> f64 {
                w.iter()
                    .zip(v)
                    .map(|(&p, &q)| f64::from(p) * f64::from(q))
                    .sum()
            };
            let (ref_q, ref_x) = (dot(&xq), dot(&x));
            let mag = magnitude(f.ty, raw, &xq);
            let steps = f.n / f.ty.block_elems().max(8) + 16;
            let mut tol_q = 2.0 * steps as f64 * f64::from(f32::EPSILON) * mag + 1e-30;
            if f.ty == WeightType::Q4_1 {
                tol_q += q8_1_sum_rounding(&f, raw, &xq);
            }
            let tol_x = tol_q
                + w.iter()
                    .zip(&err_x)
                    .map(|(&p, &e)| f64::from(p.abs()) * e)
                    .sum::<f64>();

            for t in tables() {
                let got = f64::from((t.weight(f.ty).vec_dot)(f.n, raw, &a));
                let ctx = format!("{} ({}) {} row {r}", f.name, f.source, t.isa());
                assert!(
                    (got - ref_q).abs() <= tol_q,
                    "{ctx}: vec_dot {got} vs Σw·x̂ {ref_q}: |err| {:e} > {tol_q:e}",
                    (got - ref_q).abs()
                );
                assert!(
                    (got - ref_x).abs() <= tol_x,
                    "{ctx}: vec_dot {got} vs Σw·x {ref_x}: |err| {:e} > {tol_x:e}",
                    (got - ref_x).abs()
                );
            }
        }
    }
}

/// q4_1's min term uses q8_1's `s = f16(d·Σq)` where the reference uses
/// `Σ x̂ = f16(d)·Σq`: two f16 roundings (of `s` and of `d`), each at most 2^−11
/// relative, so 2^−10·|Σ x̂| per block, times the block's min.
fn q8_1_sum_rounding(f: &Fixture, raw: &[u8], xq: &[f32]) -> f64 {
    assert_eq!(quant_ranges(f.ty), &[(4, 20)]);
    raw.chunks_exact(f.ty.block_bytes())
        .zip(xq.chunks_exact(32))
        .map(|(blk, xb)| {
            let m = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
            let s: f64 = xb.iter().map(|&v| f64::from(v)).sum();
            f64::from(m.abs()) * s.abs() * 2f64.powi(-10)
        })
        .sum()
}
