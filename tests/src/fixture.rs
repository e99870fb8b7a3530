//! A load balancer loaded into the kernel with a known configuration, for
//! BPF_PROG_TEST_RUN fixtures: gateway next-hop mode (deterministic MACs), outer sources
//! [`packets::LB4`] / [`packets::LB6`], MTU 1500, small conntrack maps.

use std::net::IpAddr;

use lb::defaults::FRAG_CAPACITY;
use lb_common::{
    stats::{GlobalStats, Reason},
    types::{
        BACKEND_ACTIVE, BackendEntry, CONFIG_ICMP_ECHO, CONFIG_ICMP_TOO_BIG, CONFIG_VALID, FlowKey,
        LbConfig, NEXTHOP_GATEWAY, PROTO_TCP, PROTO_UDP, VipKey,
    },
};
use lb_dataplane::{Dataplane, KernelDataplane, LoadOptions, TableImage, TestRunOutput};
use lb_maglev::flow::{addr_bytes, slot_of};

use crate::packets::{self, Flow, GW_MAC, LB_MAC};

/// XDP_ABORTED.
pub const XDP_ABORTED: u32 = 0;
/// XDP_DROP.
pub const XDP_DROP: u32 = 1;
/// XDP_PASS.
pub const XDP_PASS: u32 = 2;
/// XDP_TX.
pub const XDP_TX: u32 = 3;

/// Hash seed of the fixtures.
pub const SEED: u32 = 0x5eed_1234;
/// UDP idle timeout of the fixtures (ns).
pub const UDP_TIMEOUT_NS: u64 = 30_000_000_000;

/// ICMP rate limit of the fixtures: the daemon's default, 1,000 per second per CPU and
/// kind, bursts of 50.
pub const ICMP_INTERVAL_NS: u64 = 1_000_000;
/// Burst allowance matching [`ICMP_INTERVAL_NS`]: 49 intervals ahead.
pub const ICMP_BURST_NS: u64 = 49 * ICMP_INTERVAL_NS;

/// The fixtures' configuration: gateway next hop, ICMP too-big answers and echo
/// replies on (the daemon's defaults), no per-flow outer fields, no source lists. New
/// pins are not rate limited (`new_pin_interval_ns` 0): fixtures that make many flows
/// quickly test the decision, the flood tests set the rate.
pub fn default_config() -> LbConfig {
    let (src_v6, _) = addr_bytes(packets::LB6.into());
    LbConfig {
        src_v6,
        src_v4: packets::LB4.octets(),
        if_mac: LB_MAC,
        gateway_mac: GW_MAC,
        mtu: 1500,
        nexthop_mode: NEXTHOP_GATEWAY,
        syn_cache_part_bits: 0,
        flags: CONFIG_VALID | CONFIG_ICMP_TOO_BIG | CONFIG_ICMP_ECHO,
        hash_seed: SEED,
        syn_cache_mask: 0,
        udp_timeout_ns: UDP_TIMEOUT_NS,
        nexthop_cache_ns: 0,
        icmp_interval_ns: ICMP_INTERVAL_NS,
        icmp_burst_ns: ICMP_BURST_NS,
        ..LbConfig::default()
    }
}

/// The map key of a VIP.
pub fn vip_key(addr: IpAddr, port: u16, proto: u8) -> VipKey {
    let (addr, family) = addr_bytes(addr);
    VipKey {
        addr,
        port: port.to_be(),
        proto,
        family,
    }
}

/// The conntrack key of `flow` over `proto`.
pub fn flow_key(flow: &Flow, proto: u8) -> FlowKey {
    lb_maglev::flow::flow_key(
        (flow.src, flow.sport).into(),
        (flow.dst, flow.dport).into(),
        proto,
    )
    .expect("same family")
}

/// A table of `size` slots filled round-robin with `ids` (a hand-filled table; the
/// Maglev builder's own properties are tested in lb-maglev).
pub fn round_robin(size: usize, ids: &[u32]) -> Vec<u32> {
    (0..size).map(|i| ids[i % ids.len()]).collect()
}

/// A namespace for FIB next-hop tests: `lb0` (MAC 02:00:00:00:00:01, 192.0.2.1/24,
/// 2001:db8:c::1/64) routes the backend prefixes 198.51.100.0/24 and 2001:db8:b::/64 via a
/// gateway whose neighbour entry (02:00:00:00:00:fe) is permanent; forwarding is on, as
/// `bpf_fib_lookup` requires. Run test runs from a thread inside it
/// ([`crate::netns::NetNs::enter`]) with the ingress interface set to `lb0`.
///
/// # Errors
/// When a namespace command fails.
pub fn fib_namespace(prefix: &str) -> anyhow::Result<crate::netns::NetNs> {
    let ns = crate::netns::NetNs::create(prefix)?;
    for cmd in [
        "link add lb0 address 02:00:00:00:00:01 type veth peer name lb1",
        "link set lb0 up",
        "link set lb1 up",
        "addr add 192.0.2.1/24 dev lb0",
        "addr add 2001:db8:c::1/64 dev lb0 nodad",
        "route add 198.51.100.0/24 via 192.0.2.254 dev lb0",
        "route add 2001:db8:b::/64 via 2001:db8:c::fe dev lb0",
        "neigh add 192.0.2.254 lladdr 02:00:00:00:00:fe nud permanent dev lb0",
        "neigh add 2001:db8:c::fe lladdr 02:00:00:00:00:fe nud permanent dev lb0",
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        ns.ip(&args)?;
    }
    for sysctl in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        let out = ns.exec("sysctl", &["-qw", sysctl])?;
        anyhow::ensure!(
            out.status.success(),
            "sysctl {sysctl} failed in {}",
            ns.name()
        );
    }
    Ok(ns)
}

/// The index of interface `name` in the calling thread's network namespace (0 if none).
pub fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: c is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// The fixture load balancer.
pub struct Lb {
    /// The loaded program and maps.
    pub dp: KernelDataplane,
    generation: u32,
}

impl Lb {
    /// Loads the program with small conntrack maps and writes [`default_config`].
    ///
    /// # Panics
    /// When loading fails (not root, verifier rejection).
    pub fn new() -> Self {
        Self::with_ct(16_384, 4_096)
    }

    /// Like [`Lb::new`] with the given conntrack capacities.
    ///
    /// Pins the calling thread to the CPU it runs on: `BPF_PROG_TEST_RUN` runs the
    /// program on the caller's CPU, and some state is per CPU (the FIB next-hop cache,
    /// the counters), so tests choose cross-CPU cases explicitly rather than by chance.
    ///
    /// # Panics
    /// When loading fails.
    pub fn with_ct(ct_capacity: u32, ct_syn_capacity: u32) -> Self {
        Self::with_load(LoadOptions {
            ct_capacity,
            ct_syn_capacity,
            frag_capacity: FRAG_CAPACITY,
            affinity_capacity: lb_common::defaults::AFFINITY_CAPACITY,
            exceptions_capacity: 4_096,
        })
    }

    /// Like [`Lb::new`] with the given map sizes (pins the thread as [`Lb::with_ct`]).
    ///
    /// # Panics
    /// When loading fails.
    pub fn with_load(options: LoadOptions) -> Self {
        assert!(crate::is_root(), "privileged test: run as root");
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        crate::pin_to_cpu(usize::try_from(cpu).unwrap_or(0)).expect("pin the test thread");
        Self::over(KernelDataplane::load(options).expect("load the XDP program"))
    }

    /// `dp` (a freshly loaded data plane) with [`default_config`] written.
    ///
    /// # Panics
    /// When the configuration cannot be written.
    pub fn over(mut dp: KernelDataplane) -> Self {
        dp.set_config(&default_config()).expect("config");
        Self { dp, generation: 0 }
    }

    /// Rewrites the configuration: [`default_config`] changed by `change`.
    pub fn configure(&mut self, change: impl FnOnce(&mut LbConfig)) {
        let mut cfg = default_config();
        change(&mut cfg);
        self.dp.set_config(&cfg).expect("config");
    }

    /// Writes backend `id` at `addr` in `state` (IP-in-IP).
    pub fn backend(&mut self, id: u32, addr: impl Into<IpAddr>, state: u8) {
        self.encap_backend(id, addr, state, 0);
    }

    /// Writes backend `id` at `addr` in `state`, GUE to UDP port `gue_port` (host
    /// order; 0: IP-in-IP).
    pub fn encap_backend(&mut self, id: u32, addr: impl Into<IpAddr>, state: u8, gue_port: u16) {
        let (addr, family) = addr_bytes(addr.into());
        self.dp
            .set_backend(
                id,
                &BackendEntry {
                    addr,
                    family,
                    state,
                    gue_port: gue_port.to_be(),
                },
            )
            .expect("set backend");
    }

    /// Writes backends `1..=n` active at backend4(k) (or backend6(k) when `v6`).
    pub fn backends(&mut self, n: u8, v6: bool) {
        for k in 1..=n {
            let addr: IpAddr = if v6 {
                packets::backend6(k).into()
            } else {
                packets::backend4(k).into()
            };
            self.backend(u32::from(k), addr, BACKEND_ACTIVE);
        }
    }

    /// Installs `slots` as VIP `vip_id`'s table (next generation).
    pub fn table(&mut self, vip_id: u32, slots: &[u32]) {
        self.generation += 1;
        self.dp
            .install_table(
                vip_id,
                &TableImage {
                    generation: self.generation,
                    slots,
                },
            )
            .expect("install table");
    }

    /// Adds VIP `addr:port/proto` as `vip_id`.
    pub fn vip(&mut self, vip_id: u32, addr: impl Into<IpAddr>, port: u16, proto: u8) -> VipKey {
        let key = vip_key(addr.into(), port, proto);
        self.dp.set_vip(&key, vip_id).expect("set vip");
        key
    }

    /// The standard set-up: backends 1..=3 for both families, VIP4:80/tcp (id 0),
    /// VIP4:53/udp (id 1), VIP6:80/tcp (id 2), VIP6:53/udp (id 3); v4 VIPs on
    /// backends 1..=3 (IPv4), v6 VIPs on backends 11..=13 (IPv6); tables of 65,537
    /// slots filled round-robin.
    pub fn standard() -> Self {
        let mut lb = Self::new();
        lb.backends(3, false);
        for k in 1..=3u8 {
            lb.backend(10 + u32::from(k), packets::backend6(k), BACKEND_ACTIVE);
        }
        let v4 = round_robin(65_537, &[1, 2, 3]);
        let v6 = round_robin(65_537, &[11, 12, 13]);
        lb.table(0, &v4);
        lb.table(1, &v4);
        lb.table(2, &v6);
        lb.table(3, &v6);
        lb.vip(0, packets::VIP4, 80, PROTO_TCP);
        lb.vip(1, packets::VIP4, 53, PROTO_UDP);
        lb.vip(2, packets::VIP6, 80, PROTO_TCP);
        lb.vip(3, packets::VIP6, 53, PROTO_UDP);
        lb
    }

    /// Runs the program once on `frame`.
    pub fn run(&mut self, frame: &[u8]) -> TestRunOutput {
        self.dp.test_run(frame).expect("test run")
    }

    /// Runs `frame` and returns (action, outer destination if forwarded).
    pub fn send(&mut self, frame: &[u8]) -> (u32, Option<IpAddr>) {
        let out = self.run(frame);
        let dst = (out.action == XDP_TX)
            .then(|| packets::outer_destination(&out.data))
            .flatten();
        (out.action, dst)
    }

    /// Global counters.
    pub fn global(&self) -> GlobalStats {
        self.dp.global_stats().expect("global stats")
    }

    /// One global counter.
    pub fn counter(&self, reason: Reason) -> u64 {
        self.global().get(reason)
    }

    /// The backend id the current table of `vip_id` gives `flow` on a conntrack miss,
    /// predicted in userspace with the data plane's hash.
    pub fn predict(&self, vip_id: u32, flow: &Flow, proto: u8) -> u32 {
        let table = self
            .dp
            .table(vip_id)
            .expect("read table")
            .expect("table installed");
        let size = u32::try_from(table.slots.len()).expect("size fits");
        let slot = slot_of(&flow_key(flow, proto), SEED, size).expect("non-empty table");
        table.slots[slot as usize]
    }
}

impl Default for Lb {
    fn default() -> Self {
        Self::new()
    }
}
