//! `[health]`, `[vip.health]` and `[vip.backend.health]` in whole configuration files:
//! the bad configurations of the health-check issue are refused naming their key, a
//! backend's table overrides its VIP's, and a runtime-added backend gets the VIP's.

use std::time::Duration;

use crate::config::Config;
use lb_health::{
    policy::AllDown,
    settings::{Check, Mode},
};
use lb_maglev::BackendKey;

const BASE: &str = "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n";

/// A file with one VIP whose `[vip.health]` is `vip_health` (none when empty) and two
/// backends, the second with `backend_health` as its `[vip.backend.health]`.
fn file(vip_health: &str, backend_health: &str) -> String {
    let mut s = format!(
        "{BASE}[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = 1009\n"
    );
    if !vip_health.is_empty() {
        s.push_str(&format!("[vip.health]\n{vip_health}\n"));
    }
    s.push_str("[[vip.backend]]\naddress = \"198.51.100.11\"\n");
    s.push_str("[[vip.backend]]\naddress = \"198.51.100.12\"\n");
    if !backend_health.is_empty() {
        s.push_str(&format!("[vip.backend.health]\n{backend_health}\n"));
    }
    s
}

fn errors(text: &str) -> Vec<String> {
    match Config::from_toml(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn key(s: &str) -> BackendKey {
    s.parse().unwrap()
}

#[test]
fn the_issues_bad_configurations_are_refused_naming_the_key() {
    let cases = [
        (
            file("kind = \"icmp\"", ""),
            "vip[0].health.kind: expected \"tcp\", \"http\", \"https\", \"dns\" or \"none\", got \"icmp\" (line 10)",
        ),
        (
            file("kind = \"tcp\"\ninterval_ms = 1000\ntimeout_ms = 1000", ""),
            "vip[0].health.timeout_ms: expected a value below interval_ms (1000 ms), got 1000 (line 12)",
        ),
        (
            file("kind = \"tcp\"\nrise = 0", ""),
            "vip[0].health.rise: expected a value from 1 to 100, got 0 (line 11)",
        ),
        (
            file("kind = \"tcp\"\nfall = 0", ""),
            "vip[0].health.fall: expected a value from 1 to 100, got 0 (line 11)",
        ),
        (
            file("kind = \"http\"\npath = \"healthz\"", ""),
            "vip[0].health.path: expected a path starting with '/', got \"healthz\" (line 11)",
        ),
        (
            file("kind = \"http\"\nstatus = \"\"", ""),
            "vip[0].health.status: expected status codes from 100 to 599 or ranges of them like \"200-399\" (comma-separated), got \"\" (line 11)",
        ),
        (
            file("kind = \"http\"\nstatus = \"399-200\"", ""),
            "vip[0].health.status: expected status codes from 100 to 599 or ranges of them like \"200-399\" (comma-separated), got \"399-200\" (line 11)",
        ),
        // The same in a backend's table: the backend's key is named.
        (
            file("kind = \"tcp\"", "kind = \"ping\""),
            "vip[0].backend[1].health.kind: expected \"tcp\", \"http\", \"https\", \"dns\" or \"none\", got \"ping\" (line 16)",
        ),
        (
            file("kind = \"tcp\"\ninterval_ms = 500", "timeout_ms = 800"),
            "vip[0].backend[1].health.timeout_ms: expected a value below interval_ms (500 ms), got 800 (line 17)",
        ),
        (
            file("kind = \"http\"", "rise = 0"),
            "vip[0].backend[1].health.rise: expected a value from 1 to 100, got 0 (line 16)",
        ),
        (
            file("kind = \"http\"", "path = \"x\""),
            "vip[0].backend[1].health.path: expected a path starting with '/', got \"x\" (line 16)",
        ),
        (
            file("kind = \"tcp\"", "all_down = \"closed\""),
            "vip[0].backend[1].health.all_down: only allowed in the VIP's health table (it applies to all its backends) (line 16)",
        ),
        (
            format!("{BASE}[health]\ncoalesce_ms = 0\n"),
            "health.coalesce_ms: expected a value from 1 to 10000, got 0 (line 5)",
        ),
        (
            format!("{BASE}[health]\nmax_concurrent_probes = 0\n"),
            "health.max_concurrent_probes: expected a value from 1 to 65536, got 0 (line 5)",
        ),
    ];
    let mut mismatches = Vec::new();
    for (text, expected) in &cases {
        let got = errors(text);
        if !got.iter().any(|e| e == expected) {
            mismatches.push(format!(
                "expected: {expected}\n     got: {}",
                got.join(" | ")
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // A type error is serde's, at the key's path and line.
    let e = errors(&file("kind = \"tcp\"\nfall = \"three\"", ""));
    assert!(
        e[0].starts_with("vip[0].health.fall: invalid type: string \"three\""),
        "{e:?}"
    );
    let e = errors(&file("kind = \"tcp\"\nintervall_ms = 5", ""));
    assert!(
        e[0].starts_with("vip[0].health.intervall_ms: unknown field"),
        "{e:?}"
    );
}

#[test]
fn backends_inherit_the_vips_probe_and_may_override_it() {
    let text = file(
        "kind = \"http\"\npath = \"/healthz\"\ninterval_ms = 500\npanic_threshold = 40\nall_down = \"closed\"",
        "path = \"/ready\"\nmode = \"tunnel\"",
    );
    let c = Config::from_toml(&text).unwrap().config;
    let h = &c.vips[0].health;
    assert_eq!(h.policy().panic_threshold, 40);
    assert_eq!(h.policy().all_down, AllDown::Closed);
    let first = h.probe_of(&key("198.51.100.11")).expect("probed");
    let second = h.probe_of(&key("198.51.100.12")).expect("probed");
    let path = |c: &Check| match c {
        Check::Http(h) => h.path.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(path(&first.check), "/healthz");
    assert_eq!(first.mode, Mode::Direct);
    assert_eq!(path(&second.check), "/ready");
    assert_eq!(second.mode, Mode::Tunnel);
    assert_eq!(second.interval, Duration::from_millis(500));
    assert_eq!(first.port, 80, "the VIP's port by default");
    // A backend added at run time has the VIP's probe.
    assert_eq!(h.probe_of(&key("198.51.100.99")), Some(first));
    // `kind = "none"` on a backend: not probed.
    let text = file("kind = \"tcp\"", "kind = \"none\"");
    let c = Config::from_toml(&text).unwrap().config;
    assert!(c.vips[0].health.probe_of(&key("198.51.100.12")).is_none());
    assert!(c.vips[0].health.probe_of(&key("198.51.100.11")).is_some());
}

#[test]
fn without_health_tables_nothing_is_probed_and_the_checker_has_its_defaults() {
    let c = Config::from_toml(&file("", "")).unwrap().config;
    assert!(c.vips[0].health.probe_of(&key("198.51.100.11")).is_none());
    assert_eq!(c.health.coalesce_window, Duration::from_millis(100));
    assert_eq!(c.health.max_concurrent, 256);
}
