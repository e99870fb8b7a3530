//! Operator command-line verbs of the `lb` binary, one module per verb group. Each
//! module owns its clap arguments, parses them into typed values (the text of an error
//! names the flag or argument at fault), and returns its [`Output`] or its error;
//! `main.rs` prints them and decides the exit status.
//!
//! - [`table`]: `lb table build` / `lb table diff`, offline Maglev table inspection;
//! - [`hash`]: `lb hash`, the offline consistent-hashing lab;
//! - [`docs`]: `lb completions` / `lb manpage`, generated from the clap definition;
//! - [`status`], [`stats`], [`backend`], [`flow`], [`overrides`]: the verbs of the same
//!   names, through the daemon's control socket ([`crate::control`]);
//! - [`detach`]: `lb detach`, which removes a pinned datapath without a daemon;
//! - [`config`]: `lb config check`, a configuration file validated without a daemon;
//! - [`vip`]: `lb vip withdraw|announce`, a VIP address's BGP announcement, through the
//!   same socket;
//! - [`trace`]: `lb trace`, the daemon's stream of traced packets;
//! - [`conn`]: `lb conn list`, the connections in conntrack, through the socket;
//! - [`remote`]: the flags every daemon verb takes to talk to a remote daemon's API
//!   (`--remote URL` and its credentials) instead of the socket;
//! - [`fleet`]: `lb fleet status|apply`, several remote daemons at once;
//! - [`offline`]: the fallback of `lb status`, `lb stats`, `lb flow` and `lb conn list`
//!   to the pinned datapath when no daemon answers.
//!
//! Every verb takes `--json`; docs/src/guide/json.md is the schema of what each prints.

pub mod agent;
pub mod backend;
pub mod config;
pub mod conn;
pub mod detach;
pub mod docs;
pub mod fields;
pub mod fleet;
pub mod flow;
pub mod hash;
pub mod offline;
pub mod overrides;
pub mod remote;
pub mod stats;
pub mod status;
pub mod table;
pub mod trace;
pub mod vip;

#[cfg(test)]
mod verbs_tests;

use serde::Serialize;

pub use remote::SocketArg;

/// What a verb prints: `text` on standard output, then each of `warnings` on standard
/// error as a `warning: ...` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Standard output, newlines included.
    pub text: String,
    /// Advice that does not fail the verb.
    pub warnings: Vec<String>,
}

impl Output {
    /// Just `text`, no warnings.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            warnings: Vec::new(),
        }
    }
}

/// `lb object [--json]`: facts about the embedded XDP object (`{"bytes": N}`).
pub fn object(json: bool) -> Output {
    let bytes = lb_dataplane::EBPF_OBJECT.len();
    Output::text(if json {
        format!("{}\n", serde_json::json!({ "bytes": bytes }))
    } else {
        format!("embedded eBPF object: {bytes} bytes\n")
    })
}

/// `lb status` / `lb stats`.
#[derive(Clone, Debug, clap::Args)]
pub struct ReadArgs {
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lb status` / `lb stats`: [`ReadArgs`] and, when no daemon answers, where the
/// pinned datapath is.
#[derive(Clone, Debug, clap::Args)]
pub struct PinnedReadArgs {
    /// Control socket and --json.
    #[command(flatten)]
    pub read: ReadArgs,
    /// The pinned datapath.
    #[command(flatten)]
    pub pins: offline::PinsArg,
}

/// `value` as pretty JSON, one line break at the end.
pub(crate) fn json(value: &impl Serialize) -> Output {
    Output::text(serde_json::to_string_pretty(value).unwrap_or_default() + "\n")
}
