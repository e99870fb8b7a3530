//! Names and sizes of the maps the XDP program defines.
//!
//! The names are the symbol names in the eBPF object; userspace looks maps up by them
//! (`aya::Ebpf::map_mut`), so they live here once.

/// Per-CPU array of [`crate::stats::GlobalStats`], one element (index 0).
pub const GLOBAL_STATS: &str = "GLOBAL_STATS";

/// Name of the XDP program section/function in the eBPF object.
pub const XDP_PROGRAM: &str = "lb_xdp";
