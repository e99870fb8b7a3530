//! The XDP program of the load balancer.
//!
//! Entry point `lb_xdp`: it always returns a verdict; reasons are counted in per-CPU maps,
//! never logged per packet.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::PerCpuArray,
    programs::XdpContext,
};
use lb_common::stats::GlobalStats;

/// Global counters (`lb_common::maps::GLOBAL_STATS`).
#[map(name = "GLOBAL_STATS")]
static GLOBAL_STATS: PerCpuArray<GlobalStats> = PerCpuArray::with_max_entries(1, 0);

/// XDP entry point. Counts the packet and passes it on.
#[xdp]
fn lb_xdp(_ctx: XdpContext) -> u32 {
    if let Some(stats) = GLOBAL_STATS.get_ptr_mut(0) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup and is only
        // used by this CPU while the program runs.
        unsafe { (*stats).rx_packets += 1 };
    }
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// Program licence, read by the kernel to allow GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
