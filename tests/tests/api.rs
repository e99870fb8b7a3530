//! The remote API (issue 33) served by a real `lb run` in the bed's LB namespace, used
//! with `curl` over TLS: a read answers what `lb status --json` prints, a read-only
//! token cannot change, an admin's change applies once however often it is retried,
//! and the daemon's log names who made it. Privileged; needs the `lb` binary and
//! `curl`. Certificates are made here (rcgen), never committed.

use lb_tests::{
    daemon::{Daemon, DaemonConfig, TempDir, backend_addr, vip_text},
    testbed::{TestBed, TestBedOptions},
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::Value;

const ADMIN: &str = "deploy-0123456789abcdef0123456789abcdef";
const READER: &str = "grafana-0123456789abcdef0123456789abcdef";
const URL: &str = "https://127.0.0.1:9443";

/// A CA, the server's certificate for 127.0.0.1 and the two tokens, in `dir`.
fn files(dir: &std::path::Path) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct subjects: a leaf named as its CA would look self-signed to OpenSSL.
    ca.distinguished_name.push(DnType::CommonName, "lb test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "lb");
    let cert = params.signed_by(&key, &ca).unwrap();
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    write("ca.crt", ca.pem());
    write("server.crt", cert.pem());
    write("server.key", key.serialize_pem());
    write("admin.token", format!("{ADMIN}\n"));
    write("reader.token", format!("{READER}\n"));
}

/// The `[api]` table for the files in `dir`.
fn api_table(dir: &std::path::Path) -> String {
    let d = dir.display();
    format!(
        "\n[api]\nenabled = true\nlisten = \"127.0.0.1:9443\"\n\
         cert_file = \"{d}/server.crt\"\nkey_file = \"{d}/server.key\"\n\
         [[api.token]]\nname = \"deploy\"\nfile = \"{d}/admin.token\"\nrole = \"admin\"\n\
         [[api.token]]\nname = \"grafana\"\nfile = \"{d}/reader.token\"\nrole = \"read-only\"\n"
    )
}

/// `curl` in the LB namespace: (HTTP status, body).
fn curl(bed: &TestBed, dir: &std::path::Path, args: &[&str]) -> (u16, String) {
    let ca = dir.join("ca.crt");
    let mut all = vec![
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        "--cacert",
    ];
    all.push(ca.to_str().unwrap());
    all.extend(args);
    let out = bed.lb_ns().exec("curl", &all).expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// `vips` without what the daemon's periodic work changes between two reads: each VIP's
/// `slot_states` (the cleaning walk), each backend's `connections` (the conntrack walk)
/// and `nexthop` (the next-hop monitor, which resolves a backend's neighbour at its own
/// pace after the start).
fn without_walks(vips: &Value) -> Value {
    let mut vips = vips.clone();
    for v in vips.as_array_mut().into_iter().flatten() {
        let Some(v) = v.as_object_mut() else { continue };
        v.remove("slot_states");
        for b in v
            .get_mut("backends")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(b) = b.as_object_mut() {
                b.remove("connections");
                b.remove("nexthop");
            }
        }
    }
    vips
}

#[test]
fn the_daemon_serves_the_api_over_tls_and_logs_who_changed_what() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let dir = TempDir::new("lb-api-").unwrap();
    files(dir.path());
    let bed = TestBed::new(TestBedOptions {
        backends: 2,
        clients: 1,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let config = DaemonConfig {
        extra: api_table(dir.path()),
        ..DaemonConfig::equal(1..=2)
    };
    let lb = Daemon::start(&bed, &config).expect("lb run");
    let (reader, admin) = (
        format!("Authorization: Bearer {READER}"),
        format!("Authorization: Bearer {ADMIN}"),
    );
    let status = format!("{URL}/v1/status");
    let (code, body) = curl(&bed, dir.path(), &["-H", &reader, &status]);
    assert_eq!(code, 200, "{body}\n{}", lb.log());
    let api: Value = serde_json::from_str(&body).unwrap();
    let cli: Value = serde_json::from_str(&lb.cli(&["status", "--json"]).unwrap()).unwrap();
    assert_eq!(
        without_walks(&api["vips"]),
        without_walks(&cli["vips"]),
        "the API and the CLI see the same VIPs"
    );
    assert_eq!(curl(&bed, dir.path(), &[&status]).0, 401);

    let vip = vip_text(false, true);
    let backend = backend_addr(2, false).to_string();
    let drain = format!(r#"{{"action":"drain","vip":"{vip}","backend":"{backend}"}}"#);
    let url = format!("{URL}/v1/backend");
    let post = |auth: &str, id: &str| {
        let id = format!("Idempotency-Key: {id}");
        curl(
            &bed,
            dir.path(),
            &["-H", auth, "-H", &id, "--data-binary", &drain, &url],
        )
    };
    assert_eq!(post(&reader, "d1").0, 403);
    let changes = lb.status().unwrap().changes;
    let (code, first) = post(&admin, "d1");
    assert_eq!(code, 200, "{first}\n{}", lb.log());
    let (code, again) = post(&admin, "d1");
    assert_eq!(
        (code, &again),
        (200, &first),
        "a retry gets the first answer"
    );
    let after = lb.status().unwrap();
    assert_eq!(after.changes, changes + 1, "the retry applied nothing");
    let state = after
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .unwrap()
        .backends
        .iter()
        .find(|b| b.address == backend)
        .unwrap()
        .state
        .clone();
    assert_eq!(state, "drain");
    let log = lb.log();
    assert!(
        log.contains("api: change by token:deploy (request id d1): POST /v1/backend"),
        "{log}"
    );
}
