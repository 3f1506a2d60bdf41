//! `kiln bench kernels --quick` as a real process: the JSON it writes is well formed,
//! the machine's ceilings are positive, and every kernel has measurements (or, for a
//! packed kernel on a CPU without one, a stated reason). Timings are never asserted.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The catalogue's weight types on their matmul paths, as the report names them.
const KERNELS: [&str; 9] = [
    "q4_1 packed",
    "q8_0 packed",
    "q5_0 packed",
    "q4_K packed",
    "q6_K packed",
    "q4_0 packed",
    "q5_K packed",
    "q5_0 vec_dot",
    "q4_K vec_dot",
];
const OPS: [&str; 6] = [
    "rms_norm",
    "softmax_inplace",
    "softmax_rows_f32",
    "dot_f16_rows",
    "dot_f16_rows_heads",
    "axpy_f16_rows_heads",
];

fn positive(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x > 0.0 && x.is_finite(), "{what} = {x}");
    x
}

#[test]
fn quick_run_writes_ceilings_and_a_row_per_kernel() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json_path = dir.path().join("kernels.json");
    let out = Command::new(Path::new(env!("CARGO_BIN_EXE_kiln")))
        .args(["bench", "kernels", "--quick", "--threads", "2", "--json"])
        .arg(&json_path)
        .output()
        .expect("kiln runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kiln bench kernels failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| int8 dot product |"), "{stdout}");
    assert!(stdout.contains("| q4_1 packed |"), "{stdout}");

    let text = std::fs::read_to_string(&json_path).expect("the JSON file was written");
    let r: Value = serde_json::from_str(&text).expect("well-formed JSON");
    assert_eq!(r["format"], "kiln-bench-kernels/1");
    assert_eq!(r["quick"], true);
    assert_eq!(r["threads"], 2);
    let c = &r["ceilings"];
    assert_eq!(c["threads"], 2);
    let int8 = positive(&c["int8"]["gops"], "int8 ceiling");
    let mix = positive(&c["int8_kquant_mix"]["gops"], "k-quant mix ceiling");
    // The mix adds widening and sums to the same multiplies: it can't beat them alone
    // (10% for timing noise between the two measurements).
    assert!(mix < 1.1 * int8, "mix {mix} against int8 {int8}");
    assert!(stdout.contains("| int8 k-quant mix |"), "{stdout}");
    positive(&c["f32_fma"]["gflops"], "f32 FMA ceiling");
    let bandwidth = positive(&c["memory"]["gb_per_s"], "memory ceiling");
    assert!(c["memory"]["buffer_bytes"].as_u64() >= Some(64 << 20));

    let rows = r["matmul"].as_array().expect("matmul rows");
    let skipped = r["skipped"].as_array().expect("skipped list");
    let isa = r["machine"]["kernel_isa"].as_str().expect("kernel isa");
    for kernel in KERNELS {
        let mine: Vec<&Value> = rows.iter().filter(|x| x["kernel"] == kernel).collect();
        if mine.is_empty() {
            // Only a packed kernel may be missing, only where there is no packed kernel.
            let why = skipped.iter().find(|s| s["kernel"] == kernel);
            assert!(
                kernel.ends_with("packed") && isa == "scalar" && why.is_some(),
                "no rows for {kernel} (kernel isa {isa}): {text}"
            );
            continue;
        }
        let tokens: Vec<u64> = mine.iter().filter_map(|x| x["tokens"].as_u64()).collect();
        assert_eq!(tokens, [1, 8], "{kernel}");
        for row in mine {
            let what = format!("{kernel} × {}", row["tokens"]);
            let gops = positive(&row["gops"], &what);
            let pct = positive(&row["int8_ceiling_pct"], &what);
            assert!((pct - 100.0 * gops / int8).abs() < 1e-6 * pct, "{what}");
            let k_packed = row["packed"] == true && kernel.contains("_K");
            if k_packed && row["tokens"] != 1 {
                let pct = positive(&row["kquant_mix_pct"], &what);
                assert!((pct - 100.0 * gops / mix).abs() < 1e-6 * pct, "{what}");
            } else {
                assert!(row["kquant_mix_pct"].is_null(), "{what}");
            }
            positive(&row["time"]["median_s"], &what);
            assert!(row["time"]["min_s"].as_f64() <= row["time"]["median_s"].as_f64());
            positive(&row["weight_bytes"], &what);
            if row["tokens"] == 1 {
                let gbs = positive(&row["weight_gb_per_s"], &what);
                let pct = positive(&row["bandwidth_pct"], &what);
                assert!((pct - 100.0 * gbs / bandwidth).abs() < 1e-6 * pct, "{what}");
            } else {
                assert!(row["weight_gb_per_s"].is_null(), "{what}");
            }
        }
    }
    let ops = r["ops"].as_array().expect("op rows");
    let names: Vec<&str> = ops.iter().filter_map(|o| o["op"].as_str()).collect();
    assert_eq!(names, OPS);
    for op in ops {
        let name = op["op"].to_string();
        positive(&op["gb_per_s"], &name);
        // The attention kernels also report their arithmetic rate; the others don't.
        if name.contains("f16") {
            positive(&op["gflops"], &name);
        } else {
            assert!(op["gflops"].is_null(), "{name}");
        }
    }
}

/// `--kernels` measures only the kernels named (the ceilings and ops still run), and a
/// name the shape set doesn't have is refused with the names it does.
#[test]
fn kernels_option_runs_only_the_named_kernels() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json_path = dir.path().join("kernels.json");
    let kiln = Path::new(env!("CARGO_BIN_EXE_kiln"));
    let out = Command::new(kiln)
        .args(["bench", "kernels", "--quick", "--threads", "1"])
        .args(["--kernels", "q4_1 packed, q5_0 vec_dot", "--json"])
        .arg(&json_path)
        .output()
        .expect("kiln runs");
    assert!(
        out.status.success(),
        "kiln bench kernels --kernels failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json_path).expect("the JSON file was written");
    let r: Value = serde_json::from_str(&text).expect("well-formed JSON");
    let ran = |key: &str| -> Vec<String> {
        let mut names: Vec<String> = r[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} list"))
            .iter()
            .filter_map(|x| x["kernel"].as_str().map(str::to_owned))
            .collect();
        names.dedup();
        names
    };
    let mut seen = ran("matmul");
    seen.extend(ran("skipped"));
    seen.sort();
    assert_eq!(seen, ["q4_1 packed", "q5_0 vec_dot"], "{text}");
    positive(&r["ceilings"]["int8"]["gops"], "int8 ceiling");
    assert_eq!(r["ops"].as_array().map(Vec::len), Some(OPS.len()), "{text}");

    let out = Command::new(kiln)
        .args(["bench", "kernels", "--quick", "--kernels", "q4_1 packd"])
        .output()
        .expect("kiln runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a misspelt kernel ran: {stderr}");
    assert!(
        stderr.contains("--kernels")
            && stderr.contains("`q4_1 packd`")
            && stderr.contains("q4_1 packed"),
        "{stderr}"
    );
}
