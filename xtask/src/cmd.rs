//! Running child commands with a readable trace, and the workspace root.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The workspace root (the parent of this crate's directory).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map_or(manifest.clone(), PathBuf::from)
}

/// Whether the process runs as root (effective uid 0). The product's own check is
/// `lb_dataplane::is_root`; xtask keeps this one because it depends on no
/// workspace crate: it must build before setup has installed the eBPF toolchain that
/// lb-dataplane's build script needs.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A `cargo` command for the stable toolchain, run from the workspace root.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// A `cargo` command on the nightly toolchain (through rustup), with the variables the
/// outer cargo set for the stable toolchain removed.
pub(crate) fn nightly_cargo() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo"]);
    for key in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
    ] {
        cmd.env_remove(key);
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// Describes a command for the trace.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Runs `cmd`, streaming its output; fails if it exits non-zero.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: $ {}", describe(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs `cmd` and reports whether it succeeded (its output is streamed).
pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    match run(cmd) {
        Ok(()) => true,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            false
        }
    }
}

/// Runs `cmd` quietly and returns its standard output if it succeeded.
pub(crate) fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd`, echoing its standard output line by line, and returns the captured
/// lines together with whether it succeeded.
pub(crate) fn run_capture(cmd: &mut Command) -> anyhow::Result<(bool, Vec<String>)> {
    eprintln!("xtask: $ {}", describe(cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading child output")?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait().context("waiting for child")?;
    Ok((status.success(), lines))
}
