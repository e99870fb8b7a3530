//! The `[[vip]]` tables and their `[[vip.backend]]` tables, and the limits on all of them
//! together (VIP and backend counts, table memory).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
};

use lb_common::maps::{MAX_BACKENDS, MAX_VIPS};

use super::{Encap, Report, health, uint};
use crate::{
    config::{
        BackendConfig, BackendState, Protocol, Vip, VipConfig,
        file::{BackendFile, VipFile},
    },
    dataplane, defaults,
    maglev::{self, BackendKey},
};

/// IPv6 links carry at least 1,280 bytes (RFC 8200 section 5).
const IPV6_MIN_MTU: u16 = 1_280;

/// Validates every VIP (in file order, indices from 0), with the outer sources of
/// `encap` and the path MTU `mtu`.
pub(super) fn vips(files: &[VipFile], encap: &Encap, mtu: u16, r: &mut Report) -> Vec<VipConfig> {
    if files.len() > MAX_VIPS as usize {
        r.error(
            "vip",
            format!(
                "{} VIPs exceed the data plane's maximum of {MAX_VIPS}",
                files.len()
            ),
        );
    }
    let mut seen: HashMap<Vip, usize> = HashMap::new();
    let mut vips = Vec::with_capacity(files.len());
    for (i, v) in files.iter().enumerate() {
        vips.extend(vip(i, v, encap, mtu, &mut seen, r));
    }
    let backends: usize = vips.iter().map(|v| v.backends.len()).sum();
    if backends >= MAX_BACKENDS as usize {
        r.error(
            "vip",
            format!(
                "{backends} backends in all exceed the data plane's maximum of {}",
                MAX_BACKENDS - 1
            ),
        );
    }
    vips
}

/// `vip[i]`, given the VIPs `seen` before it (VIP → index); `None` when its address or
/// protocol is unreadable (nothing else about it can be checked then).
fn vip(
    i: usize,
    v: &VipFile,
    encap: &Encap,
    mtu: u16,
    seen: &mut HashMap<Vip, usize>,
    r: &mut Report,
) -> Option<VipConfig> {
    let path = format!("vip[{i}]");
    let Ok(addr) = v.address.parse::<IpAddr>().map(|a| a.to_canonical()) else {
        r.error(
            format!("{path}.address"),
            format!("expected an IP address, got {:?}", v.address),
        );
        return None;
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
            return None;
        }
    };
    let vip = Vip::new(addr, v.port.0, proto);
    if let Some(first) = seen.insert(vip, i) {
        r.error(&path, format!("duplicate VIP {vip} (also vip[{first}])"));
    }
    let lb_source = lb_source(&path, vip, encap, mtu, r);
    let table_size = uint(v.table_size, defaults::TABLE_SIZE);
    if let Err(e) = maglev::validate_table_size(table_size) {
        r.error(format!("{path}.table_size"), e.to_string());
    }
    let mut backends = Vec::with_capacity(v.backends.len());
    let mut keys: BTreeMap<BackendKey, usize> = BTreeMap::new();
    for (j, b) in v.backends.iter().enumerate() {
        let bpath = format!("{path}.backend[{j}]");
        backends.extend(backend(&bpath, j, b, vip, lb_source, &mut keys, r));
    }
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
    let health = health::vip_probes(&path, v, vip, r);
    Some(VipConfig {
        vip,
        table_size,
        backends,
        health,
    })
}

/// The LB's own address in `vip`'s family (the outer source), which the family
/// requires; an IPv6 VIP also requires an MTU of at least [`IPV6_MIN_MTU`].
fn lb_source(path: &str, vip: Vip, encap: &Encap, mtu: u16, r: &mut Report) -> Option<IpAddr> {
    match vip.addr {
        IpAddr::V4(_) => {
            if encap.source_v4.is_none() && !encap.v4_given {
                r.error(
                    "encap.source_v4",
                    format!("required by {path} ({vip}): the outer IPv4 source address"),
                );
            }
            encap.source_v4.map(IpAddr::V4)
        }
        IpAddr::V6(_) => {
            if encap.source_v6.is_none() && !encap.v6_given {
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
            encap.source_v6.map(IpAddr::V6)
        }
    }
}

/// Backend `j` of `vip` at `bpath`, given the VIP's LB address `lb_source` and the
/// backends `seen` before it (key → index); `None` when its address is unreadable.
fn backend(
    bpath: &str,
    j: usize,
    b: &BackendFile,
    vip: Vip,
    lb_source: Option<IpAddr>,
    seen: &mut BTreeMap<BackendKey, usize>,
    r: &mut Report,
) -> Option<BackendConfig> {
    let key = match b.address.parse::<BackendKey>() {
        Ok(k) => k,
        Err(e) => {
            r.error(format!("{bpath}.address"), e.to_string());
            return None;
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
    if key.ip().is_ipv4() != vip.addr.is_ipv4() {
        r.error(
            format!("{bpath}.address"),
            format!("backend {key} is not of the same address family as VIP {vip}"),
        );
    }
    if key.ip() == vip.addr || Some(key.ip()) == lb_source {
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
    Some(BackendConfig {
        key,
        weight: uint(b.weight, defaults::WEIGHT),
        state,
    })
}

/// The limit of `max_table_memory_mib` (MiB) in bytes, checked against the tables of
/// `vips` (both buffers of each VIP, see [`dataplane::table_memory`]).
pub(super) fn table_memory_limit(vips: &[VipConfig], max_mib: u32, r: &mut Report) -> u64 {
    let limit = u64::from(max_mib) << 20;
    let need: u64 = vips
        .iter()
        .map(|v| dataplane::table_memory(v.table_size))
        .sum();
    if need > limit {
        r.error(
            "max_table_memory_mib",
            format!(
                "table memory {} MiB exceeds limit {max_mib} MiB (two table buffers per VIP, \
                 each slot 8 bytes in the kernel)",
                need.div_ceil(1 << 20)
            ),
        );
    }
    limit
}
