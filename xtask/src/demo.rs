//! `cargo xtask demo`: the README's main job. After the same automatic setup as the test
//! command, builds the `lb` binary and the demo in release mode and runs the demo as
//! root (it creates network namespaces, runs `lb run` in one and sends real TCP traffic
//! through it; see `tests/src/bin/lb-demo.rs`).

use anyhow::bail;

use crate::{cmd, setup};

/// Runs the demo.
pub(crate) fn run() -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!(
            "the demo creates network namespaces, attaches XDP programs and runs `lb run`: \
             run it as root (sudo -E cargo xtask demo)"
        );
    }
    if setup::anything_missing() {
        eprintln!("xtask demo: the toolchain is incomplete; running setup first");
        setup::run()?;
    }
    eprintln!("xtask demo: building the lb binary (release)");
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "lb", "--bin", "lb"]))?;
    // The demo finds `lb` next to itself, in the same target directory and profile.
    eprintln!("xtask demo: building and running the demo (release)");
    cmd::run(cmd::cargo().args([
        "run",
        "--release",
        "--package",
        "lb-tests",
        "--bin",
        "lb-demo",
    ]))
}
