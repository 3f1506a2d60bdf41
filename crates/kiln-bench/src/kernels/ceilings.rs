//! The machine's ceilings, measured on every thread at once: the int8 dot-product rate,
//! the rate of the k-quant tiles' instruction mix, the f32 FMA rate and the memory read
//! bandwidth. Each is the best of a few timed
//! repetitions (a ceiling is what the machine *can* do; a slower repetition only means
//! something else had the core).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::microkernels::{self, FmaIsa, Int8Isa};

/// How long and how often each ceiling is measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CeilingPlan {
    pub threads: usize,
    /// Target duration of one repetition of the register loops.
    pub loop_time: Duration,
    pub repetitions: usize,
    /// Size of the buffer the bandwidth probe streams through.
    pub memory_bytes: usize,
}

/// What the machine can do, all threads together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    pub threads: usize,
    pub int8: Int8Ceiling,
    /// The k-quant tiles' per-token instruction mix ([`microkernels::kquant_mix_loop`]):
    /// the rate they could reach if unpacking and the float steps cost nothing (absent
    /// from reports written before it was measured).
    #[serde(default)]
    pub int8_kquant_mix: Option<Int8Ceiling>,
    pub f32_fma: FmaCeiling,
    pub memory: MemoryCeiling,
}

/// The int8 dot-product rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Int8Ceiling {
    pub isa: Int8Isa,
    pub instruction: String,
    /// Integer operations per second / 10⁹ (a multiply-add counts 2).
    pub gops: f64,
}

/// The f32 fused multiply-add rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FmaCeiling {
    pub isa: FmaIsa,
    pub instruction: String,
    /// Floating-point operations per second / 10⁹ (an FMA counts 2).
    pub gflops: f64,
}

/// The memory read bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryCeiling {
    /// Bytes of the buffer streamed (much larger than the last-level cache).
    pub buffer_bytes: usize,
    /// Bytes read per second / 10⁹.
    pub gb_per_s: f64,
}

/// Measures all three ceilings; `step` is called as each one starts.
pub(crate) fn measure(plan: &CeilingPlan, step: &mut dyn FnMut(&str)) -> Ceilings {
    let threads = plan.threads.max(1);
    // The ceilings of the kernel table being measured (`KILN_CPU` may pick a narrower one).
    let table = kiln_kernels::KernelTable::best().isa();
    step("ceiling: int8 dot");
    let i8_isa = Int8Isa::of(table);
    let int8_ops = best_rate(plan, |iters| {
        black_box(microkernels::int8_loop(i8_isa, iters));
        2 * iters * i8_isa.macs_per_iter()
    });
    step("ceiling: k-quant mix");
    let mix_ops = best_rate(plan, |iters| {
        black_box(microkernels::kquant_mix_loop(i8_isa, iters));
        2 * iters * i8_isa.kquant_mix_macs_per_iter()
    });
    step("ceiling: f32 fma");
    let fma_isa = FmaIsa::of(table);
    let flops = best_rate(plan, |iters| {
        black_box(microkernels::fma_loop(fma_isa, iters));
        iters * fma_isa.flops_per_iter()
    });
    step("ceiling: memory read");
    let bandwidth = memory_bandwidth(threads, plan.memory_bytes, plan.repetitions);
    Ceilings {
        threads,
        int8: Int8Ceiling {
            isa: i8_isa,
            instruction: i8_isa.instruction().to_owned(),
            gops: int8_ops / 1e9,
        },
        int8_kquant_mix: Some(Int8Ceiling {
            isa: i8_isa,
            instruction: i8_isa.kquant_mix().to_owned(),
            gops: mix_ops / 1e9,
        }),
        f32_fma: FmaCeiling {
            isa: fma_isa,
            instruction: fma_isa.instruction().to_owned(),
            gflops: flops / 1e9,
        },
        memory: MemoryCeiling {
            buffer_bytes: plan.memory_bytes,
            gb_per_s: bandwidth / 1e9,
        },
    }
}

/// The best operations-per-second of `work(iters)` (which returns the operations it did)
/// run on every thread at once, `iters` calibrated to the plan's loop time.
fn best_rate(plan: &CeilingPlan, work: impl Fn(u64) -> u64 + Sync) -> f64 {
    let iters = calibrate(plan.loop_time, &work);
    (0..plan.repetitions.max(1))
        .map(|_| {
            let (ops, seconds) = on_all_threads(plan.threads, |_| work(iters));
            ops as f64 / seconds
        })
        .fold(0.0, f64::max)
}

/// Iterations that take about `target` on one thread, found by doubling.
fn calibrate(target: Duration, work: &impl Fn(u64) -> u64) -> u64 {
    let mut iters = 1024u64;
    loop {
        let start = Instant::now();
        work(iters);
        let took = start.elapsed();
        if took >= target / 8 || iters >= 1 << 40 {
            let scale = target.as_secs_f64() / took.as_secs_f64().max(1e-9);
            return ((iters as f64 * scale) as u64).max(1);
        }
        iters *= 2;
    }
}

/// Runs `work(thread_index)` on `threads` threads released together; returns the sum of
/// what they return and the seconds from the first start to the last finish.
fn on_all_threads(threads: usize, work: impl Fn(usize) -> u64 + Sync) -> (u64, f64) {
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let units = work(i);
                    (units, start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let units = results.iter().map(|r| r.0).sum();
    let first = results.iter().map(|r| r.1).min();
    let last = results.iter().map(|r| r.2).max();
    let seconds = match (first, last) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => f64::INFINITY,
    };
    (units, seconds.max(1e-9))
}

/// Bytes per second of [`microkernels::stream_sum`] over a `bytes` buffer split evenly
/// between the threads (best of `repetitions`).
fn memory_bandwidth(threads: usize, bytes: usize, repetitions: usize) -> f64 {
    let words = (bytes / 8).max(threads * 16);
    // Written, not zeroed: a zeroed allocation maps one shared zero page, and reading it
    // would measure the cache instead of memory.
    let buffer: Vec<u64> = (0..words as u64).map(|i| i ^ 0x9e37_79b9).collect();
    let per_thread = words.div_ceil(threads);
    let chunks: Vec<&[u64]> = buffer.chunks(per_thread).collect();
    (0..repetitions.max(1))
        .map(|_| {
            let (read, seconds) = on_all_threads(chunks.len(), |i| {
                black_box(microkernels::stream_sum(chunks[i]));
                chunks[i].len() as u64 * 8
            });
            read as f64 / seconds
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_once() {
        let (sum, seconds) = on_all_threads(3, |i| i as u64 + 1);
        assert_eq!(sum, 6);
        assert!(seconds > 0.0);
    }

    #[test]
    fn ceilings_are_positive() {
        let plan = CeilingPlan {
            threads: 2,
            loop_time: Duration::from_millis(2),
            repetitions: 1,
            memory_bytes: 1 << 20,
        };
        let mut steps = vec![];
        let c = measure(&plan, &mut |s| steps.push(s.to_owned()));
        assert_eq!(steps.len(), 4);
        assert!(c.int8_kquant_mix.as_ref().is_some_and(|m| m.gops > 0.0));
        assert!(c.int8.gops > 0.0 && c.f32_fma.gflops > 0.0 && c.memory.gb_per_s > 0.0);
        assert_eq!(c.memory.buffer_bytes, 1 << 20);
    }
}
