//! `lb config check FILE`: validates a configuration file without root and without a
//! daemon, as `lb run` and a reload would, and reports every problem at once, each with
//! its key path and line. The exit status is 0 for a valid file and 1 otherwise, so a CI
//! pipeline can gate a change on it.
//!
//! `lb config diff [FILE]`: what a reload of FILE (default: the running daemon's file)
//! would change in the running daemon, asked of it through the control socket, in the
//! words its reloads log. The exit status is that of diff(1): 0 no change, 1 changes,
//! 2 an error (an invalid file, no daemon).

use std::{fmt::Write as _, path::PathBuf};

use super::{Output, SocketArg, json};
use crate::{
    config::{Config, ConfigErrors},
    control::{ConfigDiff, Request},
};

/// `lb config`.
#[derive(Clone, Debug, clap::Args)]
pub struct ConfigArgs {
    /// What to do with the file.
    #[command(subcommand)]
    pub action: ConfigAction,
}

/// The `lb config` verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// Validate a configuration file (no root, no daemon): every problem with its key
    /// path and line; exit status 1 when there is any.
    Check {
        /// The configuration file (TOML).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show what a reload of a file (default: the daemon's own) would change in the
    /// running daemon, VIP by VIP; exit status 0 no change, 1 changes, 2 error. Over
    /// --remote the file is sent, and its top-level tables replace the daemon's (as
    /// `lb fleet apply --dry-run`).
    Diff {
        /// The configuration file (TOML); default: the file the daemon runs with.
        file: Option<PathBuf>,
        /// Control socket.
        #[command(flatten)]
        socket: SocketArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// What `lb config check` found: the file's problems, or its facts and warnings.
#[derive(Debug)]
pub struct Checked {
    /// The output to print (text or JSON).
    pub output: Output,
    /// Whether the file is valid.
    pub valid: bool,
}

/// Runs `lb config check FILE`.
pub fn run(file: &std::path::Path, as_json: bool) -> Checked {
    check(file, &Config::load(file), as_json)
}

/// Runs `lb config diff [FILE]`: the output, and whether anything changes.
///
/// # Errors
/// The file's problems (every one, as `lb config check` prints them), an unreadable
/// file, or the daemon unreachable or refusing.
pub fn diff(
    file: Option<&std::path::Path>,
    socket: &SocketArg,
    as_json: bool,
) -> Result<(Output, bool), String> {
    let client = socket.client().map_err(|e| e.to_string())?;
    // A remote daemon validates what it makes of the file with its own.
    if let Some(f) = file
        && !client.is_remote()
        && let Err(errors) = Config::load(f)
    {
        return Err(problems(&f.display().to_string(), &errors, false).text);
    }
    let request = match file {
        // A remote daemon cannot read the file: it is sent, as `lb fleet apply
        // --dry-run` sends it (its top-level tables replace the daemon's).
        Some(f) if client.is_remote() => Request::PushConfig {
            toml: std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?,
            dry_run: true,
        },
        // The daemon reads the file: from its own working directory.
        Some(f) => Request::ConfigDiff {
            file: Some(std::fs::canonicalize(f).map_err(|e| format!("{}: {e}", f.display()))?),
        },
        None => Request::ConfigDiff { file: None },
    };
    let d: ConfigDiff = client.call(&request).map_err(|e| e.to_string())?;
    let out = if as_json {
        json(&d)
    } else {
        Output::text(diff_text(&d))
    };
    Ok((out, d.changed))
}

/// `lb reload`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ReloadArgs {
    /// Control socket and --json.
    #[command(flatten)]
    pub read: super::ReadArgs,
    /// A two-phase rollout's phase: `learn` marks the slots the file's tables move
    /// pending with their next owner on the VIPs with the second chance, without
    /// switching or applying anything; `switch` (the default) reloads the file.
    /// Run `learn` on every instance of a fleet before `switch` on any.
    #[arg(long, value_enum, default_value_t = Phase::Switch)]
    pub phase: Phase,
}

/// A two-phase rollout's phase (`lb reload --phase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    /// Phase 1: mark the moved slots pending, switch nothing.
    Learn,
    /// Phase 2 (and a plain reload): apply the file.
    Switch,
}

/// Runs `lb reload`: the daemon reloads its file as on SIGHUP; prints what the reload
/// changes (the lines the daemon logs). With `--phase learn`, prints the VIPs learned
/// and their pending slots instead.
///
/// # Errors
/// The daemon is unreachable, or its file is invalid (nothing is reloaded).
pub fn reload(args: &ReloadArgs) -> Result<Output, crate::control::ClientError> {
    let (socket, as_json) = (&args.read.socket, args.read.json);
    if args.phase == Phase::Learn {
        let l: crate::control::Learned = socket.client()?.call(&Request::ReloadLearn)?;
        return Ok(if as_json {
            json(&l)
        } else {
            Output::text(learned_text(&l))
        });
    }
    let d: ConfigDiff = socket.client()?.call(&Request::Reload)?;
    Ok(if as_json {
        json(&d)
    } else {
        Output::text(diff_text(&d))
    })
}

/// The text of `lb reload --phase learn`.
fn learned_text(l: &crate::control::Learned) -> String {
    if l.vips.is_empty() {
        return format!(
            "{}: no VIP with the second chance has a table the file changes: nothing pending\n",
            l.file
        );
    }
    let mut out = String::new();
    for v in &l.vips {
        if v.pending_slots == 0 {
            out.push_str(&format!(
                "{}: the file no longer changes its table: the earlier learn is abandoned, \
                 no slot pending\n",
                v.vip
            ));
        } else {
            out.push_str(&format!(
                "{}: {} slots pending their next owner (phase 1 of 2; `lb reload` switches)\n",
                v.vip, v.pending_slots
            ));
        }
    }
    out
}

/// The text of `lb config diff`: the change's lines, or a line saying there is none.
pub fn diff_text(d: &ConfigDiff) -> String {
    let lines = d.lines();
    if lines.is_empty() {
        return format!("{}: no change\n", d.file);
    }
    lines.into_iter().map(|l| l + "\n").collect()
}

/// The report of one check of `file`, whose loading gave `loaded`.
fn check(
    file: &std::path::Path,
    loaded: &Result<crate::config::Loaded, ConfigErrors>,
    as_json: bool,
) -> Checked {
    let shown = file.display();
    match loaded {
        Ok(loaded) => {
            let vips = loaded.config.vips.len();
            let backends: usize = loaded.config.vips.iter().map(|v| v.backends.len()).sum();
            let output = if as_json {
                json(&serde_json::json!({
                    "file": shown.to_string(), "valid": true, "errors": [],
                    "warnings": loaded.warnings, "vips": vips, "backends": backends,
                }))
            } else {
                let mut out = format!("{shown}: valid: {vips} VIPs, {backends} backends\n");
                for warning in &loaded.warnings {
                    let _ = writeln!(out, "{shown}: warning: {warning}");
                }
                Output::text(out)
            };
            Checked {
                output,
                valid: true,
            }
        }
        Err(errors) => Checked {
            output: problems(&shown.to_string(), errors, as_json),
            valid: false,
        },
    }
}

/// Every problem of `errors`, one `FILE:LINE: KEY: MESSAGE` line each (the form
/// compilers use, which editors and CI annotate), then `FILE: N problems, on lines ...`;
/// or as JSON.
fn problems(file: &str, errors: &ConfigErrors, as_json: bool) -> Output {
    if as_json {
        let list: Vec<_> = errors
            .0
            .iter()
            .map(|e| serde_json::json!({ "path": e.path, "message": e.message, "line": e.line }))
            .collect();
        return json(&serde_json::json!({
            "file": file, "valid": false, "errors": list, "warnings": [],
            "vips": null, "backends": null,
        }));
    }
    let mut out = String::new();
    for e in &errors.0 {
        let at = e.line.map_or_else(String::new, |l| format!("{l}:"));
        let key = if e.path.is_empty() {
            String::new()
        } else {
            format!(" {}:", e.path)
        };
        let _ = writeln!(out, "{file}:{at}{key} {}", e.message);
    }
    let count = errors.0.len();
    let noun = if count == 1 { "problem" } else { "problems" };
    let lines = lines_named(errors.0.iter().filter_map(|e| e.line));
    let _ = writeln!(out, "{file}: {count} {noun}{lines}");
    Output::text(out)
}

/// The summary's list of the lines with problems: `, on line 8` or `, on lines 8, 9 and
/// 15` (each once, in order); empty when no problem has a line.
fn lines_named(lines: impl Iterator<Item = usize>) -> String {
    let lines: Vec<String> = lines
        .collect::<std::collections::BTreeSet<_>>()
        .iter()
        .map(ToString::to_string)
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [one] => format!(", on line {one}"),
        [rest @ .., last] => format!(", on lines {} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n\n\
                         [[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\n\n\
                         [[vip.backend]]\naddress = \"198.51.100.11\"\n";

    fn checked(text: &str, as_json: bool) -> Checked {
        check(
            std::path::Path::new("lb.toml"),
            &Config::from_toml(text),
            as_json,
        )
    }

    #[test]
    fn a_learn_says_what_is_pending_and_what_is_abandoned() {
        let vip = |vip: &str, pending_slots| crate::control::LearnedVip {
            vip: vip.to_owned(),
            pending_slots,
        };
        let l = crate::control::Learned {
            file: "lb.toml".to_owned(),
            vips: vec![
                vip("203.0.113.10:80/tcp", 1_639),
                vip("203.0.113.11:80/tcp", 0),
            ],
        };
        let text = learned_text(&l);
        assert!(
            text.contains("203.0.113.10:80/tcp: 1639 slots pending"),
            "{text}"
        );
        assert!(
            text.contains("203.0.113.11:80/tcp: the file no longer changes its table"),
            "{text}"
        );
    }

    #[test]
    fn a_valid_file_is_valid_and_counted() {
        let c = checked(VALID, false);
        assert!(c.valid, "{}", c.output.text);
        assert_eq!(c.output.text, "lb.toml: valid: 1 VIPs, 1 backends\n");
    }

    #[test]
    fn every_problem_is_a_line_with_file_line_and_key() {
        // A value of the wrong kind stops the parse; range problems are all reported.
        let sctp = checked(&VALID.replace("\"tcp\"", "\"sctp\""), false);
        assert!(!sctp.valid);
        assert!(
            sctp.output.text.starts_with("lb.toml:8: vip[0].protocol:"),
            "{}",
            sctp.output.text
        );
        let two = VALID
            .replace("port = 80", "port = 80\ntable_size = 65536")
            .replace(
                "198.51.100.11\"",
                "198.51.100.11\"\nweight = 0\n[[vip.backend]]\naddress = \"x\"",
            );
        let c = checked(&two, false);
        let lines: Vec<&str> = c.output.text.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("lb.toml:8: vip[0].table_size:")),
            "{}",
            c.output.text
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("lb.toml:15: vip[0].backend[1].address:")),
            "{}",
            c.output.text
        );
        assert_eq!(
            lines.last(),
            Some(&"lb.toml: 2 problems, on lines 8 and 15")
        );
        assert_eq!(
            lines_named([15, 8, 9, 8].into_iter()),
            ", on lines 8, 9 and 15"
        );
        assert_eq!(lines_named([3].into_iter()), ", on line 3");
        assert_eq!(lines_named(std::iter::empty()), "");
    }

    #[test]
    fn json_lists_the_errors_with_path_and_line() {
        let c = checked(
            &VALID.replace("port = 80", "port = 80\ntable_size = 65536"),
            true,
        );
        let v: serde_json::Value = serde_json::from_str(&c.output.text).unwrap();
        assert_eq!(v["valid"], false);
        assert_eq!(v["errors"][0]["path"], "vip[0].table_size");
        assert_eq!(v["errors"][0]["line"], 8);
        let ok: serde_json::Value =
            serde_json::from_str(&checked(VALID, true).output.text).unwrap();
        assert_eq!(
            (ok["valid"].clone(), ok["vips"].clone()),
            (true.into(), 1.into())
        );
    }
}
