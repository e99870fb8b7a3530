//! Embeds the commit the binary is built from (see [`embed_commit`]), which
//! `lb --version` and the manual pages print.
use std::{path::Path, process::Command};

use anyhow::Context as _;
use cargo_metadata::MetadataCommand;

fn main() -> anyhow::Result<()> {
    let metadata = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    embed_commit(metadata.workspace_root.as_std_path());
    Ok(())
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
