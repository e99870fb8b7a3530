//! `lb completions SHELL` and `lb manpage [--dir DIR]`: shell completion scripts
//! (clap_complete) and section 8 manual pages (clap_mangen) generated from the `lb`
//! command's own clap definition, so they always describe the binary that prints them.
//! `main.rs` owns that definition and passes it in (`Cli::command()`); `cargo xtask
//! package` runs both verbs on the release binary to fill the Debian package.
//!
//! The pages: `lb(8)` for the command, and one page per verb named after its path
//! (`lb-run(8)`, `lb-table(8)`, `lb-table-build(8)`, ...), as git and systemd name theirs.

use std::{io, path::PathBuf};

use clap_complete::Shell;
use clap_mangen::{
    Man,
    roff::{Roff, bold, italic, roman},
};

/// The manual section of every page: system administration commands and daemons.
pub const SECTION: &str = "8";

/// `lb completions`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for (to standard output).
    #[arg(value_enum)]
    pub shell: Shell,
    /// Print `{"shell": ..., "script": ...}` instead of the script.
    #[arg(long)]
    pub json: bool,
}

/// `lb manpage`.
#[derive(Clone, Debug, clap::Args)]
pub struct ManpageArgs {
    /// Write lb.8 and one page per verb (lb-run.8, lb-table-build.8, ...) into DIR
    /// (created if missing) instead of printing lb(8) to standard output.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON: `{"name": "lb", "roff": ...}`, or with --dir `{"dir": ..., "files": [...]}`.
    #[arg(long)]
    pub json: bool,
}

/// `lb manpage --dir DIR` could not write a page.
#[derive(Debug, thiserror::Error)]
#[error("--dir: cannot write {}: {source}", path.display())]
pub struct ManpageError {
    /// The file (or the directory) that could not be written.
    pub path: PathBuf,
    /// What the file system said.
    #[source]
    pub source: io::Error,
}

/// One manual page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The page's name: `lb`, or the verb's path joined by `-` (`lb-table-build`).
    pub name: String,
    /// The page in roff (man(7) macros), UTF-8.
    pub roff: String,
}

impl Page {
    /// The file name of the page: `NAME.8`.
    pub fn file_name(&self) -> String {
        format!("{}.{SECTION}", self.name)
    }
}

/// Runs `lb completions`: the completion script for `args.shell`, for a command named
/// `lb` as defined by `cmd`.
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> String {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "lb", &mut out);
    let script = String::from_utf8_lossy(&out).into_owned();
    if args.json {
        format!(
            "{}\n",
            serde_json::json!({ "shell": args.shell.to_string(), "script": script })
        )
    } else {
        script
    }
}

/// Runs `lb manpage`: without `--dir`, returns lb(8); with it, writes every page of
/// [`pages`] into the directory and returns one line naming them.
///
/// # Errors
/// The directory cannot be created or a page cannot be written.
pub fn manpage(args: &ManpageArgs, cmd: clap::Command) -> Result<String, ManpageError> {
    let pages = pages(cmd);
    let Some(dir) = &args.dir else {
        let page = pages.into_iter().next();
        let roff = page.as_ref().map(|p| p.roff.clone()).unwrap_or_default();
        return Ok(if args.json {
            format!("{}\n", serde_json::json!({ "name": "lb", "roff": roff }))
        } else {
            roff
        });
    };
    std::fs::create_dir_all(dir).map_err(|source| ManpageError {
        path: dir.clone(),
        source,
    })?;
    let mut names = Vec::with_capacity(pages.len());
    for page in &pages {
        let path = dir.join(page.file_name());
        std::fs::write(&path, &page.roff).map_err(|source| ManpageError { path, source })?;
        names.push(page.file_name());
    }
    if args.json {
        return Ok(format!(
            "{}\n",
            serde_json::json!({ "dir": dir.display().to_string(), "files": names })
        ));
    }
    Ok(format!(
        "wrote {} manual pages to {}: {}\n",
        names.len(),
        dir.display(),
        names.join(" ")
    ))
}

/// Every page, lb(8) first, then the verbs depth first in definition order. Hidden verbs
/// and clap's `help` verb get no page.
pub fn pages(cmd: clap::Command) -> Vec<Page> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building sets each verb's display name (`lb-table-build`) and bin name.
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, None, &mut pages);
    pages
}

fn collect(cmd: &clap::Command, parent: Option<&str>, pages: &mut Vec<Page>) {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned();
    pages.push(Page {
        roff: render(cmd, &name, parent),
        name: name.clone(),
    });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, Some(&name), pages);
    }
}

/// clap_mangen's sections, then the ones it cannot know: for lb(8) the files, the
/// environment and the exit status; for lb-run(8) the signals; for every page SEE ALSO.
fn render(cmd: &clap::Command, name: &str, parent: Option<&str>) -> String {
    let man = Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section(SECTION)
        // An empty .TH argument would vanish and shift the ones after it.
        .date(if crate::COMMIT_DATE.is_empty() {
            "undated"
        } else {
            crate::COMMIT_DATE
        })
        .source(format!("lb {}", crate::version()))
        .manual("System Manager's Manual");
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render(&mut out);
    let mut extra = Roff::default();
    if parent.is_none() {
        top_level_sections(&mut extra);
    }
    if name == "lb-run" {
        signals_section(&mut extra);
    }
    see_also(&mut extra, name, parent);
    // Each rendering starts with the same apostrophe preamble (two lines defining `Aq`);
    // the page needs it once.
    let preamble = Roff::default().render();
    let extra = extra.render();
    let mut page = String::from_utf8_lossy(&out).into_owned();
    page.push_str(extra.strip_prefix(preamble.as_str()).unwrap_or(&extra));
    page
}

/// FILES, ENVIRONMENT and EXIT STATUS of lb(8).
fn top_level_sections(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    let files = [
        (
            "/etc/lb/lb.toml",
            "The configuration lb.service passes to lb run --config. The package installs \
             it with every line commented out, so lb run refuses it until interface, \
             encap and at least one vip are set.",
        ),
        (
            "/usr/share/doc/lb/lb.example.toml",
            "A complete configuration with every key, its meaning and its default.",
        ),
        (
            "/run/lb/lb.sock",
            "The daemon's control socket (key control_socket) that status, stats, backend \
             and flow talk to.",
        ),
        (
            "/usr/lib/systemd/system/lb.service",
            "The systemd unit that runs lb run; the package neither enables nor starts it.",
        ),
    ];
    tagged_paragraphs(roff, &files);
    roff.control("SH", ["ENVIRONMENT"]);
    tagged_paragraphs(
        roff,
        &[(
            "RUST_LOG",
            "The log filter of lb run (tracing's EnvFilter syntax, default info); logs go \
             to standard error.",
        )],
    );
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(
        "0 on success; 2 when the command line or an option's value is wrong; 1 for any \
         other error (an invalid configuration, an unreachable daemon with nothing pinned \
         to read instead, a refused change); 3 when lb status finds the datapath \
         degraded, or when lb status, lb stats, lb flow or lb conn list answer from the \
         pinned datapath because no daemon runs (the answer is printed and says so: \
         daemon not running; datapath forwarding, generation N, state as of T); 4 when \
         a change got no answer in time (lb status tells whether it applied).",
    )]);
}

/// SIGNALS of lb-run(8), as the daemon's event loop (`lb run`) handles them.
fn signals_section(roff: &mut Roff) {
    roff.control("SH", ["SIGNALS"]);
    let signals = [
        (
            "SIGHUP",
            "Reload the configuration file (the daemon also reloads when the file \
             changes). Only what changed is applied; an invalid file is logged and \
             nothing is applied.",
        ),
        (
            "SIGTERM, SIGINT",
            "Stop the daemon and exit 0: remove the control socket and detach the \
             tunnel-probe program. The XDP program stays attached and pinned and keeps \
             forwarding with its last state; health checks and changes pause until the \
             next start, which adopts it. With detach_on_exit = true (lb.toml(5)) the \
             daemon detaches the XDP program and removes its pins instead; lb detach \
             removes a datapath left behind.",
        ),
    ];
    tagged_paragraphs(roff, &signals);
}

/// One `.TP` paragraph per (tag in bold, text) pair.
fn tagged_paragraphs(roff: &mut Roff, items: &[(&str, &str)]) {
    for (tag, text) in items {
        roff.control("TP", []);
        roff.text([bold(*tag)]);
        roff.text([roman(*text)]);
    }
}

/// SEE ALSO: lb(8) and the parent verb's page for a verb; for lb(8) the tools the daemon
/// works with.
fn see_also(roff: &mut Roff, name: &str, parent: Option<&str>) {
    roff.control("SH", ["SEE ALSO"]);
    let refs: Vec<String> = match parent {
        None => ["ip-neighbour(8)", "systemctl(1)", "systemd.exec(5)"]
            .map(str::to_owned)
            .to_vec(),
        Some("lb") => vec![format!("lb({SECTION})")],
        Some(parent) => vec![format!("{parent}({SECTION})"), format!("lb({SECTION})")],
    };
    let mut inline = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        if i > 0 {
            inline.push(roman(", "));
        }
        inline.push(italic(r.clone()));
    }
    roff.text(inline);
    roff.control("PP", []);
    roff.text([roman(format!(
        "{name} is part of lb {}, an XDP layer-4 load balancer with Maglev hashing. \
         lb.toml(5) describes the configuration file; the README \
         (/usr/share/doc/lb/README.md.gz in the package) is a quick start, and the book \
         in the source tree's docs/ describes the operation in full.",
        crate::version()
    ))]);
}

#[cfg(test)]
mod tests;
