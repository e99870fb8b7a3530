//! The end-to-end test bed: one call builds an "LB on a stick" topology of network
//! namespaces (clients, the load balancer and the backends on one bridge, the
//! addresses of [`crate::packets`]) and [`Drop`] tears all of it down, also when a
//! test panics.
//!
//! ```text
//!   client ns                bridge ns (br0)                 LB ns
//!   c0 02:..:00:0a  <->  sw-c0 ─┬─ sw-lb0 (XDP_PASS)  <->  lb0 02:..:00:01 (XDP lb_xdp)
//!   192.0.2.10.. /              ├─ sw-b1  <->  backend 1 ns: b0 02:..:01:01 (XDP decap)
//!   2001:db8:c::10..            ├─ sw-b2  <->  backend 2 ns: b0 02:..:01:02
//!                               └─ ...
//! ```
//!
//! - Names: every namespace is a [`NetNs`] (`tb-sw-<pid>-<n>`, `tb-lb-…`, `tb-c-…`,
//!   `tb-b<k>-…`), unique per process and call, so two beds (or two test runs) coexist.
//!   Interfaces are created inside those namespaces only (the veth peers directly in
//!   their target namespace), with the same names in every bed. Nothing on the host is
//!   touched; deleting a namespace deletes its interfaces.
//! - Client namespace: `c0` (MAC 02:00:00:00:00:0a) with `clients` addresses per family
//!   (192.0.2.10.., 2001:db8:c::10..), host routes to the VIPs via the LB. With
//!   [`TestBedOptions::encap_headroom`] those routes carry an MTU of 1480 (IPv4) / 1460
//!   (IPv6), so TCP segments still fit the 1500-byte LB → backend path once
//!   encapsulated.
//! - LB namespace: `lb0` (02:00:00:00:00:01) 192.0.2.1/24, 2001:db8:c::1/64, forwarding
//!   on (`bpf_fib_lookup` refuses to work otherwise), on-link routes to 198.51.100.0/24
//!   and 2001:db8:b::/64 via `lb0`. No XDP program by default: attach the controller or
//!   [`lb::BedLb`].
//! - Backend `k` (1-based): `b0` (02:00:00:00:01:kk) 198.51.100.(10+k)/24 and
//!   2001:db8:b::(10+k)/64, the VIPs on `lo`, on-link routes back to the client prefixes
//!   (direct server return), `rp_filter` 0 (all, default, lo, b0), and a server
//!   ([`server`]) on VIP4/VIP6 port 80/tcp and 53/udp answering with `b<k>`.
//! - Decapsulation (IP-in-IP and GUE): a real backend decapsulates with an `ipip` /
//!   `ip6tnl` device, and GUE with `ip fou add port 6080 gue` in front of it (see
//!   the book, docs/src/guide/real-nic.md), but this kernel has no ipip, ip6tnl, FOU
//!   or GRE support, so every backend runs a small XDP program on `b0` that strips the
//!   outer header ([`decap`]).
//! - Neighbours: every entry traffic needs is written as `nud permanent` when the bed is
//!   built (LB: each backend's addresses; client: the LB's; backends: every client
//!   address). `bpf_fib_lookup` never resolves a neighbour itself (it answers
//!   `NO_NEIGH`, which the data plane drops), so the LB's entries must exist before the
//!   first packet; static entries also keep ARP/ND out of packet counts and timings.
//! - XDP_TX on veth (BR-24 in `docs/src/operations/failure-scenarios.md`): frames the LB sends back
//!   out of `lb0` only arrive at `sw-lb0` if that end has NAPI, so the bed attaches the
//!   empty XDP_PASS program ([`PassProgram`]) to `sw-lb0` from a thread inside the
//!   bridge namespace and keeps it for the bed's lifetime
//!   ([`TestBedOptions::peer_pass_program`] turns this off to reproduce the loss).
//! - Checksums: the client's `c0` has transmit checksum offload switched off (see
//!   [`offload`]); a veth otherwise hands the LB TCP/UDP packets whose checksum is
//!   only a pseudo-header sum, which XDP_TX forwards as is and the backend then drops.
//!   The LB's `lb0` has receive VLAN offload switched off, which `lb run` requires for
//!   native XDP.
//! - Teardown runs on drop and on unwinding; a process killed outright (SIGKILL, a
//!   timeout's SIGTERM) leaves its `tb-*-<pid>-*` namespaces behind, to be deleted by
//!   hand (`ip netns delete`).
//!
//! ```no_run
//! use lb_tests::testbed::{TestBed, TestBedOptions, lb::BedLb, vip_tcp, vip_udp};
//!
//! let bed = TestBed::new(TestBedOptions::default())?; // 3 backends, 8 client addresses
//! let _lb = BedLb::attach(&bed)?; // or run the controller inside bed.lb_ns()
//! let src = std::net::SocketAddr::new(bed.client_addr(0, false), 40_000);
//! let name = bed.tcp_exchange(src, vip_tcp(false), "hello")?; // "b1", "b2" or "b3"
//! let name6 = bed.udp_exchange((bed.client_addr(1, true), 0).into(), vip_udp(true), "q")?;
//! let served = bed.backend(1).stats().tcp_messages;
//! # let _ = (name, name6, served);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod client;
pub mod decap;
pub mod health;
pub mod lb;
pub mod offload;
pub mod plumbing;
pub mod server;

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use lb_dataplane::PassProgram;

pub use client::TcpConn;
pub use plumbing::LinkStats;
pub use server::ServerStats;

use crate::{
    netns::NetNs,
    packets::{CLIENT_MAC, LB_MAC, LB4, LB6, VIP4, VIP6},
};

/// The LB's interface (in the LB namespace).
pub const LB_IFACE: &str = "lb0";
/// The bridge-side peer of [`LB_IFACE`].
pub const LB_PEER_IFACE: &str = "sw-lb0";
/// The client's interface (in the client namespace).
pub const CLIENT_IFACE: &str = "c0";
/// The bridge-side peer of [`CLIENT_IFACE`].
pub const CLIENT_PEER_IFACE: &str = "sw-c0";
/// Every backend's interface (in its namespace).
pub const BACKEND_IFACE: &str = "b0";
/// The bridge (in the bridge namespace).
pub const BRIDGE: &str = "br0";
/// Port of the TCP service.
pub const TCP_PORT: u16 = 80;
/// Port of the UDP service.
pub const UDP_PORT: u16 = 53;
/// Most client addresses per family (192.0.2.10 ..= 192.0.2.199).
pub const MAX_CLIENTS: usize = 190;
/// Most backends of one bed (including those added later).
pub const MAX_BACKENDS: u8 = 64;
/// Default timeout of every client socket operation.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(3);

/// Client `i`'s IPv4 address, 192.0.2.(10+i).
///
/// # Panics
/// When `i >= MAX_CLIENTS`.
pub fn client4(i: usize) -> Ipv4Addr {
    assert!(i < MAX_CLIENTS, "client index {i}");
    Ipv4Addr::new(192, 0, 2, 10 + u8::try_from(i).expect("checked"))
}

/// Client `i`'s IPv6 address, 2001:db8:c::(0x10+i).
///
/// # Panics
/// When `i >= MAX_CLIENTS`.
pub fn client6(i: usize) -> Ipv6Addr {
    assert!(i < MAX_CLIENTS, "client index {i}");
    Ipv6Addr::new(
        0x2001,
        0xdb8,
        0xc,
        0,
        0,
        0,
        0,
        0x10 + u16::try_from(i).expect("checked"),
    )
}

/// Backend `k`'s IPv4 address, 198.51.100.(10+k).
pub fn backend4(k: u8) -> Ipv4Addr {
    crate::packets::backend4(k)
}

/// Backend `k`'s IPv6 address, 2001:db8:b::(0x10+k).
pub fn backend6(k: u8) -> Ipv6Addr {
    crate::packets::backend6(k)
}

/// Backend `k`'s MAC, 02:00:00:00:01:kk.
pub fn backend_mac(k: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, k]
}

/// Backend `k`'s name, the servers' answer: `b<k>`.
pub fn backend_name(k: u8) -> String {
    format!("b{k}")
}

/// The TCP service of the VIP of one family (`[VIP4]:80` or `[VIP6]:80`).
pub fn vip_tcp(v6: bool) -> SocketAddr {
    let ip: IpAddr = if v6 { VIP6.into() } else { VIP4.into() };
    (ip, TCP_PORT).into()
}

/// The UDP service of the VIP of one family (`[VIP4]:53` or `[VIP6]:53`).
pub fn vip_udp(v6: bool) -> SocketAddr {
    let ip: IpAddr = if v6 { VIP6.into() } else { VIP4.into() };
    (ip, UDP_PORT).into()
}

/// `ip` commands for backend `k`'s permanent neighbour entries of every other backend
/// the bed may have (both families).
pub(crate) fn other_backends_neighbours(k: u8) -> Vec<String> {
    let max = MAX_BACKENDS;
    (1..=max)
        .filter(|j| *j != k)
        .flat_map(|j| {
            let mac = mac_text(backend_mac(j));
            [IpAddr::from(backend4(j)), backend6(j).into()].map(|addr| {
                format!("neigh replace {addr} lladdr {mac} dev {BACKEND_IFACE} nud permanent")
            })
        })
        .collect()
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TestBedOptions {
    /// Backends built at once (`1..=MAX_BACKENDS`).
    pub backends: u8,
    /// Client addresses per family (`1..=MAX_CLIENTS`).
    pub clients: usize,
    /// Attach the XDP_PASS program to `sw-lb0`, without which veth drops the frames the
    /// LB sends with `XDP_TX` (BR-24). Off only to show the loss.
    pub peer_pass_program: bool,
    /// Client routes to the VIPs with an MTU leaving room for the outer header.
    pub encap_headroom: bool,
    /// Run the backend servers.
    pub servers: bool,
    /// Let the backends' agents forward second-chance candidates to each other: IP
    /// forwarding on in each backend namespace (the agent's FIB lookup needs it),
    /// permanent neighbour entries for every other backend's addresses, and the
    /// XDP_PASS program on each backend's bridge port (`sw-b<k>`: the agent's `XDP_TX`
    /// is lost on a veth peer without it, BR-24).
    pub agent_forwarding: bool,
    /// Timeout of every client socket operation of the [`TestBed`] helpers.
    pub io_timeout: Duration,
}

impl Default for TestBedOptions {
    fn default() -> Self {
        Self {
            backends: 3,
            clients: 8,
            peer_pass_program: true,
            encap_headroom: true,
            servers: true,
            agent_forwarding: false,
            io_timeout: DEFAULT_IO_TIMEOUT,
        }
    }
}

/// The XDP_PASS program on a backend's bridge port, kept for the backend's lifetime.
struct PeerPass(#[expect(dead_code, reason = "held for its drop")] Mutex<PassProgram>);

impl std::fmt::Debug for PeerPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerPass")
    }
}

/// One backend: its namespace, decapsulation program and server.
#[derive(Debug)]
pub struct Backend {
    // Field order is drop order: the server's sockets and the program go before the
    // namespace.
    server: Option<server::EchoServer>,
    /// `None` while decapsulation is broken on purpose ([`Backend::set_decap`]).
    decap: Mutex<Option<decap::DecapLink>>,
    /// The XDP_PASS program on its bridge port, with
    /// [`TestBedOptions::agent_forwarding`].
    _peer_pass: Option<PeerPass>,
    k: u8,
    ns: NetNs,
}

impl Backend {
    /// Its number `k` (1-based).
    pub fn k(&self) -> u8 {
        self.k
    }

    /// Its name (`b<k>`), what its servers answer.
    pub fn name(&self) -> String {
        backend_name(self.k)
    }

    /// Its namespace.
    pub fn ns(&self) -> &NetNs {
        &self.ns
    }

    /// Its IPv4 address (outer destination of IPv4-in-IPv4).
    pub fn addr4(&self) -> Ipv4Addr {
        backend4(self.k)
    }

    /// Its IPv6 address (outer destination of IPv6-in-IPv6).
    pub fn addr6(&self) -> Ipv6Addr {
        backend6(self.k)
    }

    /// Its MAC.
    pub fn mac(&self) -> [u8; 6] {
        backend_mac(self.k)
    }

    /// Its server's counters (all zero without servers).
    pub fn stats(&self) -> ServerStats {
        self.server
            .as_ref()
            .map(server::EchoServer::stats)
            .unwrap_or_default()
    }

    /// Its agent's counters (zero while decapsulation is off).
    ///
    /// # Errors
    /// When the counters map cannot be read.
    pub fn agent_stats(&self) -> anyhow::Result<lb_common::agent::AgentStats> {
        let decap = self
            .decap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        decap.as_ref().map_or_else(
            || Ok(lb_common::agent::AgentStats::default()),
            |d| d.stats(),
        )
    }

    /// Detaches (`false`) or attaches again (`true`) its decapsulation program: while
    /// detached, IP-in-IP packets reach its stack undecapsulated and are lost there.
    ///
    /// # Errors
    /// When the program cannot be attached again.
    pub fn set_decap(&self, on: bool) -> anyhow::Result<()> {
        let mut decap = self
            .decap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (on, decap.is_some()) {
            (false, true) => {
                decap.take();
            }
            (true, false) => {
                *decap = Some(
                    self.ns
                        .enter(|| decap::DecapLink::attach(BACKEND_IFACE))?
                        .context("decapsulation program")?,
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Replaces its decapsulation program by one that decapsulates only what `accept`
    /// names (a test that must prove packets came by GUE accepts nothing else).
    ///
    /// # Errors
    /// When the program cannot be attached.
    pub fn set_decap_accepting(&self, accept: decap::Accept) -> anyhow::Result<()> {
        let mut decap = self
            .decap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // One XDP program per interface: the old link goes first.
        decap.take();
        *decap = Some(
            self.ns
                .enter(|| decap::DecapLink::attach_accepting(BACKEND_IFACE, accept))?
                .context("decapsulation program")?,
        );
        Ok(())
    }

    /// Counters of its `b0` (received frames count before decapsulation).
    ///
    /// # Errors
    /// When the namespace cannot be read.
    pub fn link_stats(&self) -> anyhow::Result<LinkStats> {
        plumbing::link_stats(&self.ns, BACKEND_IFACE)
    }
}

/// The whole topology; torn down on drop.
pub struct TestBed {
    // Field order is drop order: programs and servers go before their namespaces.
    pass: Option<Mutex<PassProgram>>,
    /// Backend `k` in slot `k - 1`; filled in order, never emptied before drop.
    backends: Box<[OnceLock<Backend>]>,
    backend_count: AtomicUsize,
    /// Serialises [`TestBed::add_backend`].
    adding: Mutex<()>,
    client: NetNs,
    lb: NetNs,
    bridge: NetNs,
    options: TestBedOptions,
}

impl std::fmt::Debug for TestBed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBed")
            .field("namespaces", &self.namespace_names())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl TestBed {
    /// Builds the topology of the module documentation with `options.backends`
    /// backends, their servers started, and (by default) the pass program on `sw-lb0`.
    /// Also raises the process's open-file soft limit to its hard limit (hundreds of
    /// concurrent connections need both ends' descriptors in this process).
    ///
    /// # Errors
    /// When not root, an option is out of range, or any step fails (the message names
    /// the step). Whatever was built is removed again before returning.
    pub fn new(options: TestBedOptions) -> anyhow::Result<Self> {
        ensure!(crate::is_root(), "the test bed needs root");
        ensure!(
            (1..=MAX_BACKENDS).contains(&options.backends),
            "backends must be 1..={MAX_BACKENDS}"
        );
        ensure!(
            (1..=MAX_CLIENTS).contains(&options.clients),
            "clients must be 1..={MAX_CLIENTS}"
        );
        raise_fd_limit();
        let bridge = NetNs::create("tb-sw-")?;
        let lb = NetNs::create("tb-lb-")?;
        let client = NetNs::create("tb-c-")?;
        let mut bed = Self {
            pass: None,
            backends: (0..MAX_BACKENDS).map(|_| OnceLock::new()).collect(),
            backend_count: AtomicUsize::new(0),
            adding: Mutex::new(()),
            client,
            lb,
            bridge,
            options,
        };
        bed.build_core()
            .context("building the bridge, LB and client")?;
        for _ in 0..bed.options.backends {
            bed.add_backend()?;
        }
        if bed.options.peer_pass_program {
            let pass = bed
                .bridge
                .enter(|| PassProgram::attach(LB_PEER_IFACE))?
                .with_context(|| format!("attaching the pass program to {LB_PEER_IFACE}"))?;
            bed.pass = Some(Mutex::new(pass));
        }
        Ok(bed)
    }

    /// The bridge, the LB's and the client's interfaces and settings.
    fn build_core(&self) -> anyhow::Result<()> {
        // Bridge ports need no IPv6 (and then send nothing of their own).
        plumbing::sysctls(
            &self.bridge,
            &[
                ("net/ipv6/conf/all/disable_ipv6".into(), "1"),
                ("net/ipv6/conf/default/disable_ipv6".into(), "1"),
            ],
        )?;
        plumbing::ip_batch(
            &self.bridge,
            &[
                format!(
                    "link add {BRIDGE} type bridge stp_state 0 forward_delay 0 mcast_snooping 0"
                ),
                format!("link set {BRIDGE} up"),
                format!(
                    "link add {LB_PEER_IFACE} type veth peer name {LB_IFACE} address {} netns {}",
                    mac_text(LB_MAC),
                    self.lb.name()
                ),
                format!("link set {LB_PEER_IFACE} master {BRIDGE} up"),
                format!(
                    "link add {CLIENT_PEER_IFACE} type veth peer name {CLIENT_IFACE} address {} netns {}",
                    mac_text(CLIENT_MAC),
                    self.client.name()
                ),
                format!("link set {CLIENT_PEER_IFACE} master {BRIDGE} up"),
            ],
        )?;

        plumbing::sysctls(
            &self.lb,
            &[
                ("net/ipv4/ip_forward".into(), "1"),
                ("net/ipv4/conf/all/forwarding".into(), "1"),
                ("net/ipv6/conf/all/forwarding".into(), "1"),
            ],
        )?;
        plumbing::ip_batch(
            &self.lb,
            &[
                format!("addr add {LB4}/24 dev {LB_IFACE}"),
                format!("addr add {LB6}/64 dev {LB_IFACE} nodad"),
                format!("link set {LB_IFACE} up"),
                format!("route add 198.51.100.0/24 dev {LB_IFACE}"),
                format!("route add 2001:db8:b::/64 dev {LB_IFACE}"),
            ],
        )?;

        let mut cmds = vec![format!("link set {CLIENT_IFACE} up")];
        for i in 0..self.options.clients {
            cmds.push(format!("addr add {}/24 dev {CLIENT_IFACE}", client4(i)));
            cmds.push(format!(
                "addr add {}/64 dev {CLIENT_IFACE} nodad",
                client6(i)
            ));
        }
        let (mtu4, mtu6) = if self.options.encap_headroom {
            (" mtu 1480", " mtu 1460")
        } else {
            ("", "")
        };
        cmds.extend([
            format!("route add {VIP4}/32 via {LB4} dev {CLIENT_IFACE}{mtu4}"),
            format!("route add {VIP6}/128 via {LB6} dev {CLIENT_IFACE}{mtu6}"),
            format!(
                "neigh replace {LB4} lladdr {} dev {CLIENT_IFACE} nud permanent",
                mac_text(LB_MAC)
            ),
            format!(
                "neigh replace {LB6} lladdr {} dev {CLIENT_IFACE} nud permanent",
                mac_text(LB_MAC)
            ),
        ]);
        plumbing::ip_batch(&self.client, &cmds)?;
        let client = &self.client;
        client
            .enter(|| offload::disable_tx_checksum(CLIENT_IFACE))?
            .with_context(|| format!("checksum offload of {CLIENT_IFACE}"))?;
        self.lb
            .enter(|| offload::disable_rx_vlan(LB_IFACE))?
            .with_context(|| format!("VLAN offload of {LB_IFACE}"))?;
        Ok(())
    }

    /// Adds backend `k = backend_count() + 1` while the bed runs: its namespace, veth to
    /// the bridge, addresses, decapsulation program, server (if the bed has servers) and
    /// the LB namespace's neighbour entries for it. Returns `k`. The data plane is not
    /// changed: give the backend slots yourself (e.g. [`lb::BedLb::set_backends`]).
    ///
    /// # Errors
    /// When the bed is full ([`MAX_BACKENDS`]) or a step fails (what was built of the
    /// new backend is removed again).
    pub fn add_backend(&self) -> anyhow::Result<u8> {
        let _guard = self
            .adding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let index = self.backend_count.load(Ordering::Acquire);
        let Some(slot) = self.backends.get(index) else {
            bail!("the bed already has {MAX_BACKENDS} backends");
        };
        let k = u8::try_from(index + 1).context("backend number")?;
        let backend = self
            .build_backend(k)
            .with_context(|| format!("building backend {k}"))?;
        if slot.set(backend).is_err() {
            bail!("backend slot {k} already filled");
        }
        self.backend_count.store(index + 1, Ordering::Release);
        Ok(k)
    }

    fn build_backend(&self, k: u8) -> anyhow::Result<Backend> {
        let ns = NetNs::create(&format!("tb-b{k}-"))?;
        let peer = format!("sw-b{k}");
        let mac = mac_text(backend_mac(k));
        plumbing::ip_batch(
            &self.bridge,
            &[
                format!(
                    "link add {peer} type veth peer name {BACKEND_IFACE} address {mac} netns {}",
                    ns.name()
                ),
                format!("link set {peer} master {BRIDGE} up"),
            ],
        )?;
        // If anything below fails, deleting `ns` removes the veth and with it `peer`.
        let mut cmds = vec![
            format!("link set {BACKEND_IFACE} up"),
            format!("addr add {}/24 dev {BACKEND_IFACE}", backend4(k)),
            format!("addr add {}/64 dev {BACKEND_IFACE} nodad", backend6(k)),
            format!("addr add {VIP4}/32 dev lo"),
            format!("addr add {VIP6}/128 dev lo nodad"),
            format!("route add 192.0.2.0/24 dev {BACKEND_IFACE}"),
            format!("route add 2001:db8:c::/64 dev {BACKEND_IFACE}"),
        ];
        let client_mac = mac_text(CLIENT_MAC);
        for i in 0..self.options.clients {
            for addr in [IpAddr::from(client4(i)), client6(i).into()] {
                cmds.push(format!(
                    "neigh replace {addr} lladdr {client_mac} dev {BACKEND_IFACE} nud permanent"
                ));
            }
        }
        if self.options.agent_forwarding {
            cmds.extend(other_backends_neighbours(k));
        }
        plumbing::ip_batch(&ns, &cmds)?;
        let peer_pass = if self.options.agent_forwarding {
            plumbing::sysctls(
                &ns,
                &[
                    ("net/ipv4/conf/all/forwarding".into(), "1"),
                    ("net/ipv6/conf/all/forwarding".into(), "1"),
                ],
            )?;
            let pass = self
                .bridge
                .enter(|| PassProgram::attach(&peer))?
                .with_context(|| format!("attaching the pass program to {peer}"))?;
            Some(PeerPass(Mutex::new(pass)))
        } else {
            None
        };
        let rp_filter_off: Vec<(String, &str)> = ["all", "default", "lo", BACKEND_IFACE]
            .iter()
            .map(|dev| (format!("net/ipv4/conf/{dev}/rp_filter"), "0"))
            .collect();
        plumbing::sysctls(&ns, &rp_filter_off)?;
        let decap = ns
            .enter(|| decap::DecapLink::attach(BACKEND_IFACE))?
            .context("decapsulation program")?;
        let server = if self.options.servers {
            Some(server::EchoServer::start(
                &ns,
                &backend_name(k),
                &[vip_tcp(false), vip_tcp(true)],
                &[vip_udp(false), vip_udp(true)],
            )?)
        } else {
            None
        };
        plumbing::ip_batch(
            &self.lb,
            &[
                format!(
                    "neigh replace {} lladdr {mac} dev {LB_IFACE} nud permanent",
                    backend4(k)
                ),
                format!(
                    "neigh replace {} lladdr {mac} dev {LB_IFACE} nud permanent",
                    backend6(k)
                ),
            ],
        )?;
        Ok(Backend {
            server,
            decap: Mutex::new(Some(decap)),
            _peer_pass: peer_pass,
            k,
            ns,
        })
    }

    /// The bridge namespace.
    pub fn bridge_ns(&self) -> &NetNs {
        &self.bridge
    }

    /// The LB namespace.
    pub fn lb_ns(&self) -> &NetNs {
        &self.lb
    }

    /// The client namespace.
    pub fn client_ns(&self) -> &NetNs {
        &self.client
    }

    /// The LB's interface name ([`LB_IFACE`]).
    pub fn lb_iface(&self) -> &'static str {
        LB_IFACE
    }

    /// Number of backends now.
    pub fn backend_count(&self) -> u8 {
        u8::try_from(self.backend_count.load(Ordering::Acquire)).unwrap_or(MAX_BACKENDS)
    }

    /// Backend `k` (1-based).
    ///
    /// # Panics
    /// When there is no backend `k`.
    pub fn backend(&self, k: u8) -> &Backend {
        usize::from(k)
            .checked_sub(1)
            .and_then(|i| self.backends.get(i))
            .and_then(OnceLock::get)
            .unwrap_or_else(|| panic!("no backend {k}"))
    }

    /// Backend `k`'s namespace.
    ///
    /// # Panics
    /// When there is no backend `k`.
    pub fn backend_ns(&self, k: u8) -> &NetNs {
        self.backend(k).ns()
    }

    /// All backends now, in order.
    pub fn backends(&self) -> impl Iterator<Item = &Backend> {
        self.backends.iter().map_while(OnceLock::get)
    }

    /// The options the bed was built with.
    pub fn options(&self) -> &TestBedOptions {
        &self.options
    }

    /// Number of client addresses per family.
    pub fn client_count(&self) -> usize {
        self.options.clients
    }

    /// Client address `i` of one family.
    ///
    /// # Panics
    /// When `i >= client_count()`.
    pub fn client_addr(&self, i: usize, v6: bool) -> IpAddr {
        assert!(
            i < self.options.clients,
            "the bed has {} clients",
            self.options.clients
        );
        if v6 {
            client6(i).into()
        } else {
            client4(i).into()
        }
    }

    /// Names of all the bed's namespaces now.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [&self.bridge, &self.lb, &self.client]
            .iter()
            .map(|ns| ns.name().to_owned())
            .collect();
        names.extend(self.backends().map(|b| b.ns.name().to_owned()));
        names
    }

    /// Connects from `src` (a client address; port 0 = any) to `dst` inside the client
    /// namespace ([`client::tcp_connect`] with the bed's timeout).
    ///
    /// # Errors
    /// As [`client::tcp_connect`].
    pub fn tcp_connect(&self, src: SocketAddr, dst: SocketAddr) -> anyhow::Result<TcpConn> {
        let timeout = self.options.io_timeout;
        self.client
            .enter(|| client::tcp_connect(src, dst, timeout))?
            .with_context(|| format!("TCP {src} -> {dst}"))
    }

    /// One TCP line exchange from `src` to `dst`: returns the answering backend's name.
    ///
    /// # Errors
    /// As [`client::tcp_exchange`].
    pub fn tcp_exchange(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        msg: &str,
    ) -> anyhow::Result<String> {
        let timeout = self.options.io_timeout;
        self.client
            .enter(|| client::tcp_exchange(src, dst, msg, timeout))?
            .with_context(|| format!("TCP exchange {src} -> {dst}"))
    }

    /// One UDP datagram from `src` to `dst` and its reply: the answering backend's name.
    ///
    /// # Errors
    /// As [`client::udp_exchange`].
    pub fn udp_exchange(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        msg: &str,
    ) -> anyhow::Result<String> {
        let timeout = self.options.io_timeout;
        self.client
            .enter(|| client::udp_exchange(src, dst, msg, timeout))?
            .with_context(|| format!("UDP exchange {src} -> {dst}"))
    }

    /// Counters of the LB's `lb0`.
    ///
    /// # Errors
    /// When the namespace cannot be read.
    pub fn lb_link_stats(&self) -> anyhow::Result<LinkStats> {
        plumbing::link_stats(&self.lb, LB_IFACE)
    }

    /// Counters of the client's `c0`.
    ///
    /// # Errors
    /// When the namespace cannot be read.
    pub fn client_link_stats(&self) -> anyhow::Result<LinkStats> {
        plumbing::link_stats(&self.client, CLIENT_IFACE)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (best effort).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a live rlimit the calls read and write.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim);
        }
    }
}
