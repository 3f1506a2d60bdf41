//! Steady-state steps allocate nothing: a counting global allocator watches the engine
//! while a batch of sequences decodes.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use kiln_engine::GenerateRequest;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_decode_steps_do_not_allocate() {
    let mut c = core(256);
    let mut rxs: Vec<_> = (0..8)
        .map(|i| {
            add(
                &mut c,
                i,
                GenerateRequest::greedy(prompt(i as usize, 20 + i as usize), 200),
            )
        })
        .collect();
    // Warm up: prefill, first decodes, thread-local scratch growth, channel blocks.
    for _ in 0..40 {
        c.step();
        for rx in &mut rxs {
            while rx.try_recv().is_ok() {}
        }
    }
    // Consumers keep draining their events (as a live stream does), so the channels
    // recycle their blocks instead of growing.
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..30 {
        c.step();
        for rx in &mut rxs {
            while rx.try_recv().is_ok() {}
        }
    }
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(n, 0, "{n} heap allocations in 30 steady-state steps");
}
