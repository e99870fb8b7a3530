//! Health tables from TOML text to settings, and every rejection naming its key.

use std::time::Duration;

use hickory_proto::rr::RecordType;

use super::*;
use crate::policy::AllDown;

const VIP: &str = "vip[0].health";
const B0: &str = "vip[0].backend[0].health";

fn file(text: &str) -> HealthFile {
    toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn vip(text: &str) -> Result<VipHealth, Vec<FieldError>> {
    VipHealth::from_file(VIP, Some(&file(text)), 80)
}

fn vip_errors(text: &str) -> Vec<String> {
    vip(text)
        .expect_err(text)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn backend_errors(vip_text: &str, backend_text: &str) -> Vec<String> {
    vip(vip_text)
        .unwrap()
        .backend(B0, Some(&file(backend_text)), None)
        .expect_err(backend_text)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn defaults_of_a_tcp_probe() {
    let v = vip(r#"kind = "tcp""#).unwrap();
    let p = v.probe.clone().unwrap();
    assert_eq!(p.check, Check::Tcp);
    assert_eq!(p.mode, Mode::Direct);
    assert_eq!(p.port, 80);
    assert_eq!(p.interval, Duration::from_secs(2));
    assert_eq!(p.timeout, Duration::from_secs(1));
    assert_eq!(p.thresholds, Thresholds { rise: 2, fall: 3 });
    assert_eq!(p.damping, Damping::default());
    assert_eq!(v.policy, FailurePolicy::default());
    // A backend without a table inherits; its own port comes before the VIP's.
    assert_eq!(v.backend(B0, None, None).unwrap(), Some(p.clone()));
    assert_eq!(v.backend(B0, None, Some(8080)).unwrap().unwrap().port, 8080);
}

#[test]
fn no_table_probes_nothing() {
    let v = VipHealth::from_file(VIP, None, 80).unwrap();
    assert_eq!(v.probe, None);
    assert_eq!(v.backend(B0, None, None).unwrap(), None);
    let v = vip(r#"kind = "none""#).unwrap();
    assert_eq!(v.probe, None);
}

#[test]
fn the_default_timeout_is_below_a_short_interval() {
    let p = vip("kind = \"tcp\"\ninterval_ms = 100")
        .unwrap()
        .probe
        .unwrap();
    assert_eq!(p.timeout, Duration::from_millis(50));
}

#[test]
fn http_and_https_settings() {
    let p = vip(r#"
        kind = "http"
        path = "/healthz?full=1"
        status = "200,204, 300-308"
        host = "www.example.com:8080"
        port = 8080
        mode = "tunnel"
    "#)
    .unwrap()
    .probe
    .unwrap();
    let Check::Http(h) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(h.path, "/healthz?full=1");
    assert_eq!(h.status.to_string(), "200,204,300-308");
    assert!(h.status.contains(204) && h.status.contains(308) && !h.status.contains(201));
    assert_eq!(h.host.as_deref(), Some("www.example.com:8080"));
    assert_eq!(h.tls, None);
    assert_eq!((p.port, p.mode), (8080, Mode::Tunnel));

    let p = vip(r#"kind = "https""#).unwrap().probe.unwrap();
    let Check::Http(h) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(h.path, "/");
    assert_eq!(h.status.to_string(), "200-399");
    assert_eq!(
        h.tls,
        Some(TlsCheck::default()),
        "verification off by default"
    );
    assert_eq!(p.check.kind(), "https");
}

#[test]
fn dns_settings() {
    let p = vip("kind = \"dns\"\ndns_name = \"health.example.com\"\ndns_type = \"aaaa\"")
        .unwrap()
        .probe
        .unwrap();
    let Check::Dns(d) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(d.name.to_ascii(), "health.example.com.");
    assert_eq!(d.record_type, RecordType::AAAA);
    let p = vip("kind = \"dns\"\ndns_name = \"example.com.\"")
        .unwrap()
        .probe
        .unwrap();
    let Check::Dns(d) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(d.record_type, RecordType::A);
}

#[test]
fn bad_values_name_their_keys() {
    for (text, error) in [
        (
            r#"kind = "icmp""#,
            r#"vip[0].health.kind: expected "tcp", "http", "https", "dns" or "none", got "icmp""#,
        ),
        (
            "kind = \"tcp\"\ninterval_ms = 1000\ntimeout_ms = 1000",
            "vip[0].health.timeout_ms: expected a value below interval_ms (1000 ms), got 1000",
        ),
        (
            "kind = \"tcp\"\nrise = 0",
            "vip[0].health.rise: expected a value from 1 to 100, got 0",
        ),
        (
            "kind = \"tcp\"\nfall = 0",
            "vip[0].health.fall: expected a value from 1 to 100, got 0",
        ),
        (
            "kind = \"http\"\npath = \"healthz\"",
            r#"vip[0].health.path: expected a path starting with '/', got "healthz""#,
        ),
        (
            "kind = \"http\"\nstatus = \"\"",
            r#"vip[0].health.status: expected status codes from 100 to 599 or ranges of them like "200-399" (comma-separated), got """#,
        ),
        (
            "kind = \"tcp\"\nmode = \"gre\"",
            r#"vip[0].health.mode: expected "direct" or "tunnel", got "gre""#,
        ),
        (
            "kind = \"tcp\"\ninterval_ms = 50",
            "vip[0].health.interval_ms: expected a value from 100 to 3600000, got 50",
        ),
        (
            "kind = \"tcp\"\nport = 70000",
            "vip[0].health.port: expected a value from 1 to 65535, got 70000",
        ),
        (
            "kind = \"dns\"",
            r#"vip[0].health.dns_name: required with kind = "dns": the name to query"#,
        ),
        (
            "kind = \"dns\"\ndns_name = \"a..b\"",
            r#"vip[0].health.dns_name: expected a domain name like "health.example.com", got "a..b""#,
        ),
        (
            "kind = \"dns\"\ndns_name = \"example.com\"\ndns_type = \"AXFR\"",
            r#"vip[0].health.dns_type: "AXFR" cannot be asked for in one UDP query; use e.g. "A", "AAAA" or "SOA""#,
        ),
        (
            "kind = \"tcp\"\npath = \"/\"",
            r#"vip[0].health.path: only used with kind = "http" or "https" (kind is "tcp")"#,
        ),
        (
            "kind = \"http\"\ntls_verify = true",
            r#"vip[0].health.tls_verify: only used with kind = "https" (kind is "http")"#,
        ),
        (
            "kind = \"https\"\nca_file = \"/nonexistent/ca.pem\"\ntls_verify = true",
            r#"vip[0].health.ca_file: cannot read CA certificates from "/nonexistent/ca.pem""#,
        ),
        (
            "interval_ms = 1000",
            r#"vip[0].health.kind: required when other probe keys are set: "tcp", "http", "https", "dns" or "none""#,
        ),
        (
            "kind = \"tcp\"\npanic_threshold = 101",
            "vip[0].health.panic_threshold: expected a value from 0 to 100, got 101",
        ),
        (
            "kind = \"tcp\"\nall_down = \"maybe\"",
            r#"vip[0].health.all_down: expected "open" or "closed", got "maybe""#,
        ),
        (
            "kind = \"tcp\"\nflap_window_secs = 0",
            "vip[0].health.flap_window_secs: expected a value from 1 to 86400, got 0",
        ),
        (
            "kind = \"http\"\nhost = \"a b\"",
            r#"vip[0].health.host: expected a host name like "www.example.com" (with an optional :port), got "a b""#,
        ),
    ] {
        let errors = vip_errors(text);
        assert_eq!(errors.len(), 1, "{text}: {errors:?}");
        assert!(
            errors[0].starts_with(error),
            "{text}:\n{}\n{error}",
            errors[0]
        );
    }
}

#[test]
fn a_refused_value_is_reported_once() {
    assert_eq!(vip_errors("kind = \"icmp\"\nrise = 2").len(), 1);
    assert_eq!(
        vip_errors("kind = \"tcp\"\ninterval_ms = 50\ntimeout_ms = 3000").len(),
        1
    );
}

#[test]
fn status_ranges_must_be_well_formed() {
    for status in [
        "",
        " , ",
        "399-200",
        "200-",
        "99",
        "600",
        "2xx",
        "200-399-400",
    ] {
        let text = format!("kind = \"http\"\nstatus = {status:?}");
        let errors = vip_errors(&text);
        assert!(
            errors[0].starts_with("vip[0].health.status: "),
            "{errors:?}"
        );
    }
}

#[test]
fn every_error_of_a_table_is_reported() {
    let errors = vip_errors(
        r#"
        kind = "http"
        path = "x"
        status = ""
        rise = 0
        fall = 0
        timeout_ms = 5000
    "#,
    );
    let paths: Vec<_> = errors
        .iter()
        .map(|e| e.split(':').next().unwrap().to_owned())
        .collect();
    for key in ["path", "status", "rise", "fall", "timeout_ms"] {
        assert!(paths.contains(&format!("{VIP}.{key}")), "{key}: {errors:?}");
    }
}

#[test]
fn backends_override_the_vips_keys() {
    let v = vip(r#"
        kind = "http"
        path = "/healthz"
        interval_ms = 1000
        rise = 3
    "#)
    .unwrap();
    let p = v
        .backend(
            B0,
            Some(&file("rise = 1\nport = 8443\npath = \"/ready\"")),
            None,
        )
        .unwrap()
        .unwrap();
    assert_eq!(p.thresholds.rise, 1);
    assert_eq!(p.thresholds.fall, 3);
    assert_eq!(p.port, 8443);
    assert_eq!(p.interval, Duration::from_secs(1));
    let Check::Http(h) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(h.path, "/ready");
    // A backend may opt out, or change the kind: the VIP's http keys are then ignored.
    assert_eq!(
        v.backend(B0, Some(&file(r#"kind = "none""#)), None)
            .unwrap(),
        None
    );
    let p = v
        .backend(B0, Some(&file(r#"kind = "tcp""#)), None)
        .unwrap()
        .unwrap();
    assert_eq!(p.check, Check::Tcp);
    assert_eq!(p.interval, Duration::from_secs(1));
}

#[test]
fn a_none_vip_gives_defaults_to_backends_that_set_a_kind() {
    let v = vip("kind = \"none\"\ninterval_ms = 500\npath = \"/hc\"").unwrap();
    assert_eq!(v.backend(B0, None, None).unwrap(), None);
    let p = v
        .backend(B0, Some(&file(r#"kind = "http""#)), None)
        .unwrap()
        .unwrap();
    assert_eq!(p.interval, Duration::from_millis(500));
    let Check::Http(h) = &p.check else {
        panic!("{p:?}")
    };
    assert_eq!(h.path, "/hc");
}

#[test]
fn backend_errors_name_the_backends_keys() {
    // The override makes the VIP's timeout too long: the override is named.
    assert_eq!(
        backend_errors("kind = \"tcp\"\ntimeout_ms = 1000", "interval_ms = 500"),
        [
            "vip[0].backend[0].health.interval_ms: expected a value above timeout_ms (1000 ms), got 500"
        ]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, "timeout_ms = 2000"),
        [
            "vip[0].backend[0].health.timeout_ms: expected a value below interval_ms (2000 ms), got 2000"
        ]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, r#"path = "/""#),
        [
            r#"vip[0].backend[0].health.path: only used with kind = "http" or "https" (kind is "tcp")"#
        ]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, r#"kind = "dns""#),
        [r#"vip[0].backend[0].health.dns_name: required with kind = "dns": the name to query"#]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, "panic_threshold = 50"),
        [
            "vip[0].backend[0].health.panic_threshold: only allowed in the VIP's health table (it applies to all its backends)"
        ]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, "kind = \"none\"\nrise = 3"),
        [
            r#"vip[0].backend[0].health.rise: only used with a kind other than "none" (kind is "none")"#
        ]
    );
}

#[test]
fn https_certificate_settings() {
    let dir = std::env::temp_dir().join(format!("lb-health-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["backend.example".to_owned()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").unwrap();

    let text = format!(
        "kind = \"https\"\ntls_verify = true\ntls_server_name = \"backend.example\"\nca_file = {:?}",
        ca.display().to_string()
    );
    let p = vip(&text).unwrap().probe.unwrap();
    let Check::Http(h) = &p.check else {
        panic!("{p:?}")
    };
    let tls = h.tls.clone().unwrap();
    assert!(tls.verify);
    assert_eq!(tls.server_name.as_deref(), Some("backend.example"));
    assert_eq!(tls.ca_file.as_deref(), Some(ca.as_path()));

    let text = format!("kind = \"https\"\nca_file = {:?}", ca.display().to_string());
    assert_eq!(
        vip_errors(&text),
        ["vip[0].health.ca_file: only used with tls_verify = true"]
    );
    let text = format!(
        "kind = \"https\"\ntls_verify = true\nca_file = {:?}",
        empty.display().to_string()
    );
    assert!(vip_errors(&text)[0].contains("no PEM certificate"));
    assert!(
        vip_errors("kind = \"https\"\ntls_server_name = \"-bad name-\"")[0]
            .starts_with("vip[0].health.tls_server_name: ")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policy_and_damping_keys() {
    let v = vip(r#"
        kind = "tcp"
        panic_threshold = 50
        all_down = "closed"
        flap_transitions = 0
        flap_window_secs = 30
        flap_hold_secs = 300
    "#)
    .unwrap();
    assert_eq!(
        v.policy,
        FailurePolicy {
            panic_threshold: 50,
            all_down: AllDown::Closed
        }
    );
    assert_eq!(
        v.damping,
        Damping {
            max_transitions: 0,
            window: Duration::from_secs(30),
            hold: Duration::from_secs(300),
        }
    );
    assert_eq!(v.probe.unwrap().damping, v.damping);
}

#[test]
fn unknown_keys_and_wrong_types_are_refused_by_the_file_form() {
    let e = toml::from_str::<HealthFile>("kind = \"tcp\"\nintervall_ms = 5").unwrap_err();
    assert!(e.message().contains("intervall_ms"), "{e}");
    let e = toml::from_str::<HealthFile>("rise = \"two\"").unwrap_err();
    assert!(e.message().contains("expected u64"), "{e}");
    let e = toml::from_str::<HealthFile>("rise = -1").unwrap_err();
    assert!(e.message().contains("-1"), "{e}");
}

#[test]
fn initial_is_down_by_default_set_per_vip_and_per_backend() {
    use crate::settings::Initial;
    let v = vip(r#"kind = "tcp""#).unwrap();
    assert_eq!(v.probe.unwrap().initial, Initial::Down);
    let v = vip("kind = \"tcp\"\ninitial = \"up\"").unwrap();
    assert_eq!(v.probe.clone().unwrap().initial, Initial::Up);
    assert_eq!(
        v.backend(B0, None, None).unwrap().unwrap().initial,
        Initial::Up,
        "inherited"
    );
    let own = v
        .backend(B0, Some(&file("initial = \"down\"")), None)
        .unwrap();
    assert_eq!(own.unwrap().initial, Initial::Down, "the backend's own");
    assert_eq!(
        vip_errors("kind = \"tcp\"\ninitial = \"maybe\""),
        [r#"vip[0].health.initial: expected "down" or "up", got "maybe""#]
    );
    assert_eq!(
        backend_errors(r#"kind = "tcp""#, "kind = \"none\"\ninitial = \"up\""),
        [
            r#"vip[0].backend[0].health.initial: only used with a kind other than "none" (kind is "none")"#
        ]
    );
}
