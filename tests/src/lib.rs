//! The privileged test bed of the load balancer and its three users.
//!
//! The library: network namespaces that clean up after themselves, packet builders, a
//! fixture load balancer for BPF_PROG_TEST_RUN, the end-to-end test bed, the real
//! `lb run` daemon inside it, client traffic helpers, and the multi-instance bed
//! (several `lb run` behind an ECMP router, VIPs announced by BIRD: [`fleet`]). It enables
//! lb-dataplane's `test-harness` feature (test runs, the benchmark harness, the bed's pass program),
//! which the `lb` binary is built without.
//!
//! Its users: the privileged tests (`tests/`), the demo (`src/bin/lb-demo.rs`, behind
//! `cargo xtask demo`) and the data-plane benchmark (`src/bin/lb-bench.rs`, behind
//! `cargo xtask bench`; its runs on several CPUs at once: [`cpus`]). The two binaries live here because they are built on this
//! library and the harness feature; xtask, which runs them, cannot host them: it must
//! build before the eBPF toolchain that lb-dataplane needs is installed (it installs it).
//!
//! Everything here needs root (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN for setns).

pub mod cpus;
pub mod daemon;
pub mod fixture;
pub mod fleet;
pub mod netns;
pub mod old_layout;
pub mod packets;
pub mod prometheus;
pub mod schema;
pub mod steady;
pub mod testbed;
pub mod traffic;

/// Whether the process runs as root (the data plane's own check).
pub use lb_dataplane::is_root;

/// Pins the calling thread to `cpu` (BPF_PROG_TEST_RUN for XDP runs on the calling CPU).
///
/// # Errors
/// When the kernel refuses the affinity (CPU offline or absent).
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
