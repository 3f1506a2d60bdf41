//! `kiln bench kernels`: each compute kernel's throughput against the machine's own
//! ceilings, measured in the same run.
//!
//! 1. Ceilings ([`ceilings`]), on every thread: the int8 dot-product rate (a register
//!    loop of AVX-512 VNNI `vpdpbusd`, or AVX2 `vpmaddubsw`: the kernel table's own,
//!    which `KILN_CPU` may narrow), the f32 FMA rate, and the memory read bandwidth
//!    (a streaming sum over a buffer far larger than the caches).
//! 2. `kiln_backend::matmul` ([`matmul`]) for each weight type of the catalogue's
//!    models, packed where Kiln packs it, at SmolLM2's shapes and 1–128 tokens: median
//!    time per call, GOPS and % of the int8 ceiling, and at batch 1 the weight bytes
//!    streamed per second against the bandwidth ceiling.
//! 3. `kiln_kernels::ops` f32 primitives in GB/s ([`ops`]).
//!
//! Unlike the serving benchmark this links the backend: it times the real public APIs
//! the model calls, never copies of them.

mod ceilings;
mod machine;
mod matmul;
mod microkernels;
mod ops;
mod report;
mod timing;
mod weights;

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln_backend::ThreadPool;
use kiln_kernels::KernelTable;

pub use ceilings::{Ceilings, FmaCeiling, Int8Ceiling, MemoryCeiling};
pub use matmul::{MatmulRow, Skipped};
pub use microkernels::{FmaIsa, Int8Isa};
pub use ops::OpRow;
pub use report::{KernelReport, Machine, KERNELS_FORMAT};
pub use timing::CallTime;

use crate::error::{Error, Result};
use ceilings::CeilingPlan;
use matmul::{
    MatmulEnv, MatmulKernel, Shape, CATALOGUE_SHAPES, KERNELS, KQUANT_KERNELS, KQUANT_SHAPES,
};
use timing::TimingPlan;

const MIB: usize = 1 << 20;

/// Settings of one kernel benchmark run.
#[derive(Debug, Clone)]
pub struct KernelBenchConfig {
    /// Threads of the ceilings and the matmuls (the f32 ops run on one).
    pub threads: usize,
    /// A short run: fewer shapes and token counts, brief timings, small buffers.
    pub quick: bool,
    /// Bytes of distinct weights each matmul's calls rotate through, so that batch-1
    /// calls read their weights from memory (0: one matrix, which stays in cache).
    pub weight_set_bytes: usize,
    /// Bytes of the buffer the bandwidth ceiling streams through.
    pub memory_bytes: usize,
    /// Show a progress bar on stderr (when it is a terminal).
    pub progress: bool,
    /// Which kernels at which shapes.
    pub shapes: ShapeSet,
    /// Only these of the set's matmul kernels, by the names the report gives them
    /// (`q4_K packed`); empty runs them all. A before/after of one kernel then takes
    /// seconds, short enough to fit in one of a shared machine's quiet phases.
    pub kernels: Vec<String>,
}

/// The (kernel, shape) sets `kiln bench kernels` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShapeSet {
    /// Every packed type at the catalogue models' shapes (SmolLM2, Qwen2.5-0.5B).
    #[default]
    Catalogue,
    /// The k-quant kernels at the shapes of popular Q4_K_M files (rows 1536–4096).
    Kquant,
}

impl ShapeSet {
    /// Parses `catalogue` or `kquant`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "catalogue" => Some(Self::Catalogue),
            "kquant" => Some(Self::Kquant),
            _ => None,
        }
    }

    fn kernels(self) -> &'static [MatmulKernel] {
        match self {
            Self::Catalogue => &KERNELS,
            Self::Kquant => &KQUANT_KERNELS,
        }
    }

    fn shapes(self) -> &'static [Shape] {
        match self {
            Self::Catalogue => &CATALOGUE_SHAPES,
            Self::Kquant => &KQUANT_SHAPES,
        }
    }
}

impl KernelBenchConfig {
    /// The defaults: a 128 MiB weight set and a 512 MiB bandwidth buffer, both well past
    /// any last-level cache; `quick` shrinks both.
    pub fn new(threads: usize, quick: bool) -> Self {
        Self {
            threads,
            quick,
            weight_set_bytes: if quick { 8 * MIB } else { 128 * MIB },
            memory_bytes: if quick { 64 * MIB } else { 512 * MIB },
            progress: true,
            shapes: ShapeSet::Catalogue,
            kernels: Vec::new(),
        }
    }

    /// Every core this process may use.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    fn token_counts(&self) -> &'static [usize] {
        if self.quick {
            &[1, 8]
        } else {
            &[1, 8, 32, 128]
        }
    }

    fn timing(&self) -> TimingPlan {
        if self.quick {
            TimingPlan {
                warmup: 1,
                min_reps: 3,
                max_reps: 50,
                budget: Duration::from_millis(5),
            }
        } else {
            TimingPlan {
                warmup: 3,
                min_reps: 7,
                max_reps: 5000,
                budget: Duration::from_millis(250),
            }
        }
    }

    fn ceiling_plan(&self) -> CeilingPlan {
        CeilingPlan {
            threads: self.threads,
            loop_time: Duration::from_millis(if self.quick { 20 } else { 200 }),
            repetitions: if self.quick { 2 } else { 5 },
            memory_bytes: self.memory_bytes,
        }
    }
}

/// Measures the ceilings, then every kernel (see the module docs).
pub fn run_kernels(config: &KernelBenchConfig) -> Result<KernelReport> {
    if config.threads == 0 {
        return Err(Error::Option {
            option: "--threads",
            reason: "must be at least 1".to_owned(),
        });
    }
    if config.memory_bytes < MIB {
        return Err(Error::Option {
            option: "--memory-buffer",
            reason: format!(
                "{} bytes is too small to measure memory",
                config.memory_bytes
            ),
        });
    }
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339();
    let load_before = machine::load_average();
    let kt = KernelTable::best();

    let names: Vec<String> = config.shapes.kernels().iter().map(|k| k.name()).collect();
    if let Some(unknown) = config.kernels.iter().find(|k| !names.contains(k)) {
        return Err(Error::Option {
            option: "--kernels",
            reason: format!(
                "no kernel `{unknown}` in this shape set; it has: {}",
                names.join(", ")
            ),
        });
    }
    let (mut planned, mut skipped) = plan(kt, config.shapes, config.quick);
    if !config.kernels.is_empty() {
        planned.retain(|(k, _)| config.kernels.contains(&k.name()));
        skipped.retain(|s| config.kernels.contains(&s.kernel));
    }
    let tokens = config.token_counts();
    let steps = 3 + planned.len() * tokens.len() + ops::OPS.len();
    let bar = progress_bar(steps, config.progress);
    let mut step = |msg: &str| {
        bar.inc(1);
        bar.set_message(msg.to_owned());
    };

    let ceilings = ceilings::measure(&config.ceiling_plan(), &mut step);
    let pool = ThreadPool::new(config.threads);
    let env = MatmulEnv {
        pool: &pool,
        kt,
        ceilings: &ceilings,
        timing: config.timing(),
        weight_set_bytes: config.weight_set_bytes,
    };
    let mut rows = vec![];
    for (kernel, shape) in planned {
        rows.extend(matmul::measure(&env, kernel, shape, tokens, &mut step)?);
    }
    let timing = config.timing();
    let mut op_rows = vec![];
    for name in ops::OPS {
        step(&format!("op {name}"));
        op_rows.extend(ops::measure(name, &timing));
    }
    bar.finish_and_clear();
    Ok(KernelReport {
        format: KERNELS_FORMAT.to_owned(),
        started_at,
        quick: config.quick,
        threads: config.threads,
        weight_set_bytes: config.weight_set_bytes,
        machine: Machine {
            cpu: machine::cpu_name(),
            logical_cpus: KernelBenchConfig::default_threads(),
            kernel_isa: kt.isa().name().to_owned(),
            load_average_before: load_before,
            load_average_after: machine::load_average(),
        },
        ceilings,
        matmul: rows,
        skipped,
        ops: op_rows,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Which (kernel, shape) pairs run: every shape that suits each kernel, or in a quick
/// run the first one; and the pairs that can't run here, with the reason (in a quick run
/// only for a kernel that can't run at all).
fn plan(
    kt: &KernelTable,
    set: ShapeSet,
    quick: bool,
) -> (Vec<(MatmulKernel, Shape)>, Vec<Skipped>) {
    let mut planned = vec![];
    let mut skipped = vec![];
    for &kernel in set.kernels() {
        let mut kernel_skipped = vec![];
        for &shape in set.shapes() {
            match matmul::skip_reason(kernel, shape, kt) {
                Some(reason) => kernel_skipped.push(Skipped {
                    kernel: kernel.name(),
                    rows: shape.rows,
                    cols: shape.cols,
                    reason,
                }),
                None => planned.push((kernel, shape)),
            }
            if quick && planned.last().is_some_and(|p| p.0 == kernel) {
                kernel_skipped.clear();
                break;
            }
        }
        skipped.extend(kernel_skipped);
    }
    (planned, skipped)
}

/// One step per ceiling, matmul measurement and op; each `inc` marks a step started.
fn progress_bar(steps: usize, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix:.bold} {wide_bar:.cyan/blue} {pos}/{len} {elapsed_precise} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix("kernels");
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_kernel() {
        let kt = KernelTable::best();
        let (quick, quick_skipped) = plan(kt, ShapeSet::Catalogue, true);
        let (full, full_skipped) = plan(kt, ShapeSet::Catalogue, false);
        for kernel in KERNELS {
            let ran = |p: &[(MatmulKernel, Shape)]| p.iter().filter(|x| x.0 == kernel).count();
            let skipped = |s: &[Skipped]| s.iter().filter(|x| x.kernel == kernel.name()).count();
            assert!(
                ran(&quick) + skipped(&quick_skipped) >= 1,
                "{}",
                kernel.name()
            );
            assert!(ran(&quick) <= 1);
            assert_eq!(ran(&full) + skipped(&full_skipped), CATALOGUE_SHAPES.len());
        }
        // k-quants need 256-element blocks: only the ffn_down shapes (1536 and 4864
        // columns) qualify, on both the packed and the vec_dot path.
        for kernel in KERNELS
            .iter()
            .filter(|k| k.ty == kiln_kernels::WeightType::Q4_K)
        {
            let cols = full.iter().filter(|p| p.0 == *kernel).map(|p| p.1.cols);
            assert!(cols.eq([1536, 4864]), "{}", kernel.name());
        }
        // Every k-quant shape holds whole super-blocks, so nothing is skipped there.
        let (kq, kq_skipped) = plan(kt, ShapeSet::Kquant, false);
        if kq_skipped.is_empty() {
            assert_eq!(kq.len(), KQUANT_KERNELS.len() * KQUANT_SHAPES.len());
        }
        assert!(kq_skipped.iter().all(|s| s.reason.contains("no packed")));
        assert_eq!(ShapeSet::from_name("kquant"), Some(ShapeSet::Kquant));
        assert_eq!(ShapeSet::from_name("q4"), None);
    }

    #[test]
    fn rejects_zero_threads() {
        let config = KernelBenchConfig::new(0, true);
        assert!(matches!(
            run_kernels(&config),
            Err(Error::Option {
                option: "--threads",
                ..
            })
        ));
    }
}
