//! `cargo xtask bench`: the single entry point for benchmarks.
//!
//! 1. The Maglev table builder (no root needed): the criterion benchmarks of
//!    `lb-user/benches/maglev.rs` (build time for the four (M, N) configurations of
//!    `lb-user/benches/common/mod.rs`, the paper's
//!    pseudocode as a same-run yardstick, the fingerprint), then
//!    `lb-user/benches/maglev_memory.rs` (median build time and peak heap memory as one
//!    Markdown table).
//! 2. As root, `lb-bench`: the control-plane benchmark (backend change to live table
//!    through the controller and the kernel maps), the health-check benchmark (CPU of
//!    probing 1,000 backends every second, transition to table live), then the
//!    data-plane benchmark
//!    (BPF_PROG_TEST_RUN ns/packet over an empty XDP program measured in the same run,
//!    gateway next hop and FIB with and without its per-CPU cache, and the verifier's
//!    instruction count), then `lb-restart-bench`: restart of `lb run` to its pinned
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
        "lb-user",
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
    // The restart benchmark starts the release `lb` binary.
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "lb-user", "--bin", "lb"]))?;
    cmd::run(cmd::cargo().args([
        "run",
        "--release",
        "--package",
        "lb-tests",
        "--bin",
        "lb-restart-bench",
    ]))
}
