//! `cargo xtask test`: THE test command of README.md.
//!
//! Order: setup (only when something is missing), `cargo fmt --check`, the book (built,
//! its internal links and the crate map of ARCHITECTURE.md checked), clippy with
//! `-D warnings` on the host crates and on the eBPF crate (BPF target), each with and
//! without the `test-harness` feature (only the tests enable it), rustdoc with
//! `-D warnings` on the host crates (public and private items), the unit tests,
//! then the privileged tests (BPF_PROG_TEST_RUN, netns, and the end-to-end tests that run
//! the `lb` binary, built just before them) when running as root — then a check that
//! they left no pinned datapath under /sys/fs/bpf/lb — and the Debian
//! package (built and inspected by [`package`], one test per check). It ends
//! with one line `test: N passed, N failed, N skipped`, where each check (fmt, clippy)
//! counts as one test, and a privileged suite that could not run counts as skipped.

use anyhow::bail;

use crate::{cmd, package, setup};

/// Arguments of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub(crate) struct TestArgs {
    /// Only run tests whose name contains this string (checks still run).
    filter: Option<String>,
}

/// Running totals over every step.
#[derive(Debug, Default)]
struct Tally {
    passed: u64,
    failed: u64,
    skipped: u64,
    failures: Vec<String>,
}

impl Tally {
    fn check(&mut self, name: &str, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            self.failures.push(name.to_owned());
        }
    }

    /// Adds the libtest `test result:` lines of a cargo test run. A run that failed
    /// without reporting any failed test (a build error, a crashed test binary) counts as
    /// one failure named `name`.
    fn cargo_test(&mut self, name: &str, ok: bool, lines: &[String]) {
        let mut failed_here = 0;
        for line in lines {
            if let Some(result) = parse_result_line(line) {
                self.passed += result.passed;
                self.failed += result.failed;
                self.skipped += result.ignored;
                failed_here += result.failed;
            }
        }
        if failed_here > 0 {
            self.failures.push(format!("{name}: {failed_here} failed"));
        } else if !ok {
            self.failed += 1;
            self.failures.push(format!("{name}: did not build or run"));
        }
    }
}

/// Counts of one libtest `test result:` line.
#[derive(Debug, PartialEq, Eq)]
struct ResultLine {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
fn parse_result_line(line: &str) -> Option<ResultLine> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let (_, counts) = rest.split_once(". ")?;
    let mut result = ResultLine {
        passed: 0,
        failed: 0,
        ignored: 0,
    };
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => result.passed = n,
            "failed" => result.failed = n,
            "ignored" => result.ignored = n,
            _ => {}
        }
    }
    Some(result)
}

/// The default root of pinned datapaths (lb's `defaults::PIN_DIR`).
const PIN_ROOT: &str = "/sys/fs/bpf/lb";

/// The per-namespace directories under [`PIN_ROOT`] (`netns-<cookie>`), as paths.
fn pinned_namespaces() -> Vec<String> {
    std::fs::read_dir(PIN_ROOT)
        .map(|d| {
            d.flatten()
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the whole test command: each step adds its checks and test counts to one tally.
pub(crate) fn run(args: &TestArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    if setup::anything_missing() {
        eprintln!("xtask test: the toolchain is incomplete; running setup first");
        setup::run()?;
    }
    let mut tally = Tally::default();
    check_format(&mut tally);
    check_book(&mut tally);
    lint_host_crates(&mut tally);
    lint_ebpf_crate(&mut tally);
    unit_tests(&mut tally, args)?;
    privileged_tests(&mut tally, args)?;
    debian_package(&mut tally, args);
    report(&tally, started)
}

/// `cargo fmt --check` of the whole workspace.
fn check_format(tally: &mut Tally) {
    eprintln!("xtask test: [1/7] cargo fmt --check");
    let ok = cmd::succeeds(cmd::cargo().args(["fmt", "--all", "--", "--check"]));
    tally.check("cargo fmt --check", ok);
}

/// The book builds, its internal links resolve and ARCHITECTURE.md maps every crate.
fn check_book(tally: &mut Tally) {
    eprintln!("xtask test: [2/7] the book: mdbook build, internal links, the crate map");
    tally.check(
        "the book (build, internal links, crate map)",
        crate::book::passes(),
    );
}

/// Clippy with `-D warnings` on the host crates, with and without `test-harness`, and
/// rustdoc with `-D warnings`.
fn lint_host_crates(tally: &mut Tally) {
    eprintln!("xtask test: [3/7] clippy and rustdoc (host crates)");
    // The workspace run builds lb and lb-dataplane with lb-tests' `test-harness`
    // feature; the second lints lb as the `lb` binary has it, without.
    let lint = |scope: &[&str]| {
        cmd::succeeds(cmd::cargo().arg("clippy").args(scope).args([
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    };
    let ok = lint(&["--workspace", "--exclude", "lb-ebpf"]) & lint(&["--package", "lb"]);
    tally.check("clippy (host crates)", ok);
    // Every intra-doc link resolves, in the public docs and with the private items.
    let doc = |private: &[&str]| {
        cmd::succeeds(
            cmd::cargo()
                .args(["doc", "--workspace", "--exclude", "lb-ebpf", "--no-deps"])
                .args(private)
                .env("RUSTDOCFLAGS", "-D warnings"),
        )
    };
    let ok = doc(&[]) & doc(&["--document-private-items"]);
    tally.check("rustdoc -D warnings (host crates)", ok);
}

/// Clippy with `-D warnings` on the eBPF crate for the BPF target, with and without
/// `test-harness`.
fn lint_ebpf_crate(tally: &mut Tally) {
    eprintln!("xtask test: [4/7] clippy (eBPF crate, bpfel-unknown-none)");
    let target_dir = cmd::workspace_root().join("target").join("ebpf-clippy");
    let mut ok = true;
    for features in [&[][..], &["--features", "test-harness"][..]] {
        ok &= cmd::succeeds(
            cmd::nightly_cargo()
                .args(["clippy", "--package", "lb-ebpf", "--release"])
                .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
                .args(features)
                .arg("--target-dir")
                .arg(&target_dir)
                .args(["--", "-D", "warnings"]),
        );
    }
    tally.check("clippy (eBPF crate)", ok);
}

/// The property tests' seed in the suite, unless `PROPTEST_RNG_SEED` names another: a
/// suite run then decides the same way on every machine. A plain `cargo test` explores
/// new cases with a random seed, and proptest saves what fails in its regressions file.
const PROPTEST_SEED: &str = "20261206";

/// The unprivileged tests of every host crate but lb-tests.
fn unit_tests(tally: &mut Tally, args: &TestArgs) -> anyhow::Result<()> {
    eprintln!("xtask test: [5/7] unit tests");
    let mut unit = cmd::cargo();
    unit.args(["test", "--workspace", "--exclude", "lb-ebpf"])
        .args(["--exclude", "lb-tests", "--no-fail-fast"]);
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        unit.env("PROPTEST_RNG_SEED", PROPTEST_SEED);
    }
    if let Some(filter) = &args.filter {
        unit.args(["--", filter]);
    }
    let (ok, lines) = cmd::run_capture(&mut unit)?;
    tally.cargo_test("unit tests", ok, &lines);
    Ok(())
}

/// lb-tests as root (after building the `lb` binary they run), then the check that
/// they left no pinned datapath; without root the suite is listed and counted skipped.
fn privileged_tests(tally: &mut Tally, args: &TestArgs) -> anyhow::Result<()> {
    eprintln!("xtask test: [6/7] privileged tests (BPF_PROG_TEST_RUN, netns, lb run)");
    let mut privileged = cmd::cargo();
    privileged.args(["test", "--package", "lb-tests", "--no-fail-fast"]);
    if !cmd::is_root() {
        eprintln!("xtask test: not root: the privileged suite is SKIPPED (run as root)");
        privileged.args(["--", "--list", "--format", "terse"]);
        let listed = cmd::output(&mut privileged).unwrap_or_default();
        let count = listed.lines().filter(|l| l.ends_with(": test")).count();
        tally.skipped += u64::try_from(count.max(1)).unwrap_or(1);
        return Ok(());
    }
    // The end-to-end tests run the real `lb` binary, which `cargo test` does not build
    // for another package: build it in the same (dev) profile first.
    eprintln!("xtask test: building the lb binary for the end-to-end tests");
    if !cmd::succeeds(cmd::cargo().args(["build", "--package", "lb", "--bin", "lb"])) {
        tally.check("building the lb binary (privileged tests not run)", false);
        return Ok(());
    }
    privileged.arg("--");
    if let Some(filter) = &args.filter {
        privileged.arg(filter);
    }
    let pins_before = pinned_namespaces();
    let (ok, lines) = cmd::run_capture(&mut privileged)?;
    tally.cargo_test("privileged tests", ok, &lines);
    let left: Vec<String> = pinned_namespaces()
        .into_iter()
        .filter(|d| !pins_before.contains(d))
        .collect();
    if !left.is_empty() {
        eprintln!(
            "xtask test: the privileged tests left pinned datapaths behind (kernel memory no process frees): {}",
            left.join(", ")
        );
    }
    tally.check("no pinned datapath left behind", left.is_empty());
    Ok(())
}

/// The Debian package: built, then inspected by [`package::check`], one check each
/// (skipped when a filter that does not match `package` is set).
fn debian_package(tally: &mut Tally, args: &TestArgs) {
    eprintln!("xtask test: [7/7] the Debian package (build, then inspect)");
    if args
        .filter
        .as_deref()
        .is_some_and(|f| !"package".contains(f))
    {
        eprintln!("xtask test: a filter is set: the package step is SKIPPED");
        tally.skipped += 1;
        return;
    }
    let built = match package::build() {
        Ok(built) => built,
        Err(err) => {
            eprintln!("xtask test: {err:#}");
            tally.check("building the Debian package", false);
            return;
        }
    };
    for outcome in package::check(&built) {
        eprintln!("xtask test: package: {outcome}");
        match outcome {
            package::Outcome::Passed(name) => tally.check(name, true),
            package::Outcome::Failed(name, _) => tally.check(name, false),
            package::Outcome::Skipped(..) => tally.skipped += 1,
        }
    }
}

/// Prints the time, the failures and the summary line; an error when anything failed.
fn report(tally: &Tally, started: std::time::Instant) -> anyhow::Result<()> {
    eprintln!(
        "xtask test: finished in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for failure in &tally.failures {
        eprintln!("xtask test: FAILED: {failure}");
    }
    println!(
        "test: {} passed, {} failed, {} skipped",
        tally.passed, tally.failed, tally.skipped
    );
    if tally.failed > 0 {
        bail!("{} failed", tally.failed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libtest_result_lines() {
        let line = "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        assert_eq!(
            parse_result_line(line),
            Some(ResultLine {
                passed: 12,
                failed: 0,
                ignored: 3
            })
        );
        let line = "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(
            parse_result_line(line),
            Some(ResultLine {
                passed: 1,
                failed: 2,
                ignored: 0
            })
        );
        assert_eq!(parse_result_line("running 3 tests"), None);
    }

    #[test]
    fn a_failed_run_without_results_counts_as_one_failure() {
        let mut tally = Tally::default();
        tally.cargo_test(
            "unit",
            false,
            &["error[E0425]: cannot find value".to_owned()],
        );
        assert_eq!((tally.passed, tally.failed), (0, 1));
        let mut tally = Tally::default();
        tally.cargo_test(
            "unit",
            true,
            &["test result: ok. 4 passed; 0 failed; 1 ignored; 0 measured".to_owned()],
        );
        assert_eq!((tally.passed, tally.failed, tally.skipped), (4, 0, 1));
    }
}
