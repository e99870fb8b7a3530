//! The multi-instance test bed ([`FleetBed`]): several load-balancer instances with
//! the same configuration behind one router that spreads each VIP's flows over them by
//! ECMP, the VIPs announced by BGP (BIRD) from each instance, clients behind the
//! router, and backends that every instance reaches through it.
//!
//! ```text
//!  client ns            router ns (BIRD, ECMP)                  LB ns k (BIRD + lb run)
//!  c0 192.0.2.10.. <-> rc0 192.0.2.1        rK 10.0.K.1  <->  lb0 10.0.K.2 (XDP lb_xdp)
//!  2001:db8:c::10..    2001:db8:c::1        fd00:0:0:K::1     fd00:0:0:K::2
//!                      br0 198.51.100.1 ──┬─ sw-bJ <-> backend J ns: b0 198.51.100.(10+J)
//!                      2001:db8:b::1      └─ ...                (XDP decap, VIPs on lo)
//! ```
//!
//! - Each LB instance has one interface, `lb0`, a point-to-point link to the router:
//!   VIP packets arrive on it, and the encapsulated packets leave on it again
//!   (`XDP_TX`) towards the router, which routes them to the backends (one NIC, routed
//!   to the top-of-rack router, as LB hosts usually are). The router side of each link
//!   runs the empty XDP program, without which veth drops `XDP_TX` frames (BR-24).
//! - Every instance runs `lb run` with the same configuration (the four VIPs of the
//!   single-instance bed, the same backends, seeds and table sizes), except its outer
//!   source addresses and control socket, with `[announce]` on (table
//!   [`ANNOUNCE_TABLE`], proto [`ANNOUNCE_PROTOCOL`]); and a BIRD
//!   ([`bird::LbHostBird`]) learning that table and exporting it over eBGP (AS
//!   [`LB_AS`]) to the router (AS [`ROUTER_AS`]), an IPv4 and an IPv6 session each.
//! - The router's BIRD ([`bird::RouterBird`]) merges the instances' routes into one
//!   ECMP route per VIP address (`merge paths on`), and the kernel hashes flows over
//!   the next hops by 5-tuple (`fib_multipath_hash_policy = 1`, both families). Its
//!   `rp_filter` is off: replies come from the VIP through the backends' link while
//!   the VIP's route points at the instances (direct server return). On demand
//!   ([`FleetBed::set_resilient`], module [`resilient`]) a static route through a
//!   resilient next-hop group forwards the IPv4 VIP address instead (BIRD cannot
//!   install one).
//! - Backends: as in the single-instance bed (the backend agent `lb_agent`, the VIPs on
//!   `lo`, an echo server answering `b<k>`), plus a TCP listener on port
//!   [`HEALTH_PORT`] for direct health probes; their default route is the router. The
//!   agents can hand a packet on to a second-chance candidate, as with the
//!   single-instance bed's `agent_forwarding`: IP forwarding on, the other backends'
//!   neighbours permanent, a pass program on each bridge port.
//! - Clients: one namespace with [`FleetOptions::clients`] addresses per family, routes
//!   to the VIP prefixes through the router with an MTU that leaves room for the outer
//!   header, and transmit checksum offload off (as in the single-instance bed).
//! - Names are unique per process (`fl-r-<pid>-<n>`...), like the single-instance
//!   bed's; everything is removed on drop, also when a test panics. A process killed
//!   outright leaves its `fl-*-<pid>-*` namespaces, its temporary directory
//!   (`$TMPDIR/lb-fleet-<pid>-<n>`) and, until they notice, its BIRD and `lb run`
//!   processes (they get SIGKILL and SIGTERM when the thread that started them exits).

pub mod bird;
pub mod change;
pub mod flows;
pub mod resilient;

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use lb::control::Stats;
use lb_dataplane::PassProgram;

use crate::{
    daemon::{Daemon, DaemonConfig, TempDir, vip_text},
    netns::NetNs,
    packets::{VIP4, VIP6},
    testbed::{
        BACKEND_IFACE, CLIENT_IFACE, LB_IFACE, backend_mac, backend_name, backend4, backend6,
        client4, client6, decap::DecapLink, health::PortListener, offload,
        other_backends_neighbours, plumbing, server::EchoServer, vip_tcp, vip_udp,
    },
};
use bird::{Bird, LbHostBird, RouterBird, RouterPeer};
use flows::LongFlows;

/// The router's AS number.
pub const ROUTER_AS: u32 = 65000;
/// The LB instances' AS number (all the same).
pub const LB_AS: u32 = 65001;
/// `announce.table` of every instance.
pub const ANNOUNCE_TABLE: u32 = 100;
/// `announce.protocol` of every instance.
pub const ANNOUNCE_PROTOCOL: u8 = 76;
/// The port of the backends' health-probe listener.
pub const HEALTH_PORT: u16 = 8080;
/// Most instances of one bed.
pub const MAX_INSTANCES: usize = 9;
/// The router's client-side addresses.
pub const ROUTER_CLIENT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The router's client-side IPv6 address.
pub const ROUTER_CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1);
/// The router's backend-side addresses.
pub const ROUTER_BACKENDS4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// The router's backend-side IPv6 address.
pub const ROUTER_BACKENDS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);
/// How long [`FleetBed::new`] waits for every instance to be announced.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Instance `k`'s (1-based) IPv4 address, 10.0.k.2, on its link to the router.
///
/// # Panics
/// When `k` is 0 or above [`MAX_INSTANCES`].
pub fn instance4(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, small(k), 2)
}

/// Instance `k`'s IPv6 address, fd00:0:0:k::2.
pub fn instance6(k: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, u16::from(small(k)), 0, 0, 0, 2)
}

/// The router's IPv4 address on its link to instance `k`, 10.0.k.1.
pub fn router4(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, small(k), 1)
}

/// The router's IPv6 address on its link to instance `k`, fd00:0:0:k::1.
pub fn router6(k: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, u16::from(small(k)), 0, 0, 0, 1)
}

fn small(k: usize) -> u8 {
    assert!((1..=MAX_INSTANCES).contains(&k), "instance {k}");
    u8::try_from(k).expect("checked")
}

/// The router's interface towards instance `k` (`r<k>`).
pub fn router_iface(k: usize) -> String {
    format!("r{k}")
}

fn mac(bytes: [u8; 6]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The MAC of the router's `r<k>`.
fn router_mac(k: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x10, small(k)]
}

/// The MAC of instance `k`'s `lb0`.
fn instance_mac(k: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x20, small(k)]
}

/// The BIRD configuration of instance `k` (`log` as given).
pub fn lb_host_bird(k: usize, log: &str) -> LbHostBird {
    LbHostBird {
        router_id: instance4(k),
        local4: instance4(k),
        peer4: router4(k),
        local6: instance6(k),
        peer6: router6(k),
        local_as: LB_AS,
        peer_as: ROUTER_AS,
        table: ANNOUNCE_TABLE,
        log: log.to_owned(),
    }
}

/// The router's BIRD configuration for `instances` instances.
pub fn router_bird(instances: usize, log: &str) -> RouterBird {
    RouterBird {
        router_id: Ipv4Addr::new(10, 0, 0, 1),
        local_as: ROUTER_AS,
        peer_as: LB_AS,
        peers: (1..=instances)
            .map(|k| RouterPeer {
                name: format!("lb{k}"),
                addr4: instance4(k),
                addr6: instance6(k),
            })
            .collect(),
        vips4: "203.0.113.0/24".to_owned(),
        vips6: "2001:db8:f::/48".to_owned(),
        log: log.to_owned(),
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// LB instances (`1..=MAX_INSTANCES`).
    pub instances: usize,
    /// Backends built at once.
    pub backends: u8,
    /// Client addresses per family.
    pub clients: usize,
    /// Timeout of every client socket operation.
    pub io_timeout: Duration,
    /// Turns every instance's remote API on, at `https://instance4(k):`[`API_PORT`]:
    /// a directory holding `server.crt` (valid for every instance's address),
    /// `server.key`, `admin.token` and `reader.token` ([`api_table`]).
    pub api_dir: Option<std::path::PathBuf>,
}

/// The port of each instance's remote API (with [`FleetOptions::api_dir`]).
pub const API_PORT: u16 = 9443;

/// The `[api]` table of instance `k` for the files in `dir`: tokens `deploy` (admin,
/// `admin.token`) and `grafana` (read-only, `reader.token`).
pub fn api_table(k: usize, dir: &std::path::Path) -> String {
    let d = dir.display();
    format!(
        "\n[api]\nenabled = true\nlisten = \"{}:{API_PORT}\"\n\
         cert_file = \"{d}/server.crt\"\nkey_file = \"{d}/server.key\"\n\
         [[api.token]]\nname = \"deploy\"\nfile = \"{d}/admin.token\"\nrole = \"admin\"\n\
         [[api.token]]\nname = \"grafana\"\nfile = \"{d}/reader.token\"\nrole = \"read-only\"\n",
        instance4(k)
    )
}

/// The URL of instance `k`'s remote API.
pub fn api_url(k: usize) -> String {
    format!("https://{}:{API_PORT}", instance4(k))
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            instances: 3,
            backends: 3,
            clients: 16,
            // Above the longest stall a failover may cause: a host that dies silently is
            // dropped after the BGP hold time (3 s), and TCP's next retransmission after
            // that comes up to about 6 s after the failure (RTO 0.2 s doubling).
            io_timeout: Duration::from_secs(10),
            api_dir: None,
        }
    }
}

/// One LB instance: its namespace, BIRD and daemon.
pub struct Instance {
    // Field order is drop order: the daemon and BIRD go before the namespace.
    daemon: Option<Daemon<'static>>,
    bird: Bird,
    config: DaemonConfig,
    k: usize,
    ns: Arc<NetNs>,
}

impl Instance {
    /// Its number (1-based).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Its namespace.
    pub fn ns(&self) -> &NetNs {
        &self.ns
    }

    /// Its daemon.
    ///
    /// # Panics
    /// While the daemon is stopped ([`FleetBed::stop_daemon`]).
    pub fn daemon(&self) -> &Daemon<'static> {
        self.daemon.as_ref().expect("the instance's daemon runs")
    }

    /// Its BIRD.
    pub fn bird(&self) -> &Bird {
        &self.bird
    }

    /// Its configuration.
    pub fn config(&self) -> &DaemonConfig {
        &self.config
    }
}

/// One backend of the fleet.
struct FleetBackend {
    // Field order is drop order.
    _server: EchoServer,
    _health: PortListener,
    _decap: DecapLink,
    /// The XDP_PASS program on its bridge port (`sw-b<j>`, in the router's namespace):
    /// the agent's `XDP_TX` towards a candidate is lost on a veth peer without it
    /// (BR-24).
    _pass: PassProgram,
    _ns: NetNs,
}

/// How an instance fails in the tests and the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The router's port towards it goes down (as a pulled cable would): the router's
    /// kernel drops its next hop at once, BIRD its sessions.
    RouterLinkDown,
    /// Its BIRD is killed (SIGKILL): the kernel closes the BGP connections, the
    /// router withdraws its routes.
    BirdKilled,
    /// The host dies without a word: the router's port towards it drops every
    /// packet both ways while its carrier stays up (an nftables `netdev` table on the
    /// router), so no BGP message says goodbye and the router drops its routes when
    /// the BGP hold time runs out.
    HostSilent,
    /// The operator withdraws the VIP addresses (`lb vip withdraw`).
    Withdrawn,
    /// Its daemon has stopped (a plain SIGTERM, [`FleetBed::stop_daemon`]: the pinned
    /// datapath kept forwarding and stayed announced), then `lb detach` removes the
    /// announcement routes and the datapath, in that order.
    Detached,
}

impl Failure {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Failure::RouterLinkDown => "router link down",
            Failure::BirdKilled => "BIRD killed",
            Failure::HostSilent => "host silent (BGP hold timer)",
            Failure::Withdrawn => "operator withdrawal (lb vip withdraw)",
            Failure::Detached => "lb run stopped, then lb detach",
        }
    }
}

/// The whole multi-instance topology; torn down on drop.
pub struct FleetBed {
    // Field order is drop order: processes and programs go before their namespaces.
    instances: Vec<Instance>,
    router_bird: Bird,
    /// The router's resilient next-hop group for the IPv4 VIP address, when on
    /// ([`resilient`]).
    resilient: Option<resilient::ResilientGroup>,
    _passes: Vec<PassProgram>,
    backends: Vec<FleetBackend>,
    router: NetNs,
    client: NetNs,
    dir: TempDir,
    options: FleetOptions,
    /// Sources handed out so far ([`FleetBed::sources`]).
    sources_given: AtomicUsize,
}

/// The first client port [`FleetBed::sources`] gives; below Linux's default ephemeral
/// range (32768-60999), so no connection with a kernel-chosen port takes one.
const FIRST_SOURCE_PORT: usize = 10_000;
/// The ports [`FleetBed::sources`] gives per client address before it starts over.
const SOURCE_PORTS: usize = 22_000;

impl FleetBed {
    /// Builds the topology of the module documentation, starts every BIRD and daemon,
    /// and waits until the router routes both VIP addresses over every instance.
    ///
    /// # Errors
    /// Not root, BIRD missing, or any step failing (the message names it); whatever
    /// was built is removed again.
    pub fn new(options: FleetOptions) -> anyhow::Result<Self> {
        ensure!(crate::is_root(), "the fleet bed needs root");
        ensure!(
            (1..=MAX_INSTANCES).contains(&options.instances),
            "instances must be 1..={MAX_INSTANCES}"
        );
        ensure!(
            (1..=crate::testbed::MAX_CLIENTS).contains(&options.clients),
            "clients must be 1..={}",
            crate::testbed::MAX_CLIENTS
        );
        let dir = TempDir::new("lb-fleet-")?;
        let router = NetNs::create("fl-r-")?;
        let client = NetNs::create("fl-c-")?;
        router_core(&router, &client, &options).context("router and client")?;
        let mut passes = Vec::new();
        let mut namespaces = Vec::new();
        for k in 1..=options.instances {
            let ns = Arc::new(NetNs::create(&format!("fl-lb{k}-"))?);
            link_instance(&router, &ns, k).with_context(|| format!("instance {k}'s link"))?;
            let iface = router_iface(k);
            let pass = router
                .enter(|| PassProgram::attach(&iface))?
                .with_context(|| format!("the pass program on {iface}"))?;
            passes.push(pass);
            namespaces.push(ns);
        }
        let mut backends = Vec::new();
        for j in 1..=options.backends {
            backends.push(build_backend(&router, j).with_context(|| format!("backend {j}"))?);
        }
        let router_bird = Bird::start(
            router.name(),
            dir.path(),
            "router",
            &router_bird(options.instances, &log_target(&dir, "router")).render(),
        )
        .context("the router's BIRD")?;
        let mut instances = Vec::new();
        for (i, ns) in namespaces.into_iter().enumerate() {
            let k = i + 1;
            let bird = Bird::start(
                ns.name(),
                dir.path(),
                &format!("lb{k}"),
                &lb_host_bird(k, &log_target(&dir, &format!("lb{k}"))).render(),
            )
            .with_context(|| format!("instance {k}'s BIRD"))?;
            let mut config = instance_config(k, options.backends);
            if let Some(dir) = &options.api_dir {
                config.extra.push_str(&api_table(k, dir));
            }
            let daemon = Daemon::start_in(Arc::clone(&ns), &config)
                .with_context(|| format!("instance {k}'s lb run"))?;
            instances.push(Instance {
                daemon: Some(daemon),
                bird,
                config,
                k,
                ns,
            });
        }
        let bed = Self {
            instances,
            router_bird,
            resilient: None,
            _passes: passes,
            backends,
            router,
            client,
            dir,
            options,
            sources_given: AtomicUsize::new(0),
        };
        bed.wait_all_announced(CONVERGE_TIMEOUT)?;
        Ok(bed)
    }

    /// The options it was built with.
    pub fn options(&self) -> &FleetOptions {
        &self.options
    }

    /// The instances, in order.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Instance `k` (1-based).
    ///
    /// # Panics
    /// When there is no instance `k`.
    pub fn instance(&self, k: usize) -> &Instance {
        &self.instances[k - 1]
    }

    /// Instance `k`'s daemon.
    ///
    /// # Panics
    /// When there is no instance `k` or its daemon is stopped.
    pub fn daemon(&self, k: usize) -> &Daemon<'static> {
        self.instance(k).daemon()
    }

    /// The router's namespace.
    pub fn router_ns(&self) -> &NetNs {
        &self.router
    }

    /// The router's BIRD.
    pub fn router_bird(&self) -> &Bird {
        &self.router_bird
    }

    /// The client namespace.
    pub fn client_ns(&self) -> &NetNs {
        &self.client
    }

    /// The bed's temporary directory (BIRD configurations, sockets and logs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The instances the router's FIB sends `addr` to now (next hops that are not
    /// dead), by instance number.
    ///
    /// # Errors
    /// When `ip` fails or prints something unexpected.
    pub fn router_nexthops(&self, addr: IpAddr) -> anyhow::Result<BTreeSet<usize>> {
        let family = if addr.is_ipv4() { "-4" } else { "-6" };
        let out = Command::new("ip")
            .args(["-n", self.router.name(), "-j", family, "route", "show"])
            .arg(addr.to_string())
            .output()
            .context("ip route show")?;
        ensure!(
            out.status.success(),
            "ip route show {addr}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        parse_nexthops(&out.stdout, addr)
    }

    /// Polls the router (every few milliseconds) until `done` holds for the instances
    /// it sends `addr` to; returns when that was first seen.
    ///
    /// # Errors
    /// On timeout, with the last next hops and the BIRD states.
    pub fn wait_router(
        &self,
        addr: IpAddr,
        timeout: Duration,
        done: impl Fn(&BTreeSet<usize>) -> bool,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let hops = self.router_nexthops(addr)?;
            let seen = Instant::now();
            if done(&hops) {
                return Ok(seen);
            }
            if seen > deadline {
                bail!(
                    "the router's route to {addr} did not converge within {timeout:?}: next hops {hops:?}\n\
                     router BIRD:\n{}",
                    self.router_bird
                        .birdc(&["show", "protocols"])
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until the router sends both VIP addresses to every instance.
    ///
    /// # Errors
    /// On timeout.
    pub fn wait_all_announced(&self, timeout: Duration) -> anyhow::Result<()> {
        let all: BTreeSet<usize> = (1..=self.instances.len()).collect();
        for addr in [IpAddr::from(VIP4), VIP6.into()] {
            self.wait_router(addr, timeout, |h| *h == all)?;
        }
        Ok(())
    }

    /// Brings the router's port towards instance `k` down or up. With the resilient
    /// group on, a port brought up also returns the instance's next hop to the group,
    /// as the operator's tooling would (the kernel removed it when the port went down).
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn set_router_link(&self, k: usize, up: bool) -> anyhow::Result<()> {
        self.router.ip(&[
            "link",
            "set",
            &router_iface(k),
            if up { "up" } else { "down" },
        ])?;
        match self.resilient {
            Some(group) if up => self.rejoin_group(group, k),
            _ => Ok(()),
        }
    }

    /// Makes the router's port towards instance `k` drop every packet in both
    /// directions, carrier up ([`Failure::HostSilent`]), or forward again.
    ///
    /// # Errors
    /// When `nft` fails.
    pub fn set_port_silent(&self, k: usize, silent: bool) -> anyhow::Result<()> {
        let table = format!("lbfleet_silent{k}");
        let exists = self
            .router
            .exec("nft", &["list", "table", "netdev", &table])?
            .status
            .success();
        if silent && !exists {
            let dev = router_iface(k);
            self.router.nft(&format!(
                    "table netdev {table} {{\n\
                     \tchain in {{ type filter hook ingress device \"{dev}\" priority 0; policy drop; }}\n\
                     \tchain out {{ type filter hook egress device \"{dev}\" priority 0; policy drop; }}\n\
                     }}\n"
            ))
        } else if !silent && exists {
            let out = self
                .router
                .exec("nft", &["delete", "table", "netdev", &table])?;
            ensure!(
                out.status.success(),
                "nft delete table: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(())
        } else {
            Ok(())
        }
    }

    /// Stops instance `k`'s daemon (SIGTERM: its pinned datapath keeps forwarding and its
    /// routes stay in the announcement table) and returns its log.
    ///
    /// # Errors
    /// When it is not running or does not exit cleanly.
    pub fn stop_daemon(&mut self, k: usize) -> anyhow::Result<String> {
        let daemon = self.instances[k - 1]
            .daemon
            .take()
            .context("the daemon is not running")?;
        daemon.stop()
    }

    /// Kills instance `k`'s daemon (SIGKILL, a crash: nothing is cleaned up, so its
    /// pinned datapath keeps forwarding with the tables it had and its routes stay in
    /// the announcement table) and returns its log.
    ///
    /// # Errors
    /// When it is not running.
    pub fn kill_daemon(&mut self, k: usize) -> anyhow::Result<String> {
        let mut daemon = self.instances[k - 1]
            .daemon
            .take()
            .context("the daemon is not running")?;
        daemon.halt(crate::daemon::Stop::Kill);
        Ok(daemon.log())
    }

    /// `lb detach --interface lb0` in instance `k`'s namespace (its daemon stopped, with
    /// the bed's announcement table); returns what it printed.
    ///
    /// # Errors
    /// When the daemon runs or `lb detach` fails.
    pub fn detach(&self, k: usize) -> anyhow::Result<String> {
        let instance = self.instance(k);
        ensure!(instance.daemon.is_none(), "instance {k}'s daemon runs");
        let lb = crate::daemon::lb_binary();
        let lb = lb.to_str().context("the lb binary's path")?;
        let table = ANNOUNCE_TABLE.to_string();
        let protocol = ANNOUNCE_PROTOCOL.to_string();
        let out = instance.ns.exec(
            lb,
            &[
                "detach",
                "--interface",
                LB_IFACE,
                "--announce-table",
                &table,
                "--announce-protocol",
                &protocol,
            ],
        )?;
        ensure!(
            out.status.success(),
            "lb detach: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts instance `k`'s daemon again with its configuration.
    ///
    /// # Errors
    /// As [`Daemon::start_in`].
    pub fn start_daemon(&mut self, k: usize) -> anyhow::Result<()> {
        let instance = &mut self.instances[k - 1];
        ensure!(instance.daemon.is_none(), "instance {k}'s daemon runs");
        instance.daemon = Some(Daemon::start_in(
            Arc::clone(&instance.ns),
            &instance.config,
        )?);
        Ok(())
    }

    /// Replaces every instance's configuration with `change` applied (the daemons
    /// reload it) and waits until each status satisfies `applied`.
    ///
    /// # Errors
    /// When a file cannot be written or a daemon does not apply it in time.
    pub fn reconfigure(
        &mut self,
        change: impl Fn(&mut DaemonConfig),
        applied: impl Fn(&lb::control::Status) -> bool,
    ) -> anyhow::Result<()> {
        for instance in &mut self.instances {
            change(&mut instance.config);
            let daemon = instance.daemon.as_ref().context("a daemon is stopped")?;
            daemon.write_config(&instance.config)?;
        }
        for instance in &self.instances {
            instance.daemon().wait_status(
                "the new configuration",
                Duration::from_secs(10),
                &applied,
            )?;
        }
        Ok(())
    }

    /// Adds backend `backend_count() + 1` to the bed (not to any VIP: do that with
    /// `lb backend add` on every instance); returns its number.
    ///
    /// # Errors
    /// When a step fails.
    pub fn add_backend(&mut self) -> anyhow::Result<u8> {
        let j = u8::try_from(self.backends.len() + 1).context("backend number")?;
        self.backends.push(build_backend(&self.router, j)?);
        Ok(j)
    }

    /// Fails instance `k` the `failure` way.
    ///
    /// # Errors
    /// When the action fails.
    pub fn fail(&mut self, k: usize, failure: Failure) -> anyhow::Result<()> {
        match failure {
            Failure::RouterLinkDown => self.set_router_link(k, false),
            Failure::BirdKilled => self.instances[k - 1].bird.signal(libc::SIGKILL),
            Failure::HostSilent => self.set_port_silent(k, true),
            Failure::Withdrawn => self.vip_all(k, "withdraw"),
            Failure::Detached => {
                let line = self.detach(k)?;
                ensure!(
                    line.contains("withdrew 2 VIP announcement routes from table"),
                    "lb detach did not withdraw both addresses first: {line}"
                );
                Ok(())
            }
        }
    }

    /// Undoes [`Self::fail`].
    ///
    /// # Errors
    /// When the action fails.
    pub fn restore(&mut self, k: usize, failure: Failure) -> anyhow::Result<()> {
        match failure {
            Failure::RouterLinkDown => self.set_router_link(k, true),
            Failure::BirdKilled => self.instances[k - 1].bird.restart(),
            Failure::HostSilent => self.set_port_silent(k, false),
            Failure::Withdrawn => self.vip_all(k, "announce"),
            Failure::Detached => self.start_daemon(k),
        }
    }

    /// Brings the bed back to its baseline after a scenario that stopped half-way:
    /// every router port up, every BIRD running (a frozen one continued, a dead one
    /// started again), every daemon running with no runtime change (`lb overrides
    /// --clear`) and nothing withdrawn; waits until the router uses every instance.
    ///
    /// # Errors
    /// When a step fails or the router does not converge.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        for k in 1..=self.instances.len() {
            self.set_router_link(k, true)?;
            self.set_port_silent(k, false)?;
            let bird = &mut self.instances[k - 1].bird;
            if !bird.running() {
                bird.restart()?;
            }
            if self.instances[k - 1].daemon.is_none() {
                self.start_daemon(k)?;
            }
            self.daemon(k).cli(&["overrides", "--clear"])?;
            self.vip_all(k, "announce")?;
        }
        self.wait_all_announced(CONVERGE_TIMEOUT)
    }

    /// `lb vip ACTION` for both VIP addresses on instance `k`.
    fn vip_all(&self, k: usize, action: &str) -> anyhow::Result<()> {
        for addr in [IpAddr::from(VIP4), VIP6.into()] {
            self.daemon(k)
                .cli(&["vip", action, "--vip", &addr.to_string()])?;
        }
        Ok(())
    }

    /// Client address `i` of one family.
    ///
    /// # Panics
    /// When `i` is not below [`FleetOptions::clients`].
    pub fn client_addr(&self, i: usize, v6: bool) -> IpAddr {
        assert!(i < self.options.clients, "client {i}");
        if v6 {
            client6(i).into()
        } else {
            client4(i).into()
        }
    }

    /// `n` sources spread over the client addresses, each a client port that no
    /// earlier source of this bed had. The instances' conntrack keeps a connection's
    /// pin long after the test that made it (until it idles out); a later connection
    /// on the same 4-tuple through another instance would find it there, a stale pin
    /// no real client port reuse within minutes would meet. With kernel-chosen ports a
    /// few hundred trials' connections reuse some.
    pub fn sources(&self, n: usize, v6: bool) -> Vec<SocketAddr> {
        let clients = self.options.clients;
        let first = self.sources_given.fetch_add(n, Ordering::Relaxed);
        (first..first + n)
            .map(|c| {
                let port = FIRST_SOURCE_PORT + (c / clients) % SOURCE_PORTS;
                let port = u16::try_from(port).expect("below 32,000");
                SocketAddr::new(self.client_addr(c % clients, v6), port)
            })
            .collect()
    }

    /// `n` long-lived connections to the TCP VIP of one family, busy from now on.
    ///
    /// # Errors
    /// As [`LongFlows::open`].
    pub fn long_flows(&self, n: usize, v6: bool) -> anyhow::Result<LongFlows> {
        LongFlows::open(
            &self.client,
            &self.sources(n, v6),
            vip_tcp(v6),
            self.options.io_timeout,
        )
    }

    /// For each client address of `locals`, the instances whose conntrack holds an
    /// established pin of its flow to `vip` ([`vip_text`]), with the pin's backend.
    ///
    /// # Errors
    /// When a daemon does not answer.
    pub fn pins(
        &self,
        vip: &str,
        locals: &[SocketAddr],
    ) -> anyhow::Result<Vec<Vec<(usize, String)>>> {
        let mut out = vec![Vec::new(); locals.len()];
        for instance in &self.instances {
            let Some(daemon) = instance.daemon.as_ref() else {
                continue;
            };
            for (i, local) in locals.iter().enumerate() {
                if let Some(pin) = daemon.flow(vip, *local)?.pinned.filter(|p| p.established) {
                    out[i].push((instance.k, pin.backend));
                }
            }
        }
        Ok(out)
    }

    /// Each running instance's table fingerprint of `vip`.
    ///
    /// # Errors
    /// When a daemon does not answer or lacks the VIP.
    pub fn fingerprints(&self, vip: &str) -> anyhow::Result<Vec<String>> {
        self.instances
            .iter()
            .filter_map(|i| i.daemon.as_ref())
            .map(|d| {
                let status = d.status()?;
                status
                    .vips
                    .iter()
                    .find(|v| v.vip == vip)
                    .map(|v| v.fingerprint.clone())
                    .with_context(|| format!("no VIP {vip} in lb status"))
            })
            .collect()
    }

    /// Instance `k`'s counter `name` of `vip` (`packets`, `ct_misses_non_syn`, ...).
    ///
    /// # Errors
    /// When the daemon does not answer.
    pub fn counter(&self, k: usize, vip: &str, name: &str) -> anyhow::Result<u64> {
        let stats: Stats = self.daemon(k).stats()?;
        Ok(stats
            .vips
            .iter()
            .find(|v| v.vip == vip)
            .and_then(|v| v.counters.iter().find(|c| c.name == name))
            .map_or(0, |c| c.value))
    }

    /// Drops instance `k`'s outgoing health probes (TCP to [`HEALTH_PORT`]) until the
    /// guard is dropped.
    ///
    /// # Errors
    /// When `nft` fails.
    pub fn block_probes(&self, k: usize) -> anyhow::Result<ProbeBlock<'_>> {
        ProbeBlock::add(self.instance(k).ns())
    }
}

/// An nftables rule in an instance's namespace dropping its outgoing health probes;
/// removed on drop.
pub struct ProbeBlock<'a> {
    ns: &'a NetNs,
}

impl<'a> ProbeBlock<'a> {
    fn add(ns: &'a NetNs) -> anyhow::Result<Self> {
        let script = format!(
            "table inet lbfleet {{\n  chain output {{\n    type filter hook output priority 0;\n    \
             tcp dport {HEALTH_PORT} drop\n  }}\n}}\n"
        );
        ns.nft(&script)?;
        Ok(Self { ns })
    }
}

impl Drop for ProbeBlock<'_> {
    fn drop(&mut self) {
        let _ = self.ns.exec("nft", &["delete", "table", "inet", "lbfleet"]);
    }
}

/// The `log` target of a BIRD of the bed: a file in its directory.
fn log_target(dir: &TempDir, name: &str) -> String {
    format!(
        "\"{}\"",
        dir.path().join(format!("{name}.bird.log")).display()
    )
}

/// Instance `k`'s daemon configuration: the single-instance bed's VIPs and backends
/// `1..=backends`, its own outer sources, `[announce]` on.
pub fn instance_config(k: usize, backends: u8) -> DaemonConfig {
    let mut config = DaemonConfig::equal(1..=backends);
    config.sources = (instance4(k), instance6(k));
    config.extra = format!(
        "\n[announce]\nenabled = true\ntable = {ANNOUNCE_TABLE}\nprotocol = {ANNOUNCE_PROTOCOL}\n"
    );
    config
}

/// The router's sysctls and client link, the client namespace, the backends' bridge.
fn router_core(router: &NetNs, client: &NetNs, options: &FleetOptions) -> anyhow::Result<()> {
    let mut sysctls: Vec<(String, &str)> = vec![
        ("net/ipv4/ip_forward".into(), "1"),
        ("net/ipv4/conf/all/forwarding".into(), "1"),
        ("net/ipv6/conf/all/forwarding".into(), "1"),
        ("net/ipv4/fib_multipath_hash_policy".into(), "1"),
        ("net/ipv6/fib_multipath_hash_policy".into(), "1"),
        // A port taken down and up again keeps its IPv6 addresses, as a router's
        // configured ones do (Linux flushes them on link down by default, and the BGP
        // session over IPv6 would never come back).
        ("net/ipv6/conf/all/keep_addr_on_down".into(), "1"),
    ];
    for dev in ["all", "default"] {
        sysctls.push((format!("net/ipv4/conf/{dev}/rp_filter"), "0"));
    }
    plumbing::sysctls(router, &sysctls)?;
    plumbing::ip_batch(
        router,
        &[
            format!(
                "link add rc0 type veth peer name {CLIENT_IFACE} address {} netns {}",
                mac(crate::packets::CLIENT_MAC),
                client.name()
            ),
            format!("addr add {ROUTER_CLIENT4}/24 dev rc0"),
            format!("addr add {ROUTER_CLIENT6}/64 dev rc0 nodad"),
            "link set rc0 up".to_owned(),
            "link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0".to_owned(),
            format!("addr add {ROUTER_BACKENDS4}/24 dev br0"),
            format!("addr add {ROUTER_BACKENDS6}/64 dev br0 nodad"),
            "link set br0 up".to_owned(),
        ],
    )?;
    let mut cmds = vec![format!("link set {CLIENT_IFACE} up")];
    for i in 0..options.clients {
        cmds.push(format!("addr add {}/24 dev {CLIENT_IFACE}", client4(i)));
        cmds.push(format!(
            "addr add {}/64 dev {CLIENT_IFACE} nodad",
            client6(i)
        ));
    }
    // Room for the outer header on the LB -> backend path, as in the single bed.
    cmds.push(format!(
        "route add 203.0.113.0/24 via {ROUTER_CLIENT4} dev {CLIENT_IFACE} mtu 1480"
    ));
    cmds.push(format!(
        "route add 2001:db8:f::/48 via {ROUTER_CLIENT6} dev {CLIENT_IFACE} mtu 1460"
    ));
    plumbing::ip_batch(client, &cmds)?;
    client
        .enter(|| offload::disable_tx_checksum(CLIENT_IFACE))?
        .context("checksum offload of c0")?;
    Ok(())
}

/// The link between the router and instance `k`, and the instance's addresses,
/// routes, forwarding and neighbours.
fn link_instance(router: &NetNs, ns: &NetNs, k: usize) -> anyhow::Result<()> {
    let iface = router_iface(k);
    plumbing::ip_batch(
        router,
        &[
            format!(
                "link add {iface} address {} type veth peer name {LB_IFACE} address {} netns {}",
                mac(router_mac(k)),
                mac(instance_mac(k)),
                ns.name()
            ),
            format!("addr add {}/24 dev {iface}", router4(k)),
            format!("addr add {}/64 dev {iface} nodad", router6(k)),
            format!("link set {iface} up"),
        ],
    )?;
    plumbing::sysctls(
        ns,
        &[
            ("net/ipv4/ip_forward".into(), "1"),
            ("net/ipv4/conf/all/forwarding".into(), "1"),
            ("net/ipv6/conf/all/forwarding".into(), "1"),
            ("net/ipv6/conf/all/keep_addr_on_down".into(), "1"),
        ],
    )?;
    // bpf_fib_lookup needs the gateway's neighbour entry before the first packet.
    plumbing::ip_batch(
        ns,
        &[
            format!("addr add {}/24 dev {LB_IFACE}", instance4(k)),
            format!("addr add {}/64 dev {LB_IFACE} nodad", instance6(k)),
            format!("link set {LB_IFACE} up"),
            format!("route add default via {} dev {LB_IFACE}", router4(k)),
            format!("route add default via {} dev {LB_IFACE}", router6(k)),
            format!(
                "neigh replace {} lladdr {} dev {LB_IFACE} nud permanent",
                router4(k),
                mac(router_mac(k))
            ),
            format!(
                "neigh replace {} lladdr {} dev {LB_IFACE} nud permanent",
                router6(k),
                mac(router_mac(k))
            ),
        ],
    )?;
    // A veth offers receive VLAN offload, and `lb run` refuses native XDP with it on.
    ns.enter(|| offload::disable_rx_vlan(LB_IFACE))?
        .with_context(|| format!("VLAN offload of instance {k}'s {LB_IFACE}"))?;
    Ok(())
}

/// Backend `j`: its namespace on the router's bridge, addresses, VIPs, routes,
/// decapsulation, echo server and health listener.
fn build_backend(router: &NetNs, j: u8) -> anyhow::Result<FleetBackend> {
    let ns = NetNs::create(&format!("fl-b{j}-"))?;
    let peer = format!("sw-b{j}");
    plumbing::ip_batch(
        router,
        &[
            format!(
                "link add {peer} type veth peer name {BACKEND_IFACE} address {} netns {}",
                mac(backend_mac(j)),
                ns.name()
            ),
            format!("link set {peer} master br0 up"),
        ],
    )?;
    plumbing::ip_batch(
        &ns,
        &[
            format!("link set {BACKEND_IFACE} up"),
            format!("addr add {}/24 dev {BACKEND_IFACE}", backend4(j)),
            format!("addr add {}/64 dev {BACKEND_IFACE} nodad", backend6(j)),
            format!("addr add {VIP4}/32 dev lo"),
            format!("addr add {VIP6}/128 dev lo nodad"),
            format!("route add default via {ROUTER_BACKENDS4} dev {BACKEND_IFACE}"),
            format!("route add default via {ROUTER_BACKENDS6} dev {BACKEND_IFACE}"),
        ]
        .into_iter()
        .chain(other_backends_neighbours(j))
        .collect::<Vec<_>>(),
    )?;
    // The agent hands a packet on to a second-chance candidate with a FIB lookup and
    // XDP_TX: forwarding on, the other backends' neighbours permanent (above), and a
    // pass program on the bridge port.
    plumbing::sysctls(
        &ns,
        &[
            ("net/ipv4/conf/all/forwarding".into(), "1"),
            ("net/ipv6/conf/all/forwarding".into(), "1"),
        ],
    )?;
    let pass = router
        .enter(|| PassProgram::attach(&peer))?
        .with_context(|| format!("the pass program on {peer}"))?;
    let rp_filter_off: Vec<(String, &str)> = ["all", "default", "lo", BACKEND_IFACE]
        .iter()
        .map(|dev| (format!("net/ipv4/conf/{dev}/rp_filter"), "0"))
        .collect();
    plumbing::sysctls(&ns, &rp_filter_off)?;
    let decap = ns
        .enter(|| DecapLink::attach(BACKEND_IFACE))?
        .context("decapsulation program")?;
    let server = EchoServer::start(
        &ns,
        &backend_name(j),
        &[vip_tcp(false), vip_tcp(true)],
        &[vip_udp(false), vip_udp(true)],
    )?;
    let health = PortListener::open(&ns, HEALTH_PORT)?;
    Ok(FleetBackend {
        _server: server,
        _health: health,
        _decap: decap,
        _pass: pass,
        _ns: ns,
    })
}

/// The instances of `ip -j route show ADDR` output: the devices `r<k>` of its next
/// hops, but those flagged dead. Of several routes to `addr` only those of the lowest
/// metric count (the kernel forwards by them: the resilient group's static route
/// before BIRD's, [`resilient`]); a route without one has metric 0.
fn parse_nexthops(json: &[u8], addr: IpAddr) -> anyhow::Result<BTreeSet<usize>> {
    if json.iter().all(u8::is_ascii_whitespace) {
        return Ok(BTreeSet::new());
    }
    let routes: Vec<serde_json::Value> =
        serde_json::from_slice(json).context("parsing ip -j route show")?;
    let metric = |r: &serde_json::Value| r.get("metric").and_then(serde_json::Value::as_u64);
    let to_addr: Vec<&serde_json::Value> = routes
        .iter()
        .filter(|r| r.get("dst").and_then(|d| d.as_str()) == Some(&addr.to_string()))
        .collect();
    let lowest = to_addr.iter().map(|r| metric(r).unwrap_or(0)).min();
    let mut out = BTreeSet::new();
    for route in to_addr
        .into_iter()
        .filter(|r| Some(metric(r).unwrap_or(0)) == lowest)
    {
        let hops: Vec<&serde_json::Value> = match route.get("nexthops") {
            Some(serde_json::Value::Array(hops)) => hops.iter().collect(),
            _ => vec![route],
        };
        for hop in hops {
            let dead = hop
                .get("flags")
                .and_then(|f| f.as_array())
                .is_some_and(|f| f.iter().any(|x| x.as_str() == Some("dead")));
            let k = hop
                .get("dev")
                .and_then(|d| d.as_str())
                .and_then(|d| d.strip_prefix('r'))
                .and_then(|k| k.parse::<usize>().ok());
            if let (Some(k), false) = (k, dead) {
                out.insert(k);
            }
        }
    }
    Ok(out)
}

/// A short report of every instance's announcements (for failure messages).
pub fn describe(bed: &FleetBed) -> String {
    let mut out = String::new();
    for i in bed.instances() {
        let Some(d) = i.daemon.as_ref() else {
            let _ = writeln!(out, "instance {}: daemon stopped", i.k);
            continue;
        };
        match d.status() {
            Ok(s) => {
                for a in &s.announce.addresses {
                    let _ = writeln!(
                        out,
                        "instance {}: {} announced {} ({})",
                        i.k, a.address, a.announced, a.reason
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "instance {}: {e}", i.k);
            }
        }
    }
    out
}

/// [`vip_text`] of the TCP VIP of one family.
pub fn tcp_vip(v6: bool) -> String {
    vip_text(v6, true)
}

/// The BIRD configurations of the book's fleets chapter (docs/src/guide/fleets.md):
/// instance 1's and the router's of a three-instance bed, logging to syslog. The chapter
/// shows exactly these texts (checked by a test), so what it gives is what the
/// multi-instance tests run.
pub fn readme_birds() -> (String, String) {
    (
        lb_host_bird(1, "syslog").render(),
        router_bird(3, "syslog").render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fenced block that follows the line `marker` in `readme`.
    fn block_after<'a>(readme: &'a str, marker: &str) -> Option<&'a str> {
        let rest = &readme[readme.find(marker)? + marker.len()..];
        let open = rest.find("```")?;
        let body = &rest[open..];
        let body = &body[body.find('\n')? + 1..];
        Some(&body[..body.find("```")?])
    }

    /// The book's two BIRD configurations (docs/src/guide/fleets.md) are the ones the bed
    /// runs (the markers are HTML comments before each block).
    #[test]
    fn book_bird_configurations_are_the_beds() {
        let chapter = include_str!("../../docs/src/guide/fleets.md");
        let (host, router) = readme_birds();
        for (marker, want) in [
            ("<!-- bird: lb host -->", host),
            ("<!-- bird: router -->", router),
        ] {
            let got = block_after(chapter, marker)
                .unwrap_or_else(|| panic!("docs/src/guide/fleets.md has no block after {marker}"));
            assert_eq!(
                got, want,
                "docs/src/guide/fleets.md block after {marker}; it should read:\n{want}"
            );
        }
    }

    #[test]
    fn router_next_hops_parse_multipath_and_single_routes() {
        let addr: IpAddr = "203.0.113.10".parse().unwrap();
        let multi = br#"[{"dst":"203.0.113.10","protocol":"bird","metric":32,"flags":[],
            "nexthops":[{"gateway":"10.0.1.2","dev":"r1","weight":1,"flags":[]},
                        {"gateway":"10.0.2.2","dev":"r2","weight":1,"flags":["dead","linkdown"]},
                        {"gateway":"10.0.3.2","dev":"r3","weight":1,"flags":[]}]}]"#;
        assert_eq!(parse_nexthops(multi, addr).unwrap(), BTreeSet::from([1, 3]));
        let single = br#"[{"dst":"203.0.113.10","gateway":"10.0.2.2","dev":"r2","protocol":"bird","metric":32,"flags":[]}]"#;
        assert_eq!(parse_nexthops(single, addr).unwrap(), BTreeSet::from([2]));
        assert!(parse_nexthops(b"", addr).unwrap().is_empty());
        assert!(parse_nexthops(b"[]", addr).unwrap().is_empty());
    }

    #[test]
    fn router_next_hops_are_the_lowest_metric_routes() {
        let addr: IpAddr = "203.0.113.10".parse().unwrap();
        // The resilient group's route (metric 1) before BIRD's (32): as `ip -j route
        // show` prints them after instance 2's link went down.
        let both = br#"[{"dst":"203.0.113.10","nhid":100,"metric":1,"flags":[],
            "nexthops":[{"gateway":"10.0.1.2","dev":"r1","weight":1,"flags":[]},
                        {"gateway":"10.0.3.2","dev":"r3","weight":1,"flags":[]}]},
            {"dst":"203.0.113.10","gateway":"10.0.2.2","dev":"r2","protocol":"bird","metric":32,"flags":[]}]"#;
        assert_eq!(parse_nexthops(both, addr).unwrap(), BTreeSet::from([1, 3]));
        let unmetered = br#"[{"dst":"203.0.113.10","gateway":"10.0.2.2","dev":"r2","flags":[]},
            {"dst":"203.0.113.10","gateway":"10.0.1.2","dev":"r1","metric":32,"flags":[]}]"#;
        assert_eq!(
            parse_nexthops(unmetered, addr).unwrap(),
            BTreeSet::from([2])
        );
    }
}
