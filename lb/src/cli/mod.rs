//! Operator command-line verbs of the `lb` binary, one module per verb group. Each
//! module owns its clap arguments, parses them into typed values (the text of an error
//! names the flag or argument at fault), and returns its [`Output`] or its error;
//! `main.rs` prints them and decides the exit status.
//!
//! - [`table`]: `lb table build` / `lb table diff`, offline Maglev table inspection;
//! - [`hash`]: `lb hash`, the offline consistent-hashing lab;
//! - [`docs`]: `lb completions` / `lb manpage`, generated from the clap definition;
//! - [`ops`]: `lb status`, `lb stats`, `lb backend`, `lb flow`, through the daemon's
//!   control socket ([`crate::control`]);
//! - [`vip`]: `lb vip withdraw|announce`, a VIP address's BGP announcement, through the
//!   same socket;
//! - [`trace`]: `lb trace`, the daemon's stream of traced packets.
//!
//! Every verb takes `--json`; docs/src/guide/json.md is the schema of what each prints.

pub mod docs;
pub mod hash;
pub mod ops;
pub mod table;
pub mod trace;
pub mod vip;

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
