//! From [`FileConfig`] to [`Config`]: parse errors with their key path and line, then
//! every semantic check, collected (not just the first).
//!
//! Semantic rules, with the shared cases they come from (../shared/cases):
//! - table sizes: prime, at most `maglev::MAX_TABLE_SIZE`, not below the VIP's backend
//!   count (BR-04);
//! - backends: unique per VIP after canonicalisation (`::ffff:a.b.c.d` is `a.b.c.d`),
//!   no port (IP-in-IP keeps the VIP's port), same family as the VIP, never the VIP or
//!   the LB's own address (a forwarding loop) (BR-06);
//! - weights are integers in `0..=u32::MAX` (BR-03.T4); all-zero weights are a warning
//!   and the VIP drops new flows (BR-03.T3, BR-08);
//! - the table maps' total memory stays under `max_table_memory_mib` (BR-10.T3).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    path::PathBuf,
    time::Duration,
};

use lb_common::maps::{MAX_BACKENDS, MAX_VIPS};

use super::{
    BackendConfig, BackendState, Config, ConfigError, ConfigErrors, Loaded, Nexthop, Protocol, Vip,
    VipConfig, XdpMode,
    file::{FileConfig, UInt},
};
use crate::{
    defaults,
    maglev::{self, BackendKey},
};

/// Bytes one table slot takes in the kernel (a `u32` in an 8-byte array cell).
const TABLE_SLOT_BYTES: u64 = 8;
/// Header entries of a table map (size and generation).
const TABLE_HEADER: u64 = lb_common::maps::TABLE_HEADER_LEN as u64;

const CT_CAPACITY_RANGE: (u32, u32) = (1_024, 64 << 20);
/// SYN cache slots (64 bytes each): 16 KiB to 256 MiB.
const CT_SYN_CAPACITY_RANGE: (u32, u32) = (256, 1 << 22);
const UDP_TIMEOUT_RANGE: (u32, u32) = (1, 86_400);
/// `nexthop.cache_ms`: 0 (look the FIB up for every packet) to 10 s.
const NEXTHOP_CACHE_MS_RANGE: (u32, u32) = (0, 10_000);
const MTU_RANGE: (u16, u16) = (576, 65_535);
/// IPv6 links carry at least 1,280 bytes (RFC 8200 section 5).
const IPV6_MIN_MTU: u16 = 1_280;
/// Linux interface names are at most 15 bytes (`IFNAMSIZ` - 1).
const IFNAME_MAX: usize = 15;

/// Parses and validates `text`.
pub(super) fn parse(text: &str) -> Result<Loaded, ConfigErrors> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            message: e.message().to_owned(),
            line: e.span().map(|s| line_of(text, s.start)),
        }])
    })?;
    let file: FileConfig = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ConfigErrors(vec![ConfigError {
            path: if path == "." { String::new() } else { path },
            message: inner.message().to_owned(),
            line: inner.span().map(|s| line_of(text, s.start)),
        }])
    })?;
    validate(file)
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

/// Collected problems and warnings.
#[derive(Default)]
struct Report {
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
}

impl Report {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
            line: None,
        });
    }
}

fn in_range<T: PartialOrd + Copy + std::fmt::Display>(
    report: &mut Report,
    path: &str,
    value: T,
    (min, max): (T, T),
) -> T {
    if value < min || value > max {
        report.error(
            path,
            format!("expected a value from {min} to {max}, got {value}"),
        );
    }
    value
}

fn uint<T: Copy>(v: Option<UInt<T>>, default: T) -> T {
    v.map_or(default, |u| u.0)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn validate(file: FileConfig) -> Result<Loaded, ConfigErrors> {
    let mut r = Report::default();

    let interface = file.interface.clone();
    if interface.is_empty() || interface.len() > IFNAME_MAX || interface.contains(['/', ' ']) {
        r.error(
            "interface",
            format!(
                "expected an interface name of 1 to {IFNAME_MAX} characters, got {interface:?}"
            ),
        );
    }
    let xdp_mode = match file.xdp_mode.as_deref().unwrap_or(defaults::XDP_MODE) {
        "auto" => XdpMode::Auto,
        "native" => XdpMode::Native,
        "skb" => XdpMode::Skb,
        other => {
            r.error(
                "xdp_mode",
                format!("expected \"auto\", \"native\" or \"skb\", got {other:?}"),
            );
            XdpMode::Auto
        }
    };
    let control_socket = PathBuf::from(
        file.control_socket
            .as_deref()
            .unwrap_or(defaults::CONTROL_SOCKET),
    );
    if !control_socket.is_absolute() {
        r.error(
            "control_socket",
            format!(
                "expected an absolute path, got {:?}",
                control_socket.display().to_string()
            ),
        );
    }
    let mtu = in_range(&mut r, "mtu", uint(file.mtu, defaults::MTU), MTU_RANGE);
    let hash_seed = uint(file.hash_seed, defaults::HASH_SEED);
    let maglev_seed = uint(file.maglev_seed, defaults::MAGLEV_SEED);
    let max_table_mib = uint(file.max_table_memory_mib, defaults::MAX_TABLE_MEMORY_MIB);
    if max_table_mib == 0 {
        r.error("max_table_memory_mib", "expected at least 1, got 0");
    }

    let source_v4 = file.encap.source_v4.as_deref().and_then(|t| {
        match t.parse::<IpAddr>().map(|a| a.to_canonical()) {
            Ok(IpAddr::V4(a)) => Some(a),
            _ => {
                r.error(
                    "encap.source_v4",
                    format!("expected an IPv4 address, got {t:?}"),
                );
                None
            }
        }
    });
    let source_v6 = file
        .encap
        .source_v6
        .as_deref()
        .and_then(|t| match t.parse::<IpAddr>() {
            Ok(IpAddr::V6(a)) if a.to_ipv4_mapped().is_none() => Some(a),
            _ => {
                r.error(
                    "encap.source_v6",
                    format!("expected an IPv6 address, got {t:?}"),
                );
                None
            }
        });

    let nexthop = match (
        file.nexthop
            .mode
            .as_deref()
            .unwrap_or(defaults::NEXTHOP_MODE),
        &file.nexthop.gateway_mac,
    ) {
        ("fib", None) => Nexthop::Fib,
        ("fib", Some(_)) => {
            r.error(
                "nexthop.gateway_mac",
                "only used with mode = \"gateway\" (the FIB finds the MAC in fib mode)",
            );
            Nexthop::Fib
        }
        ("gateway", Some(mac)) => match parse_mac(mac) {
            Some(m) if m[0] & 1 == 0 && m != [0; 6] => Nexthop::Gateway { mac: m },
            _ => {
                r.error(
                    "nexthop.gateway_mac",
                    format!("expected a unicast MAC like \"02:00:00:00:00:fe\", got {mac:?}"),
                );
                Nexthop::Fib
            }
        },
        ("gateway", None) => {
            r.error("nexthop.gateway_mac", "required with mode = \"gateway\"");
            Nexthop::Fib
        }
        (other, _) => {
            r.error(
                "nexthop.mode",
                format!("expected \"fib\" or \"gateway\", got {other:?}"),
            );
            Nexthop::Fib
        }
    };

    let nexthop_cache_ms = in_range(
        &mut r,
        "nexthop.cache_ms",
        uint(file.nexthop.cache_ms, defaults::NEXTHOP_CACHE_MS),
        NEXTHOP_CACHE_MS_RANGE,
    );
    if file.nexthop.cache_ms.is_some() && matches!(nexthop, Nexthop::Gateway { .. }) {
        r.error(
            "nexthop.cache_ms",
            "only used with mode = \"fib\" (gateway mode looks nothing up)",
        );
    }

    let ct_capacity = in_range(
        &mut r,
        "conntrack.capacity",
        uint(file.conntrack.capacity, defaults::CT_CAPACITY),
        CT_CAPACITY_RANGE,
    );
    let ct_syn_capacity = in_range(
        &mut r,
        "conntrack.syn_capacity",
        uint(file.conntrack.syn_capacity, defaults::CT_SYN_CAPACITY),
        CT_SYN_CAPACITY_RANGE,
    );
    if !ct_syn_capacity.is_power_of_two() {
        r.error(
            "conntrack.syn_capacity",
            format!(
                "expected a power of two (SYN cache slots), got {ct_syn_capacity}; the nearest are {} and {}",
                ct_syn_capacity.checked_next_power_of_two().map_or(0, |n| n / 2),
                ct_syn_capacity.checked_next_power_of_two().unwrap_or(0)
            ),
        );
    }
    let udp_timeout_secs = in_range(
        &mut r,
        "conntrack.udp_timeout_secs",
        uint(file.conntrack.udp_timeout_secs, defaults::UDP_TIMEOUT_SECS),
        UDP_TIMEOUT_RANGE,
    );

    if file.vips.len() > MAX_VIPS as usize {
        r.error(
            "vip",
            format!(
                "{} VIPs exceed the data plane's maximum of {MAX_VIPS}",
                file.vips.len()
            ),
        );
    }
    let mut seen_vips: HashMap<Vip, usize> = HashMap::new();
    let mut vips = Vec::with_capacity(file.vips.len());
    let mut total_backends = 0usize;
    let mut table_bytes = 0u64;
    for (i, v) in file.vips.iter().enumerate() {
        let path = format!("vip[{i}]");
        let addr = match v.address.parse::<IpAddr>() {
            Ok(a) => a.to_canonical(),
            Err(_) => {
                r.error(
                    format!("{path}.address"),
                    format!("expected an IP address, got {:?}", v.address),
                );
                continue;
            }
        };
        if v.port.0 == 0 {
            r.error(
                format!("{path}.port"),
                "expected a port from 1 to 65535, got 0",
            );
        }
        let proto = match v.protocol.parse::<Protocol>() {
            Ok(p) => p,
            Err(e) => {
                r.error(format!("{path}.protocol"), e);
                continue;
            }
        };
        let vip = Vip::new(addr, v.port.0, proto);
        if let Some(first) = seen_vips.insert(vip, i) {
            r.error(&path, format!("duplicate VIP {vip} (also vip[{first}])"));
        }
        let lb_source: Option<IpAddr> = match addr {
            IpAddr::V4(_) => {
                if source_v4.is_none() && file.encap.source_v4.is_none() {
                    r.error(
                        "encap.source_v4",
                        format!("required by {path} ({vip}): the outer IPv4 source address"),
                    );
                }
                source_v4.map(IpAddr::V4)
            }
            IpAddr::V6(_) => {
                if source_v6.is_none() && file.encap.source_v6.is_none() {
                    r.error(
                        "encap.source_v6",
                        format!("required by {path} ({vip}): the outer IPv6 source address"),
                    );
                }
                if mtu < IPV6_MIN_MTU {
                    r.error(
                        "mtu",
                        format!("IPv6 VIP {vip} needs at least {IPV6_MIN_MTU}, got {mtu}"),
                    );
                }
                source_v6.map(IpAddr::V6)
            }
        };
        let table_size = uint(v.table_size, defaults::TABLE_SIZE);
        if let Err(e) = maglev::validate_table_size(table_size) {
            r.error(format!("{path}.table_size"), e.to_string());
        }
        table_bytes += (u64::from(table_size) + TABLE_HEADER) * TABLE_SLOT_BYTES;

        let mut backends = Vec::with_capacity(v.backends.len());
        let mut seen: BTreeMap<BackendKey, usize> = BTreeMap::new();
        for (j, b) in v.backends.iter().enumerate() {
            let bpath = format!("{path}.backend[{j}]");
            let key = match b.address.parse::<BackendKey>() {
                Ok(k) => k,
                Err(e) => {
                    r.error(format!("{bpath}.address"), e.to_string());
                    continue;
                }
            };
            if key.port().is_some() {
                r.error(
                    format!("{bpath}.address"),
                    format!(
                        "backend port not supported with IP-in-IP encapsulation (the VIP's port \
                         is kept), got {:?}",
                        b.address
                    ),
                );
            }
            if key.ip().is_ipv4() != addr.is_ipv4() {
                r.error(
                    format!("{bpath}.address"),
                    format!("backend {key} is not of the same address family as VIP {vip}"),
                );
            }
            if key.ip() == addr || Some(key.ip()) == lb_source {
                r.error(
                    format!("{bpath}.address"),
                    format!("backend {key} is the VIP or the LB's own address (a forwarding loop)"),
                );
            }
            if let Some(first) = seen.insert(key, j) {
                r.error(
                    format!("{bpath}.address"),
                    format!("duplicate backend {key} in VIP {vip} (also backend[{first}])"),
                );
            }
            let state = match b.state.as_deref().unwrap_or(defaults::BACKEND_STATE) {
                "active" => BackendState::Active,
                "drain" => BackendState::Drain,
                "down" => BackendState::Down,
                other => {
                    r.error(
                        format!("{bpath}.state"),
                        format!("expected \"active\", \"drain\" or \"down\", got {other:?}"),
                    );
                    BackendState::Active
                }
            };
            backends.push(BackendConfig {
                key,
                weight: uint(b.weight, defaults::WEIGHT),
                state,
            });
        }
        total_backends += backends.len();
        let in_table = backends
            .iter()
            .filter(|b| b.state == BackendState::Active && b.weight > 0)
            .count();
        if usize::try_from(table_size).is_ok_and(|m| m < in_table) && table_size >= 2 {
            r.error(
                format!("{path}.table_size"),
                format!("table_size {table_size} is smaller than backend count {in_table}"),
            );
        }
        if in_table == 0 {
            r.warnings.push(format!(
                "VIP {vip} has no backend with weight > 0: new flows to it are dropped"
            ));
        }
        vips.push(VipConfig {
            vip,
            table_size,
            backends,
        });
    }
    if total_backends >= MAX_BACKENDS as usize {
        r.error(
            "vip",
            format!(
                "{total_backends} backends in all exceed the data plane's maximum of {}",
                MAX_BACKENDS - 1
            ),
        );
    }
    let limit = u64::from(max_table_mib) << 20;
    if table_bytes > limit {
        r.error(
            "max_table_memory_mib",
            format!(
                "table memory {} MiB exceeds limit {max_table_mib} MiB (each slot takes {TABLE_SLOT_BYTES} bytes in the kernel)",
                table_bytes.div_ceil(1 << 20)
            ),
        );
    }
    if !r.errors.is_empty() {
        return Err(ConfigErrors(r.errors));
    }
    Ok(Loaded {
        config: Config {
            interface,
            xdp_mode,
            control_socket,
            mtu,
            hash_seed,
            maglev_seed,
            max_table_memory: limit,
            source_v4,
            source_v6,
            nexthop,
            ct_capacity,
            ct_syn_capacity,
            udp_timeout: Duration::from_secs(u64::from(udp_timeout_secs)),
            nexthop_cache: Duration::from_millis(u64::from(nexthop_cache_ms)),
            vips,
        },
        warnings: r.warnings,
    })
}

#[cfg(test)]
mod tests;
