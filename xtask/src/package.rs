//! `cargo xtask package [--check]`: the Debian package `lb`, and its inspection.
//!
//! Build: the release `lb` binary (it embeds the XDP object, so the package needs no BPF
//! toolchain); then the generated inputs in `target/release/lb-package/` (man pages and
//! completion scripts printed by the binary's own `lb manpage` / `lb completions`,
//! lb.toml(5) rendered from the book's configuration chapter by [`manpage`], the
//! commented-out conffile made from lb.example.toml, the changelog, the gzipped README
//! and book (docs/src's Markdown, in usr/share/doc/lb/book/),
//! the list of linked crates); then cargo-deb (`--no-build`), which reads
//! `[package.metadata.deb]` of lb/Cargo.toml and takes the unit from
//! dist/systemd/lb.service and dist/systemd/lb-agent@.service. The version is
//! [`deb_version`].
//!
//! Check ([`check`], also step 6 of `cargo xtask test`): the package's file list and
//! control data, lintian, and the unpacked tree (`dpkg-deb -x` into a temporary
//! directory, never installed): `lb --version` with an empty environment, the conffile
//! refused by `lb run`, `man -l` on every page (lb.toml(5) too), the bash completion of `lb b`, and
//! `systemd-analyze verify` on both units (the agent's as an instance).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{cmd, manpage, setup};

/// Arguments of `cargo xtask package`.
#[derive(Debug, clap::Args)]
pub(crate) struct PackageArgs {
    /// Inspect the package after building it (as `cargo xtask test` does).
    #[arg(long)]
    check: bool,
}

/// The Debian revision of every package built here (the packaging has no separate
/// history from the source).
const DEBIAN_REVISION: &str = "1";

/// Files every package holds besides the man pages (paths inside the package).
const EXPECTED_FILES: &[&str] = &[
    "usr/bin/lb",
    "etc/lb/lb.toml",
    "usr/lib/systemd/system/lb.service",
    "usr/lib/systemd/system/lb-agent@.service",
    "usr/share/doc/lb/copyright",
    "usr/share/doc/lb/changelog.Debian.gz",
    "usr/share/doc/lb/README.md.gz",
    "usr/share/doc/lb/lb.example.toml",
    "usr/share/doc/lb/rust-crates.txt",
    "usr/share/man/man5/lb.toml.5.gz",
    "usr/share/bash-completion/completions/lb",
    "usr/share/zsh/vendor-completions/_lb",
    "usr/share/fish/vendor_completions.d/lb.fish",
    "usr/share/lintian/overrides/lb",
    "usr/share/lb/grafana/lb.json",
    "usr/share/lb/prometheus/lb-alerts.yml",
];

/// Where the book's Markdown (docs/src, each file gzipped as the README) goes in the
/// package; its files are expected besides [`EXPECTED_FILES`] ([`book_files`]).
const BOOK_DIR: &str = "usr/share/doc/lb/book";

/// The book's Markdown files, relative to docs/src, sorted.
///
/// # Errors
/// docs/src could not be read.
pub(crate) fn book_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let src = root.join("docs/src");
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let dir = src.join(&rel);
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry?;
            let path = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Runs `cargo xtask package`.
pub(crate) fn run(args: &PackageArgs) -> anyhow::Result<()> {
    if setup::anything_missing() {
        eprintln!("xtask package: the toolchain is incomplete; running setup first");
        setup::run()?;
    }
    let built = build()?;
    println!("{}", built.deb.display());
    if args.check {
        let mut failed = 0;
        for outcome in check(&built) {
            eprintln!("xtask package: {outcome}");
            failed += usize::from(matches!(outcome, Outcome::Failed(..)));
        }
        if failed > 0 {
            bail!("{failed} package checks failed");
        }
    }
    Ok(())
}

/// A built package.
#[derive(Debug)]
pub(crate) struct Built {
    /// The .deb file.
    pub(crate) deb: PathBuf,
    /// Its version (`0.1.0+git20261201092737.a56af7c-1`).
    pub(crate) version: String,
    /// What the release binary's `--version` printed (`lb 0.1.0 (commit a56af7c)`).
    pub(crate) version_line: String,
    /// The man pages the binary wrote (`lb.8`, `lb-run.8`, ...).
    pub(crate) pages: Vec<String>,
}

/// The result of one package check.
#[derive(Debug)]
pub(crate) enum Outcome {
    Passed(&'static str),
    Failed(&'static str, String),
    Skipped(&'static str, &'static str),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Passed(name) => write!(f, "ok: {name}"),
            Self::Failed(name, why) => write!(f, "FAILED: {name}: {why}"),
            Self::Skipped(name, why) => write!(f, "skipped: {name} ({why})"),
        }
    }
}

/// The target directory (`CARGO_TARGET_DIR`, else `target/` of the workspace).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cmd::workspace_root().join("target"))
}

/// Builds the package and returns it.
///
/// # Errors
/// The release build, a generator or cargo-deb failed.
pub(crate) fn build() -> anyhow::Result<Built> {
    let root = cmd::workspace_root();
    eprintln!("xtask package: building the lb binary (release)");
    cmd::run(cmd::cargo().args(["build", "--release", "--package", "lb", "--bin", "lb"]))?;
    let release = target_dir().join("release");
    let lb = release.join("lb");
    let version_line = stdout_of(Command::new(&lb).arg("--version"))?;
    let version_line = version_line.trim().to_owned();
    let commit = commit_of_version_line(&version_line)
        .with_context(|| format!("unexpected `lb --version` output: {version_line:?}"))?;
    let stamp = commit.and_then(commit_stamp);
    let version = deb_version(
        workspace_version(&root)?.as_str(),
        commit.zip(stamp.as_deref()),
    );
    eprintln!("xtask package: version {version}");

    let out = release.join("lb-package");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let program = version_line.strip_prefix("lb ").unwrap_or(&version_line);
    let pages = generate(&root, &lb, &out, &version, program, commit)?;

    let debian = target_dir().join("debian");
    for old in std::fs::read_dir(&debian).into_iter().flatten().flatten() {
        let name = old.file_name().to_string_lossy().into_owned();
        if name.starts_with("lb_") && name.ends_with(".deb") {
            std::fs::remove_file(old.path()).with_context(|| format!("removing the old {name}"))?;
        }
    }
    let listed = stdout_of(cmd::cargo().args([
        "deb",
        "--package",
        "lb",
        "--no-build",
        "--deb-version",
        &version,
    ]))?;
    let deb = listed
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
        .context("cargo deb printed no .deb path")?;
    Ok(Built {
        deb,
        version,
        version_line,
        pages,
    })
}

/// Writes the generated package inputs into `out`; returns the man page file names.
/// `version` is the package's; `program` the one `lb --version` prints, which every
/// manual page shows (lb.toml(5) as lb(8) does).
fn generate(
    root: &Path,
    lb: &Path,
    out: &Path,
    version: &str,
    program: &str,
    commit: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let man = out.join("man8");
    let said = stdout_of(Command::new(lb).arg("manpage").arg("--dir").arg(&man))?;
    // "wrote N manual pages to DIR: lb.8 lb-run.8 ..."
    let pages: Vec<String> = said
        .rsplit_once(": ")
        .map(|(_, names)| names.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    if !pages.iter().any(|p| p == "lb.8") {
        bail!("`lb manpage --dir` wrote no lb.8: {said}");
    }
    for page in &pages {
        gzip(&man.join(page))?;
    }
    let man5 = out.join("man5");
    std::fs::create_dir_all(&man5)?;
    let chapter = std::fs::read_to_string(root.join(manpage::SOURCE))
        .with_context(|| format!("reading {}", manpage::SOURCE))?;
    std::fs::write(man5.join("lb.toml.5"), manpage::render(&chapter, program))?;
    gzip(&man5.join("lb.toml.5"))?;
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)?;
    for (shell, file) in [("bash", "lb.bash"), ("zsh", "_lb"), ("fish", "lb.fish")] {
        let script = stdout_of(Command::new(lb).args(["completions", shell]))?;
        std::fs::write(completions.join(file), script)?;
    }
    let example = std::fs::read_to_string(root.join("lb.example.toml"))?;
    std::fs::write(out.join("lb.toml"), commented_config(&example))?;
    std::fs::copy(root.join("README.md"), out.join("README.md"))?;
    gzip(&out.join("README.md"))?;
    // The book's Markdown, in its layout: lb/Cargo.toml's `book/**/*.md.gz` asset.
    for file in book_files(root)? {
        let to = out.join("book").join(&file);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(root.join("docs/src").join(&file), &to)
            .with_context(|| format!("copying docs/src/{}", file.display()))?;
        gzip(&to)?;
    }
    let maintainer = deb_maintainer(root)?;
    let date = commit
        .and_then(|c| git(&["show", "-s", "--format=%cD", c]))
        .or_else(|| cmd::output(Command::new("date").arg("-R")).map(|d| d.trim().to_owned()))
        .context("no date for the changelog")?;
    std::fs::write(
        out.join("changelog.Debian"),
        changelog(version, commit, &maintainer, &date),
    )?;
    gzip(&out.join("changelog.Debian"))?;
    let tree = stdout_of(cmd::cargo().args([
        "tree",
        "--package",
        "lb",
        "--edges",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p}|{l}",
    ]))?;
    std::fs::write(out.join("rust-crates.txt"), crate_list(&tree))?;
    Ok(pages)
}

/// The package version: the workspace version, then for a build from a commit
/// `+git<committer time, UTC, YYYYMMDDhhmmss>.<hash>`, then the Debian revision.
///
/// `+` sorts after the bare version (Debian Policy 5.6.12): the workspace version names
/// the last release (it is bumped when releasing), a snapshot of later commits is newer
/// than it and older than the next release. The timestamp makes later commits sort
/// later (a hash alone has no order). Without a commit: the workspace version alone.
pub(crate) fn deb_version(workspace: &str, commit: Option<(&str, &str)>) -> String {
    match commit {
        Some((hash, stamp)) => format!("{workspace}+git{stamp}.{hash}-{DEBIAN_REVISION}"),
        None => format!("{workspace}-{DEBIAN_REVISION}"),
    }
}

/// The commit in `lb --version` output (`lb 0.1.0 (commit a56af7c)`): `Some(None)` for
/// `unknown`, `None` when the line has another shape.
pub(crate) fn commit_of_version_line(line: &str) -> Option<Option<&str>> {
    let commit = line.strip_suffix(')')?.rsplit_once("(commit ")?.1;
    if commit == "unknown" {
        return Some(None);
    }
    commit
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some(Some(commit))
}

/// The committer time of `commit` in UTC, `YYYYMMDDhhmmss`.
fn commit_stamp(commit: &str) -> Option<String> {
    git(&[
        "show",
        "-s",
        "--format=%cd",
        "--date=format-local:%Y%m%d%H%M%S",
        commit,
    ])
}

fn git(args: &[&str]) -> Option<String> {
    let mut git = Command::new("git");
    git.arg("-C")
        .arg(cmd::workspace_root())
        .args(args)
        .env("TZ", "UTC");
    cmd::output(&mut git).map(|s| s.trim().to_owned())
}

/// The conffile /etc/lb/lb.toml: lb.example.toml with every line commented out, under a
/// header saying why. `lb run` refuses it (no `interface`), so installing the package
/// starts nothing even if the unit were started by hand.
pub(crate) fn commented_config(example: &str) -> String {
    let mut out = String::from(
        "# /etc/lb/lb.toml: the configuration of lb.service (lb run --config /etc/lb/lb.toml).\n\
         #\n\
         # Everything below is commented out, so `lb run` refuses this file until you set at\n\
         # least `interface`, [encap] and one [[vip]] with its backends: the package starts\n\
         # nothing by itself. The keys below are those of /usr/share/doc/lb/lb.example.toml,\n\
         # each with its meaning and default. Then: systemctl enable --now lb\n\
         # The daemon reloads this file when it changes (and on systemctl reload lb).\n\
         \n",
    );
    for line in example.lines() {
        if line.is_empty() || line.starts_with('#') {
            out.push_str(line);
        } else {
            out.push_str("# ");
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// A one-entry Debian changelog (deb-changelog(5)) for this build.
fn changelog(version: &str, commit: Option<&str>, maintainer: &str, date: &str) -> String {
    let what = commit.map_or_else(
        || "Build of a source tree without git history.".to_owned(),
        |c| format!("Snapshot of commit {c}."),
    );
    format!("lb ({version}) unstable; urgency=medium\n\n  * {what}\n\n -- {maintainer}  {date}\n")
}

/// `cargo tree --format '{p}|{l}'` lines to `name version licence` lines, sorted and
/// without duplicates, the workspace's own crates (path sources) and proc macros (not
/// linked into the binary) left out.
pub(crate) fn crate_list(tree: &str) -> String {
    let mut crates: Vec<String> = tree
        .lines()
        .filter(|l| !l.contains("(proc-macro)") && !l.contains(" (/"))
        .filter_map(|l| {
            let (package, licence) = l.split_once('|')?;
            let mut words = package.split_whitespace();
            let (name, version) = (words.next()?, words.next()?);
            let licence = licence.trim().trim_end_matches("(*)").trim();
            Some(format!(
                "{name} {} {}",
                version.trim_start_matches('v'),
                if licence.is_empty() {
                    "(no licence declared)"
                } else {
                    licence
                }
            ))
        })
        .collect();
    crates.sort();
    crates.dedup();
    let mut out = String::from(
        "Rust crates from crates.io compiled into /usr/bin/lb (name, version, licence).\n\n",
    );
    for c in crates {
        out.push_str(&c);
        out.push('\n');
    }
    out
}

/// `version` of the workspace (`[workspace.package]` in Cargo.toml).
fn workspace_version(root: &Path) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    toml_string(&manifest, "[workspace.package]", "version")
        .context("Cargo.toml: no [workspace.package] version")
}

/// `maintainer` of `[package.metadata.deb]` in lb/Cargo.toml.
fn deb_maintainer(root: &Path) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(root.join("lb/Cargo.toml"))?;
    toml_string(&manifest, "[package.metadata.deb]", "maintainer")
        .context("lb/Cargo.toml: no [package.metadata.deb] maintainer")
}

/// The string value of `key = "..."` in the table that starts with the line `table`
/// (enough for the two plain keys read here; xtask has no TOML parser).
fn toml_string(text: &str, table: &str, key: &str) -> Option<String> {
    text.lines()
        .skip_while(|l| l.trim() != table)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
        })
}

/// Replaces `path` by `path.gz` (`gzip -9n`: no name or time stamp, reproducible).
fn gzip(path: &Path) -> anyhow::Result<()> {
    cmd::run(Command::new("gzip").args(["-9nf"]).arg(path))
}

/// Runs `cmd` and returns its standard output; stderr is passed through.
fn stdout_of(cmd: &mut Command) -> anyhow::Result<String> {
    eprintln!("xtask: $ {}", cmd::describe(cmd));
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{}`", cmd::describe(cmd)))?;
    if !out.status.success() {
        bail!("`{}` failed ({})", cmd::describe(cmd), out.status);
    }
    String::from_utf8(out.stdout).context("output is not UTF-8")
}

/// Inspects a built package; one outcome per check, in a fixed order.
pub(crate) fn check(built: &Built) -> Vec<Outcome> {
    let mut outcomes = vec![
        outcome("contents (dpkg-deb --contents)", check_contents(built)),
        outcome("control data and maintainer scripts", check_control(built)),
        outcome("lintian", check_lintian(built)),
    ];
    let unpacked = match Unpacked::new(&built.deb) {
        Ok(u) => u,
        Err(err) => {
            outcomes.push(Outcome::Failed("unpack (dpkg-deb -x)", format!("{err:#}")));
            return outcomes;
        }
    };
    outcomes.push(outcome(
        "unpacked lb runs with an empty environment",
        check_binary(built, &unpacked),
    ));
    outcomes.push(if cmd::is_root() {
        outcome(
            "the conffile starts nothing (lb run refuses it)",
            check_conffile(&unpacked),
        )
    } else {
        Outcome::Skipped(
            "the conffile starts nothing (lb run refuses it)",
            "lb run checks privileges before the file: run as root",
        )
    });
    outcomes.push(outcome(
        "man -l renders every page",
        check_man(built, &unpacked),
    ));
    outcomes.push(outcome(
        "bash completes `lb b` to `backend`",
        check_bash_completion(&unpacked),
    ));
    outcomes.push(outcome(
        "systemd-analyze verify accepts the units",
        UNITS
            .iter()
            .try_for_each(|(unit, instance)| check_unit(&unpacked, unit, instance)),
    ));
    outcomes
}

fn outcome(name: &'static str, result: anyhow::Result<()>) -> Outcome {
    match result {
        Ok(()) => Outcome::Passed(name),
        Err(err) => Outcome::Failed(name, format!("{err:#}")),
    }
}

/// A package unpacked into a fresh temporary directory, removed on drop.
struct Unpacked {
    root: PathBuf,
}

impl Unpacked {
    fn new(deb: &Path) -> anyhow::Result<Self> {
        let root = std::env::temp_dir().join(format!("lb-package-check-{}", std::process::id()));
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        std::fs::create_dir_all(root.join("home"))?;
        let unpacked = Self { root };
        cmd::run(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(deb)
                .arg(unpacked.tree()),
        )?;
        Ok(unpacked)
    }

    /// The package's files (`<tmp>/tree/usr/bin/lb`, ...).
    fn tree(&self) -> PathBuf {
        self.root.join("tree")
    }

    /// An empty home directory.
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// A command with an empty environment but `PATH=/usr/bin:/bin` and the empty home.
    fn bare(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home())
            .current_dir(&self.root);
        cmd
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `cmd` and returns (success, stdout, stderr).
fn capture(cmd: &mut Command) -> anyhow::Result<(bool, String, String)> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{}`", cmd::describe(cmd)))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn check_contents(built: &Built) -> anyhow::Result<()> {
    let (ok, listing, err) = capture(Command::new("dpkg-deb").arg("--contents").arg(&built.deb))?;
    if !ok {
        bail!("dpkg-deb --contents: {err}");
    }
    // "-rwxr-xr-x root/root 6000000 2026-12-01 09:00 ./usr/bin/lb"
    let files: Vec<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches("./"))
        .collect();
    let mut expected: Vec<String> = EXPECTED_FILES.iter().map(|f| (*f).to_owned()).collect();
    expected.extend(
        built
            .pages
            .iter()
            .map(|p| format!("usr/share/man/man8/{p}.gz")),
    );
    expected.extend(
        book_files(&cmd::workspace_root())?
            .iter()
            .map(|f| format!("{BOOK_DIR}/{}.gz", f.display())),
    );
    let missing: Vec<&String> = expected
        .iter()
        .filter(|e| !files.contains(&e.as_str()))
        .collect();
    let extra: Vec<&&str> = files
        .iter()
        .filter(|f| !expected.iter().any(|e| e == *f))
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        bail!("missing {missing:?}, unexpected {extra:?}");
    }
    for page in ["lb.8", "lb-run.8", "lb-status.8", "lb-table-build.8"] {
        if !built.pages.iter().any(|p| p == page) {
            bail!("no man page {page} among {:?}", built.pages);
        }
    }
    Ok(())
}

fn check_control(built: &Built) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("lb-package-control-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = (|| {
        cmd::run(
            Command::new("dpkg-deb")
                .arg("--control")
                .arg(&built.deb)
                .arg(&dir),
        )?;
        let control = std::fs::read_to_string(dir.join("control"))?;
        let field = |name: &str| {
            control
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                .unwrap_or("")
                .to_owned()
        };
        if field("Package") != "lb" || field("Version") != built.version {
            bail!(
                "Package/Version: {:?} {:?}",
                field("Package"),
                field("Version")
            );
        }
        let depends = field("Depends");
        if !depends.contains("libc6") || !depends.contains("iproute2") {
            bail!("Depends should name libc6 and iproute2: {depends:?}");
        }
        let conffiles = std::fs::read_to_string(dir.join("conffiles")).unwrap_or_default();
        if conffiles.trim() != "/etc/lb/lb.toml" {
            bail!("conffiles: {conffiles:?}");
        }
        for script in ["preinst", "postinst", "prerm", "postrm"] {
            let text = std::fs::read_to_string(dir.join(script)).unwrap_or_default();
            starts_nothing(&text).map_err(|line| anyhow::anyhow!("{script}: `{line}`"))?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Whether a maintainer script leaves the unit as the administrator set it: it may
/// reload systemd, restart a *running* unit (`try-restart`) and re-create the links of
/// a unit the administrator had enabled (`enable` under `was-enabled`, as debhelper's
/// `--no-enable` scripts do), but never start or enable it on its own. Returns the
/// offending line.
fn starts_nothing(script: &str) -> Result<(), &str> {
    let mut after_was_enabled = false;
    for line in script.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let starts = ["start", "restart", "reload-or-restart"]
            .iter()
            .any(|verb| {
                line.contains(&format!("deb-systemd-invoke {verb} "))
                    || line.contains(&format!("systemctl {verb} "))
            });
        let enables = line.contains("systemctl enable")
            || line.contains("deb-systemd-helper enable")
            || line.contains("deb-systemd-helper reenable");
        if starts || (enables && !after_was_enabled) {
            return Err(line);
        }
        if line.contains("was-enabled") {
            after_was_enabled = true;
        } else if line == "fi" {
            after_was_enabled = false;
        }
    }
    Ok(())
}

fn check_lintian(built: &Built) -> anyhow::Result<()> {
    // Warnings fail too: the accepted ones are overridden, with reasons, in
    // dist/debian/lintian-overrides, so a new warning cannot pass unnoticed.
    let (ok, out, err) = capture(
        Command::new("lintian")
            .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
            .arg(&built.deb),
    )?;
    eprint!("{out}");
    if !ok {
        bail!("lintian reported errors or warnings:\n{out}{err}");
    }
    Ok(())
}

fn check_binary(built: &Built, unpacked: &Unpacked) -> anyhow::Result<()> {
    let lb = unpacked.tree().join("usr/bin/lb");
    let (_, cargo, _) = capture(unpacked.bare("sh").args(["-c", "command -v cargo rustc"]))?;
    if !cargo.trim().is_empty() {
        bail!("the bare PATH still finds a Rust toolchain: {cargo}");
    }
    let (ok, out, err) = capture(unpacked.bare(&lb).arg("--version"))?;
    if !ok || out.trim() != built.version_line {
        bail!(
            "lb --version: {out:?} {err:?} (the build printed {:?})",
            built.version_line
        );
    }
    // The embedded XDP object and a real computation, still without any other file.
    let (ok, out, err) = capture(unpacked.bare(&lb).arg("object"))?;
    if !ok || !out.starts_with("embedded eBPF object: ") || out.contains(": 0 bytes") {
        bail!("lb object: {out:?} {err:?}");
    }
    let (ok, out, err) =
        capture(
            unpacked
                .bare(&lb)
                .args(["table", "build", "198.51.100.11", "198.51.100.12"]),
        )?;
    if !ok || !out.contains("2 backends") {
        bail!("lb table build: {out:?} {err:?}");
    }
    Ok(())
}

fn check_conffile(unpacked: &Unpacked) -> anyhow::Result<()> {
    // In a new, empty network namespace: even a file that parsed could attach nothing.
    let conffile = unpacked.tree().join("etc/lb/lb.toml");
    let (ok, out, err) = capture(
        unpacked
            .bare("unshare")
            .arg("--net")
            .arg(unpacked.tree().join("usr/bin/lb"))
            .args(["run", "--config"])
            .arg(&conffile),
    )?;
    if ok || !err.contains("missing field `interface`") {
        bail!("lb run on the conffile should refuse it naming `interface`: {out:?} {err:?}");
    }
    Ok(())
}

fn check_man(built: &Built, unpacked: &Unpacked) -> anyhow::Result<()> {
    let man = unpacked.tree().join("usr/share/man");
    for page in &built.pages {
        man_renders(
            unpacked,
            &man.join("man8"),
            page,
            page.trim_end_matches(".8"),
        )?;
    }
    // lb.toml(5), from the book: its configuration chapter's sections must be there.
    man_renders(
        unpacked,
        &man.join("man5"),
        "lb.toml.5",
        "CHANGES WHILE TRAFFIC FLOWS",
    )
}

/// `man --warnings -l` renders `dir/page.gz` without a warning, and the output has its
/// NAME section and `expected`.
fn man_renders(unpacked: &Unpacked, dir: &Path, page: &str, expected: &str) -> anyhow::Result<()> {
    let path = dir.join(format!("{page}.gz"));
    // --warnings: groff reports what it could not typeset; any of it fails.
    let (ok, out, err) = capture(
        unpacked
            .bare("man")
            .args(["--warnings", "-l"])
            .arg(&path)
            .env("MANWIDTH", "80"),
    )?;
    if !ok || !err.trim().is_empty() || !out.contains("NAME") || !out.contains(expected) {
        bail!("man -l {page}: status ok={ok}, stderr {err:?}, output {out:.400}");
    }
    Ok(())
}

/// Completes `words` (the last one being completed) with the function the sourced
/// script registered for `lb`, the way bash calls it (COMP_WORDS, COMP_CWORD, and the
/// arguments command, word, previous word).
const BASH_COMPLETE: &str = r#"
set -u
[ -r /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion
. "$1"; shift
spec=$(complete -p lb) || { echo "no completion registered for lb" >&2; exit 1; }
func=${spec#*-F }; func=${func%% *}
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
prev=""; [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}
COMPREPLY=()
"$func" lb "${COMP_WORDS[COMP_CWORD]}" "$prev"
printf '%s\n' "${COMPREPLY[@]}"
"#;

fn check_bash_completion(unpacked: &Unpacked) -> anyhow::Result<()> {
    let script = unpacked
        .tree()
        .join("usr/share/bash-completion/completions/lb");
    let complete = |words: &[&str]| -> anyhow::Result<String> {
        let (ok, out, err) = capture(
            unpacked
                .bare("bash")
                .args(["--norc", "--noprofile", "-c", BASH_COMPLETE, "complete"])
                .arg(&script)
                .args(words),
        )?;
        if !ok {
            bail!("bash: {err}");
        }
        Ok(out.trim().to_owned())
    };
    for (words, want) in [
        (&["lb", "b"][..], "backend"),
        (&["lb", "table", "b"][..], "build"),
    ] {
        let got = complete(words)?;
        if got != want {
            bail!(
                "`{}` completed to {got:?}, expected {want:?}",
                words.join(" ")
            );
        }
    }
    Ok(())
}

/// The package's units and the name `systemd-analyze verify` checks each as: the
/// agent's template as an instance (`%i` an interface name).
const UNITS: &[(&str, &str)] = &[
    ("lb.service", "lb.service"),
    ("lb-agent@.service", "lb-agent@eth0.service"),
];

/// `systemd-analyze verify` accepts unit file `unit` of the package, checked as
/// `instance`.
fn check_unit(unpacked: &Unpacked, unit: &str, instance: &str) -> anyhow::Result<()> {
    // verify checks that ExecStart's binary exists and that the Documentation= pages
    // open with man: point ExecStart at the unpacked binary (in a copy of the unit) and
    // MANPATH at the unpacked pages.
    let tree = unpacked.tree();
    let text = std::fs::read_to_string(tree.join("usr/lib/systemd/system").join(unit))
        .with_context(|| format!("reading {unit}"))?;
    let exec = "ExecStart=/usr/bin/lb ";
    if !text.lines().any(|l| l.starts_with(exec)) {
        bail!("{unit} has no `{exec}...` line");
    }
    let lb = tree.join("usr/bin/lb");
    let copy = text.replace(exec, &format!("ExecStart={} ", lb.display()));
    let dir = unpacked.root.join("unit");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(unit), copy)?;
    let (ok, out, err) = capture(
        unpacked
            .bare("systemd-analyze")
            .arg("verify")
            .arg(dir.join(instance))
            .env("MANPATH", tree.join("usr/share/man")),
    )?;
    if !ok || !err.trim().is_empty() {
        bail!("systemd-analyze verify {instance}: {out}{err}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_carry_the_commit_and_sort_in_commit_order() {
        let old = deb_version("0.1.0", Some(("a56af7c", "20261201092737")));
        assert_eq!(old, "0.1.0+git20261201092737.a56af7c-1");
        assert_eq!(deb_version("0.1.0", None), "0.1.0-1");
        let later = deb_version("0.1.0", Some(("0000001", "20261201100000")));
        // dpkg's own order (Debian Policy 5.6.12): release < snapshots by time < next.
        let ordered = [
            "0.1.0-1",
            old.as_str(),
            later.as_str(),
            "0.1.1~rc1-1",
            "0.1.1-1",
        ];
        for pair in ordered.windows(2) {
            let status = Command::new("dpkg")
                .args(["--compare-versions", pair[0], "lt", pair[1]])
                .status()
                .expect("dpkg (Debian)");
            assert!(status.success(), "{} < {}", pair[0], pair[1]);
        }
    }

    #[test]
    fn maintainer_scripts_may_keep_but_never_start_or_enable_the_unit() {
        // debhelper's --no-enable --no-start fragments (as cargo-deb generates them).
        let kept = "if deb-systemd-helper --quiet was-enabled lb.service; then\n\
                    \tdeb-systemd-helper enable lb.service >/dev/null || true\n\
                    fi\n\
                    systemctl --system daemon-reload >/dev/null || true\n\
                    deb-systemd-invoke try-restart lb.service >/dev/null || true\n";
        assert_eq!(starts_nothing(kept), Ok(()));
        for bad in [
            "deb-systemd-helper enable lb.service >/dev/null || true\n",
            "if was-enabled; then\nfi\ndeb-systemd-helper enable lb.service\n",
            "deb-systemd-invoke start lb.service >/dev/null || true\n",
            "deb-systemd-invoke restart lb.service\n",
            "systemctl enable --now lb\n",
        ] {
            assert!(starts_nothing(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_commit_is_read_from_the_version_line() {
        assert_eq!(
            commit_of_version_line("lb 0.1.0 (commit a56af7c)"),
            Some(Some("a56af7c"))
        );
        assert_eq!(
            commit_of_version_line("lb 0.1.0 (commit unknown)"),
            Some(None)
        );
        assert_eq!(commit_of_version_line("lb 0.1.0"), None);
        assert_eq!(commit_of_version_line("lb 0.1.0 (commit 12 4)"), None);
    }

    #[test]
    fn the_conffile_is_the_example_fully_commented() {
        let example = "# a comment\ninterface = \"eth0\"\n\n[encap]\n  source_v4 = \"192.0.2.1\"\n";
        let conf = commented_config(example);
        assert!(conf.starts_with("# /etc/lb/lb.toml: "));
        assert!(conf.ends_with(
            "# a comment\n# interface = \"eth0\"\n\n# [encap]\n#   source_v4 = \"192.0.2.1\"\n"
        ));
        assert!(conf.lines().all(|l| l.is_empty() || l.starts_with('#')));
        // The real example: not one active line survives.
        let real = std::fs::read_to_string(cmd::workspace_root().join("lb.example.toml"))
            .expect("lb.example.toml");
        let conf = commented_config(&real);
        assert!(conf.lines().all(|l| l.is_empty() || l.starts_with('#')));
        assert!(conf.contains("# interface = "));
    }

    #[test]
    fn the_crate_list_leaves_out_workspace_crates_and_proc_macros() {
        let tree = "lb v0.1.0 (/src/lb)|MIT OR Apache-2.0\n\
                    aya v0.14.0|MIT OR Apache-2.0\n\
                    thiserror-impl v2.0.17 (proc-macro)|MIT OR Apache-2.0\n\
                    libc v0.2.180|MIT OR Apache-2.0\n\
                    aya v0.14.0|MIT OR Apache-2.0 (*)\n\
                    odd v1.0.0|\n";
        let list = crate_list(tree);
        let lines: Vec<&str> = list.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "aya 0.14.0 MIT OR Apache-2.0",
                "libc 0.2.180 MIT OR Apache-2.0",
                "odd 1.0.0 (no licence declared)"
            ]
        );
    }

    #[test]
    fn the_package_expects_every_chapter_of_the_book() {
        let files = book_files(&cmd::workspace_root()).expect("docs/src");
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        assert!(names.iter().any(|f| f == "SUMMARY.md"), "{names:?}");
        // Every chapter SUMMARY.md links, in its directory.
        let summary = std::fs::read_to_string(cmd::workspace_root().join("docs/src/SUMMARY.md"))
            .expect("SUMMARY.md");
        let linked: Vec<&str> = summary
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .filter(|target| target.ends_with(".md"))
            .collect();
        assert!(linked.len() > 10, "{linked:?}");
        for chapter in linked {
            assert!(
                names.iter().any(|f| f == chapter),
                "{chapter} not in {names:?}"
            );
        }
    }

    #[test]
    fn toml_strings_are_read_from_their_table_only() {
        let text = "[package]\nversion = \"9\"\n[workspace.package]\nversion = \"0.1.0\"\nedition = \"2024\"\n[x]\nversion = \"7\"\n";
        assert_eq!(
            toml_string(text, "[workspace.package]", "version").as_deref(),
            Some("0.1.0")
        );
        assert_eq!(toml_string(text, "[workspace.package]", "license"), None);
        let root = cmd::workspace_root();
        assert!(deb_maintainer(&root).expect("maintainer").contains('<'));
        assert!(!workspace_version(&root).expect("version").is_empty());
    }
}
