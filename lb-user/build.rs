//! Builds the eBPF object from the `lb-ebpf` workspace package (the only build path for
//! it) with aya-build, which runs `cargo +nightly build -Z build-std=core --target
//! bpfel-unknown-none` and copies the object into `OUT_DIR/lb-ebpf`, where
//! `lb_user::EBPF_OBJECT` embeds it. lb-user's `test-harness` feature turns on lb-ebpf's
//! feature of the same name (the benchmark harness programs). It also embeds the commit
//! the binary is built from (see [`embed_commit`]), which `lb --version` prints.
use std::{path::Path, process::Command};

use anyhow::{Context as _, anyhow};
use cargo_metadata::{Metadata, MetadataCommand};

fn main() -> anyhow::Result<()> {
    let Metadata {
        packages,
        workspace_root,
        ..
    } = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    embed_commit(workspace_root.as_std_path());
    let find = |name: &str| {
        packages
            .iter()
            .find(|p| p.name.as_str() == name)
            .ok_or_else(|| anyhow!("package {name} not found in the workspace"))
    };
    let ebpf = find("lb-ebpf")?;
    let common = find("lb-common")?;
    // aya-build watches lb-ebpf's directory; the program also compiles lb-common.
    let common_dir = common
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("lb-common manifest has no parent"))?;
    println!("cargo:rerun-if-changed={common_dir}");
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("lb-ebpf manifest has no parent"))?;
    // The benchmark harness programs go into the object only for the test and benchmark
    // builds (lb-user's `test-harness` feature, enabled by lb-tests alone).
    let features: &[&str] = if std::env::var_os("CARGO_FEATURE_TEST_HARNESS").is_some() {
        &["test-harness"]
    } else {
        &[]
    };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            features,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )?;
    if features.is_empty() {
        return Ok(());
    }
    // The upgrade tests' variant (lb-ebpf's `upgrade-variant`: another program, the same
    // maps as the `lb` binary's object) into OUT_DIR/variant/lb-ebpf. aya-build writes
    // into $OUT_DIR, so it runs once more with OUT_DIR pointing there.
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
    let variant = out_dir.join("variant");
    std::fs::create_dir_all(&variant)?;
    // SAFETY: the build script is single-threaded here; nothing reads the environment
    // concurrently.
    unsafe { std::env::set_var("OUT_DIR", &variant) };
    let built = aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            features: &["upgrade-variant"],
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    );
    // SAFETY: as above.
    unsafe { std::env::set_var("OUT_DIR", &out_dir) };
    built
}

/// Sets `LB_COMMIT` (the abbreviated hash of `HEAD`, or `unknown`) and `LB_COMMIT_DATE`
/// (its committer date, `YYYY-MM-DD`, or empty) for the crate's `env!`.
///
/// The commit is known only when the workspace root is the top level of a git work tree
/// (a clone or a worktree); a source tree without `.git`, or one unpacked inside some
/// other repository, gets `unknown`. An `LB_COMMIT` variable in the environment wins, so
/// a build from an exported tree can still name its commit.
fn embed_commit(workspace_root: &Path) {
    println!("cargo:rerun-if-env-changed=LB_COMMIT");
    if let Ok(commit) = std::env::var("LB_COMMIT") {
        println!("cargo:rustc-env=LB_COMMIT={commit}");
        println!("cargo:rustc-env=LB_COMMIT_DATE=");
        return;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(workspace_root)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.trim().to_owned())
    };
    let top_level = git(&["rev-parse", "--show-toplevel"]).map(std::path::PathBuf::from);
    let ours =
        top_level.is_some_and(|top| top.canonicalize().ok() == workspace_root.canonicalize().ok());
    let commit = ours
        .then(|| git(&["rev-parse", "--short=7", "HEAD"]))
        .flatten();
    let date = commit
        .as_ref()
        .and_then(|_| git(&["log", "-1", "--format=%cs"]));
    println!(
        "cargo:rustc-env=LB_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=LB_COMMIT_DATE={}",
        date.as_deref().unwrap_or("")
    );
    // Build again when HEAD moves: HEAD itself (checkout), the branch it names (commit),
    // and packed-refs (a branch that git gc packed). Only existing files: cargo reruns a
    // script on every build when a watched path is missing.
    if ours {
        let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(git(&["rev-parse", "--git-path", &branch]));
        }
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
        for path in watched.into_iter().flatten() {
            let path = workspace_root.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
