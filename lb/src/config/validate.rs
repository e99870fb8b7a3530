//! From [`FileConfig`] to [`Config`]: parse errors with their key path and line, then
//! every semantic check, collected (not just the first), each with the line of its key
//! ([`lines`]).
//!
//! Semantic rules, each guarding against a failure seen in other balancers (the
//! failure scenarios of `docs/src/operations/failure-scenarios.md` named in brackets):
//! - table sizes: prime (Maglev's permutations visit every slot only then), at most
//!   `maglev::MAX_TABLE_SIZE` (bounds what one entry makes the daemon allocate), not
//!   below the VIP's backend count (BR-04);
//! - backends: unique per VIP after canonicalisation (`::ffff:a.b.c.d` is `a.b.c.d`),
//!   no port (IP-in-IP keeps the VIP's port), same family as the VIP, never the VIP or
//!   the LB's own address (a forwarding loop) (BR-06);
//! - weights are integers in `0..=u32::MAX` (BR-03.T4); all-zero weights are a warning
//!   and the VIP drops new flows, like a VIP without backends (BR-03.T3, BR-08);
//! - the table maps' total memory stays under `max_table_memory_mib`, so many VIPs
//!   cannot exhaust kernel memory (BR-10.T3).
//!
//! One validator per section of the file: the top-level keys, `[encap]`, `[nexthop]`,
//! `[conntrack]` here, `[metrics]` in [`metrics`], the `[[vip]]` tables and their
//! backends in [`vips`], `[icmp]` and the per-flow outer headers of `[encap]` in
//! [`datapath`], `[health]` and the VIPs' health tables in [`health`], `[announce]` in
//! [`announce`], `[api]` in [`api`].

mod announce;
mod api;
mod datapath;
mod health;
mod lines;
mod metrics;
mod vips;

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::PathBuf,
    time::Duration,
};

use super::{
    CleaningConfig, Config, ConfigError, ConfigErrors, Loaded, Nexthop, ReloadMode, VipConfig,
    XdpMode,
    file::{ConntrackFile, EncapFile, FileConfig, NexthopFile, UInt},
};
use crate::defaults;

const CT_CAPACITY_RANGE: (u32, u32) = (1_024, 64 << 20);
/// SYN cache slots (64 bytes each): 16 KiB to 256 MiB.
const CT_SYN_CAPACITY_RANGE: (u32, u32) = (256, 1 << 22);
const UDP_TIMEOUT_RANGE: (u32, u32) = (1, 86_400);
/// `conntrack.new_pin_rate`: 0 (no limit) to 100 million pins per second per CPU.
const NEW_PIN_RATE_RANGE: (u32, u32) = (0, 100_000_000);
/// `conntrack.tcp_idle_secs` and `conntrack.quiet_secs`: a minute to a week.
const IDLE_RANGE: (u32, u32) = (60, 604_800);
/// `conntrack.clean_interval_secs`: a second to an hour.
const CLEAN_INTERVAL_RANGE: (u32, u32) = (1, 3_600);
/// Fragment tracking entries: 256 to 1,048,576.
const FRAG_CAPACITY_RANGE: (u32, u32) = (256, 1 << 20);
/// `conntrack.persistence_capacity`: at least a few clients, at most 16 Mi (key and
/// value are 40 bytes; an LRU map preallocates its entries).
const AFFINITY_CAPACITY_RANGE: (u32, u32) = (256, 1 << 24);
/// `conntrack.exceptions_capacity`: 256 to 16 Mi (72 bytes of key and value, about 136
/// bytes of kernel memory each, preallocated).
const EXCEPTIONS_CAPACITY_RANGE: (u32, u32) = (256, 1 << 24);
/// `nexthop.cache_ms`: 0 (look the FIB up for every packet) to 10 s.
const NEXTHOP_CACHE_MS_RANGE: (u32, u32) = (0, 10_000);
const MTU_RANGE: (u16, u16) = (576, 65_535);
/// Linux interface names are at most 15 bytes (`IFNAMSIZ` - 1).
const IFNAME_MAX: usize = 15;

/// At most this many type errors are collected from one file.
const MAX_TYPE_ERRORS: usize = 64;

/// Parses and validates `text`.
///
/// A file without type errors is read once: its parsed document goes to serde as it
/// is, without a copy (a file of 1,000 VIPs and 65,000 backends parses in tens of
/// milliseconds; each copy of its document costs about as much again). The lines of
/// the errors are looked up, in a second parse, only when there are errors.
///
/// Type errors (a string where a number belongs, an unknown key) are all collected
/// ([`type_errors`]). The value checks run once the types are right.
pub(super) fn parse(text: &str) -> Result<Loaded, ConfigErrors> {
    let doc = toml::de::DeTable::parse(text).map_err(|e| syntax_error(text, &e))?;
    match serde_path_to_error::deserialize::<_, FileConfig>(toml::Deserializer::from(doc)) {
        Ok(file) => validate(file, text),
        Err(_) => {
            // Parsed again: the first parse went to serde.
            let doc = toml::de::DeTable::parse(text).map_err(|e| syntax_error(text, &e))?;
            Err(type_errors(text, doc))
        }
    }
}

/// Every type error of `text`, a file that parses (into `original`) but does not
/// deserialise: each offending key is reported, taken out of the parsed document, and
/// the rest deserialised again. A required key taken out that way is not reported
/// again as missing.
fn type_errors<'t>(text: &'t str, original: toml::Spanned<toml::de::DeTable<'t>>) -> ConfigErrors {
    let lines = lines::Lines::new(text, original.get_ref());
    let mut doc = original.clone();
    let mut errors = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    loop {
        let deserializer = toml::Deserializer::from(doc.clone());
        let Err(error) = serde_path_to_error::deserialize::<_, FileConfig>(deserializer) else {
            break;
        };
        let path = error.path().to_string();
        let segments: Vec<serde_path_to_error::Segment> = error.path().iter().cloned().collect();
        let inner = error.into_inner();
        let path = if path == "." { String::new() } else { path };
        let message = inner.message().to_owned();
        let missing_removed = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
            .is_some_and(|field| {
                let full = if path.is_empty() {
                    field.to_owned()
                } else {
                    format!("{path}.{field}")
                };
                removed.contains(&full)
            });
        if !missing_removed {
            let line = inner.span().map(|s| lines::line_of(text, s.start));
            errors.push(ConfigError {
                line: line.or_else(|| lines.line(&path, None)),
                path: path.clone(),
                message,
            });
        }
        if missing_removed
            || errors.len() >= MAX_TYPE_ERRORS
            || !remove_at(doc.get_mut(), &segments)
        {
            break;
        }
        removed.push(path);
    }
    ConfigErrors(errors)
}

/// A file that is not TOML: the parser's message and line; a duplicate key is named
/// by its key path.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigErrors {
    let path = match e.span() {
        Some(span) if e.message() == "duplicate key" => {
            lines::duplicate_key_path(text, span).unwrap_or_default()
        }
        _ => String::new(),
    };
    ConfigErrors(vec![ConfigError {
        path,
        message: e.message().to_owned(),
        line: e.span().map(|s| lines::line_of(text, s.start)),
    }])
}

/// Removes the key at `path` from `table`; `false` when the path does not end in a
/// key that exists (nothing is removed then).
fn remove_at(table: &mut toml::de::DeTable<'_>, path: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    match path {
        [Segment::Map { key }] => table.remove(key.as_str()).is_some(),
        [Segment::Map { key }, rest @ ..] => table
            .get_mut(key.as_str())
            .is_some_and(|v| remove_in(v.get_mut(), rest)),
        _ => false,
    }
}

/// [`remove_at`] below `value`.
fn remove_in(value: &mut toml::de::DeValue<'_>, path: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    use toml::de::DeValue;
    match (value, path) {
        (DeValue::Table(t), _) => remove_at(t, path),
        (DeValue::Array(a), [Segment::Seq { index }, rest @ ..]) if !rest.is_empty() => a
            .get_mut(*index)
            .is_some_and(|v| remove_in(v.get_mut(), rest)),
        _ => false,
    }
}

/// Collected problems and warnings.
#[derive(Default)]
struct Report {
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
    /// The key whose line an error takes when its own key is not in the file (index of
    /// the error, key path).
    anchors: Vec<(usize, String)>,
}

impl Report {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
            line: None,
        });
    }

    /// An error at `path` that takes the line of `anchor` when `path` is not in the
    /// file (a required key left out, a default that conflicts).
    fn error_near(
        &mut self,
        path: impl Into<String>,
        anchor: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.anchors.push((self.errors.len(), anchor.into()));
        self.error(path, message);
    }

    /// The errors, each with the line of its key (or anchor) in `text` (parsed again
    /// for the lines: errors are the rare case).
    fn into_errors(self, text: &str) -> ConfigErrors {
        let Ok(doc) = toml::de::DeTable::parse(text) else {
            return ConfigErrors(self.errors);
        };
        let lines = lines::Lines::new(text, doc.get_ref());
        let mut errors = self.errors;
        for (i, e) in errors.iter_mut().enumerate() {
            let anchor = self.anchors.iter().find(|(at, _)| *at == i);
            e.line = e
                .line
                .or_else(|| lines.line(&e.path, anchor.map(|(_, a)| a.as_str())));
        }
        ConfigErrors(errors)
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

/// The top-level keys but the sections.
struct TopLevel {
    interface: String,
    xdp_mode: XdpMode,
    control_socket: PathBuf,
    pin_dir: PathBuf,
    state_dir: PathBuf,
    detach_on_exit: bool,
    reload: ReloadMode,
    mtu: u16,
    hash_seed: u32,
    maglev_seed: u64,
    max_table_mib: u32,
}

fn top_level(file: &FileConfig, r: &mut Report) -> TopLevel {
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
    let pin_dir = absolute(r, "pin_dir", file.pin_dir.as_deref(), defaults::PIN_DIR);
    let state_dir = absolute(
        r,
        "state_dir",
        file.state_dir.as_deref(),
        defaults::STATE_DIR,
    );
    let reload = match file.reload.as_deref().unwrap_or(defaults::RELOAD) {
        "auto" => ReloadMode::Auto,
        "signal" => ReloadMode::Signal,
        other => {
            r.error(
                "reload",
                format!("expected \"auto\" or \"signal\", got {other:?}"),
            );
            ReloadMode::Auto
        }
    };
    let mtu = in_range(r, "mtu", uint(file.mtu, defaults::MTU), MTU_RANGE);
    let max_table_mib = uint(file.max_table_memory_mib, defaults::MAX_TABLE_MEMORY_MIB);
    if max_table_mib == 0 {
        r.error("max_table_memory_mib", "expected at least 1, got 0");
    }
    TopLevel {
        interface,
        xdp_mode,
        control_socket,
        pin_dir,
        state_dir,
        detach_on_exit: file.detach_on_exit.unwrap_or(defaults::DETACH_ON_EXIT),
        reload,
        mtu,
        hash_seed: uint(file.hash_seed, defaults::HASH_SEED),
        maglev_seed: uint(file.maglev_seed, defaults::MAGLEV_SEED),
        max_table_mib,
    }
}

/// The path of key `key` (`default` when absent); an error unless absolute.
fn absolute(r: &mut Report, key: &str, value: Option<&str>, default: &str) -> PathBuf {
    let path = PathBuf::from(value.unwrap_or(default));
    if !path.is_absolute() {
        r.error(
            key,
            format!(
                "expected an absolute path, got {:?}",
                path.display().to_string()
            ),
        );
    }
    path
}

/// `[encap]`: the outer source addresses.
struct Encap {
    source_v4: Option<Ipv4Addr>,
    source_v6: Option<Ipv6Addr>,
    /// Whether the keys were given at all (an invalid one is reported once, as invalid,
    /// not again as missing).
    v4_given: bool,
    v6_given: bool,
}

fn encap(file: &EncapFile, r: &mut Report) -> Encap {
    let source_v4 = file.source_v4.as_deref().and_then(|t| {
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
    Encap {
        source_v4,
        source_v6,
        v4_given: file.source_v4.is_some(),
        v6_given: file.source_v6.is_some(),
    }
}

/// `[nexthop]`: the mode and, in `fib` mode, how long a lookup is reused.
fn nexthop(file: &NexthopFile, r: &mut Report) -> (Nexthop, Duration) {
    let mode = file.mode.as_deref().unwrap_or(defaults::NEXTHOP_MODE);
    let nexthop = match (mode, &file.gateway_mac) {
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
    let cache_ms = in_range(
        r,
        "nexthop.cache_ms",
        uint(file.cache_ms, defaults::NEXTHOP_CACHE_MS),
        NEXTHOP_CACHE_MS_RANGE,
    );
    if file.cache_ms.is_some() && matches!(nexthop, Nexthop::Gateway { .. }) {
        r.error(
            "nexthop.cache_ms",
            "only used with mode = \"fib\" (gateway mode looks nothing up)",
        );
    }
    (nexthop, Duration::from_millis(u64::from(cache_ms)))
}

/// `[conntrack]`: (capacity per family, SYN cache slots, UDP idle timeout, new pins per
/// second per CPU); the fragment tracking entries are read by [`fragment_capacity`].
fn conntrack(file: &ConntrackFile, r: &mut Report) -> (u32, u32, Duration, u32) {
    let capacity = in_range(
        r,
        "conntrack.capacity",
        uint(file.capacity, defaults::CT_CAPACITY),
        CT_CAPACITY_RANGE,
    );
    let syn_capacity = in_range(
        r,
        "conntrack.syn_capacity",
        uint(file.syn_capacity, defaults::CT_SYN_CAPACITY),
        CT_SYN_CAPACITY_RANGE,
    );
    if !syn_capacity.is_power_of_two() {
        let above = syn_capacity.checked_next_power_of_two();
        r.error(
            "conntrack.syn_capacity",
            format!(
                "expected a power of two (SYN cache slots), got {syn_capacity}; the nearest are {} and {}",
                above.map_or(0, |n| n / 2),
                above.unwrap_or(0)
            ),
        );
    }
    let udp_timeout_secs = in_range(
        r,
        "conntrack.udp_timeout_secs",
        uint(file.udp_timeout_secs, defaults::UDP_TIMEOUT_SECS),
        UDP_TIMEOUT_RANGE,
    );
    let new_pin_rate = in_range(
        r,
        "conntrack.new_pin_rate",
        uint(file.new_pin_rate, defaults::NEW_PIN_RATE),
        NEW_PIN_RATE_RANGE,
    );
    (
        capacity,
        syn_capacity,
        Duration::from_secs(u64::from(udp_timeout_secs)),
        new_pin_rate,
    )
}

/// `conntrack.persistence_capacity`.
fn persistence_capacity(file: &ConntrackFile, r: &mut Report) -> u32 {
    in_range(
        r,
        "conntrack.persistence_capacity",
        uint(file.persistence_capacity, defaults::AFFINITY_CAPACITY),
        AFFINITY_CAPACITY_RANGE,
    )
}

/// `conntrack.exceptions_capacity`.
fn exceptions_capacity(file: &ConntrackFile, r: &mut Report) -> u32 {
    in_range(
        r,
        "conntrack.exceptions_capacity",
        uint(file.exceptions_capacity, defaults::EXCEPTIONS_CAPACITY),
        EXCEPTIONS_CAPACITY_RANGE,
    )
}

/// `conntrack.fragment_capacity`.
fn fragment_capacity(file: &ConntrackFile, r: &mut Report) -> u32 {
    in_range(
        r,
        "conntrack.fragment_capacity",
        uint(file.fragment_capacity, defaults::FRAG_CAPACITY),
        FRAG_CAPACITY_RANGE,
    )
}

/// `conntrack.tcp_idle_secs`, `quiet_secs` and `clean_interval_secs`: the fast path's
/// cleaning. The quiet time may not be below the TCP idle time (rule C3 of
/// `lb_common::fastpath`).
fn cleaning(file: &ConntrackFile, r: &mut Report) -> CleaningConfig {
    let mut secs = |key, value, default, range| {
        Duration::from_secs(u64::from(in_range(r, key, uint(value, default), range)))
    };
    let tcp_idle = secs(
        "conntrack.tcp_idle_secs",
        file.tcp_idle_secs,
        defaults::TCP_IDLE_SECS,
        IDLE_RANGE,
    );
    let quiet = secs(
        "conntrack.quiet_secs",
        file.quiet_secs,
        defaults::QUIET_SECS,
        IDLE_RANGE,
    );
    let interval = secs(
        "conntrack.clean_interval_secs",
        file.clean_interval_secs,
        defaults::CLEAN_INTERVAL_SECS,
        CLEAN_INTERVAL_RANGE,
    );
    if quiet < tcp_idle {
        r.error(
            "conntrack.quiet_secs",
            format!(
                "expected at least conntrack.tcp_idle_secs ({}), got {} (a slot cleaned \
                 sooner could break a flow silent for less than the idle time)",
                tcp_idle.as_secs(),
                quiet.as_secs()
            ),
        );
    }
    CleaningConfig {
        tcp_idle,
        quiet,
        interval,
    }
}

/// Rule F1 of the fast path (`lb_common::fastpath::enabled`): with `[announce]` on,
/// this instance is one of a fleet behind ECMP, and until the backends' second chance
/// exists a flow moved between instances would find no pin; the fast path stays off
/// there, with a warning naming each VIP that asked for it.
fn fleet_rule(vips: &mut [VipConfig], announced: bool, r: &mut Report) {
    for v in vips.iter_mut().filter(|v| v.fast_path) {
        if !lb_common::fastpath::enabled(true, announced, false) {
            v.fast_path = false;
            r.warnings.push(format!(
                "VIP {}: fast_path stays off while [announce] is enabled (a fleet member: \
                 a flow moved between instances would find no pin without the backends' \
                 second chance)",
                v.vip
            ));
        }
    }
}

/// Every section in turn; every problem collected.
fn validate(file: FileConfig, text: &str) -> Result<Loaded, ConfigErrors> {
    let mut r = Report::default();
    let top = top_level(&file, &mut r);
    let encap = encap(&file.encap, &mut r);
    let (nexthop, nexthop_cache) = nexthop(&file.nexthop, &mut r);
    let (ct_capacity, ct_syn_capacity, udp_timeout, new_pin_rate) =
        conntrack(&file.conntrack, &mut r);
    let frag_capacity = fragment_capacity(&file.conntrack, &mut r);
    let affinity_capacity = persistence_capacity(&file.conntrack, &mut r);
    let exceptions_capacity = exceptions_capacity(&file.conntrack, &mut r);
    let cleaning = cleaning(&file.conntrack, &mut r);
    let icmp = datapath::icmp(&file.icmp, &mut r);
    let outer = datapath::outer(&file.encap, &mut r);
    let metrics = metrics::metrics(&file.metrics, &mut r);
    let health = health::checker(&file.health, &mut r);
    let announce = announce::announce(&file.announce, &mut r);
    let api = api::api(&file.api, &mut r);
    let walk_ms = u32::try_from(metrics.connections_interval.as_millis()).unwrap_or(u32::MAX);
    let mut vips = vips::vips(&file.vips, &encap, top.mtu, walk_ms, &mut r);
    fleet_rule(&mut vips, announce.enabled, &mut r);
    let max_table_memory = vips::table_memory_limit(&vips, top.max_table_mib, &mut r);
    if !r.errors.is_empty() {
        return Err(r.into_errors(text));
    }
    Ok(Loaded {
        config: Config {
            interface: top.interface,
            xdp_mode: top.xdp_mode,
            control_socket: top.control_socket,
            pin_dir: top.pin_dir,
            state_dir: top.state_dir,
            detach_on_exit: top.detach_on_exit,
            reload: top.reload,
            mtu: top.mtu,
            hash_seed: top.hash_seed,
            maglev_seed: top.maglev_seed,
            max_table_memory,
            source_v4: encap.source_v4,
            source_v6: encap.source_v6,
            nexthop,
            ct_capacity,
            ct_syn_capacity,
            udp_timeout,
            new_pin_rate,
            nexthop_cache,
            frag_capacity,
            affinity_capacity,
            exceptions_capacity,
            cleaning,
            icmp,
            outer,
            metrics,
            health,
            announce,
            api,
            vips,
        },
        warnings: r.warnings,
    })
}

#[cfg(test)]
mod tests;
