//! Configuration: the TOML file ([`file`](mod@file)), parsed with serde and then validated
//! (`validate`) into the [`Config`] the daemon uses; its health-check part is in
//! `health` (the probes' own types are `lb_health`'s), the VIP announcements'
//! in [`announce`], the remote API's in [`api`].
//!
//! Every error names the key path, the value and the line of the key, e.g.
//! `vip[1].backend[2].weight: expected an integer >= 0 and <= 4294967295, got "abc" (line 14)`.
//! Array indices in paths count from 0 in file order. Unknown keys are errors. An
//! example file with every key is `lb.example.toml` at the repository root.

pub mod announce;
pub mod api;
pub mod file;
mod health;
pub mod push;
mod validate;
pub mod value;
mod vip;

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr},
    path::{Path, PathBuf},
    time::Duration,
};

pub use announce::Announce;
pub use api::{Api, ApiToken, Role};
pub use health::{HealthChecker, VipProbes};
pub use vip::{Protocol, Vip};

use lb_dataplane::prefix::Prefix;
use lb_maglev::BackendKey;

/// How the XDP program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// Native, falling back to generic (skb) mode with a warning.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode.
    Skb,
}

/// How the next-hop MAC of encapsulated packets is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nexthop {
    /// `bpf_fib_lookup`: the kernel's routes and neighbours (needs forwarding enabled on
    /// the interface, and the neighbours resolved).
    Fib,
    /// Every encapsulated frame goes to this MAC (a router); no lookup on the packet
    /// path (see the data-plane benchmark).
    Gateway {
        /// The gateway's MAC.
        mac: [u8; 6],
    },
}

/// A backend's administrative state.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// In the table with its weight.
    Active,
    /// Out of the table (as weight 0); its established flows stay.
    Drain,
    /// Out of the table; its flows are re-picked on the current table (as if removed).
    Down,
}

impl fmt::Display for BackendState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendState::Active => "active",
            BackendState::Drain => "drain",
            BackendState::Down => "down",
        })
    }
}

/// A backend of a VIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendConfig {
    /// Identity (address; ports are rejected with IP-in-IP encapsulation).
    pub key: BackendKey,
    /// Relative weight.
    pub weight: u32,
    /// Administrative state.
    pub state: BackendState,
}

/// A VIP and its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipConfig {
    /// The VIP.
    pub vip: Vip,
    /// Maglev table size (prime).
    pub table_size: u32,
    /// The backends are IPv6 (for an IPv4 VIP: IPv4-in-IPv6); else of the VIP's family.
    pub ipv6_backends: bool,
    /// How packets reach the backends (`vip.encap`).
    pub encap: Encapsulation,
    /// Client prefixes allowed to reach the VIP, sorted; empty: every client.
    pub allowed_sources: Vec<Prefix>,
    /// The fast path is on (asked for, and this instance is not a fleet member:
    /// `[announce]` off; `lb_common::fastpath::enabled`).
    pub fast_path: bool,
    /// The backends' second chance (`vip.second_chance`, GUE only): a TCP miss on a
    /// dirty slot carries the slot's other possible owner as a candidate.
    pub second_chance: bool,
    /// The fields of a flow that pick its backend (`vip.hash`, `vip.hash_source_prefix`)
    /// and the affinity timeout (`vip.persistence_timeout_secs`).
    pub hash: lb_common::hash_fields::HashFields,
    /// Backends, in file order.
    pub backends: Vec<BackendConfig>,
    /// Health checks of its backends, its multi-failure policy.
    pub health: VipProbes,
}

/// The ICMP messages the data plane sends (`[icmp]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpConfig {
    /// Answer a VIP packet too big once encapsulated (and not to be fragmented) with
    /// ICMP "fragmentation needed" / ICMPv6 "packet too big".
    pub too_big: bool,
    /// Answer echo requests to VIP addresses.
    pub echo: bool,
    /// Messages per second, per CPU and kind (too big, echo replies).
    pub rate_limit: u32,
    /// Messages a burst may send at once.
    pub burst: u32,
}

/// Per-flow outer headers (`[encap]`'s optional keys). The default is the keys' defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OuterConfig {
    /// Outer IPv4 sources: this prefix, host bits from the flow hash.
    pub source_prefix_v4: Option<Prefix>,
    /// Outer IPv6 sources: this prefix, host bits (at most the low 32) from the flow
    /// hash.
    pub source_prefix_v6: Option<Prefix>,
    /// Outer IPv6 flow label from the flow hash (RFC 6438), not copied from the inner
    /// packet.
    pub flow_label_hash: bool,
    /// UDP destination port of GUE (`encap.gue_port`, host order, 1..=65535).
    pub gue_port: u16,
}

impl Default for OuterConfig {
    fn default() -> Self {
        Self {
            source_prefix_v4: None,
            source_prefix_v6: None,
            flow_label_hash: false,
            gue_port: crate::defaults::GUE_PORT,
        }
    }
}

/// How a VIP's packets reach its backends (`vip.encap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encapsulation {
    /// IP-in-IP: IPv4-in-IPv4 (RFC 2003), IPv6-in-IPv6 and IPv4-in-IPv6 (RFC 2473).
    #[default]
    Ipip,
    /// Generic UDP Encapsulation (draft-ietf-intarea-gue, variant 0) to
    /// `encap.gue_port`.
    Gue,
}

impl fmt::Display for Encapsulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encapsulation::Ipip => "ipip",
            Encapsulation::Gue => "gue",
        })
    }
}

/// When the daemon reloads its file (`reload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadMode {
    /// On every write of the file (watched), and on SIGHUP.
    Auto,
    /// Only on SIGHUP: a write is logged and left for the operator's signal.
    Signal,
}

impl ReloadMode {
    /// The key's value: `auto` or `signal`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Signal => "signal",
        }
    }
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Interface the program attaches to.
    pub interface: String,
    /// Attach mode.
    pub xdp_mode: XdpMode,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// Where the datapath is pinned (bpffs, host's view).
    pub pin_dir: PathBuf,
    /// Where runtime changes are kept.
    pub state_dir: PathBuf,
    /// Detach the datapath and remove its pins at exit.
    pub detach_on_exit: bool,
    /// When the file is reloaded.
    pub reload: ReloadMode,
    /// MTU of the LB → backend path (bytes).
    pub mtu: u16,
    /// Flow-hash seed.
    pub hash_seed: u32,
    /// Maglev permutation seed.
    pub maglev_seed: u64,
    /// Cap on the memory of all table maps (bytes).
    pub max_table_memory: u64,
    /// Outer source for IPv4 VIPs.
    pub source_v4: Option<Ipv4Addr>,
    /// Outer source for IPv6 VIPs.
    pub source_v6: Option<Ipv6Addr>,
    /// Next-hop mode.
    pub nexthop: Nexthop,
    /// Capacity of each established-flow conntrack map (IPv4, IPv6).
    pub ct_capacity: u32,
    /// SYN cache slots (a power of two), split into one part per CPU on an interface with
    /// several receive queues (`lb_common::syn_cache`).
    pub ct_syn_capacity: u32,
    /// UDP idle timeout.
    pub udp_timeout: Duration,
    /// New conntrack pins per second per CPU (0: no limit).
    pub new_pin_rate: u32,
    /// `fib` next hop: how long each CPU reuses a backend's FIB lookup (zero: every
    /// packet looks it up).
    pub nexthop_cache: Duration,
    /// Fragment tracking entries (datagrams whose first fragment was seen).
    pub frag_capacity: u32,
    /// Affinity pins (`AFFINITY`: clients of VIPs with a persistence timeout).
    pub affinity_capacity: u32,
    /// The fast path's exceptions (`EXCEPTIONS`: pins the miss rule does not give again).
    pub exceptions_capacity: u32,
    /// The fast path's cleaning of dirty table slots.
    pub cleaning: CleaningConfig,
    /// The ICMP messages the data plane sends.
    pub icmp: IcmpConfig,
    /// Per-flow outer headers.
    pub outer: OuterConfig,
    /// The metrics endpoint and the live-connection count (`[metrics]`).
    pub metrics: MetricsConfig,
    /// The health checker's settings.
    pub health: HealthChecker,
    /// Whether and where the servable VIP addresses are published for BGP.
    pub announce: Announce,
    /// The remote HTTPS API (`[api]`).
    pub api: Api,
    /// VIPs in file order.
    pub vips: Vec<VipConfig>,
}

/// The fast path's cleaning (`conntrack.tcp_idle_secs`, `quiet_secs`,
/// `clean_interval_secs`; rules C1-C5 of `lb_common::fastpath`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleaningConfig {
    /// The established-TCP idle time: a pin not seen this long blocks no cleaning.
    pub tcp_idle: Duration,
    /// A dirty slot stays dirty this long after its last change (at least `tcp_idle`).
    pub quiet: Duration,
    /// Period of the cleaning walk.
    pub interval: Duration,
}

/// `[metrics]`: the Prometheus endpoint and the periodic conntrack walk behind the live
/// connection counts of `lb status`, `lb stats` and the endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where the endpoint listens (`None`: disabled).
    pub listen: Option<std::net::SocketAddr>,
    /// Period of the conntrack walk.
    pub connections_interval: Duration,
    /// A connection idle longer than this counts as idle.
    pub idle: Duration,
    /// How long a removed backend's series stay exported with `state="removed"`.
    pub removed_retention: Duration,
}

/// A configuration problem: where (key path, line) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Key path, e.g. `vip[1].backend[2].weight` (indices from 0); empty for the file
    /// as a whole.
    pub path: String,
    /// What is wrong, naming the value.
    pub message: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)?;
        } else {
            write!(f, "{}: {}", self.path, self.message)?;
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// Every problem found in a configuration (at least one).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A loaded configuration with the warnings it raised.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Advice that does not stop the configuration (e.g. a VIP whose backends all have
    /// weight 0).
    pub warnings: Vec<String>,
}

impl Config {
    /// Parses and validates TOML text.
    ///
    /// # Errors
    /// Every problem found, each with its key path.
    pub fn from_toml(text: &str) -> Result<Loaded, ConfigErrors> {
        validate::parse(text)
    }

    /// Reads, parses and validates the file at `path`.
    ///
    /// # Errors
    /// An unreadable file, or every problem found.
    pub fn load(path: &Path) -> Result<Loaded, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: String::new(),
                message: format!("cannot read {}: {e}", path.display()),
                line: None,
            }])
        })?;
        Self::from_toml(&text)
    }

    /// The configured VIP `vip`, if any.
    pub fn vip(&self, vip: &Vip) -> Option<&VipConfig> {
        self.vips.iter().find(|v| v.vip == *vip)
    }
}
