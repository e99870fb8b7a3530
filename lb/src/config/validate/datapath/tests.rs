//! The data plane's optional keys: `[icmp]`, the per-flow outer headers of `[encap]`,
//! `conntrack.fragment_capacity`, `vip.backend_family` and `vip.allowed_sources`: what
//! they load as, and each bad value named with its key path.

use lb_common::types::{
    CONFIG_FLOW_LABEL_HASH, CONFIG_ICMP_ECHO, CONFIG_ICMP_TOO_BIG, CONFIG_SOURCE_PREFIX_V4,
    CONFIG_SOURCE_PREFIX_V6, CONFIG_SOURCE_RANGES,
};

use super::super::{parse, tests::BASE};
use crate::{config::Config, controller::Desired};
use lb_dataplane::prefix::Prefix;

const VIP: &str = r#"
[[vip]]
address = "203.0.113.10"
port = 80
protocol = "tcp"
[[vip.backend]]
address = "198.51.100.11"
"#;

fn load(text: &str) -> Config {
    match parse(text) {
        Ok(l) => l.config,
        Err(e) => panic!("refused: {e}\n{text}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

/// `text` with `line` added after `section`'s header (added at the end if absent).
fn with(section: &str, line: &str) -> String {
    let text = format!("{BASE}{VIP}");
    let header = format!("[{section}]\n");
    match text.find(&header) {
        Some(at) => {
            let at = at + header.len();
            format!("{}{line}\n{}", &text[..at], &text[at..])
        }
        None => format!("{text}\n{header}{line}\n"),
    }
}

#[test]
fn defaults_answer_icmp_and_keep_one_outer_source() {
    let c = load(&format!("{BASE}{VIP}"));
    assert!(c.icmp.too_big && c.icmp.echo);
    assert_eq!((c.icmp.rate_limit, c.icmp.burst), (1000, 50));
    assert_eq!(c.frag_capacity, 8192);
    assert_eq!(c.outer, Default::default());
    assert!(!c.vips[0].ipv6_backends && c.vips[0].allowed_sources.is_empty());
    let cfg = Desired::from_config(&c, [2, 0, 0, 0, 0, 1])
        .globals
        .lb_config();
    assert_eq!(cfg.flags & CONFIG_ICMP_TOO_BIG, CONFIG_ICMP_TOO_BIG);
    assert_eq!(cfg.flags & CONFIG_ICMP_ECHO, CONFIG_ICMP_ECHO);
    let optional = CONFIG_SOURCE_RANGES
        | CONFIG_SOURCE_PREFIX_V4
        | CONFIG_SOURCE_PREFIX_V6
        | CONFIG_FLOW_LABEL_HASH;
    assert_eq!(cfg.flags & optional, 0, "nothing optional by default");
    // GCRA: 1 ms between messages, 49 of them ahead.
    assert_eq!(
        (cfg.icmp_interval_ns, cfg.icmp_burst_ns),
        (1_000_000, 49_000_000)
    );
}

#[test]
fn the_optional_keys_reach_the_data_plane_configuration() {
    let text = format!(
        "{BASE}source_prefix_v4 = \"172.16.0.0/16\"\nsource_prefix_v6 = \"2001:db8:1b::/64\"\n\
         flow_label = \"hash\"\n[icmp]\ntoo_big = false\necho = false\nrate_limit = 10\nburst = 1\n\
         {VIP}allowed_sources = [\"198.18.0.0/15\", \"192.0.2.0/24\"]\n"
    );
    // The [[vip.backend]] table above is the VIP's; put the list on the VIP itself.
    let text = text.replace(
        "protocol = \"tcp\"\n[[vip.backend]]\naddress = \"198.51.100.11\"\nallowed_sources",
        "protocol = \"tcp\"\nallowed_sources",
    );
    let text = format!("{text}[[vip.backend]]\naddress = \"198.51.100.11\"\n");
    let c = load(&text);
    assert_eq!(
        c.vips[0].allowed_sources,
        vec![
            "192.0.2.0/24".parse::<Prefix>().unwrap(),
            "198.18.0.0/15".parse().unwrap()
        ],
        "sorted"
    );
    let cfg = Desired::from_config(&c, [2, 0, 0, 0, 0, 1])
        .globals
        .lb_config();
    assert_eq!(cfg.flags & (CONFIG_ICMP_TOO_BIG | CONFIG_ICMP_ECHO), 0);
    for flag in [
        CONFIG_SOURCE_RANGES,
        CONFIG_SOURCE_PREFIX_V4,
        CONFIG_SOURCE_PREFIX_V6,
        CONFIG_FLOW_LABEL_HASH,
    ] {
        assert_eq!(cfg.flags & flag, flag, "flag {flag:#x}");
    }
    assert_eq!((cfg.icmp_interval_ns, cfg.icmp_burst_ns), (100_000_000, 0));
    assert_eq!(cfg.src_prefix_v4, [172, 16, 0, 0]);
    assert_eq!(cfg.src_host_mask_v4, u32::from_ne_bytes([0, 0, 255, 255]));
    assert_eq!(cfg.src_prefix_v6[..6], [0x20, 0x01, 0x0d, 0xb8, 0, 0x1b]);
    assert_eq!(cfg.src_host_mask_v6, u32::MAX);
}

#[test]
fn an_ipv4_vip_may_have_ipv6_backends_when_it_says_so() {
    let vip = "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\n\
               backend_family = \"ipv6\"\n[[vip.backend]]\naddress = \"2001:db8:b::11\"\n";
    let c = load(&format!("{BASE}{vip}"));
    assert!(c.vips[0].ipv6_backends);
    assert_eq!(
        errors(&format!(
            "{BASE}{}",
            vip.replace("2001:db8:b::11", "198.51.100.11")
        )),
        vec![
            "vip[0].backend[0].address: backend 198.51.100.11 is not of the VIP's \
             backend_family (\"ipv6\") (line 12)"
        ]
    );
    assert_eq!(
        errors(&format!("{BASE}{vip}").replace("[encap]", "mtu = 1000\n[encap]")),
        vec![
            "mtu: VIP with IPv6 backends 203.0.113.10:80/tcp needs at least 1280, got 1000 (line 3)"
        ]
    );
}

#[test]
fn bad_values_are_named_with_their_key_path() {
    let vip6 = "[[vip]]\naddress = \"2001:db8:f::10\"\nport = 80\nprotocol = \"tcp\"\n\
                backend_family = \"ipv4\"\n[[vip.backend]]\naddress = \"2001:db8:b::11\"\n";
    let list = |entries: &str| {
        format!("{BASE}{VIP}").replace(
            "protocol = \"tcp\"\n",
            &format!("protocol = \"tcp\"\nallowed_sources = [{entries}]\n"),
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            with("icmp", "rate_limit = 0"),
            "icmp.rate_limit: expected a value from 1 to 1000000, got 0 (line 15)",
        ),
        (
            with("icmp", "burst = 100001"),
            "icmp.burst: expected a value from 1 to 100000, got 100001 (line 15)",
        ),
        (
            with("icmp", "echo = \"yes\""),
            "icmp.echo: invalid type: string \"yes\", expected a boolean (line 15)",
        ),
        (
            with("encap", "flow_label = \"random\""),
            "encap.flow_label: expected \"inner\" or \"hash\", got \"random\" (line 4)",
        ),
        (
            with("encap", "source_prefix_v4 = \"172.16.0.1/16\""),
            "encap.source_prefix_v4: 172.16.0.1/16 has bits set beyond its length (did you \
             mean 172.16.0.0/16?) (line 4)",
        ),
        (
            with("encap", "source_prefix_v4 = \"172.16.0.0/32\""),
            "encap.source_prefix_v4: expected a prefix length from 8 to 31 (its host bits come \
             from the flow hash), got 172.16.0.0/32 (line 4)",
        ),
        (
            with("encap", "source_prefix_v6 = \"172.16.0.0/16\""),
            "encap.source_prefix_v6: expected an IPv6 prefix, got \"172.16.0.0/16\" (line 4)",
        ),
        (
            with("conntrack", "fragment_capacity = 10"),
            "conntrack.fragment_capacity: expected a value from 256 to 1048576, got 10 (line 15)",
        ),
        (
            format!("{BASE}{vip6}"),
            "vip[0].backend_family: IPv6 VIP [2001:db8:f::10]:80/tcp cannot have IPv4 backends \
             (IPv6-in-IPv4 is not supported) (line 10)",
        ),
        (
            format!("{BASE}{vip6}").replace("\"ipv4\"", "\"ip4\""),
            "vip[0].backend_family: expected \"ipv4\" or \"ipv6\", got \"ip4\" (line 10)",
        ),
        (
            list("\"192.0.2.0/24\", \"192.0.2.1/24\""),
            "vip[0].allowed_sources[1]: 192.0.2.1/24 has bits set beyond its length (did you \
             mean 192.0.2.0/24?) (line 11)",
        ),
        (
            list("\"2001:db8::/32\""),
            "vip[0].allowed_sources[0]: 2001:db8::/32 is not of the address family of VIP \
             203.0.113.10:80/tcp (its clients) (line 11)",
        ),
        (
            list("\"10.0.0.0/8\", \"10.0.0.0/8\""),
            "vip[0].allowed_sources[1]: duplicate prefix 10.0.0.0/8 (line 11)",
        ),
        (
            list("\"ten\""),
            "vip[0].allowed_sources[0]: expected a prefix like \"192.0.2.0/24\" or \
             \"2001:db8::/32\", got \"ten\" (line 11)",
        ),
        (
            list(""),
            "vip[0].allowed_sources: an empty list would refuse every client; leave the key \
             out to allow all (line 11)",
        ),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .map(|(text, expected)| (errors(text), expected))
        .filter(|(got, expected)| got.len() != 1 || got[0] != **expected)
        .map(|(got, expected)| format!("expected: {expected}\n     got: {}", got.join(" | ")))
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
