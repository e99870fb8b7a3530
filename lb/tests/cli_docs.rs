//! `lb --version`, `lb completions` and `lb manpage` through the real binary: the pages
//! and scripts cover every verb the binary has (no root needed).

use std::process::{Command, Output};

fn lb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run the lb binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// The verbs `lb --help` lists (clap's `help` aside).
fn verbs() -> Vec<String> {
    let help = text(&lb(&["--help"]).stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn version_names_the_workspace_version_the_layout_stamp_and_the_commit() {
    let out = lb(&["--version"]);
    assert!(out.status.success());
    let line = text(&out.stdout);
    let stamp = lb_dataplane::pinned::Layout::of_object(lb_dataplane::EBPF_OBJECT)
        .expect("layout")
        .stamp();
    let prefix = format!(
        "lb {} (datapath layout {stamp}) (commit ",
        env!("CARGO_PKG_VERSION")
    );
    let commit = line
        .trim_end()
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected version line {line:?}"));
    // Built from this checkout: the commit is HEAD's (when git can tell).
    let head = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=7",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(commit, head),
        None => assert_eq!(commit, "unknown"),
    }
}

#[test]
fn manpage_dir_writes_lb_8_and_a_page_for_every_verb() {
    let dir = std::env::temp_dir().join(format!("lb-cli-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = lb(&["manpage", "--dir", dir.to_str().expect("UTF-8 temp dir")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let verbs = verbs();
    assert!(verbs.len() >= 10, "{verbs:?}");
    assert!(dir.join("lb.8").is_file());
    for verb in &verbs {
        let page = dir.join(format!("lb-{verb}.8"));
        let roff = std::fs::read_to_string(&page).unwrap_or_else(|_| panic!("no {page:?}"));
        assert!(roff.contains(&format!(".TH LB-{} 8", verb.to_uppercase())));
    }
    // Verbs of verbs have their own pages too.
    assert!(dir.join("lb-table-build.8").is_file());
    assert!(dir.join("lb-table-diff.8").is_file());
    std::fs::remove_dir_all(&dir).expect("clean up");
    // Without --dir: lb(8) on stdout.
    let out = lb(&["manpage"]);
    assert!(text(&out.stdout).contains(".TH LB 8"));
}

#[test]
fn completion_scripts_offer_every_verb() {
    let verbs = verbs();
    for shell in ["bash", "zsh", "fish"] {
        let out = lb(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for verb in &verbs {
            assert!(script.contains(verb.as_str()), "{shell} lacks {verb}");
        }
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_choices() {
    let out = lb(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tcsh") && stderr.contains("bash"),
        "{stderr}"
    );
}

#[test]
fn an_unwritable_dir_is_an_error_naming_the_option() {
    let out = lb(&["manpage", "--dir", "/proc/lb-no-such-dir"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("lb manpage: error: --dir: cannot write /proc/lb-no-such-dir"),
        "{stderr}"
    );
}
