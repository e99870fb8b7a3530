//! Page naming, the sections clap_mangen does not write, and completion scripts, on a
//! small command shaped like `lb` (a plain verb, a verb with verbs, a hidden verb).

use super::*;

fn command() -> clap::Command {
    clap::Command::new("lb")
        .version("9.9.9")
        .about("A test command.")
        .subcommand(
            clap::Command::new("run")
                .about("Run it.")
                .arg(clap::Arg::new("config").long("config").required(true)),
        )
        .subcommand(
            clap::Command::new("table")
                .about("Tables.")
                .subcommand(clap::Command::new("build").about("Build one."))
                .subcommand(clap::Command::new("diff").about("Compare two.")),
        )
        .subcommand(clap::Command::new("secret").hide(true))
}

fn page<'a>(pages: &'a [Page], name: &str) -> &'a Page {
    pages
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no page {name}"))
}

#[test]
fn one_page_per_verb_named_by_its_path_and_none_for_hidden_or_help() {
    let pages = pages(command());
    let names: Vec<&str> = pages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lb",
            "lb-run",
            "lb-table",
            "lb-table-build",
            "lb-table-diff"
        ]
    );
    assert_eq!(pages[3].file_name(), "lb-table-build.8");
}

#[test]
fn pages_are_section_8_with_title_synopsis_and_see_also() {
    let pages = pages(command());
    let run = page(&pages, "lb-run");
    assert!(run.roff.contains(".TH LB-RUN 8"), "{}", run.roff);
    assert!(run.roff.contains(".SH SYNOPSIS"));
    assert!(run.roff.contains("\\-\\-config"), "{}", run.roff);
    // A verb refers to lb(8); a nested verb also to its parent's page.
    assert!(run.roff.contains(".SH \"SEE ALSO\""), "{}", run.roff);
    assert!(run.roff.contains("lb(8)"));
    let build = page(&pages, "lb-table-build");
    assert!(build.roff.contains("lb\\-table(8)"), "{}", build.roff);
    // Only lb(8) has FILES, ENVIRONMENT and EXIT STATUS.
    let top = page(&pages, "lb");
    for section in ["FILES", "ENVIRONMENT", "EXIT STATUS"] {
        assert!(top.roff.contains(section), "lb(8) lacks {section}");
        assert!(!run.roff.contains(section), "lb-run(8) has {section}");
    }
    assert!(top.roff.contains("/etc/lb/lb.toml"));
    // The daemon's page says what its signals do.
    assert!(run.roff.contains(".SH SIGNALS") && run.roff.contains("SIGHUP"));
    // A stop leaves the datapath forwarding (issue 29 item 7); only detach_on_exit
    // detaches it.
    let signals = run.roff.split(".SH SIGNALS").nth(1).expect("SIGNALS");
    let signals = signals.split("\n.SH ").next().expect("its text");
    assert!(
        signals.contains("stays attached") && signals.contains("keeps forwarding"),
        "{signals}"
    );
    assert!(signals.contains("detach_on_exit"), "{signals}");
    assert!(!signals.contains("Detach the XDP program"), "{signals}");
    assert!(!top.roff.contains(".SH SIGNALS"));
    // One apostrophe preamble although two renderings make up the page.
    assert_eq!(top.roff.matches(".ie \\n(.g").count(), 1, "{}", top.roff);
    // lb(8) lists the verb pages.
    assert!(top.roff.contains("lb\\-run(8)"), "{}", top.roff);
    assert!(!top.roff.contains("secret"));
}

#[test]
fn pages_print_the_version_lb_version_prints() {
    let version = crate::version();
    assert!(version.contains("datapath layout"), "{version}");
    // roff escapes every hyphen of the text, not of the .TH arguments.
    let escaped = version.replace('-', "\\-");
    for page in pages(command()) {
        let footer = format!("\"lb {version}\"");
        assert!(page.roff.contains(&footer), "{}: {}", page.name, page.roff);
        assert!(page.roff.contains(&format!("part of lb {escaped},")));
    }
}

#[test]
fn manpage_without_dir_returns_lb_8_and_with_dir_writes_every_page() {
    let printed = manpage(
        &ManpageArgs {
            dir: None,
            json: false,
        },
        command(),
    )
    .expect("no I/O");
    assert!(printed.contains(".TH LB 8"));
    let dir = std::env::temp_dir().join(format!("lb-docs-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let said = manpage(
        &ManpageArgs {
            dir: Some(dir.join("man8")),
            json: false,
        },
        command(),
    )
    .expect("writable temp dir");
    assert!(said.starts_with("wrote 5 manual pages to "), "{said}");
    let mut written: Vec<String> = std::fs::read_dir(dir.join("man8"))
        .expect("dir created")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "lb-run.8",
            "lb-table-build.8",
            "lb-table-diff.8",
            "lb-table.8",
            "lb.8"
        ]
    );
    let lb8 = std::fs::read_to_string(dir.join("man8/lb.8")).expect("lb.8");
    assert_eq!(lb8, printed);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn manpage_error_names_the_option_and_the_path() {
    // A regular file where the directory should be.
    let file = std::env::temp_dir().join(format!("lb-docs-file-{}", std::process::id()));
    std::fs::write(&file, b"").expect("temp file");
    let err = manpage(
        &ManpageArgs {
            dir: Some(file.join("man8")),
            json: false,
        },
        command(),
    )
    .expect_err("a file is no directory");
    std::fs::remove_file(&file).expect("clean up");
    let text = err.to_string();
    assert!(text.starts_with("--dir: cannot write "), "{text}");
    assert!(text.contains("man8"), "{text}");
}

#[test]
fn completion_scripts_name_the_verbs_for_each_shell() {
    let bash = completions(
        &CompletionsArgs {
            shell: Shell::Bash,
            json: false,
        },
        command(),
    );
    assert!(bash.contains("complete -F _lb"), "{bash}");
    assert!(bash.contains("run") && bash.contains("table"));
    let zsh = completions(
        &CompletionsArgs {
            shell: Shell::Zsh,
            json: false,
        },
        command(),
    );
    assert!(zsh.starts_with("#compdef lb"), "{zsh}");
    let fish = completions(
        &CompletionsArgs {
            shell: Shell::Fish,
            json: false,
        },
        command(),
    );
    assert!(fish.contains("complete -c lb"), "{fish}");
    assert!(fish.contains("-a \"build\""), "{fish}");
}
