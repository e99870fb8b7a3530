//! The load balancer's controller library and the `lb` command's verbs, in layers that
//! only import downwards (`main.rs` on top):
//!
//! - [`cli`]: the operator verbs (`lb table`, `lb hash`, and
//!   `lb status|stats|backend|flow` through the control socket);
//! - [`daemon`]: `lb run` — reloads, the control socket's server, signals, counters;
//! - [`controller`]: desired state, id allocation, ordered plans with undo;
//! - [`control`]: the control protocol, used by the CLI, the daemon and the controller;
//! - [`config`]: the TOML file and its validation;
//! - [`dataplane`]: the only aya user — the kernel data plane, its double-buffered
//!   tables, an in-memory fake, an inspector of running programs;
//! - at the bottom: [`maglev`] (the table builder, pure), [`hashlab`] (the
//!   consistent-hashing lab of `lb hash`, pure), [`health`] (the health-check engine:
//!   probe settings, probers, states, scheduler, multi-failure policy), [`flow`] (flow
//!   keys and slot prediction), [`prefix`] (IP prefixes), [`routes`] (the kernel
//!   routing table of the VIP announcements, through iproute2) and [`defaults`] (every
//!   default value), over `lb_common`.
//!
//! Feature `test-harness` (enabled only by the `lb-tests` crate) adds the test and
//! benchmark access to the kernel data plane, and the benchmark harness programs to the
//! embedded eBPF object.

pub mod cli;
pub mod config;
pub mod control;
pub mod controller;
pub mod daemon;
pub mod dataplane;
pub mod defaults;
pub mod flow;
pub mod hashlab;
pub mod health;
pub mod maglev;
pub mod prefix;
pub mod routes;

/// What `lb --version` prints after the name: the workspace version and the commit the
/// binary was built from (`build.rs`; `unknown` outside a git checkout), for example
/// `0.1.0 (commit a56af7c)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LB_COMMIT"),
    ")"
);

/// What `lb --version` prints after the name: the workspace version, the layout stamp
/// of the embedded datapath (`dataplane::pinned::layout`: a restarted daemon adopts a
/// pinned datapath of the same stamp) and the commit, which stays last, for example
/// `0.1.0 (datapath layout 1-3f2a9c1b7e4d) (commit a56af7c)`.
pub fn version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let stamp = dataplane::pinned::Layout::of_object(EBPF_OBJECT)
            .map_or_else(|_| "unknown".to_owned(), |l| l.stamp());
        format!(
            "{} (datapath layout {stamp}) (commit {})",
            env!("CARGO_PKG_VERSION"),
            env!("LB_COMMIT")
        )
    })
}

/// The committer date of that commit, `YYYY-MM-DD` (empty when unknown): the date of the
/// manual pages.
pub const COMMIT_DATE: &str = env!("LB_COMMIT_DATE");

/// The XDP object built from `lb-ebpf` by `build.rs`, embedded in the binary
/// (ELF, BPF little-endian, 8-byte aligned as aya requires).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// The upgrade tests' variant of the XDP object (feature `test-harness` only): built
/// from `lb-ebpf` with its `upgrade-variant` feature, so its program differs from the
/// `lb` binary's while every map is the same; `lb run --object FILE` loads it.
#[cfg(feature = "test-harness")]
pub static UPGRADE_VARIANT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/variant/lb-ebpf"));
