//! Validation: good files load; a table of bad files, each with the exact error text.

use super::*;
use crate::config::BackendState;
use lb_health::{
    damping::Damping, policy::FailurePolicy, settings::StatusRanges, state::Thresholds,
};

/// The smallest file without VIPs (also the data-plane keys' tests).
pub(super) const BASE: &str = r#"
interface = "eth0"
[encap]
source_v4 = "192.0.2.1"
source_v6 = "2001:db8:c::1"
"#;

const VIP: &str = r#"
[[vip]]
address = "203.0.113.10"
port = 80
protocol = "tcp"
[[vip.backend]]
address = "198.51.100.11"
[[vip.backend]]
address = "198.51.100.12"
weight = 2
[[vip.backend]]
address = "198.51.100.13"
state = "drain"
"#;

fn load(text: &str) -> Result<Loaded, ConfigErrors> {
    parse(text)
}

fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_complete_file_loads_with_defaults_filled_in() {
    let loaded = load(&format!("{BASE}{VIP}")).expect("valid");
    let c = loaded.config;
    assert_eq!(c.interface, "eth0");
    assert_eq!(c.xdp_mode, XdpMode::Auto);
    assert_eq!(c.control_socket, PathBuf::from(defaults::CONTROL_SOCKET));
    assert_eq!(c.mtu, 1500);
    assert_eq!(c.nexthop, Nexthop::Fib);
    assert_eq!(c.udp_timeout, Duration::from_secs(30));
    assert_eq!(c.vips.len(), 1);
    let v = &c.vips[0];
    assert_eq!(v.vip.to_string(), "203.0.113.10:80/tcp");
    assert_eq!(v.table_size, 65_537);
    assert_eq!(
        v.backends
            .iter()
            .map(|b| (b.key.to_string(), b.weight, b.state))
            .collect::<Vec<_>>(),
        vec![
            ("198.51.100.11".to_owned(), 1, BackendState::Active),
            ("198.51.100.12".to_owned(), 2, BackendState::Active),
            ("198.51.100.13".to_owned(), 1, BackendState::Drain),
        ]
    );
    assert!(loaded.warnings.is_empty());
}

#[test]
fn the_example_file_in_the_repository_is_valid() {
    let text = include_str!("../../../../lb.example.toml");
    let loaded = load(text).expect("lb.example.toml is valid");
    assert!(!loaded.config.vips.is_empty());
}

/// Every key of `lb.example.toml` that has a default states exactly that default, so
/// that an instance started from the example builds the tables `lb table build` shows
/// with its own defaults (same size, same seed).
#[test]
fn the_example_file_states_exactly_the_defaults() {
    let text = include_str!("../../../../lb.example.toml");
    let file: toml::Table = text.parse().expect("lb.example.toml is TOML");
    let at = |path: &str| {
        let mut value = toml::Value::Table(file.clone());
        for part in path.split('.') {
            value = match part.split_once('[') {
                Some((key, index)) => {
                    let i: usize = index.trim_end_matches(']').parse().expect("index");
                    value[key][i].clone()
                }
                None => value[part].clone(),
            };
        }
        value
    };
    let int = |v: u64| toml::Value::Integer(i64::try_from(v).expect("fits TOML"));
    let ms = |d: Duration| u64::try_from(d.as_millis()).expect("fits");
    let string = |s: &str| toml::Value::String(s.to_owned());
    assert_eq!(
        at("detach_on_exit"),
        toml::Value::Boolean(defaults::DETACH_ON_EXIT)
    );
    let expected = [
        ("pin_dir", string(defaults::PIN_DIR)),
        ("state_dir", string(defaults::STATE_DIR)),
        ("xdp_mode", string(defaults::XDP_MODE)),
        ("control_socket", string(defaults::CONTROL_SOCKET)),
        ("reload", string(defaults::RELOAD)),
        ("mtu", int(defaults::MTU.into())),
        ("hash_seed", int(defaults::HASH_SEED.into())),
        ("maglev_seed", int(defaults::MAGLEV_SEED)),
        (
            "max_table_memory_mib",
            int(defaults::MAX_TABLE_MEMORY_MIB.into()),
        ),
        ("nexthop.mode", string(defaults::NEXTHOP_MODE)),
        ("nexthop.cache_ms", int(defaults::NEXTHOP_CACHE_MS.into())),
        ("conntrack.capacity", int(defaults::CT_CAPACITY.into())),
        (
            "conntrack.syn_capacity",
            int(defaults::CT_SYN_CAPACITY.into()),
        ),
        (
            "conntrack.udp_timeout_secs",
            int(defaults::UDP_TIMEOUT_SECS.into()),
        ),
        ("conntrack.new_pin_rate", int(defaults::NEW_PIN_RATE.into())),
        (
            "conntrack.tcp_idle_secs",
            int(defaults::TCP_IDLE_SECS.into()),
        ),
        ("conntrack.quiet_secs", int(defaults::QUIET_SECS.into())),
        (
            "conntrack.clean_interval_secs",
            int(defaults::CLEAN_INTERVAL_SECS.into()),
        ),
        (
            "conntrack.fragment_capacity",
            int(defaults::FRAG_CAPACITY.into()),
        ),
        ("encap.flow_label", string(defaults::FLOW_LABEL)),
        ("encap.gue_port", int(defaults::GUE_PORT.into())),
        ("icmp.too_big", toml::Value::Boolean(defaults::ICMP_TOO_BIG)),
        ("icmp.echo", toml::Value::Boolean(defaults::ICMP_ECHO)),
        ("icmp.rate_limit", int(defaults::ICMP_RATE_LIMIT.into())),
        ("icmp.burst", int(defaults::ICMP_BURST.into())),
        (
            "metrics.enabled",
            toml::Value::Boolean(defaults::METRICS_ENABLED),
        ),
        ("metrics.listen", string(defaults::METRICS_LISTEN)),
        (
            "metrics.connections_interval_ms",
            int(defaults::CONNECTIONS_INTERVAL_MS.into()),
        ),
        ("metrics.idle_secs", int(defaults::IDLE_SECS.into())),
        (
            "metrics.removed_retention_secs",
            int(defaults::REMOVED_RETENTION_SECS.into()),
        ),
        ("vip[0].table_size", int(defaults::TABLE_SIZE.into())),
        ("vip[0].encap", string(defaults::VIP_ENCAP)),
        ("vip[0].hash", string(defaults::VIP_HASH)),
        (
            "health.coalesce_ms",
            int(defaults::HEALTH_COALESCE_MS.into()),
        ),
        (
            "health.max_concurrent_probes",
            int(defaults::HEALTH_MAX_CONCURRENT_PROBES.into()),
        ),
        ("vip[0].health.mode", string("direct")),
        (
            "vip[0].health.interval_ms",
            int(ms(lb_health::settings::DEFAULT_INTERVAL)),
        ),
        (
            "vip[0].health.timeout_ms",
            int(ms(lb_health::settings::DEFAULT_TIMEOUT)),
        ),
        ("vip[0].health.rise", int(Thresholds::DEFAULT_RISE.into())),
        ("vip[0].health.fall", int(Thresholds::DEFAULT_FALL.into())),
        (
            "vip[0].health.path",
            string(lb_health::settings::DEFAULT_HTTP_PATH),
        ),
        (
            "vip[0].health.status",
            string(&StatusRanges::default().to_string()),
        ),
        (
            "vip[0].health.panic_threshold",
            int(FailurePolicy::default().panic_threshold.into()),
        ),
        (
            "vip[0].health.all_down",
            string(&FailurePolicy::default().all_down.to_string()),
        ),
        (
            "vip[0].health.flap_transitions",
            int(Damping::DEFAULT_MAX_TRANSITIONS.into()),
        ),
        (
            "vip[0].health.flap_window_secs",
            int(Damping::DEFAULT_WINDOW.as_secs()),
        ),
        (
            "vip[0].health.flap_hold_secs",
            int(Damping::DEFAULT_HOLD.as_secs()),
        ),
        (
            "vip[1].health.dns_type",
            string(&lb_health::settings::DEFAULT_DNS_TYPE.to_string()),
        ),
        ("vip[0].backend[0].weight", int(defaults::WEIGHT.into())),
        (
            "announce.enabled",
            toml::Value::Boolean(defaults::ANNOUNCE_ENABLED),
        ),
        ("announce.table", int(defaults::ANNOUNCE_TABLE.into())),
        ("announce.protocol", int(defaults::ANNOUNCE_PROTOCOL.into())),
        ("api.enabled", toml::Value::Boolean(defaults::API_ENABLED)),
        ("api.listen", string(defaults::API_LISTEN)),
        (
            "api.max_connections",
            int(defaults::API_MAX_CONNECTIONS.into()),
        ),
        (
            "api.max_body_bytes",
            int(defaults::API_MAX_BODY_BYTES.into()),
        ),
        (
            "api.header_timeout_ms",
            int(defaults::API_HEADER_TIMEOUT_MS.into()),
        ),
        (
            "api.body_timeout_ms",
            int(defaults::API_BODY_TIMEOUT_MS.into()),
        ),
        (
            "api.idempotency_entries",
            int(defaults::API_IDEMPOTENCY_ENTRIES.into()),
        ),
    ];
    for (path, value) in expected {
        assert_eq!(at(path), value, "lb.example.toml: {path}");
    }
    // The example's first backend leaves `state` out: the comment on the third
    // documents the default.
    assert!(text.contains(&format!("# {} (default)", defaults::BACKEND_STATE)));
}

/// Every bad file is rejected with the key path, the value and the line of the key: type,
/// range, semantic and duplicate-key errors alike.
#[test]
fn bad_files_are_rejected_with_the_key_path_value_and_line() {
    let with_vip = |extra: &str| format!("{BASE}{VIP}{extra}");
    let cases: Vec<(String, &str)> = vec![
        // Types: the key path, the value, the line.
        (
            with_vip("").replace("weight = 2", "weight = \"abc\""),
            "vip[0].backend[1].weight: expected an integer >= 0 and <= 4294967295, got \"abc\" (line 15)",
        ),
        (
            with_vip("").replace("weight = 2", "weight = -1"),
            "vip[0].backend[1].weight: expected an integer >= 0 and <= 4294967295, got -1 (line 15)",
        ),
        (
            with_vip("").replace("weight = 2", "weight = 1.5"),
            "vip[0].backend[1].weight: expected an integer >= 0 and <= 4294967295, got 1.5 (line 15)",
        ),
        (
            with_vip("").replace("port = 80", "port = 70000"),
            "vip[0].port: expected an integer >= 0 and <= 65535, got 70000 (line 9)",
        ),
        (
            format!("colour = \"blue\"{BASE}"),
            "colour: unknown field `colour`, expected one of `interface`, `xdp_mode`, `control_socket`, `pin_dir`, `state_dir`, `detach_on_exit`, `reload`, `mtu`, `hash_seed`, `maglev_seed`, `max_table_memory_mib`, `encap`, `nexthop`, `conntrack`, `icmp`, `metrics`, `health`, `announce`, `api`, `vip` (line 1)",
        ),
        (
            with_vip("").replace("state = \"drain\"", "stat = \"drain\""),
            "vip[0].backend[2].stat: unknown field `stat`, expected one of `address`, `weight`, `state`, `health` (line 18)",
        ),
        (
            "[encap]\nsource_v4 = \"192.0.2.1\"\n".to_owned(),
            "missing field `interface` (line 1)",
        ),
        (
            "interface = \n".to_owned(),
            "string values must be quoted, expected literal string (line 1)",
        ),
        // Semantics.
        (
            with_vip("").replace("protocol = \"tcp\"", "protocol = \"sctp\""),
            "vip[0].protocol: expected \"tcp\" or \"udp\", got \"sctp\" (line 10)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\ntable_size = 65536\n"),
            "vip[0].table_size: table_size 65536 is not prime (nearest primes: 65521 and 65537) (line 8)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\ntable_size = 1\n"),
            "vip[0].table_size: table_size must be a prime >= 2 (got 1) (line 8)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\ntable_size = 10000019\n"),
            "vip[0].table_size: table_size 10000019 exceeds maximum 4000037 (line 8)",
        ),
        (
            with_vip("")
                .replace("[[vip]]\n", "[[vip]]\ntable_size = 2\n")
                .replace("state = \"drain\"", "state = \"active\""),
            "vip[0].table_size: table_size 2 is smaller than backend count 3 (line 8)",
        ),
        (
            with_vip("").replace("198.51.100.12", "198.51.100.11"),
            "vip[0].backend[1].address: duplicate backend 198.51.100.11 in VIP 203.0.113.10:80/tcp (also backend[0]) (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "::ffff:198.51.100.11"),
            "vip[0].backend[1].address: duplicate backend 198.51.100.11 in VIP 203.0.113.10:80/tcp (also backend[0]) (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "198.51.100.12:8080"),
            "vip[0].backend[1].address: backend port not supported with IP-in-IP encapsulation (the VIP's port is kept), got \"198.51.100.12:8080\" (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "203.0.113.10"),
            "vip[0].backend[1].address: backend 203.0.113.10 is the VIP or the LB's own address (a forwarding loop) (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "192.0.2.1"),
            "vip[0].backend[1].address: backend 192.0.2.1 is the VIP or the LB's own address (a forwarding loop) (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "2001:db8:b::12"),
            "vip[0].backend[1].address: backend 2001:db8:b::12 is not of the same address family as VIP 203.0.113.10:80/tcp (line 14)",
        ),
        (
            with_vip("").replace("198.51.100.12", "not-an-address"),
            "vip[0].backend[1].address: invalid backend address \"not-an-address\": expected ADDR, ADDR:PORT or [V6ADDR]:PORT (line 14)",
        ),
        (
            with_vip("").replace("state = \"drain\"", "state = \"paused\""),
            "vip[0].backend[2].state: expected \"active\", \"drain\" or \"down\", got \"paused\" (line 18)",
        ),
        (
            format!("{BASE}{VIP}{VIP}"),
            "vip[1]: duplicate VIP 203.0.113.10:80/tcp (also vip[0]) (line 20)",
        ),
        (
            format!("interface = \"eth0\"\n{VIP}"),
            "encap.source_v4: required by vip[0] (203.0.113.10:80/tcp): the outer IPv4 source address (line 3)",
        ),
        (
            format!("{BASE}[nexthop]\nmode = \"gateway\"\n"),
            "nexthop.gateway_mac: required with mode = \"gateway\" (line 6)",
        ),
        (
            format!("{BASE}[nexthop]\nmode = \"gateway\"\ngateway_mac = \"01:00:5e:00:00:01\"\n"),
            "nexthop.gateway_mac: expected a unicast MAC like \"02:00:00:00:00:fe\", got \"01:00:5e:00:00:01\" (line 8)",
        ),
        (
            format!("{BASE}[conntrack]\ncapacity = 10\n"),
            "conntrack.capacity: expected a value from 1024 to 67108864, got 10 (line 7)",
        ),
        (
            format!("{BASE}[nexthop]\ncache_ms = 60000\n"),
            "nexthop.cache_ms: expected a value from 0 to 10000, got 60000 (line 7)",
        ),
        (
            format!(
                "{BASE}[nexthop]\nmode = \"gateway\"\ngateway_mac = \"02:00:00:00:00:fe\"\ncache_ms = 5\n"
            ),
            "nexthop.cache_ms: only used with mode = \"fib\" (gateway mode looks nothing up) (line 9)",
        ),
        (
            format!("{BASE}[conntrack]\nsyn_capacity = 10000\n"),
            "conntrack.syn_capacity: expected a power of two (SYN cache slots), got 10000; the nearest are 8192 and 16384 (line 7)",
        ),
        (
            format!("{BASE}[conntrack]\nsyn_capacity = 8388608\n"),
            "conntrack.syn_capacity: expected a value from 256 to 4194304, got 8388608 (line 7)",
        ),
        (
            format!("{BASE}[metrics]\nlisten = \"localhost:9469\"\n"),
            "metrics.listen: expected ADDR:PORT with a port from 1 to 65535 (IPv6 in brackets), got \"localhost:9469\" (line 7)",
        ),
        (
            format!("{BASE}[metrics]\nlisten = \"127.0.0.1:0\"\n"),
            "metrics.listen: expected ADDR:PORT with a port from 1 to 65535 (IPv6 in brackets), got \"127.0.0.1:0\" (line 7)",
        ),
        (
            format!("{BASE}[metrics]\nconnections_interval_ms = 10\n"),
            "metrics.connections_interval_ms: expected a value from 100 to 3600000, got 10 (line 7)",
        ),
        (
            format!("{BASE}[metrics]\nenabled = \"yes\"\n"),
            "metrics.enabled: invalid type: string \"yes\", expected a boolean (line 7)",
        ),
        (
            format!("xdp_mode = \"offload\"{BASE}"),
            "xdp_mode: expected \"auto\", \"native\" or \"skb\", got \"offload\" (line 1)",
        ),
        (
            format!("max_table_memory_mib = 1{}", with_vip(""))
                .replace("[[vip]]\n", "[[vip]]\ntable_size = 4000037\n"),
            "max_table_memory_mib: table memory 123 MiB exceeds limit 1 MiB (two table buffers per VIP, each slot 16 bytes in the kernel) (line 1)",
        ),
        (
            format!("{BASE}[announce]\ntable = 254\n"),
            "announce.table: expected a routing table of its own (1 to 4294967295 but 253, 254 and 255, the kernel's default, main and local tables), got 254 (line 7)",
        ),
        (
            format!("{BASE}[announce]\nprotocol = 12\n"),
            "announce.protocol: expected a route protocol number from 5 to 255 but 12 (0 to 4 are the kernel's, 12 is BIRD's own, which BIRD never learns), got 12 (line 7)",
        ),
        (
            format!("{BASE}[announce]\nprotocol = 256\n"),
            "announce.protocol: expected a route protocol number from 5 to 255 but 12 (0 to 4 are the kernel's, 12 is BIRD's own, which BIRD never learns), got 256 (line 7)",
        ),
        (
            format!("{BASE}[announce]\nenabled = \"yes\"\n"),
            "announce.enabled: invalid type: string \"yes\", expected a boolean (line 7)",
        ),
        // Duplicate keys: the key path of the first definition, the line of the second.
        (
            with_vip("").replace("port = 80\n", "port = 80\nport = 81\n"),
            "vip[0].port: duplicate key (line 10)",
        ),
        (
            format!("{BASE}[encap]\nflow_label = \"hash\"\n"),
            "encap: duplicate key (line 6)",
        ),
        (
            format!("mtu = 1500\nmtu = 1400\n{BASE}"),
            "mtu: duplicate key (line 2)",
        ),
        // More semantics, keys given and keys left out.
        (
            BASE.replace("\"eth0\"", "\"eth0/1\""),
            "interface: expected an interface name of 1 to 15 characters, got \"eth0/1\" (line 2)",
        ),
        (
            format!("control_socket = \"lb.sock\"{BASE}"),
            "control_socket: expected an absolute path, got \"lb.sock\" (line 1)",
        ),
        (
            format!("mtu = 1000{}", with_vip(""))
                .replace("203.0.113.10", "2001:db8::10")
                .replace("198.51.100.1", "2001:db8:b::1"),
            "mtu: IPv6 VIP [2001:db8::10]:80/tcp needs at least 1280, got 1000 (line 1)",
        ),
        (
            format!("{BASE}flow_label = \"random\"\n"),
            "encap.flow_label: expected \"inner\" or \"hash\", got \"random\" (line 6)",
        ),
        (
            format!("{BASE}source_prefix_v4 = \"10.0.0.0/32\"\n"),
            "encap.source_prefix_v4: expected a prefix length from 8 to 31 (its host bits come from the flow hash), got 10.0.0.0/32 (line 6)",
        ),
        (
            format!("{BASE}gue_port = 0\n"),
            "encap.gue_port: expected a value from 1 to 65535, got 0 (line 6)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\nencap = \"vxlan\"\n"),
            "vip[0].encap: expected \"ipip\" or \"gue\", got \"vxlan\" (line 8)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\nhash = \"sh\"\n"),
            "vip[0].hash: expected one of \"5-tuple\", \"src\", \"src+dport\", \"dport\", got \"sh\" (line 8)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\nhash_source_prefix = 24\n"),
            "vip[0].hash_source_prefix: applies only with hash = \"src\" or \"src+dport\" (the hashed client address), not with hash = \"5-tuple\" (line 8)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nhash = \"src\"\nhash_source_prefix = 33\n",
            ),
            "vip[0].hash_source_prefix: expected a prefix length from 1 to 32 for VIP 203.0.113.10:80/tcp, got 33 (line 9)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\npersistence_timeout_secs = 300\n"),
            "vip[0].persistence_timeout_secs: applies only with hash = \"src\" or \"src+dport\" (a client is its source address), not with hash = \"5-tuple\" (line 8)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nhash = \"dport\"\npersistence_timeout_secs = 300\n",
            ),
            "vip[0].persistence_timeout_secs: applies only with hash = \"src\" or \"src+dport\" (a client is its source address), not with hash = \"dport\" (line 9)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nhash = \"src\"\nfast_path = true\npersistence_timeout_secs = 300\n",
            ),
            "vip[0].persistence_timeout_secs: does not apply with fast_path = true (the fast path's table decides new flows without the client's affinity) (line 10)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nhash = \"src\"\npersistence_timeout_secs = 2678401\n",
            ),
            "vip[0].persistence_timeout_secs: expected at most 2678400 seconds (31 days), got 2678401 (line 9)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nhash = \"src\"\npersistence_timeout_secs = 22\n",
            ),
            "vip[0].persistence_timeout_secs: expected at least 23 seconds, got 22: twice the period of the conntrack walk that keeps busy clients' pins alive (metrics.connections_interval_ms = 10000) plus 3 s (line 9)",
        ),
        (
            format!("{BASE}[conntrack]\npersistence_capacity = 10\n"),
            "conntrack.persistence_capacity: expected a value from 256 to 16777216, got 10 (line 7)",
        ),
        (
            format!("{BASE}[conntrack]\nexceptions_capacity = 10\n"),
            "conntrack.exceptions_capacity: expected a value from 256 to 16777216, got 10 (line 7)",
        ),
        (
            format!("{BASE}[icmp]\nrate_limit = 0\n"),
            "icmp.rate_limit: expected a value from 1 to 1000000, got 0 (line 7)",
        ),
        (
            format!("{BASE}[health]\ncoalesce_ms = 0\n"),
            "health.coalesce_ms: expected a value from 1 to 10000, got 0 (line 7)",
        ),
        (
            with_vip("").replace("port = 80", "port = 0"),
            "vip[0].port: expected a port from 1 to 65535, got 0 (line 9)",
        ),
        (
            with_vip("").replace("address = \"203.0.113.10\"", "address = \"vip.example\""),
            "vip[0].address: expected an IP address, got \"vip.example\" (line 8)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\nbackend_family = \"ipx\"\n"),
            "vip[0].backend_family: expected \"ipv4\" or \"ipv6\", got \"ipx\" (line 8)",
        ),
        (
            with_vip("").replace(
                "[[vip]]\n",
                "[[vip]]\nallowed_sources = [\n  \"10.0.0.0/8\",\n  \"2001:db8::/32\",\n]\n",
            ),
            "vip[0].allowed_sources[1]: 2001:db8::/32 is not of the address family of VIP 203.0.113.10:80/tcp (its clients) (line 10)",
        ),
        (
            with_vip("").replace("[[vip]]\n", "[[vip]]\nallowed_sources = []\n"),
            "vip[0].allowed_sources: an empty list would refuse every client; leave the key out to allow all (line 8)",
        ),
        (
            format!("{BASE}{VIP}")
                .replace("source_v6 = \"2001:db8:c::1\"\n", "")
                .replace("[[vip]]\n", "[[vip]]\nbackend_family = \"ipv6\"\n")
                .replace("198.51.100.1", "2001:db8:b::1"),
            "encap.source_v6: required by vip[0] (203.0.113.10:80/tcp): the outer IPv6 source address (line 6)",
        ),
    ];
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for (_, expected) in &cases {
        assert!(expected.contains(" (line "), "no line in {expected}");
    }
    let mut mismatches = Vec::new();
    for (text, expected) in cases {
        let got = errors(&text);
        if !got.iter().any(|e| e == expected) {
            mismatches.push(format!(
                "expected: {expected}\n     got: {}",
                got.join(" | ")
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn metrics_are_served_on_the_default_address_unless_disabled() {
    let on = load(&format!("{BASE}{VIP}")).unwrap().config.metrics;
    assert_eq!(on.listen, Some(defaults::METRICS_LISTEN.parse().unwrap()));
    assert_eq!(on.connections_interval, Duration::from_secs(10));
    let off = load(&format!("{BASE}[metrics]\nenabled = false\n{VIP}"))
        .unwrap()
        .config
        .metrics;
    assert_eq!(off.listen, None);
    let v6 = load(&format!("{BASE}[metrics]\nlisten = \"[::1]:9100\"\n{VIP}"))
        .unwrap()
        .config
        .metrics;
    assert_eq!(v6.listen, Some("[::1]:9100".parse().unwrap()));
}

#[test]
fn table_memory_counts_both_buffers_of_each_vip() {
    // One 32,771-slot buffer takes 512 KiB and would fit 1 MiB; the kernel holds two per
    // VIP once its table changed (the live one and the previous), just over 1 MiB.
    let one_vip = format!("max_table_memory_mib = 1{BASE}{VIP}")
        .replace("[[vip]]\n", "[[vip]]\ntable_size = 32771\n");
    assert_eq!(
        errors(&one_vip),
        [
            "max_table_memory_mib: table memory 2 MiB exceeds limit 1 MiB (two table buffers per VIP, each slot 16 bytes in the kernel) (line 1)"
        ]
    );
    let loaded = load(&one_vip.replace("table_size = 32771", "table_size = 32749"))
        .expect("2 x 32,750 cells of 16 bytes fit 1 MiB");
    assert_eq!(loaded.config.max_table_memory, 1 << 20);
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let text = format!("{BASE}{VIP}")
        .replace("198.51.100.12", "198.51.100.11")
        .replace(
            "protocol = \"tcp\"",
            "protocol = \"tcp\"\ntable_size = 65536",
        );
    assert_eq!(errors(&text).len(), 2);
}

#[test]
fn all_weights_zero_is_a_warning_not_an_error() {
    // Every backend drained: valid, with a warning; the VIP drops new flows (BR-03.T3).
    let text = format!("{BASE}{VIP}")
        .replace("weight = 2", "weight = 0")
        .replace(
            "address = \"198.51.100.11\"",
            "address = \"198.51.100.11\"\nweight = 0",
        );
    let loaded = load(&text).expect("valid");
    assert_eq!(
        loaded.warnings,
        vec!["VIP 203.0.113.10:80/tcp has no backend with weight > 0: new flows to it are dropped"]
    );
}

#[test]
fn extreme_weights_are_accepted() {
    // Weights are u32, and the largest is a valid weight: ratios are computed exactly
    // (BR-01.T2).
    let text = format!("{BASE}{VIP}").replace("weight = 2", "weight = 4294967295");
    assert_eq!(
        load(&text).expect("valid").config.vips[0].backends[1].weight,
        u32::MAX
    );
}

#[test]
fn announce_defaults_off_and_takes_its_table_and_protocol() {
    let off = load(BASE).expect("valid").config.announce;
    assert_eq!(off, crate::config::Announce::default());
    assert!(!off.enabled);
    let on = load(&format!(
        "{BASE}[announce]\nenabled = true\ntable = 4242\nprotocol = 200\n"
    ))
    .expect("valid")
    .config
    .announce;
    assert_eq!(
        on,
        crate::config::Announce {
            enabled: true,
            table: 4242,
            protocol: 200
        }
    );
}

/// Several type errors in one file (a string for a number, an unknown key, a number for
/// a string, a wrong type in an array of tables) are reported together, each with its
/// key path and line; a required key with a wrong type is not reported again as missing.
#[test]
fn several_type_errors_are_reported_at_once() {
    let text = "interface = \"eth0\"\nmtu = \"big\"\nbogus = 1\n[encap]\nsource_v4 = 7\n\
                [[vip]]\naddress = \"203.0.113.10\"\nport = \"eighty\"\nprotocol = \"tcp\"\n\
                [[vip.backend]]\naddress = \"198.51.100.11\"\nweight = -1\n";
    let errors = Config::from_toml(text).unwrap_err().0;
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    for expected in [
        "mtu: expected an integer >= 0 and <= 65535, got \"big\" (line 2)",
        "bogus: unknown field `bogus`",
        "encap.source_v4: invalid type: integer `7`, expected a string (line 5)",
        "vip[0].port: expected an integer >= 0 and <= 65535, got \"eighty\" (line 8)",
        "vip[0].backend[0].weight: expected an integer >= 0 and <= 4294967295, got -1 (line 12)",
    ] {
        assert!(
            shown.iter().any(|s| s.starts_with(expected)),
            "missing {expected:?} in {shown:#?}"
        );
    }
    assert_eq!(shown.len(), 5, "{shown:#?}");
}

#[test]
fn the_fast_path_is_off_by_default_and_stays_off_in_a_fleet_with_a_warning() {
    let plain = load(&format!("{BASE}{VIP}")).expect("valid");
    assert!(!plain.config.vips[0].fast_path);
    let vip = VIP.replace("protocol = \"tcp\"", "protocol = \"tcp\"\nfast_path = true");
    let alone = load(&format!("{BASE}{vip}")).expect("valid");
    assert!(alone.config.vips[0].fast_path);
    assert!(alone.warnings.is_empty(), "{:?}", alone.warnings);
    let fleet = load(&format!("{BASE}[announce]\nenabled = true\n{vip}")).expect("valid");
    assert!(!fleet.config.vips[0].fast_path, "rule F1");
    assert_eq!(
        fleet.warnings,
        [
            "VIP 203.0.113.10:80/tcp: fast_path stays off while [announce] is enabled (a fleet \
          member: a flow moved between instances would find no pin without the backends' \
          second chance)"
        ]
    );
}

#[test]
fn hash_fields_are_read_and_a_whole_address_prefix_is_no_prefix() {
    let hashed = |keys: &str| {
        let text = format!("{BASE}{VIP}").replace("[[vip]]\n", &format!("[[vip]]\n{keys}"));
        load(&text).expect("valid").config.vips[0].hash
    };
    use lb_common::hash_fields::{Fields, HashFields};
    assert_eq!(hashed(""), HashFields::default());
    assert_eq!(
        hashed("hash = \"src\"\nhash_source_prefix = 24\n"),
        HashFields {
            fields: Fields::Src,
            prefix: 24,
            affinity_secs: 0,
        }
    );
    assert_eq!(
        hashed("hash = \"src+dport\"\nhash_source_prefix = 32\n"),
        HashFields {
            fields: Fields::SrcDport,
            prefix: 0,
            affinity_secs: 0,
        }
    );
    assert_eq!(hashed("hash = \"dport\"\n").fields, Fields::Dport);
    assert_eq!(
        hashed("hash = \"src\"\nhash_source_prefix = 24\npersistence_timeout_secs = 10800\n")
            .affinity_secs,
        10_800,
        "a persistence timeout with source fields"
    );
    assert_eq!(
        hashed("persistence_timeout_secs = 0\n").affinity_secs,
        0,
        "0: no affinity, with any fields"
    );
    // A faster conntrack walk allows a shorter timeout: 2 x 0.5 s + 3 s.
    let fast = format!("{BASE}[metrics]\nconnections_interval_ms = 500\n{VIP}").replace(
        "[[vip]]\n",
        "[[vip]]\nhash = \"src\"\npersistence_timeout_secs = 4\n",
    );
    assert_eq!(
        load(&fast).expect("valid").config.vips[0]
            .hash
            .affinity_secs,
        4
    );
}

#[test]
fn the_second_chance_is_off_by_default_and_needs_gue() {
    let plain = load(&format!("{BASE}{VIP}")).expect("valid");
    assert!(!plain.config.vips[0].second_chance);
    let ipip = VIP.replace(
        "protocol = \"tcp\"",
        "protocol = \"tcp\"\nsecond_chance = true",
    );
    // The line is the key's own.
    assert_eq!(
        errors(&format!("{BASE}{ipip}")),
        [
            "vip[0].second_chance: second_chance = true needs encap = \"gue\": candidates \
             travel in the GUE header, IP-in-IP has no room for them (line 11)"
        ]
    );
    let gue = VIP.replace(
        "protocol = \"tcp\"",
        "protocol = \"tcp\"\nencap = \"gue\"\nsecond_chance = true",
    );
    let loaded = load(&format!("{BASE}{gue}")).expect("valid");
    assert!(loaded.config.vips[0].second_chance);
}
