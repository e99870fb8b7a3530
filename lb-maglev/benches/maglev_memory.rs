//! Median build time and peak heap memory of `MaglevTable::build` for the four (M, N)
//! configurations of `common::CONFIGS`, printed as one Markdown table (run by `cargo xtask
//! bench`; `cargo bench -p lb-maglev --bench maglev_memory`).
//!
//! Memory is measured by a counting global allocator: the peak of live heap bytes
//! during one build above what was live before it (the builder's temporaries and the
//! table), and the bytes the finished table keeps. Times are wall-clock medians over
//! repeated builds; the paper's pseudocode (equal weights) runs in the same process as a
//! yardstick, timed alternately with the builder (one build, one pseudocode run, and
//! so on), because this machine is shared and absolute times move with its load; the
//! ratio column is the median of the per-pair ratios.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    time::{Duration, Instant},
};

use lb_maglev::MaglevTable;
use lb_maglev::defaults::MAGLEV_SEED;

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

/// One timing of `f`.
fn once<R>(f: &mut impl FnMut() -> R) -> Duration {
    let started = Instant::now();
    black_box(f());
    started.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// `runs` timings of `build` and of `reference`, taken alternately (so the machine's
/// speed changes affect both alike): the medians, the fastest build, and the median of
/// the per-pair ratios build / reference.
fn interleaved<A, B>(
    runs: usize,
    mut build: impl FnMut() -> A,
    mut reference: impl FnMut() -> B,
) -> (Duration, Duration, Duration, f64) {
    let (mut builds, mut references, mut ratios) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        let b = once(&mut build);
        let r = once(&mut reference);
        ratios.push(b.as_secs_f64() / r.as_secs_f64());
        builds.push(b);
        references.push(r);
    }
    ratios.sort_by(f64::total_cmp);
    let fastest = builds.iter().copied().min().unwrap_or_default();
    (
        median(builds),
        fastest,
        median(references),
        ratios[runs / 2],
    )
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn kib(bytes: usize) -> String {
    format!("{:.0}", bytes as f64 / 1024.0)
}

fn main() {
    println!(
        "Maglev build against the paper's pseudocode (equal weights, same (M, N), timed alternately in the same run): medians; ratio = median of the per-run ratios build / pseudocode (goal: 0.4 or less)."
    );
    println!();
    println!(
        "| M | N | weights | median build (ms) | fastest (ms) | paper pseudocode median (ms) | ratio build / pseudocode | peak heap during build (KiB) | table keeps (KiB) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for (size, n) in common::CONFIGS {
        let runs = if size > 100_000 { 31 } else { 201 };
        let permutations = common::permutations(&common::backends(n, false), size);
        for weighted in [false, true] {
            let backends = common::backends(n, weighted);
            let build = || MaglevTable::build(&backends, size, MAGLEV_SEED).expect("valid");

            let before = LIVE.load(Relaxed);
            PEAK.store(before, Relaxed);
            let table = build();
            let peak = PEAK.load(Relaxed) - before;
            let keeps = LIVE.load(Relaxed) - before;
            drop(table);

            let (median, fastest, reference, ratio) =
                interleaved(runs, build, || common::paper_reference(size, &permutations));
            println!(
                "| {size} | {n} | {} | {} | {} | {} | {ratio:.2} | {} | {} |",
                if weighted { "1..=10" } else { "equal" },
                ms(median),
                ms(fastest),
                ms(reference),
                kib(peak),
                kib(keeps),
            );
        }
    }
}
