//! `/proc` parsing on this test's own process.

use std::hint::black_box;
use std::process::Command;

use kiln_bench::procfs::{self, ProcessSampler};

fn burn_cpu() -> u64 {
    let mut x = 0u64;
    let start = std::time::Instant::now();
    // Spin until the process has used a few clock ticks of CPU.
    while start.elapsed().as_millis() < 300 {
        for i in 0..100_000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[test]
fn clock_ticks_match_getconf() {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf runs");
    let expected: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(procfs::clock_ticks_per_second(), expected);
}

#[test]
fn own_cpu_time_grows_while_spinning() {
    let pid = std::process::id();
    let before = procfs::cpu_ticks(pid).expect("own stat");
    black_box(burn_cpu());
    let after = procfs::cpu_ticks(pid).expect("own stat");
    assert!(after.utime >= before.utime && after.stime >= before.stime);
    // 300 ms of spinning is ~30 ticks at 100 Hz; allow for a busy machine.
    assert!(after.total() > before.total(), "{before:?} -> {after:?}");
}

#[test]
fn own_memory_and_sampler() {
    let pid = std::process::id();
    let m = procfs::memory(pid).expect("own status");
    assert!(m.rss > 0 && m.hwm >= m.rss, "{m:?}");

    let sampler = ProcessSampler::start(pid).expect("sampler starts");
    // Touch 64 MiB so resident memory visibly rises while the sampler watches.
    let big = vec![1u8; 64 << 20];
    black_box(&big);
    black_box(burn_cpu());
    let usage = sampler.finish().expect("sampler finishes");
    drop(big);
    assert_eq!(usage.pid, pid);
    assert!(usage.cpu_seconds > 0.0, "{usage:?}");
    assert!(usage.max_sampled_rss_bytes >= 64 << 20, "{usage:?}");
    assert!(
        usage.peak_rss_bytes >= usage.max_sampled_rss_bytes - (1 << 20),
        "{usage:?}"
    );
}

#[test]
fn missing_process_is_an_error() {
    // PIDs are below 2^22 on Linux.
    let err = procfs::cpu_ticks(u32::MAX).expect_err("no such process");
    assert!(err.to_string().contains("/proc/4294967295/stat"), "{err}");
    assert!(ProcessSampler::start(u32::MAX).is_err());
}
