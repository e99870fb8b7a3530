//! `cargo xtask demo`: builds what the demo needs (after the same automatic setup as the
//! test command) and runs the demo binary of the tests crate as root.

use anyhow::bail;

use crate::{cmd, setup};

/// Runs the demo.
pub(crate) fn run() -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!(
            "the demo creates network namespaces and attaches XDP programs: run it as root \
             (sudo -E cargo xtask demo)"
        );
    }
    if setup::anything_missing() {
        eprintln!("xtask demo: the toolchain is incomplete; running setup first");
        setup::run()?;
    }
    eprintln!("xtask demo: building");
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "lb-tests", "--bins"]))?;
    cmd::run(cmd::cargo().args([
        "run",
        "--release",
        "--package",
        "lb-tests",
        "--bin",
        "lb-demo",
    ]))
}
