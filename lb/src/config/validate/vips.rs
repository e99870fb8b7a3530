//! The `[[vip]]` tables and their `[[vip.backend]]` tables, and the limits on all of them
//! together (VIP and backend counts, allowed source prefixes, table memory).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
};

use lb_common::{
    affinity,
    hash_fields::{Fields, HashFields, PrefixError},
    maps::{MAX_BACKENDS, MAX_SOURCE_RANGES, MAX_VIPS},
    types::{FAMILY_V4, FAMILY_V6},
};

use super::{Encap, Report, health, uint};
use crate::{
    config::{
        BackendConfig, BackendState, Encapsulation, Protocol, Vip, VipConfig,
        file::{BackendFile, VipFile},
    },
    defaults,
};
use lb_dataplane::prefix::Prefix;
use lb_maglev::BackendKey;

/// IPv6 links carry at least 1,280 bytes (RFC 8200 section 5).
const IPV6_MIN_MTU: u16 = 1_280;

/// Validates every VIP (in file order, indices from 0), with the outer sources of
/// `encap`, the path MTU `mtu` and the conntrack walk's period `walk_ms`
/// (`metrics.connections_interval_ms`, which bounds the affinity timeout from below).
pub(super) fn vips(
    files: &[VipFile],
    encap: &Encap,
    mtu: u16,
    walk_ms: u32,
    r: &mut Report,
) -> Vec<VipConfig> {
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
        vips.extend(vip(i, v, (encap, mtu, walk_ms), &mut seen, r));
    }
    let sources: usize = vips.iter().map(|v| v.allowed_sources.len()).sum();
    if sources > MAX_SOURCE_RANGES as usize {
        r.error(
            "vip",
            format!(
                "{sources} allowed source prefixes in all exceed the data plane's maximum of \
                 {MAX_SOURCE_RANGES}"
            ),
        );
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
    (encap, mtu, walk_ms): (&Encap, u16, u32),
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
    let ipv6_backends = backend_family(&path, v, vip, r);
    let tunnel = vip_encap(&path, v, r);
    let allowed_sources = allowed_sources(&path, v, vip, r);
    let mut hash = hash_fields(&path, v, vip, r);
    hash.affinity_secs = persistence(&path, v, hash.fields, walk_ms, r);
    let lb_source = lb_source(&path, vip, ipv6_backends, encap, mtu, r);
    let table_size = uint(v.table_size, defaults::TABLE_SIZE);
    if let Err(e) = lb_maglev::validate_table_size(table_size) {
        r.error(format!("{path}.table_size"), e.to_string());
    }
    let mut backends = Vec::with_capacity(v.backends.len());
    let mut keys: BTreeMap<BackendKey, usize> = BTreeMap::new();
    for (j, b) in v.backends.iter().enumerate() {
        let bpath = format!("{path}.backend[{j}]");
        let family = Family {
            vip,
            ipv6_backends,
            given: v.backend_family.is_some(),
        };
        backends.extend(backend(&bpath, j, b, &family, lb_source, &mut keys, r));
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
    let second_chance = v.second_chance.unwrap_or(false);
    if second_chance && tunnel != Encapsulation::Gue {
        r.error(
            format!("{path}.second_chance"),
            "second_chance = true needs encap = \"gue\": candidates travel in the GUE \
             header, IP-in-IP has no room for them"
                .to_owned(),
        );
    }
    Some(VipConfig {
        vip,
        table_size,
        ipv6_backends,
        encap: tunnel,
        allowed_sources,
        fast_path: v.fast_path.unwrap_or(false),
        second_chance,
        hash,
        backends,
        health,
    })
}

/// `vip[i].encap`: `ipip` (the default) or `gue`.
fn vip_encap(path: &str, v: &VipFile, r: &mut Report) -> Encapsulation {
    match v.encap.as_deref().unwrap_or(defaults::VIP_ENCAP) {
        "ipip" => Encapsulation::Ipip,
        "gue" => Encapsulation::Gue,
        other => {
            r.error(
                format!("{path}.encap"),
                format!("expected \"ipip\" or \"gue\", got {other:?}"),
            );
            Encapsulation::Ipip
        }
    }
}

/// `vip[i].persistence_timeout_secs`: client affinity's idle timeout (seconds; 0 or
/// absent: none), only with source fields (`lb_common::affinity`) and without the fast
/// path, whose table decides new flows without reading the client's pin; at least
/// `affinity::min_timeout_secs` of the conntrack walk's period `walk_ms`, which keeps
/// busy clients' pins alive.
fn persistence(path: &str, v: &VipFile, fields: Fields, walk_ms: u32, r: &mut Report) -> u32 {
    let Some(secs) = v.persistence_timeout_secs.map(|s| s.0) else {
        return 0;
    };
    let key = format!("{path}.persistence_timeout_secs");
    if secs == 0 {
        return 0;
    }
    if !fields.uses_source() {
        r.error(
            key,
            format!(
                "applies only with hash = \"src\" or \"src+dport\" (a client is its \
                 source address), not with hash = {:?}",
                fields.name()
            ),
        );
        return 0;
    }
    if v.fast_path == Some(true) {
        r.error(
            key,
            "does not apply with fast_path = true (the fast path's table decides new \
             flows without the client's affinity)",
        );
        return 0;
    }
    if secs > affinity::MAX_TIMEOUT_SECS {
        r.error(
            key,
            format!(
                "expected at most {} seconds (31 days), got {secs}",
                affinity::MAX_TIMEOUT_SECS
            ),
        );
        return 0;
    }
    let min = affinity::min_timeout_secs(walk_ms);
    if secs < min {
        r.error(
            key,
            format!(
                "expected at least {min} seconds, got {secs}: twice the period of the \
                 conntrack walk that keeps busy clients' pins alive \
                 (metrics.connections_interval_ms = {walk_ms}) plus {} s",
                affinity::ACTIVITY_LAG_SECS
            ),
        );
        return 0;
    }
    secs
}

/// `vip[i].hash` and `vip[i].hash_source_prefix`: the fields of a flow that pick its
/// backend, and the leading bits of the client address hashed (its whole length is
/// stored as 0, the whole address).
fn hash_fields(path: &str, v: &VipFile, vip: Vip, r: &mut Report) -> HashFields {
    let name = v.hash.as_deref().unwrap_or(defaults::VIP_HASH);
    let Some(fields) = Fields::from_name(name) else {
        let names: Vec<String> = Fields::ALL
            .iter()
            .map(|f| format!("{:?}", f.name()))
            .collect();
        r.error(
            format!("{path}.hash"),
            format!("expected one of {}, got {name:?}", names.join(", ")),
        );
        return HashFields::default();
    };
    let Some(prefix) = v.hash_source_prefix.map(|p| p.0) else {
        return HashFields {
            fields,
            prefix: 0,
            affinity_secs: 0,
        };
    };
    let key = format!("{path}.hash_source_prefix");
    let family = if vip.addr.is_ipv4() {
        FAMILY_V4
    } else {
        FAMILY_V6
    };
    match HashFields::with_source_prefix(fields, family, prefix) {
        Ok(hash) => return hash,
        Err(PrefixError::NotSource) => r.error(
            key,
            format!(
                "applies only with hash = \"src\" or \"src+dport\" (the hashed client \
                 address), not with hash = {name:?}"
            ),
        ),
        Err(PrefixError::OutOfRange { max }) => r.error(
            key,
            format!("expected a prefix length from 1 to {max} for VIP {vip}, got {prefix}"),
        ),
    }
    HashFields {
        fields,
        prefix: 0,
        affinity_secs: 0,
    }
}

/// `vip[i].backend_family`: whether the VIP's backends are IPv6 (for an IPv4 VIP:
/// IPv4-in-IPv6). IPv6 VIPs have IPv6 backends only (no IPv6-in-IPv4).
fn backend_family(path: &str, v: &VipFile, vip: Vip, r: &mut Report) -> bool {
    let own = vip.addr.is_ipv6();
    match v.backend_family.as_deref() {
        None => own,
        Some("ipv6") => true,
        Some("ipv4") if !own => false,
        Some("ipv4") => {
            r.error(
                format!("{path}.backend_family"),
                format!("IPv6 VIP {vip} cannot have IPv4 backends (IPv6-in-IPv4 is not supported)"),
            );
            true
        }
        Some(other) => {
            r.error(
                format!("{path}.backend_family"),
                format!("expected \"ipv4\" or \"ipv6\", got {other:?}"),
            );
            own
        }
    }
}

/// `vip[i].allowed_sources`: prefixes of the VIP's family, sorted, each once.
fn allowed_sources(path: &str, v: &VipFile, vip: Vip, r: &mut Report) -> Vec<Prefix> {
    let Some(texts) = &v.allowed_sources else {
        return Vec::new();
    };
    if texts.is_empty() {
        r.error(
            format!("{path}.allowed_sources"),
            "an empty list would refuse every client; leave the key out to allow all",
        );
    }
    let mut prefixes: Vec<Prefix> = Vec::with_capacity(texts.len());
    for (j, text) in texts.iter().enumerate() {
        let spath = format!("{path}.allowed_sources[{j}]");
        match text.parse::<Prefix>() {
            Ok(p) if p.is_ipv4() != vip.addr.is_ipv4() => r.error(
                spath,
                format!("{p} is not of the address family of VIP {vip} (its clients)"),
            ),
            Ok(p) if prefixes.contains(&p) => r.error(spath, format!("duplicate prefix {p}")),
            Ok(p) => prefixes.push(p),
            Err(e) => r.error(spath, e.to_string()),
        }
    }
    prefixes.sort();
    prefixes
}

/// The address family a VIP's backends must have, for [`backend`].
struct Family {
    vip: Vip,
    ipv6_backends: bool,
    /// Whether `backend_family` was given (the error names it then).
    given: bool,
}

/// The LB's own address in the family of `vip`'s backends (the outer source), which
/// that family requires; IPv6 backends also require an MTU of at least
/// [`IPV6_MIN_MTU`].
fn lb_source(
    path: &str,
    vip: Vip,
    ipv6_backends: bool,
    encap: &Encap,
    mtu: u16,
    r: &mut Report,
) -> Option<IpAddr> {
    if !ipv6_backends {
        if encap.source_v4.is_none() && !encap.v4_given {
            r.error_near(
                "encap.source_v4",
                path,
                format!("required by {path} ({vip}): the outer IPv4 source address"),
            );
        }
        return encap.source_v4.map(IpAddr::V4);
    }
    if encap.source_v6.is_none() && !encap.v6_given {
        r.error_near(
            "encap.source_v6",
            path,
            format!("required by {path} ({vip}): the outer IPv6 source address"),
        );
    }
    if mtu < IPV6_MIN_MTU {
        let what = if vip.addr.is_ipv6() {
            "IPv6 VIP"
        } else {
            "VIP with IPv6 backends"
        };
        r.error(
            "mtu",
            format!("{what} {vip} needs at least {IPV6_MIN_MTU}, got {mtu}"),
        );
    }
    encap.source_v6.map(IpAddr::V6)
}

/// Backend `j` of `vip` at `bpath`, given the VIP's LB address `lb_source` and the
/// backends `seen` before it (key → index); `None` when its address is unreadable.
fn backend(
    bpath: &str,
    j: usize,
    b: &BackendFile,
    family: &Family,
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
    let vip = family.vip;
    if key.ip().is_ipv6() != family.ipv6_backends {
        let message = if family.given {
            let want = if family.ipv6_backends { "ipv6" } else { "ipv4" };
            format!("backend {key} is not of the VIP's backend_family (\"{want}\")")
        } else {
            format!("backend {key} is not of the same address family as VIP {vip}")
        };
        r.error(format!("{bpath}.address"), message);
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
/// `vips` (both buffers of each VIP, see [`lb_dataplane::table_memory`]).
pub(super) fn table_memory_limit(vips: &[VipConfig], max_mib: u32, r: &mut Report) -> u64 {
    let limit = u64::from(max_mib) << 20;
    let need: u64 = vips
        .iter()
        .map(|v| lb_dataplane::table_memory(v.table_size))
        .sum();
    if need > limit {
        r.error_near(
            "max_table_memory_mib",
            "vip",
            format!(
                "table memory {} MiB exceeds limit {max_mib} MiB (two table buffers per VIP, \
                 each slot 16 bytes in the kernel)",
                need.div_ceil(1 << 20)
            ),
        );
    }
    limit
}
