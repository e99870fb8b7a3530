//! The load balancer's data plane driven directly for a bed, without the controller:
//! [`BedLb`] loads the XDP program, writes a complete configuration (FIB next hop, outer
//! sources 192.0.2.1 / 2001:db8:c::1, MTU 1500), the four VIPs, the backends and
//! hand-filled round-robin tables of 65,537 slots, and attaches the program natively on
//! the LB's `lb0` from a thread inside the LB namespace. It stays attached until the
//! [`BedLb`] is dropped.
//!
//! VIP ids: 0 = VIP4:80/tcp, 1 = VIP4:53/udp, 2 = VIP6:80/tcp, 3 = VIP6:53/udp.
//! Backend ids: backend `k`'s IPv4 address is id `k`, its IPv6 address id `256 + k`
//! (a backend entry holds one address family).

use std::net::IpAddr;

use anyhow::Context as _;
use lb_common::types::{
    BACKEND_ACTIVE, BackendEntry, CONFIG_VALID, LbConfig, NEXTHOP_FIB, PROTO_TCP, PROTO_UDP,
};
use lb_dataplane::{AttachMode, Dataplane as _, KernelDataplane, LoadOptions, TableImage};
use lb_maglev::flow::addr_bytes;

use super::{LB_IFACE, TCP_PORT, TestBed, UDP_PORT, backend4, backend6};
use crate::{
    fixture::{SEED, UDP_TIMEOUT_NS, round_robin, vip_key},
    packets::{LB_MAC, LB4, LB6, VIP4, VIP6},
};

/// VIP id of VIP4:80/tcp.
pub const VIP4_TCP: u32 = 0;
/// VIP id of VIP4:53/udp.
pub const VIP4_UDP: u32 = 1;
/// VIP id of VIP6:80/tcp.
pub const VIP6_TCP: u32 = 2;
/// VIP id of VIP6:53/udp.
pub const VIP6_UDP: u32 = 3;
/// Slots of every table.
pub const TABLE_SIZE: usize = 65_537;

/// Conntrack sizes of the bed's data plane (small: fast to load, and plenty for tests).
pub const BED_LOAD_OPTIONS: LoadOptions = LoadOptions {
    ct_capacity: 65_536,
    ct_syn_capacity: 16_384,
    frag_capacity: 1_024,
    affinity_capacity: 4_096,
    exceptions_capacity: 4_096,
};

/// The data-plane id of backend `k`'s IPv4 (`v6 == false`) or IPv6 address.
pub fn backend_id(k: u8, v6: bool) -> u32 {
    if v6 { 256 + u32::from(k) } else { u32::from(k) }
}

/// The bed's configuration of the data plane.
pub fn bed_config() -> LbConfig {
    let (src_v6, _) = addr_bytes(LB6.into());
    LbConfig {
        src_v6,
        src_v4: LB4.octets(),
        if_mac: LB_MAC,
        gateway_mac: [0; 6],
        mtu: 1500,
        nexthop_mode: NEXTHOP_FIB,
        syn_cache_part_bits: 0,
        flags: CONFIG_VALID,
        hash_seed: SEED,
        syn_cache_mask: 0,
        udp_timeout_ns: UDP_TIMEOUT_NS,
        nexthop_cache_ns: 0,
        ..LbConfig::default()
    }
}

/// The XDP program attached to the bed's `lb0` with a complete configuration;
/// detached on drop.
pub struct BedLb {
    dp: KernelDataplane,
    generation: u32,
}

impl BedLb {
    /// Loads with [`BED_LOAD_OPTIONS`], configures all of the bed's backends (see
    /// [`Self::attach_with`]).
    ///
    /// # Errors
    /// As [`Self::attach_with`].
    pub fn attach(bed: &TestBed) -> anyhow::Result<Self> {
        Self::attach_with(bed, BED_LOAD_OPTIONS)
    }

    /// Loads the program with `options`, writes [`bed_config`], the four VIPs, backends
    /// `1..=bed.backend_count()` (both families) and round-robin tables over them, then
    /// attaches natively on `lb0` inside the LB namespace.
    ///
    /// # Errors
    /// When loading (verifier, `CAP_BPF`), a map update or the attachment fails.
    pub fn attach_with(bed: &TestBed, options: LoadOptions) -> anyhow::Result<Self> {
        let dp = KernelDataplane::load(options).context("loading the XDP program")?;
        let mut lb = Self { dp, generation: 0 };
        lb.dp.set_config(&bed_config()).context("config")?;
        let ks: Vec<u8> = (1..=bed.backend_count()).collect();
        lb.set_backends(&ks)?;
        for (id, addr, port, proto) in [
            (VIP4_TCP, IpAddr::from(VIP4), TCP_PORT, PROTO_TCP),
            (VIP4_UDP, VIP4.into(), UDP_PORT, PROTO_UDP),
            (VIP6_TCP, VIP6.into(), TCP_PORT, PROTO_TCP),
            (VIP6_UDP, VIP6.into(), UDP_PORT, PROTO_UDP),
        ] {
            lb.dp
                .set_vip(&vip_key(addr, port, proto), id)
                .with_context(|| format!("VIP {addr}:{port}/{proto}"))?;
        }
        let dp = &mut lb.dp;
        bed.lb_ns()
            .enter(|| dp.attach(LB_IFACE, AttachMode::Native))?
            .with_context(|| format!("attaching natively to {LB_IFACE}"))?;
        Ok(lb)
    }

    /// Writes backends `ks` as active (both families) and installs round-robin tables
    /// over exactly them for all four VIPs (each replacing the previous table in one
    /// update). Backends not listed keep their entries but get no slots.
    ///
    /// # Errors
    /// When a map update fails.
    ///
    /// # Panics
    /// When `ks` is empty.
    pub fn set_backends(&mut self, ks: &[u8]) -> anyhow::Result<()> {
        assert!(!ks.is_empty(), "at least one backend");
        for &k in ks {
            for (v6, addr) in [
                (false, IpAddr::from(backend4(k))),
                (true, backend6(k).into()),
            ] {
                let (addr, family) = addr_bytes(addr);
                self.dp
                    .set_backend(
                        backend_id(k, v6),
                        &BackendEntry {
                            addr,
                            family,
                            state: BACKEND_ACTIVE,
                            gue_port: 0,
                        },
                    )
                    .with_context(|| format!("backend {k}"))?;
            }
        }
        let ids4: Vec<u32> = ks.iter().map(|&k| backend_id(k, false)).collect();
        let ids6: Vec<u32> = ks.iter().map(|&k| backend_id(k, true)).collect();
        let v4 = round_robin(TABLE_SIZE, &ids4);
        let v6 = round_robin(TABLE_SIZE, &ids6);
        self.generation += 1;
        for (vip_id, slots) in [
            (VIP4_TCP, &v4),
            (VIP4_UDP, &v4),
            (VIP6_TCP, &v6),
            (VIP6_UDP, &v6),
        ] {
            self.dp
                .install_table(
                    vip_id,
                    &TableImage {
                        generation: self.generation,
                        slots,
                    },
                )
                .with_context(|| format!("table of VIP id {vip_id}"))?;
        }
        Ok(())
    }

    /// The data plane (counters, conntrack).
    pub fn dp(&self) -> &KernelDataplane {
        &self.dp
    }

    /// The data plane, mutable (further map changes).
    pub fn dp_mut(&mut self) -> &mut KernelDataplane {
        &mut self.dp
    }
}

impl Drop for BedLb {
    fn drop(&mut self) {
        // A BPF link: detaching needs no namespace (and is moot once lb0 is gone).
        if self.dp.is_attached() {
            let _ = self.dp.detach();
        }
    }
}
