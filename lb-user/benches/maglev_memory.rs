//! Median build time and peak heap memory of `MaglevTable::build` for the four (M, N)
//! configurations of `common::CONFIGS`, printed as one Markdown table (run by `cargo xtask
//! bench`; `cargo bench -p lb-user --bench maglev_memory`).
//!
//! Memory is measured by a counting global allocator: the peak of live heap bytes
//! during one build above what was live before it (the builder's temporaries and the
//! table), and the bytes the finished table keeps. Times are wall-clock medians over
//! repeated builds; the paper's pseudocode (equal weights) runs in the same process as a
//! yardstick, because this machine is shared and absolute times move with its load.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    time::{Duration, Instant},
};

use lb_user::{defaults::MAGLEV_SEED, maglev::MaglevTable};

#[path = "common/mod.rs"]
mod common;

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every method forwards to the system allocator with the caller's arguments
// unchanged, so the GlobalAlloc contract is the system allocator's; the counters have
// no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's (see the impl).
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's (see the impl).
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's (see the impl).
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            grew(new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The median and the minimum of `runs` timings of `f`.
fn time<R>(runs: usize, mut f: impl FnMut() -> R) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            black_box(f());
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    (times[runs / 2], times[0])
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn kib(bytes: usize) -> String {
    format!("{:.0}", bytes as f64 / 1024.0)
}

fn main() {
    println!(
        "| M | N | weights | median build (ms) | fastest (ms) | paper pseudocode median (ms) | peak heap during build (KiB) | table keeps (KiB) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|");
    for (size, n) in common::CONFIGS {
        let runs = if size > 100_000 { 31 } else { 201 };
        for weighted in [false, true] {
            let backends = common::backends(n, weighted);
            let build = || MaglevTable::build(&backends, size, MAGLEV_SEED).expect("valid");

            let before = LIVE.load(Relaxed);
            PEAK.store(before, Relaxed);
            let table = build();
            let peak = PEAK.load(Relaxed) - before;
            let keeps = LIVE.load(Relaxed) - before;
            drop(table);

            let (median, fastest) = time(runs, build);
            let reference = if weighted {
                "-".to_owned()
            } else {
                let permutations = common::permutations(&backends, size);
                let (median, _) = time(runs.min(51), || {
                    common::paper_reference(size, &permutations)
                });
                ms(median)
            };
            println!(
                "| {size} | {n} | {} | {} | {} | {reference} | {} | {} |",
                if weighted { "1..=10" } else { "equal" },
                ms(median),
                ms(fastest),
                kib(peak),
                kib(keeps),
            );
        }
    }
}
