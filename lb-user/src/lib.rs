//! The load balancer's controller library: the data-plane interface ([`dataplane`], the
//! only module that touches aya), the Maglev table builder ([`maglev`], pure), flow keys
//! and slot prediction ([`flow`]), the consistent-hashing lab ([`hashlab`], pure), and
//! the CLI verbs ([`cli`]).

pub mod cli;
pub mod config;
pub mod control;
pub mod controller;
pub mod daemon;
pub mod dataplane;
pub mod flow;
pub mod hashlab;
pub mod maglev;

/// What `lb --version` prints after the name: the workspace version and the commit the
/// binary was built from (`build.rs`; `unknown` outside a git checkout), for example
/// `0.1.0 (commit a56af7c)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LB_COMMIT"),
    ")"
);

/// The committer date of that commit, `YYYY-MM-DD` (empty when unknown): the date of the
/// manual pages.
pub const COMMIT_DATE: &str = env!("LB_COMMIT_DATE");

/// The XDP object built from `lb-ebpf` by `build.rs`, embedded in the binary
/// (ELF, BPF little-endian, 8-byte aligned as aya requires).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));
