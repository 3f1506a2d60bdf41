//! The kernel benchmark's results: JSON for tools, Markdown tables for people.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ceilings::Ceilings;
use super::matmul::{MatmulRow, Skipped};
use super::ops::OpRow;
use crate::error::Result;
use crate::report::save_json;

/// Version tag of the kernel report JSON.
pub const KERNELS_FORMAT: &str = "kiln-bench-kernels/1";

/// The machine the kernels ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo` (`unknown` elsewhere).
    pub cpu: String,
    pub logical_cpus: usize,
    /// The instruction set of Kiln's kernel table (`KernelTable::best`).
    pub kernel_isa: String,
    /// `/proc/loadavg` (1, 5, 15 minutes) before and after the run: a busy machine
    /// lowers every figure.
    pub load_average_before: Option<[f64; 3]>,
    pub load_average_after: Option<[f64; 3]>,
}

/// Everything one `kiln bench kernels` run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    /// Always [`KERNELS_FORMAT`].
    pub format: String,
    /// RFC 3339 start time.
    pub started_at: String,
    pub quick: bool,
    /// Threads of the matmuls and the ceilings (the f32 ops run on one).
    pub threads: usize,
    /// Bytes of distinct weights each matmul's calls rotate through.
    pub weight_set_bytes: usize,
    pub machine: Machine,
    pub ceilings: Ceilings,
    pub matmul: Vec<MatmulRow>,
    pub skipped: Vec<Skipped>,
    pub ops: Vec<OpRow>,
    pub wall_seconds: f64,
}

impl KernelReport {
    /// Writes the report as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        save_json(path, self)
    }

    /// The ceilings, the matmuls and the ops as Markdown tables.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let m = &self.machine;
        let load = |l: Option<[f64; 3]>| l.map_or("?".to_owned(), |l| format!("{:.2}", l[0]));
        let _ = writeln!(
            t,
            "{} ({} logical CPUs), {} threads, kernel table {}, load average {} → {}\n",
            m.cpu,
            m.logical_cpus,
            self.threads,
            m.kernel_isa,
            load(m.load_average_before),
            load(m.load_average_after)
        );
        let c = &self.ceilings;
        let _ = writeln!(
            t,
            "| ceiling ({} threads) | measured with | rate |",
            c.threads
        );
        let _ = writeln!(t, "|---|---|---|");
        let _ = writeln!(
            t,
            "| int8 dot product | {} | {:.1} GOPS |",
            c.int8.instruction, c.int8.gops
        );
        if let Some(mix) = &c.int8_kquant_mix {
            let _ = writeln!(
                t,
                "| int8 k-quant mix | {} | {:.1} GOPS |",
                mix.instruction, mix.gops
            );
        }
        let _ = writeln!(
            t,
            "| f32 FMA | {} | {:.1} GFLOPS |",
            c.f32_fma.instruction, c.f32_fma.gflops
        );
        let _ = writeln!(
            t,
            "| memory read | streaming sum over {} MiB | {:.1} GB/s |\n",
            c.memory.buffer_bytes >> 20,
            c.memory.gb_per_s
        );
        let _ = writeln!(
            t,
            "| kernel | rows×cols | role | tokens | time/call | GOPS | % int8 ceiling | % k-quant mix | weights GB/s | % bandwidth |"
        );
        let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.matmul {
            let _ = writeln!(
                t,
                "| {} | {}×{} | {} | {} | {} | {:.1} | {:.1}% | {} | {} | {} |",
                r.kernel,
                r.rows,
                r.cols,
                r.role,
                r.tokens,
                duration(r.time.median_s),
                r.gops,
                r.int8_ceiling_pct,
                r.kquant_mix_pct
                    .map_or(String::new(), |v| format!("{v:.0}%")),
                r.weight_gb_per_s
                    .map_or(String::new(), |v| format!("{v:.1}")),
                r.bandwidth_pct
                    .map_or(String::new(), |v| format!("{v:.0}%"))
            );
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(t, "\nskipped:");
            for s in &self.skipped {
                let _ = writeln!(t, "- {} at {}×{}: {}", s.kernel, s.rows, s.cols, s.reason);
            }
        }
        // The ops run on one thread: set them against one thread's share of the ceiling.
        let fma_per_thread = c.f32_fma.gflops / c.threads.max(1) as f64;
        let _ = writeln!(
            t,
            "\n| op (1 thread) | shape | time/call | GB/s | GFLOPS | % FMA ceiling |"
        );
        let _ = writeln!(t, "|---|---|---|---|---|---|");
        for o in &self.ops {
            let (gflops, pct) = o.gflops.map_or((String::new(), String::new()), |g| {
                (
                    format!("{g:.1}"),
                    format!("{:.0}%", 100.0 * g / fma_per_thread),
                )
            });
            let _ = writeln!(
                t,
                "| {} | {} | {} | {:.1} | {gflops} | {pct} |",
                o.op,
                o.shape,
                duration(o.time.median_s),
                o.gb_per_s
            );
        }
        t
    }
}

/// Seconds as µs or ms with three significant-ish digits.
fn duration(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration(12.34e-6), "12.3 µs");
        assert_eq!(duration(0.0123), "12.30 ms");
        assert_eq!(duration(2.5), "2.50 s");
    }
}
