//! `cargo xtask bench`: the single entry point for benchmarks.
//!
//! Runs the data-plane benchmark (BPF_PROG_TEST_RUN ns/packet against an empty XDP
//! program measured in the same run; needs root).

use anyhow::bail;

use crate::{cmd, setup};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Extra arguments passed to the benchmark binaries.
    #[arg(trailing_var_arg = true)]
    rest: Vec<String>,
}

/// Runs every benchmark.
pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if setup::anything_missing() {
        setup::run()?;
    }
    if !cmd::is_root() {
        bail!("the data-plane benchmarks load XDP programs: run as root");
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
    )
}
