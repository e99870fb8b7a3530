//! `cargo xtask setup`: brings a fresh machine to a working state, idempotently.
//!
//! Steps, as the README's "The two commands" lists them: Debian packages (LLVM 22
//! development files, which match the LLVM inside the machine's rustc 1.95 and nightly
//! 1.97, so that bpf-linker can link rustc's output, plus iproute2 for the netns tests,
//! nftables for their drop rules, python3 for a killable server, prometheus for the
//! metrics tests, and the tools the package check runs), BIRD 2 for the multi-instance
//! tests (installed without starting its service: [`bird`]), the nightly toolchain's
//! `rust-src` component (for `-Z build-std=core`), `bpf-linker` built against LLVM 22,
//! `cargo-deb` for `cargo xtask package`, `mdbook` for `cargo xtask book` and
//! `openapi-spec-validator` (PyPI) for the OpenAPI document's test. Each step
//! says whether it installs or skips.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::cmd;

mod bird;

/// Debian packages the build and the tests need.
const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "iproute2",
    "nftables",
    // The health-check tests kill a real server process: Python's http.server.
    "python3",
    // The package check (`cargo xtask package --check`): lintian, `man -l`, the bash
    // completion library the generated script calls, and `systemd-analyze verify`.
    "lintian",
    "man-db",
    "bash-completion",
    "systemd",
    // The metrics tests: a real Prometheus server (started by the test, in the test's
    // network namespace, on its own port) and `promtool check metrics`.
    "prometheus",
    // The remote API's tests: a real HTTPS client; pip for openapi-spec-validator.
    "curl",
    "python3-pip",
];

/// bpf-linker version known to build against LLVM 22 here.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// cargo-deb version `cargo xtask package` is written for (its `--deb-version` flag and
/// `[package.metadata.deb]` keys); 3.8.0 builds with rustc 1.95.
pub(crate) const CARGO_DEB_VERSION: &str = "3.8.0";

/// mdbook version `cargo xtask book` builds the book with; 0.4.52 builds with rustc 1.95
/// (without its default features: serve, watch and search).
pub(crate) const MDBOOK_VERSION: &str = "0.4.52";

/// openapi-spec-validator version (PyPI) that checks the committed OpenAPI document
/// (docs/src/reference/openapi.json) in the `openapi` test.
pub(crate) const OPENAPI_SPEC_VALIDATOR_VERSION: &str = "0.9.0";

/// Where Debian installs LLVM 22; bpf-linker's build script needs it (`LLVM_PREFIX`).
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// A setup step: how to tell whether it is needed and how to carry it out.
struct Step {
    name: &'static str,
    missing: fn() -> Vec<String>,
    install: fn(&[String]) -> anyhow::Result<()>,
}

const STEPS: &[Step] = &[
    Step {
        name: "apt packages",
        missing: missing_apt_packages,
        install: install_apt_packages,
    },
    Step {
        name: "bird2 (BGP for the multi-instance tests; service not started)",
        missing: missing_bird,
        install: install_bird,
    },
    Step {
        name: "nightly toolchain",
        missing: missing_nightly,
        install: install_nightly,
    },
    Step {
        name: "nightly rust-src",
        missing: missing_rust_src,
        install: install_rust_src,
    },
    Step {
        name: "bpf-linker",
        missing: missing_bpf_linker,
        install: install_bpf_linker,
    },
    Step {
        name: "cargo-deb",
        missing: missing_cargo_deb,
        install: install_cargo_deb,
    },
    Step {
        name: "mdbook",
        missing: missing_mdbook,
        install: install_mdbook,
    },
    Step {
        name: "openapi-spec-validator (PyPI)",
        missing: missing_openapi_validator,
        install: install_openapi_validator,
    },
];

/// Whether any step still has something to install.
pub(crate) fn anything_missing() -> bool {
    STEPS.iter().any(|step| !(step.missing)().is_empty())
}

/// Runs every step, installing what is missing.
///
/// # Errors
/// Names the failing step and what to do about it.
pub(crate) fn run() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    for step in STEPS {
        let missing = (step.missing)();
        if missing.is_empty() {
            eprintln!("xtask setup: {}: present, skipping", step.name);
            continue;
        }
        eprintln!(
            "xtask setup: {}: installing {}",
            step.name,
            missing.join(" ")
        );
        (step.install)(&missing).with_context(|| format!("setup step `{}` failed", step.name))?;
        let still = (step.missing)();
        if !still.is_empty() {
            bail!(
                "setup step `{}` ran but {} is still missing",
                step.name,
                still.join(" ")
            );
        }
    }
    eprintln!(
        "xtask setup: done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn missing_apt_packages() -> Vec<String> {
    missing_packages(APT_PACKAGES)
}

fn missing_bird() -> Vec<String> {
    missing_packages(&[bird::PACKAGE])
}

fn install_bird(_: &[String]) -> anyhow::Result<()> {
    bird::install(install_apt_packages)
}

/// The packages of `list` that dpkg does not have installed.
fn missing_packages(list: &[&str]) -> Vec<String> {
    list.iter()
        .filter(|pkg| {
            let status =
                cmd::output(Command::new("dpkg-query").args(["-W", "-f=${db:Status-Abbrev}", pkg]));
            !status.is_some_and(|s| s.starts_with("ii"))
        })
        .map(|pkg| (*pkg).to_owned())
        .collect()
}

fn install_apt_packages(missing: &[String]) -> anyhow::Result<()> {
    if which("apt-get").is_none() {
        bail!(
            "apt-get not found: this setup supports Debian-based machines; install {} by hand",
            missing.join(" ")
        );
    }
    if !cmd::is_root() {
        bail!(
            "installing Debian packages needs root: run `sudo apt-get install -y {}` or run \
             this command as root",
            missing.join(" ")
        );
    }
    cmd::run(
        Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    cmd::run(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if missing.iter().any(|p| p == "prometheus") {
        keep_system_prometheus_stopped();
    }
    Ok(())
}

/// Debian's `prometheus` package enables a system service (on port 9090 of the host's
/// namespace). The tests start their own server in their own namespace and need no
/// other, so where systemd runs the machine, the service is stopped and disabled
/// (best effort: without systemd as PID 1, `invoke-rc.d` did not start it).
fn keep_system_prometheus_stopped() {
    if std::path::Path::new("/run/systemd/system").exists() {
        let _ =
            cmd::run(Command::new("systemctl").args(["disable", "--now", "prometheus.service"]));
    }
}

fn missing_nightly() -> Vec<String> {
    let listed = cmd::output(Command::new("rustup").args(["toolchain", "list"]));
    if listed.is_some_and(|l| l.lines().any(|t| t.starts_with("nightly"))) {
        Vec::new()
    } else {
        vec!["nightly".to_owned()]
    }
}

fn install_nightly(_: &[String]) -> anyhow::Result<()> {
    if which("rustup").is_none() {
        bail!("rustup not found: install it from https://rustup.rs, then run setup again");
    }
    cmd::run(Command::new("rustup").args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
    ]))
}

fn missing_rust_src() -> Vec<String> {
    let installed = cmd::output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]));
    if installed.is_some_and(|l| l.lines().any(|c| c.starts_with("rust-src"))) {
        Vec::new()
    } else {
        vec!["rust-src".to_owned()]
    }
}

fn install_rust_src(_: &[String]) -> anyhow::Result<()> {
    cmd::run(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))
}

fn missing_bpf_linker() -> Vec<String> {
    let version = cmd::output(Command::new("bpf-linker").arg("--version"));
    if version.is_some_and(|v| v.contains(BPF_LINKER_VERSION)) {
        Vec::new()
    } else {
        vec![format!("bpf-linker {BPF_LINKER_VERSION}")]
    }
}

fn install_bpf_linker(_: &[String]) -> anyhow::Result<()> {
    if !std::path::Path::new(LLVM_PREFIX).join("lib").exists() {
        bail!("{LLVM_PREFIX} does not exist: the apt step must install llvm-22-dev first");
    }
    cmd::run(
        cmd::cargo()
            .args([
                "install",
                "bpf-linker",
                "--locked",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", LLVM_PREFIX),
    )
}

fn missing_cargo_deb() -> Vec<String> {
    let version = cmd::output(cmd::cargo().args(["deb", "--version"]));
    if version.is_some_and(|v| v.contains(CARGO_DEB_VERSION)) {
        Vec::new()
    } else {
        vec![format!("cargo-deb {CARGO_DEB_VERSION}")]
    }
}

fn install_cargo_deb(_: &[String]) -> anyhow::Result<()> {
    cmd::run(cmd::cargo().args([
        "install",
        "cargo-deb",
        "--locked",
        "--version",
        CARGO_DEB_VERSION,
    ]))
}

fn missing_mdbook() -> Vec<String> {
    let version = cmd::output(Command::new("mdbook").arg("--version"));
    if version.is_some_and(|v| v.trim() == format!("mdbook v{MDBOOK_VERSION}")) {
        Vec::new()
    } else {
        vec![format!("mdbook {MDBOOK_VERSION}")]
    }
}

fn install_mdbook(_: &[String]) -> anyhow::Result<()> {
    cmd::run(cmd::cargo().args([
        "install",
        "mdbook",
        "--locked",
        "--version",
        MDBOOK_VERSION,
        "--no-default-features",
    ]))
}

fn missing_openapi_validator() -> Vec<String> {
    let version = cmd::output(Command::new("python3").args([
        "-c",
        "import importlib.metadata as m; print(m.version('openapi-spec-validator'))",
    ]));
    if version.is_some_and(|v| v.trim() == OPENAPI_SPEC_VALIDATOR_VERSION) {
        Vec::new()
    } else {
        vec![format!(
            "openapi-spec-validator {OPENAPI_SPEC_VALIDATOR_VERSION}"
        )]
    }
}

/// `pip install` into the `python3` on PATH; a Debian python that refuses it
/// (PEP 668, externally managed) gets `--break-system-packages`: the validator is a
/// test tool of this machine.
fn install_openapi_validator(_: &[String]) -> anyhow::Result<()> {
    let package = format!("openapi-spec-validator=={OPENAPI_SPEC_VALIDATOR_VERSION}");
    let pip = |extra: &[&str]| {
        let mut c = Command::new("python3");
        c.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(extra)
        .arg(&package);
        c
    };
    if cmd::succeeds(&mut pip(&[])) {
        return Ok(());
    }
    cmd::run(&mut pip(&["--break-system-packages"]))
}

/// The path of `program` in `PATH`, if any.
fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
