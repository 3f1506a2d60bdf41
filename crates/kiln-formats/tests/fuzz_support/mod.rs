//! Support for the header fuzz tests: a counting global allocator, so each case can assert
//! that parsing allocates only a bounded multiple of the input's size, and the proptest
//! configuration they share.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::test_runner::Config;

/// Counts live heap bytes per thread (each proptest case runs on one thread).
pub struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn record(delta: i64) {
    // `try_with`: allocations can happen while thread-locals are being torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are
// updated around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        record(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            record(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Runs `f` and returns its result with the peak heap growth on this thread while it ran.
pub fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, (peak - start).max(0) as u64)
}

/// Case count, no regression files written into the source tree, quiet shrinking.
pub fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

/// Interesting replacements for an integer field whose current value is `orig`, in a file
/// of `len` bytes, chosen by `pick`; `noise` supplies randomness.
pub fn interesting(orig: u64, len: u64, pick: u8, noise: u64) -> u64 {
    match pick % 12 {
        0 => 0,
        1 => 1,
        2 => noise % 64,
        3 => u64::MAX,
        4 => 1 << 31,
        5 => 1 << 63,
        6 => i64::MAX as u64,
        7 => orig.wrapping_add(1 + noise % 16),
        8 => orig.wrapping_sub(1 + noise % 16),
        9 => orig.wrapping_mul(2 + noise % 1024),
        10 => len.wrapping_add(noise % 64).wrapping_sub(32),
        _ => noise,
    }
}
