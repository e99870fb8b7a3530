//! The load balancer's controller library and the `lb` command's verbs, in layers that
//! only import downwards (`main.rs` on top). The layers below this crate are crates of
//! their own, so the compiler keeps the rule for them:
//!
//! - [`cli`]: the operator verbs (`lb table`, `lb hash`, and
//!   `lb status|stats|backend|flow` through the control socket);
//! - [`daemon`]: `lb run` — reloads, the control socket's server, signals, counters;
//! - [`api`]: the remote HTTPS API the daemon serves (`[api]`), answering through it;
//! - [`controller`]: desired state, id allocation, ordered plans with undo;
//! - [`control`]: the control protocol, used by the CLI, the daemon and the controller;
//! - [`config`]: the TOML file and its validation;
//! - [`defaults`]: every default value (a leaf);
//! - crate `lb_health`: the health-check engine (probe settings, probers, states,
//!   scheduler, multi-failure policy);
//! - crate `lb_hashlab`: the consistent-hashing lab of `lb hash` (pure);
//! - crate `lb_dataplane`: the only aya user — the kernel data plane, its double-buffered
//!   tables, the pinned datapath, IP prefixes, the announcement routes and the embedded
//!   XDP object;
//! - crate `lb_maglev`: the table builder and flow selection (pure);
//! - crate `lb_common`: what the XDP program and userspace share.
//!
//! Feature `test-harness` (enabled only by the `lb-tests` crate) passes through to
//! `lb_dataplane`: the test and benchmark access to the kernel data plane.

pub mod api;
pub mod cli;
pub mod config;
pub mod control;
pub mod controller;
pub mod daemon;
pub mod defaults;

/// What `lb --version` and the manual pages print after the name: the workspace version,
/// the layout stamp of the embedded datapath (`lb_dataplane::pinned::Layout`: a restarted
/// daemon adopts a pinned datapath of the same stamp) and the commit (`build.rs`;
/// `unknown` outside a git checkout), which stays last, for example
/// `0.1.0 (datapath layout 1-3f2a9c1b7e4d) (commit a56af7c)`.
pub fn version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let stamp = lb_dataplane::pinned::Layout::of_object(lb_dataplane::EBPF_OBJECT)
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
