//! [`BackendKey`]: parsing, the canonical text of every form, and the order.

use super::*;

fn key(text: &str) -> BackendKey {
    text.parse()
        .unwrap_or_else(|err| panic!("{text:?} should parse: {err}"))
}

#[test]
fn canonical_text_of_every_form() {
    for (input, canonical) in [
        ("198.51.100.11", "198.51.100.11"),
        ("198.51.100.11:8080", "198.51.100.11:8080"),
        ("2001:db8::1", "2001:db8::1"),
        ("2001:0db8:0:0::1", "2001:db8::1"),
        ("2001:DB8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
        ("[2001:db8::1]:80", "[2001:db8::1]:80"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("::", "::"),
        ("::1", "::1"),
        ("[::]:0", "[::]:0"),
        ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
        ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1"),
        ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
        ("1:0:0:0:0:0:0:0", "1::"),
        (
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ),
        ("64:ff9b::198.51.100.11", "64:ff9b::c633:640b"),
        ("::198.51.100.11", "::c633:640b"),
        ("::ffff:198.51.100.11", "198.51.100.11"),
        ("::FFFF:c633:640b", "198.51.100.11"),
        ("[::ffff:198.51.100.11]:80", "198.51.100.11:80"),
    ] {
        assert_eq!(key(input).to_string(), canonical, "input {input:?}");
        assert_eq!(key(canonical), key(input), "{canonical:?} round trip");
    }
}

#[test]
fn longest_text_fits() {
    let text = key("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535").to_string();
    assert_eq!(text.len(), MAX_KEY_TEXT_LEN);
}

#[test]
fn ipv6_text_matches_std_for_non_mapped_addresses() {
    // std is only a cross-check here: the canonical text must not depend on it.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..20_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // Make zero groups frequent so that every run length occurs.
        let mut groups = [0u16; 8];
        for (n, group) in groups.iter_mut().enumerate() {
            #[expect(
                clippy::cast_possible_truncation,
                reason = "takes one byte of the random state on purpose"
            )]
            let bits = (state >> (n * 8)) as u8;
            *group = if bits & 1 == 0 {
                0
            } else {
                u16::from(bits) << 3
            };
        }
        let ip = Ipv6Addr::from(groups);
        if ip.to_ipv4_mapped().is_some() {
            continue;
        }
        assert_eq!(BackendKey::from(ip).to_string(), ip.to_string());
    }
}

#[test]
fn mapped_ipv6_is_the_ipv4_backend() {
    assert_eq!(key("::ffff:198.51.100.11"), key("198.51.100.11"));
    assert_eq!(
        key("::ffff:198.51.100.11").ip(),
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 11))
    );
    let sock: SocketAddr = "[::ffff:198.51.100.11]:80".parse().unwrap();
    assert_eq!(BackendKey::from(sock), key("198.51.100.11:80"));
}

#[test]
fn ports_are_part_of_the_identity() {
    let a = key("198.51.100.11:8080");
    let b = key("198.51.100.11:8081");
    let c = key("198.51.100.11");
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.port(), Some(8080));
    assert_eq!(c.port(), None);
}

#[test]
fn invalid_addresses_are_named() {
    for text in [
        "",
        "198.51.100.300",
        "198.51.100",
        "198.51.100.11:",
        "198.51.100.11:65536",
        "2001:db8::1:80:1:2:3:4:5",
        "[198.51.100.11]:80",
        "[2001:db8::1]:",
        "[fe80::1%2]:80",
        "fe80::1%eth0",
        " 198.51.100.11",
        "backend.example",
    ] {
        let err = text.parse::<BackendKey>().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid backend address {text:?}: expected ADDR, ADDR:PORT or [V6ADDR]:PORT")
        );
    }
}

#[test]
fn order_is_family_then_address_then_port() {
    let ordered = [
        "0.0.0.0",
        "198.51.100.2",
        "198.51.100.11",
        "198.51.100.11:1",
        "198.51.100.11:8080",
        "255.255.255.255",
        "::",
        "::1",
        "[::1]:53",
        "2001:db8::1",
    ];
    for pair in ordered.windows(2) {
        assert!(key(pair[0]) < key(pair[1]), "{} < {}", pair[0], pair[1]);
    }
}

#[test]
fn display_honours_width() {
    assert_eq!(format!("{:<15}|", key("192.0.2.1")), "192.0.2.1      |");
}

#[test]
fn serde_uses_the_canonical_text() {
    let k = key("2001:0db8::0001");
    let json = serde_json::to_string(&k).unwrap();
    assert_eq!(json, "\"2001:db8::1\"");
    assert_eq!(serde_json::from_str::<BackendKey>(&json).unwrap(), k);
}
