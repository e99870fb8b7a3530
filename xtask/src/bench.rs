//! `cargo xtask bench`: the single entry point for benchmarks.
//!
//! 1. The Maglev table builder (no root needed): the criterion benchmarks of
//!    `lb-maglev/benches/maglev.rs` (build time for the four (M, N) configurations of
//!    `lb-maglev/benches/common/mod.rs`, the paper's
//!    pseudocode as a same-run yardstick, the fingerprint), then
//!    `lb-maglev/benches/maglev_memory.rs` (median build time and peak heap memory as one
//!    Markdown table, with the builder's ratio to the pseudocode timed alternately in
//!    the same run).
//! 2. As root, `lb-bench`: the control-plane benchmarks (change to live: p50/p99 of 100
//!    add/drain/remove changes through the controller and the kernel maps, at
//!    M = 65,537 / N = 100 and M = 655,373 / N = 1,000; `lb run` at scale: start time,
//!    private memory per VIP and restart to adopted with 1, 10, 100, 500 and 1,000 VIPs
//!    (100 backends each, 65 at 1,000 VIPs), and where each start's time went, in
//!    namespaces it creates), the remote API's request latency (p50/p99 of
//!    a status read and a backend change at 100 VIPs x 100 backends, the `lb` client
//!    against `lb run`; `-- --api-only --quick` runs it alone and short), the
//!    health-check benchmark (CPU of
//!    probing 1,000 backends every second, transition to table live), the multi-instance
//!    benchmark (an instance fails five ways: time until the router stops using it,
//!    median of 5, against a route removed in the router's kernel), then the
//!    data-plane benchmark
//!    (BPF_PROG_TEST_RUN ns/packet over an empty XDP program measured in the same run,
//!    gateway next hop and FIB with and without its per-CPU cache, and the verifier's
//!    instruction count; then the same kinds of packets on two CPUs at once against each
//!    alone, the scaling efficiency, which `-- --data-only --concurrent` runs alone and
//!    `--quick` keeps short), then `lb-restart-bench`: restart of `lb run` to its pinned
//!    datapath adopted (100 VIPs x 100 backends; one VIP with M = 655,373) and the time
//!    to write the state file.

use anyhow::bail;

use crate::{cmd, setup};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Extra arguments passed to the data-plane benchmark binary.
    #[arg(trailing_var_arg = true)]
    rest: Vec<String>,
}

/// Runs every benchmark.
pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if setup::anything_missing() {
        setup::run()?;
    }
    cmd::run(cmd::cargo().args([
        "bench",
        "--package",
        "lb-maglev",
        "--bench",
        "maglev",
        "--bench",
        "maglev_memory",
    ]))?;
    if !cmd::is_root() {
        bail!(
            "the Maglev benchmarks ran; the data-plane benchmarks load XDP programs: run as root"
        );
    }
    // The control-plane scale and multi-instance parts of lb-bench and the restart
    // benchmark start the release `lb` binary.
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "lb", "--bin", "lb"]))?;
    cmd::run(
        cmd::cargo()
            .args([
                "run",
                "--release",
                "--package",
                "lb-tests",
                "--bin",
                "lb-bench",
                "--",
            ])
            .args(&args.rest),
    )?;
    cmd::run(cmd::cargo().args([
        "run",
        "--release",
        "--package",
        "lb-tests",
        "--bin",
        "lb-restart-bench",
    ]))
}
