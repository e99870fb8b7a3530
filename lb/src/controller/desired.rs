//! [`Desired`]: the state the controller drives the data plane to — the configuration
//! file's VIPs and backends plus runtime changes made through the control socket — and
//! the operations that edit it.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use lb_common::hash_fields::HashFields;
use lb_common::types::{
    CONFIG_FLOW_LABEL_HASH, CONFIG_ICMP_ECHO, CONFIG_ICMP_TOO_BIG, CONFIG_SOURCE_PREFIX_V4,
    CONFIG_SOURCE_PREFIX_V6, CONFIG_SOURCE_RANGES, CONFIG_VALID, LbConfig, NEXTHOP_FIB,
    NEXTHOP_GATEWAY,
};

use crate::config::{BackendState, Config, Encapsulation, IcmpConfig, Nexthop, OuterConfig, Vip};
use lb_dataplane::prefix::Prefix;
use lb_health::policy::FailurePolicy;
use lb_maglev::BackendKey;
use lb_maglev::flow::addr_bytes;

/// Settings that apply to every VIP (the data plane's `CONFIG` element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Globals {
    /// MTU of the LB → backend path.
    pub mtu: u16,
    /// Flow-hash seed.
    pub hash_seed: u32,
    /// Outer IPv4 source.
    pub source_v4: Option<Ipv4Addr>,
    /// Outer IPv6 source.
    pub source_v6: Option<Ipv6Addr>,
    /// Next-hop mode.
    pub nexthop: Nexthop,
    /// MAC of the interface (source MAC in gateway mode).
    pub if_mac: [u8; 6],
    /// UDP idle timeout.
    pub udp_timeout: Duration,
    /// New conntrack pins per second per CPU (0: no limit).
    pub new_pin_rate: u32,
    /// How long each CPU reuses a backend's FIB lookup.
    pub nexthop_cache: Duration,
    /// The ICMP messages the data plane sends.
    pub icmp: IcmpConfig,
    /// Per-flow outer headers.
    pub outer: OuterConfig,
    /// Whether some VIP has allowed source prefixes (the data plane checks them only
    /// then).
    pub source_ranges: bool,
}

impl Globals {
    /// The `CONFIG` map element, but for `syn_cache_mask` and `syn_cache_part_bits`: the
    /// data plane that sized `SYN_CACHE` writes those (see [`lb_dataplane::Dataplane::set_config`]).
    pub fn lb_config(&self) -> LbConfig {
        let (src_v6, _) = self
            .source_v6
            .map_or(([0; 16], 0), |a| addr_bytes(a.into()));
        let (nexthop_mode, gateway_mac) = match self.nexthop {
            Nexthop::Fib => (NEXTHOP_FIB, [0; 6]),
            Nexthop::Gateway { mac } => (NEXTHOP_GATEWAY, mac),
        };
        let config = LbConfig {
            src_v6,
            src_v4: self.source_v4.map_or([0; 4], |a| a.octets()),
            if_mac: self.if_mac,
            gateway_mac,
            mtu: self.mtu,
            nexthop_mode,
            flags: CONFIG_VALID,
            hash_seed: self.hash_seed,
            udp_timeout_ns: u64::try_from(self.udp_timeout.as_nanos()).unwrap_or(u64::MAX),
            nexthop_cache_ns: u64::try_from(self.nexthop_cache.as_nanos()).unwrap_or(u64::MAX),
            new_pin_interval_ns: new_pin_interval_ns(self.new_pin_rate),
            new_pin_burst_ns: u64::from(crate::defaults::NEW_PIN_BURST_MS) * 1_000_000,
            ..LbConfig::default()
        };
        with_options(config, self)
    }
}

/// `config` with the flags and fields of the optional behaviour: ICMP, source lists,
/// per-flow outer headers.
fn with_options(mut config: LbConfig, g: &Globals) -> LbConfig {
    let icmp = &g.icmp;
    for (on, flag) in [
        (icmp.too_big, CONFIG_ICMP_TOO_BIG),
        (icmp.echo, CONFIG_ICMP_ECHO),
        (g.source_ranges, CONFIG_SOURCE_RANGES),
        (g.outer.flow_label_hash, CONFIG_FLOW_LABEL_HASH),
    ] {
        if on {
            config.flags |= flag;
        }
    }
    // GCRA: the emission interval and how far a burst runs ahead of it.
    let interval = 1_000_000_000 / u64::from(icmp.rate_limit.max(1));
    config.icmp_interval_ns = interval;
    config.icmp_burst_ns = interval * u64::from(icmp.burst.max(1) - 1);
    if let Some(p) = g.outer.source_prefix_v4 {
        let (addr, _) = addr_bytes(p.addr());
        let (mask, _) = addr_bytes(p.host_mask());
        config.flags |= CONFIG_SOURCE_PREFIX_V4;
        config.src_prefix_v4 = [addr[0], addr[1], addr[2], addr[3]];
        config.src_host_mask_v4 = u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]);
    }
    if let Some(p) = g.outer.source_prefix_v6 {
        let (addr, _) = addr_bytes(p.addr());
        let (mask, _) = addr_bytes(p.host_mask());
        config.flags |= CONFIG_SOURCE_PREFIX_V6;
        config.src_prefix_v6 = addr;
        // Only the last word's host bits vary; those above stay the prefix's (0).
        config.src_host_mask_v6 = u32::from_ne_bytes([mask[12], mask[13], mask[14], mask[15]]);
    }
    config
}

/// The emission interval (ns) of `rate` new pins per second (0: no limit, and a rate
/// above a billion is one pin per ns).
fn new_pin_interval_ns(rate: u32) -> u64 {
    if rate == 0 {
        0
    } else {
        (1_000_000_000 / u64::from(rate)).max(1)
    }
}

/// A backend's desired weight and state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackendSpec {
    /// Relative weight.
    pub weight: u32,
    /// Administrative state.
    pub state: BackendState,
}

/// A VIP's desired table size and backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSpec {
    /// Maglev table size.
    pub table_size: u32,
    /// The backends are IPv6 (for an IPv4 VIP: IPv4-in-IPv6).
    pub ipv6_backends: bool,
    /// GUE destination port of the VIP's backends (host order); 0: IP-in-IP. Written
    /// into each backend entry ([`BackendEntry::gue_port`](lb_common::types::BackendEntry::gue_port)),
    /// which the XDP program and the tunnel-mode probes read.
    pub gue_port: u16,
    /// Allowed client prefixes, sorted; empty: every client.
    pub allowed_sources: Vec<Prefix>,
    /// The fast path is on (`VIP_FAST_PATH`).
    pub fast_path: bool,
    /// Misses on dirty slots carry second-chance candidates (`VIP_SECOND_CHANCE`).
    pub second_chance: bool,
    /// The fields of a flow that pick its table slot (`lb_common::hash_fields`).
    pub hash: HashFields,
    /// Backends by key.
    pub backends: BTreeMap<BackendKey, BackendSpec>,
    /// What the VIP does when its backends fail health checks (`[vip.health]`).
    pub policy: FailurePolicy,
}

/// The whole desired state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Global settings.
    pub globals: Globals,
    /// Maglev permutation seed.
    pub maglev_seed: u64,
    /// Cap on all table maps' memory (bytes).
    pub max_table_memory: u64,
    /// VIPs.
    pub vips: BTreeMap<Vip, VipSpec>,
}

/// Why a runtime change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The VIP is not configured.
    #[error("VIP {0} is not configured")]
    UnknownVip(Vip),
    /// The backend is not in the VIP.
    #[error("backend {backend} is not in VIP {vip}")]
    UnknownBackend {
        /// The VIP.
        vip: Vip,
        /// The backend.
        backend: BackendKey,
    },
    /// The backend is already in the VIP: the answer names the verb that changes it.
    #[error(
        "backend {backend} is already in VIP {vip} ({} (weight {})); to change its weight: \
         lb backend weight --vip {vip} --backend {backend} N",
        .now.state,
        .now.weight
    )]
    DuplicateBackend {
        /// The VIP.
        vip: Vip,
        /// The backend.
        backend: BackendKey,
        /// What it is now.
        now: BackendSpec,
    },
    /// The backend cannot belong to the VIP.
    #[error("backend {backend} cannot be added to VIP {vip}: {reason}")]
    Invalid {
        /// The VIP.
        vip: Vip,
        /// The backend.
        backend: BackendKey,
        /// Why.
        reason: String,
    },
}

impl Desired {
    /// The desired state of a configuration; `if_mac` is the interface's MAC.
    pub fn from_config(config: &Config, if_mac: [u8; 6]) -> Self {
        let vips = config
            .vips
            .iter()
            .map(|v| {
                let backends = v
                    .backends
                    .iter()
                    .map(|b| {
                        (
                            b.key,
                            BackendSpec {
                                weight: b.weight,
                                state: b.state,
                            },
                        )
                    })
                    .collect();
                (
                    v.vip,
                    VipSpec {
                        table_size: v.table_size,
                        ipv6_backends: v.ipv6_backends,
                        gue_port: match v.encap {
                            Encapsulation::Ipip => 0,
                            Encapsulation::Gue => config.outer.gue_port,
                        },
                        allowed_sources: v.allowed_sources.clone(),
                        fast_path: v.fast_path,
                        second_chance: v.second_chance,
                        hash: v.hash,
                        backends,
                        policy: v.health.policy(),
                    },
                )
            })
            .collect();
        Self {
            globals: Globals {
                mtu: config.mtu,
                hash_seed: config.hash_seed,
                source_v4: config.source_v4,
                source_v6: config.source_v6,
                nexthop: config.nexthop,
                if_mac,
                udp_timeout: config.udp_timeout,
                new_pin_rate: config.new_pin_rate,
                nexthop_cache: config.nexthop_cache,
                icmp: config.icmp,
                outer: config.outer,
                source_ranges: config.vips.iter().any(|v| !v.allowed_sources.is_empty()),
            },
            maglev_seed: config.maglev_seed,
            max_table_memory: config.max_table_memory,
            vips,
        }
    }

    fn vip_mut(&mut self, vip: &Vip) -> Result<&mut VipSpec, EditError> {
        self.vips.get_mut(vip).ok_or(EditError::UnknownVip(*vip))
    }

    /// Adds `backend` to `vip` with `weight`, active.
    ///
    /// # Errors
    /// Unknown VIP, backend already present, a port, another family, or the VIP's or
    /// LB's own address.
    pub fn add_backend(
        &mut self,
        vip: &Vip,
        backend: BackendKey,
        weight: u32,
    ) -> Result<(), EditError> {
        let invalid = |reason: &str| EditError::Invalid {
            vip: *vip,
            backend,
            reason: reason.to_owned(),
        };
        if backend.port().is_some() {
            return Err(invalid(
                "backend port not supported with IP-in-IP encapsulation",
            ));
        }
        let ipv6_backends = self
            .vips
            .get(vip)
            .map_or(vip.addr.is_ipv6(), |spec| spec.ipv6_backends);
        if backend.ip().is_ipv6() != ipv6_backends {
            return Err(invalid(if ipv6_backends == vip.addr.is_ipv6() {
                "not of the VIP's address family"
            } else {
                "not an IPv6 address (the VIP's backends are IPv6)"
            }));
        }
        let lb_addr = match backend.ip() {
            std::net::IpAddr::V4(_) => self.globals.source_v4.map(std::net::IpAddr::V4),
            std::net::IpAddr::V6(_) => self.globals.source_v6.map(std::net::IpAddr::V6),
        };
        if backend.ip() == vip.addr || Some(backend.ip()) == lb_addr {
            return Err(invalid(
                "it is the VIP or the LB's own address (a forwarding loop)",
            ));
        }
        let spec = self.vip_mut(vip)?;
        if let Some(now) = spec.backends.get(&backend) {
            return Err(EditError::DuplicateBackend {
                vip: *vip,
                backend,
                now: *now,
            });
        }
        spec.backends.insert(
            backend,
            BackendSpec {
                weight,
                state: BackendState::Active,
            },
        );
        Ok(())
    }

    /// Removes `backend` from `vip`.
    ///
    /// # Errors
    /// Unknown VIP or backend.
    pub fn remove_backend(&mut self, vip: &Vip, backend: &BackendKey) -> Result<(), EditError> {
        self.vip_mut(vip)?
            .backends
            .remove(backend)
            .map(|_| ())
            .ok_or(EditError::UnknownBackend {
                vip: *vip,
                backend: *backend,
            })
    }

    /// Sets `backend`'s state (and weight, when given).
    ///
    /// # Errors
    /// Unknown VIP or backend.
    pub fn set_backend(
        &mut self,
        vip: &Vip,
        backend: &BackendKey,
        state: BackendState,
        weight: Option<u32>,
    ) -> Result<(), EditError> {
        let spec =
            self.vip_mut(vip)?
                .backends
                .get_mut(backend)
                .ok_or(EditError::UnknownBackend {
                    vip: *vip,
                    backend: *backend,
                })?;
        spec.state = state;
        if let Some(w) = weight {
            spec.weight = w;
        }
        Ok(())
    }

    /// Sets `backend`'s weight, keeping its state.
    ///
    /// # Errors
    /// Unknown VIP or backend.
    pub fn set_weight(
        &mut self,
        vip: &Vip,
        backend: &BackendKey,
        weight: u32,
    ) -> Result<(), EditError> {
        let state = self
            .vips
            .get(vip)
            .ok_or(EditError::UnknownVip(*vip))?
            .backends
            .get(backend)
            .ok_or(EditError::UnknownBackend {
                vip: *vip,
                backend: *backend,
            })?
            .state;
        self.set_backend(vip, backend, state, Some(weight))
    }

    /// `backend`'s spec in `vip`, if it is there.
    pub fn backend(&self, vip: &Vip, backend: &BackendKey) -> Option<&BackendSpec> {
        self.vips.get(vip).and_then(|v| v.backends.get(backend))
    }
}
