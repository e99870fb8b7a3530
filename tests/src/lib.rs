//! Support code for the privileged tests, the demo and the data-plane benchmarks:
//! network namespaces that clean up after themselves, and packet builders.
//!
//! Everything here needs root (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN for setns).

pub mod netns;
pub mod packets;

/// Whether the process runs as root; privileged tests skip themselves otherwise (and
/// `cargo xtask test` reports the suite as skipped before ever running it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
