//! `cargo xtask book [--no-build]`: builds the book (docs/) with mdbook into
//! `target/book`, then checks every internal link of docs/src/**/*.md, README.md and
//! ARCHITECTURE.md: a relative link names an existing file, and its `#anchor` is the
//! slug of a heading in the target file (GitHub's and mdBook's rule, [`slug`]). It also
//! checks that ARCHITECTURE.md's map names every crate of the workspace
//! ([`unmapped_crates`]), so the map stays equal to the tree.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::cmd;

/// Arguments of `cargo xtask book`.
#[derive(Debug, clap::Args)]
pub(crate) struct BookArgs {
    /// Only check the links (no mdbook needed).
    #[arg(long)]
    no_build: bool,
}

/// Runs `cargo xtask book`.
///
/// # Errors
/// mdbook failed, or a link is broken (each one is printed).
pub(crate) fn run(args: &BookArgs) -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    if !args.no_build {
        build(&root)?;
    }
    let mut broken = check_links(&root)?;
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).context("Cargo.toml")?;
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("ARCHITECTURE.md")?;
    broken.extend(unmapped_crates(&manifest, &map));
    for problem in &broken {
        eprintln!("xtask book: {problem}");
    }
    if !broken.is_empty() {
        bail!("{} broken links or unmapped crates", broken.len());
    }
    eprintln!("xtask book: every internal link resolves");
    Ok(())
}

/// The book step of `cargo xtask test`: builds it and checks its links, printing what
/// fails; true when all is well.
pub(crate) fn passes() -> bool {
    let result = run(&BookArgs { no_build: false });
    if let Err(err) = &result {
        eprintln!("xtask book: {err:#}");
    }
    result.is_ok()
}

/// Builds the book into `target/book`.
fn build(root: &Path) -> anyhow::Result<()> {
    cmd::run(
        Command::new("mdbook")
            .arg("build")
            .arg(root.join("docs"))
            .arg("--dest-dir")
            .arg(root.join("target").join("book")),
    )
    .context("mdbook build (`cargo xtask setup` installs mdbook)")
}

/// The documents whose links are checked: README.md, ARCHITECTURE.md and every
/// Markdown file under docs/src.
fn documents(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut dirs = vec![root.join("docs").join("src")];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The workspace members (the `members` array of the root `manifest`) that the
/// architecture `map` does not name as a directory (`` `lb-maglev/` ``), one problem each.
fn unmapped_crates(manifest: &str, map: &str) -> Vec<String> {
    let Some(start) = manifest.find("\nmembers = [") else {
        return vec!["Cargo.toml: no workspace members array".to_owned()];
    };
    let list = &manifest[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split('"')
        .skip(1)
        .step_by(2)
        .filter(|member| !map.contains(&format!("`{member}/`")))
        .map(|member| format!("ARCHITECTURE.md: the crate map does not name `{member}/`"))
        .collect()
}

/// Every broken internal link of the documents, as `FILE:LINE: link TARGET: why`.
fn check_links(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut broken = Vec::new();
    for file in documents(root)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for link in links(&text) {
            if let Err(why) = resolve(&file, &text, &link.target) {
                broken.push(format!(
                    "{shown}:{}: link {}: {why}",
                    link.line, link.target
                ));
            }
        }
    }
    Ok(broken)
}

/// Checks one link target of `file` (whose text is `text`).
fn resolve(file: &Path, text: &str, target: &str) -> Result<(), String> {
    if is_external(target) {
        return Ok(());
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let (dest, dest_text) = if path.is_empty() {
        (file.to_path_buf(), text.to_owned())
    } else {
        let dest = file.parent().unwrap_or(Path::new(".")).join(path);
        if !dest.exists() {
            return Err(format!("{} does not exist", dest.display()));
        }
        let dest_text = if anchor.is_empty() {
            String::new()
        } else {
            std::fs::read_to_string(&dest).map_err(|e| format!("{}: {e}", dest.display()))?
        };
        (dest, dest_text)
    };
    if !anchor.is_empty() && !anchors(&dest_text).contains(anchor) {
        return Err(format!(
            "no heading with the slug #{anchor} in {}",
            dest.display()
        ));
    }
    Ok(())
}

/// Whether a target leaves the repository (a URL scheme such as `https:` or `mailto:`).
fn is_external(target: &str) -> bool {
    target.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
    })
}

/// A link found in a document: its 1-based line and its target.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
}

/// The inline links (`[text](target)`, images too) and reference definitions
/// (`[name]: target`) of a Markdown text, outside code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (index, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(close) = after.find(')') else { break };
            let target = after[..close].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                found.push(Link {
                    line: index + 1,
                    target: target.to_owned(),
                });
            }
            rest = &after[close..];
        }
        if let Some(def) = reference_definition(line) {
            found.push(Link {
                line: index + 1,
                target: def.to_owned(),
            });
        }
    }
    found
}

/// The target of a reference definition line (`[name]: target "title"`), if it is one.
fn reference_definition(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (name, after) = rest.split_once("]:")?;
    if name.is_empty() || name.contains(']') {
        return None;
    }
    after.split_whitespace().next()
}

/// The lines of `text` with fenced code blocks emptied and code spans blanked, so that
/// nothing inside code counts as a link or a heading. Line numbers stay as they were.
fn prose(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    let mut in_span = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            out.push(String::new());
            continue;
        }
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = Some(marker);
            in_span = false;
            out.push(String::new());
            continue;
        }
        if trimmed.is_empty() {
            in_span = false;
        }
        let masked: String = line
            .chars()
            .map(|c| {
                if c == '`' {
                    in_span = !in_span;
                    ' '
                } else if in_span {
                    ' '
                } else {
                    c
                }
            })
            .collect();
        out.push(masked);
    }
    out
}

/// The anchors of a text's headings (ATX `#` headings outside code), with `-1`, `-2`, ...
/// appended to repeated slugs as GitHub and mdBook do.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let raw: Vec<&str> = text.lines().collect();
    for (index, line) in prose(text).iter().enumerate() {
        let Some(heading) = heading_text(line) else {
            continue;
        };
        // The slug is of the heading as written, code spans included.
        let written = heading_text(raw[index]).unwrap_or(heading);
        let base = slug(written);
        let mut id = base.clone();
        let mut n = 0;
        while seen.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        seen.insert(id);
    }
    seen
}

/// The text of an ATX heading line (`## Title ##`), if the line is one.
fn heading_text(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) || line.len() - trimmed.len() > 3 {
        return None;
    }
    let rest = &trimmed[hashes..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim_end())
}

/// The anchor GitHub and mdBook give a heading: its text without Markdown (code marks,
/// emphasis, link targets), lower-cased, spaces as `-`, other punctuation but `-` and
/// `_` dropped.
pub(crate) fn slug(heading: &str) -> String {
    let mut plain = String::new();
    let mut rest = heading;
    // Links keep their text only.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        plain.push_str(&rest[..open]);
        plain.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    plain.push_str(rest);
    plain
        .chars()
        .filter(|c| *c != '`' && *c != '*')
        .flat_map(char::to_lowercase)
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_must_name_every_workspace_member() {
        let manifest = "[workspace]\n# a comment\nmembers = [\n    \"lb\",\n    \"lb-maglev\",\n]\n\
                        default-members = [\"lb-other\"]\n";
        assert!(unmapped_crates(manifest, "| `lb/` | x |\n| `lb-maglev/` | y |").is_empty());
        assert_eq!(
            unmapped_crates(manifest, "| `lb/` | x |"),
            ["ARCHITECTURE.md: the crate map does not name `lb-maglev/`"]
        );
    }

    #[test]
    fn slugs_follow_github_and_mdbook() {
        assert_eq!(slug("The two commands"), "the-two-commands");
        assert_eq!(
            slug("Restarts, upgrades and the pinned datapath"),
            "restarts-upgrades-and-the-pinned-datapath"
        );
        assert_eq!(
            slug("Packet tracing: `lb trace`"),
            "packet-tracing-lb-trace"
        );
        assert_eq!(
            slug("BR-24 The veth test bed loses XDP_TX frames"),
            "br-24-the-veth-test-bed-loses-xdp_tx-frames"
        );
        assert_eq!(
            slug("Real networks (ICMP, fragments, VLANs)"),
            "real-networks-icmp-fragments-vlans"
        );
        assert_eq!(slug("See [the book](docs/x.md) now"), "see-the-book-now");
        assert_eq!(slug("**Bold** and *em*"), "bold-and-em");
    }

    #[test]
    fn repeated_headings_get_numbered_anchors() {
        let text = "# Intro\n## Notes\ntext\n## Notes\n## Notes\n";
        let got = anchors(text);
        for want in ["intro", "notes", "notes-1", "notes-2"] {
            assert!(got.contains(want), "{want} missing from {got:?}");
        }
    }

    #[test]
    fn headings_inside_code_blocks_are_not_headings() {
        let text = "```\n# not a heading\n```\n#no space\n    # indented code\n## Yes ##\n";
        let got = anchors(text);
        assert_eq!(got, HashSet::from(["yes".to_owned()]));
    }

    #[test]
    fn links_are_found_outside_code_only() {
        let text = "See [a](a.md#x) and ![img](p.png \"title\").\n\
                    `[not](code.md)` and\n\
                    ```\n[no](fenced.md)\n```\n\
                    [wrapped\ntext](b.md) [ext](https://example.com)\n\
                    [ref]: c.md\n\
                    a `span that\nwraps [no](span.md)` ends\n";
        let found = links(text);
        let got: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
        assert_eq!(
            got,
            [
                (1, "a.md#x"),
                (1, "p.png"),
                (7, "b.md"),
                (7, "https://example.com"),
                (8, "c.md"),
            ]
        );
    }

    #[test]
    fn external_targets_are_not_checked() {
        assert!(is_external("https://aya-rs.dev"));
        assert!(is_external("mailto:someone@example.com"));
        assert!(!is_external("docs/src/guide/install.md"));
        assert!(!is_external("#the-two-commands"));
    }

    #[test]
    fn broken_links_name_file_line_and_why() {
        let dir = std::env::temp_dir().join(format!("xtask-book-{}", std::process::id()));
        let src = dir.join("docs").join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(
            dir.join("README.md"),
            "# Top\n[ok](docs/src/a.md#part-one)\n[self](#top)\n[gone](docs/src/none.md)\n",
        )
        .unwrap();
        std::fs::write(dir.join("ARCHITECTURE.md"), "[bad](README.md#nowhere)\n").unwrap();
        std::fs::write(
            src.join("a.md"),
            "# A\n## Part one\n[up](../../README.md#top)\n",
        )
        .unwrap();
        let got = check_links(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("ARCHITECTURE.md:1: link README.md#nowhere: no heading"),
            "{got:?}"
        );
        assert!(
            got[1].starts_with("README.md:4: link docs/src/none.md: ")
                && got[1].ends_with("does not exist"),
            "{got:?}"
        );
    }
}
