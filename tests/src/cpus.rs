//! Runs of the benchmark harness on several CPUs at once: one thread per CPU, pinned
//! with `sched_setaffinity` ([`crate::pin_to_cpu`]), all released together by a
//! barrier. `BPF_PROG_TEST_RUN` runs all of a call's repetitions on the calling
//! thread's CPU, so each thread measures its CPU while the others run.

use std::sync::Barrier;

use anyhow::{Context as _, anyhow, ensure};
use lb_dataplane::{BenchRunner, TestRunOutput};

/// Runs `runner` on every CPU of `cpus` at the same time, thread `i` pinned to
/// `cpus[i]` with `frames[i]` (each exactly `BENCH_FRAME_MAX` bytes), `repeat`
/// repetitions each; returns the threads' results in the order of `cpus`.
///
/// # Errors
/// When `cpus` and `frames` differ in length, a thread cannot be pinned or ran on
/// another CPU than its own, a run fails, or a thread panics.
pub fn at_once(
    runner: &BenchRunner<'_>,
    cpus: &[usize],
    frames: &[&[u8]],
    repeat: u32,
) -> anyhow::Result<Vec<TestRunOutput>> {
    ensure!(
        cpus.len() == frames.len(),
        "{} CPUs and {} frames: one frame per CPU",
        cpus.len(),
        frames.len()
    );
    let start = Barrier::new(cpus.len());
    std::thread::scope(|scope| {
        let threads: Vec<_> = cpus
            .iter()
            .zip(frames)
            .map(|(&cpu, frame)| {
                let start = &start;
                scope.spawn(move || -> anyhow::Result<TestRunOutput> {
                    let pinned = crate::pin_to_cpu(cpu);
                    // SAFETY: sched_getcpu takes no arguments and only reads.
                    let on = unsafe { libc::sched_getcpu() };
                    // Every thread reaches the barrier, pinned or not, so that none
                    // waits forever for a failed one.
                    start.wait();
                    pinned.with_context(|| format!("pinning a benchmark thread to CPU {cpu}"))?;
                    ensure!(
                        usize::try_from(on).ok() == Some(cpu),
                        "a thread pinned to CPU {cpu} ran on CPU {on}"
                    );
                    Ok(runner.run(frame, None, repeat)?)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| anyhow!("a benchmark thread panicked"))?
            })
            .collect()
    })
}
