//! The configuration file as written: TOML deserialised with serde into these types,
//! unknown keys rejected. Values stay close to the text here (addresses as strings);
//! `super::validate` turns them into a [`super::Config`].
//!
//! Integer fields go through [`UInt`], whose errors read
//! `expected an integer >= 0, got "abc"` instead of serde's type names.

use serde::Deserialize;

use lb_health::file::HealthFile;

pub use super::value::UInt;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Interface to attach the XDP program to.
    pub interface: String,
    /// `auto` (native, falling back to skb with a warning), `native` or `skb`.
    #[serde(default)]
    pub xdp_mode: Option<String>,
    /// Path of the control socket.
    #[serde(default)]
    pub control_socket: Option<String>,
    /// Where the datapath is pinned (bpffs, host's view).
    #[serde(default)]
    pub pin_dir: Option<String>,
    /// Where runtime changes are kept.
    #[serde(default)]
    pub state_dir: Option<String>,
    /// Detach the datapath and remove its pins when the daemon exits.
    #[serde(default)]
    pub detach_on_exit: Option<bool>,
    /// When the file is reloaded: `auto` (on every write, and SIGHUP) or `signal`
    /// (only SIGHUP).
    #[serde(default)]
    pub reload: Option<String>,
    /// Largest outer IP packet on the LB → backend path (bytes).
    #[serde(default)]
    pub mtu: Option<UInt<u16>>,
    /// Seed of the data plane's flow hash.
    #[serde(default)]
    pub hash_seed: Option<UInt<u32>>,
    /// Seed of the Maglev permutations.
    #[serde(default)]
    pub maglev_seed: Option<UInt<u64>>,
    /// Cap on the memory of all Maglev table maps together (MiB).
    #[serde(default)]
    pub max_table_memory_mib: Option<UInt<u32>>,
    /// Outer source addresses.
    #[serde(default)]
    pub encap: EncapFile,
    /// How the next-hop MAC is found.
    #[serde(default)]
    pub nexthop: NexthopFile,
    /// Connection tracking sizes and timeouts.
    #[serde(default)]
    pub conntrack: ConntrackFile,
    /// The ICMP messages the load balancer sends.
    #[serde(default)]
    pub icmp: IcmpFile,
    /// The metrics endpoint and the live-connection count.
    #[serde(default)]
    pub metrics: MetricsFile,
    /// The health checker as a whole (every VIP's probes run in it).
    #[serde(default)]
    pub health: HealthCheckerFile,
    /// Publishing the servable VIP addresses for BGP (`[announce]`).
    #[serde(default)]
    pub announce: super::announce::AnnounceFile,
    /// The remote HTTPS API (`[api]`).
    #[serde(default)]
    pub api: super::api::ApiFile,
    /// The VIPs, `[[vip]]` tables.
    #[serde(default, rename = "vip")]
    pub vips: Vec<VipFile>,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsFile {
    /// Whether the endpoint is served.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `ADDR:PORT` of the endpoint (IPv6 in brackets).
    #[serde(default)]
    pub listen: Option<String>,
    /// Period of the conntrack walk that counts live connections (ms).
    #[serde(default)]
    pub connections_interval_ms: Option<UInt<u32>>,
    /// A connection idle longer than this counts as idle (s).
    #[serde(default)]
    pub idle_secs: Option<UInt<u32>>,
    /// How long a removed backend's series stay exported (s).
    #[serde(default)]
    pub removed_retention_secs: Option<UInt<u32>>,
}

/// `[encap]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncapFile {
    /// Outer source for IPv4-in-IPv4.
    #[serde(default)]
    pub source_v4: Option<String>,
    /// Outer source for IPv6-in-IPv6.
    #[serde(default)]
    pub source_v6: Option<String>,
    /// Per-flow outer IPv4 sources: a prefix whose host bits come from the flow hash.
    #[serde(default)]
    pub source_prefix_v4: Option<String>,
    /// Per-flow outer IPv6 sources.
    #[serde(default)]
    pub source_prefix_v6: Option<String>,
    /// Outer IPv6 flow label: `inner` (copied) or `hash` (from the flow hash).
    #[serde(default)]
    pub flow_label: Option<String>,
    /// UDP destination port of GUE (`vip.encap = "gue"`).
    #[serde(default)]
    pub gue_port: Option<UInt<u16>>,
}

/// `[nexthop]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NexthopFile {
    /// `fib` or `gateway`.
    #[serde(default)]
    pub mode: Option<String>,
    /// The gateway's MAC (`gateway` mode).
    #[serde(default)]
    pub gateway_mac: Option<String>,
    /// How long each CPU reuses a backend's FIB lookup (`fib` mode), milliseconds.
    #[serde(default)]
    pub cache_ms: Option<UInt<u32>>,
}

/// `[conntrack]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackFile {
    /// Established-flow entries, per address family.
    #[serde(default)]
    pub capacity: Option<UInt<u32>>,
    /// SYN cache slots (a power of two), split into one part per CPU on an interface with
    /// several receive queues (`lb_common::syn_cache`).
    #[serde(default)]
    pub syn_capacity: Option<UInt<u32>>,
    /// UDP idle timeout (seconds).
    #[serde(default)]
    pub udp_timeout_secs: Option<UInt<u32>>,
    /// New pins per second per CPU (0: no limit).
    #[serde(default)]
    pub new_pin_rate: Option<UInt<u32>>,
    /// Datagrams whose first fragment was seen (fragment tracking entries).
    #[serde(default)]
    pub fragment_capacity: Option<UInt<u32>>,
    /// Clients whose affinity pins are kept, over all VIPs with a persistence timeout.
    #[serde(default)]
    pub persistence_capacity: Option<UInt<u32>>,
    /// The fast path's exceptions kept, over all fast-path VIPs (a map that never evicts).
    #[serde(default)]
    pub exceptions_capacity: Option<UInt<u32>>,
    /// The established-TCP idle time (seconds) the fast path's cleaning assumes.
    #[serde(default)]
    pub tcp_idle_secs: Option<UInt<u32>>,
    /// The quiet time (seconds) before a dirty table slot may turn clean.
    #[serde(default)]
    pub quiet_secs: Option<UInt<u32>>,
    /// Period (seconds) of the cleaning walk.
    #[serde(default)]
    pub clean_interval_secs: Option<UInt<u32>>,
}

/// `[icmp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcmpFile {
    /// Answer packets too big once encapsulated with ICMP "too big".
    #[serde(default)]
    pub too_big: Option<bool>,
    /// Answer echo requests to VIP addresses.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Messages per second, per CPU and kind.
    #[serde(default)]
    pub rate_limit: Option<UInt<u32>>,
    /// Messages a burst may send at once.
    #[serde(default)]
    pub burst: Option<UInt<u32>>,
}

/// `[health]`: the health checker's own settings (the probes are per VIP).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckerFile {
    /// Transitions within this window (milliseconds) become one table change per VIP.
    #[serde(default)]
    pub coalesce_ms: Option<UInt<u32>>,
    /// Most probes in flight at once.
    #[serde(default)]
    pub max_concurrent_probes: Option<UInt<u32>>,
}

/// One `[[vip]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VipFile {
    /// VIP address.
    pub address: String,
    /// Port.
    pub port: UInt<u16>,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Maglev table size (a prime).
    #[serde(default)]
    pub table_size: Option<UInt<u32>>,
    /// `ipv4` or `ipv6`: the backends' family (IPv6 for an IPv4 VIP: IPv4-in-IPv6).
    #[serde(default)]
    pub backend_family: Option<String>,
    /// `ipip` (default) or `gue`: how packets reach the backends.
    #[serde(default)]
    pub encap: Option<String>,
    /// Client prefixes allowed to reach the VIP (absent: every client).
    #[serde(default)]
    pub allowed_sources: Option<Vec<String>>,
    /// The fast path: the table decides on clean slots, conntrack only where it changed.
    #[serde(default)]
    pub fast_path: Option<bool>,
    /// The backends' second chance: a TCP miss on a dirty slot names the slot's other
    /// possible owner as a GUE candidate (needs `encap = "gue"`).
    #[serde(default)]
    pub second_chance: Option<bool>,
    /// The fields of a flow that pick its backend: `5-tuple` (default), `src`,
    /// `src+dport`, `dport`.
    #[serde(default)]
    pub hash: Option<String>,
    /// The leading bits of the client address hashed with `src` or `src+dport` (a /64
    /// client is one client); default: the whole address.
    #[serde(default)]
    pub hash_source_prefix: Option<UInt<u32>>,
    /// Client affinity (IPVS persistence): a client stays on its backend until idle
    /// this long (seconds); needs `hash = "src"` or `"src+dport"`.
    #[serde(default)]
    pub persistence_timeout_secs: Option<UInt<u32>>,
    /// Its health checks, multi-failure policy and flap damping (`[vip.health]`).
    #[serde(default)]
    pub health: Option<HealthFile>,
    /// The backends, `[[vip.backend]]` tables.
    #[serde(default, rename = "backend")]
    pub backends: Vec<BackendFile>,
}

/// One `[[vip.backend]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendFile {
    /// Backend address.
    pub address: String,
    /// Relative weight (default 1; 0 drains).
    #[serde(default)]
    pub weight: Option<UInt<u32>>,
    /// `active` (default), `drain` or `down`.
    #[serde(default)]
    pub state: Option<String>,
    /// This backend's overrides of its VIP's probe keys (`[vip.backend.health]`).
    #[serde(default)]
    pub health: Option<HealthFile>,
}
