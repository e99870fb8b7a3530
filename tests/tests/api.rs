//! The remote API (issue 33) served by a real `lb run` in the bed's LB namespace, used
//! with `curl` over TLS: a read answers what `lb status --json` prints, a read-only
//! token cannot change, an admin's change applies once however often it is retried,
//! and the daemon's log names who made it. Privileged; needs the `lb` binary and
//! `curl`. Certificates are made here (rcgen), never committed.

use std::{
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use lb::control::TraceEvent;
use lb_tests::{
    daemon::{Daemon, DaemonConfig, TempDir, backend_addr, vip_text},
    testbed::{TestBed, TestBedOptions, vip_tcp},
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

/// `lb ARGS...` in the LB namespace: (exit status, stdout, stderr).
fn lb_in(bed: &TestBed, args: &[&str]) -> (i32, String, String) {
    let lb = lb_tests::daemon::lb_binary();
    let out = bed
        .lb_ns()
        .exec(lb.to_str().unwrap(), args)
        .expect("running lb");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_api_lists_connections_reloads_takes_a_pushed_configuration_and_serves_the_remote_cli() {
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
    let d = dir.path();
    let (reader, admin) = (
        format!("Authorization: Bearer {READER}"),
        format!("Authorization: Bearer {ADMIN}"),
    );

    // Connections: the read-only role; the answer is `lb conn list --json`'s.
    let vip = vip_text(false, true);
    let conns = format!(
        "{URL}/v1/conns?limit=7&vip={}",
        vip.replace(':', "%3A").replace('/', "%2F")
    );
    let (code, body) = curl(&bed, d, &["-H", &reader, &conns]);
    assert_eq!(code, 200, "{body}\n{}", lb.log());
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["limit"], 7, "{body}");
    assert!(list["connections"].is_array(), "{body}");
    let (code, body) = curl(
        &bed,
        d,
        &["-H", &reader, &format!("{URL}/v1/conns?limit=0")],
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("limit"), "{body}");

    // Reload: admin only, with a request id; answers `lb reload --json`'s shape.
    let reload = format!("{URL}/v1/reload");
    let id = "Idempotency-Key: r1";
    assert_eq!(
        curl(&bed, d, &["-X", "POST", "-H", &reader, "-H", id, &reload]).0,
        403
    );
    let (code, body) = curl(&bed, d, &["-X", "POST", "-H", &admin, "-H", id, &reload]);
    assert_eq!(code, 200, "{body}\n{}", lb.log());
    let diff: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(diff["changed"], false, "{body}");

    // A pushed configuration: its [[vip]] tables replace the file's (backend 2 goes),
    // the daemon's own keys stay; an instance's own key is refused.
    let full = DaemonConfig::equal(1..=1).to_toml(&lb.socket_path());
    let vips = &full[full.find("\n[[vip]]").expect("VIPs")..];
    let push = dir.path().join("push.toml");
    std::fs::write(&push, vips).unwrap();
    let at = format!("@{}", push.display());
    let put = format!("{URL}/v1/config");
    let toml = "Content-Type: application/toml";
    let (code, body) = curl(
        &bed,
        d,
        &[
            "-X",
            "POST",
            "-H",
            &reader,
            "-H",
            toml,
            "--data-binary",
            &at,
            &format!("{URL}/v1/config/diff"),
        ],
    );
    assert_eq!(code, 200, "{body}\n{}", lb.log());
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["changed"],
        true,
        "{body}"
    );
    assert_eq!(
        lb.status().unwrap().vips[0].backends.len(),
        2,
        "a dry run changes nothing"
    );
    let (code, body) = curl(
        &bed,
        d,
        &[
            "-X",
            "PUT",
            "-H",
            &reader,
            "-H",
            "Idempotency-Key: p1",
            "--data-binary",
            &at,
            &put,
        ],
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = curl(
        &bed,
        d,
        &[
            "-X",
            "PUT",
            "-H",
            &admin,
            "-H",
            "Idempotency-Key: p1",
            "-H",
            toml,
            "--data-binary",
            &at,
            &put,
        ],
    );
    assert_eq!(code, 200, "{body}\n{}", lb.log());
    lb.wait_status("the pushed VIPs", Duration::from_secs(10), |s| {
        s.vips.iter().all(|v| v.backends.len() == 1)
    })
    .expect("the push applies");
    let file = std::fs::read_to_string(lb.config_path()).unwrap();
    assert!(
        file.contains("[api]") && file.contains("pushed configuration"),
        "{file}"
    );
    let (code, body) = curl(
        &bed,
        d,
        &[
            "-X",
            "PUT",
            "-H",
            &admin,
            "-H",
            "Idempotency-Key: p2",
            "--data-binary",
            "state_dir = \"/tmp\"",
            &put,
        ],
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("state_dir"), "{body}");

    // The remote CLI: the same text and JSON as over the socket; a read-only token
    // cannot change, and says so with its role; a wrong CA fails the handshake.
    let ca = d.join("ca.crt").display().to_string();
    let reader_token = d.join("reader.token").display().to_string();
    let remote = [
        "--remote",
        URL,
        "--cacert",
        &ca,
        "--token-file",
        &reader_token,
    ];
    let (code, text, err) = lb_in(&bed, &[&["status", "--json"][..], &remote].concat());
    assert_eq!(code, 0, "{err}");
    let api: Value = serde_json::from_str(&text).unwrap();
    let cli: Value = serde_json::from_str(&lb.cli(&["status", "--json"]).unwrap()).unwrap();
    assert_eq!(without_walks(&api["vips"]), without_walks(&cli["vips"]));
    let (code, text, err) = lb_in(&bed, &[&["overrides"][..], &remote].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(text, lb.cli(&["overrides"]).unwrap(), "the same text");
    remote_trace(&bed, &remote);
    let backend = backend_addr(1, false).to_string();
    let (code, _, err) = lb_in(
        &bed,
        &[
            &["backend", "drain", "--vip", &vip, "--backend", &backend][..],
            &remote,
        ]
        .concat(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("403") && err.contains("read-only"), "{err}");
    let admin_token = d.join("admin.token").display().to_string();
    let (code, text, err) = lb_in(
        &bed,
        &[
            "backend",
            "drain",
            "--vip",
            &vip,
            "--backend",
            &backend,
            "--remote",
            URL,
            "--cacert",
            &ca,
            "--token-file",
            &admin_token,
        ],
    );
    assert_eq!(code, 0, "{err}\n{}", lb.log());
    assert!(text.contains(&backend), "{text}");
    let (code, _, err) = lb_in(
        &bed,
        &[
            "status",
            "--remote",
            URL,
            "--cacert",
            &d.join("server.crt").display().to_string(),
            "--token-file",
            &reader_token,
        ],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("--remote") && err.contains("TLS handshake failed"),
        "{err}"
    );
    let (code, _, err) = lb_in(&bed, &["status", "--remote", "http://127.0.0.1:9443"]);
    assert_eq!(code, 1);
    assert!(err.contains("--remote") && err.contains("HTTPS"), "{err}");
    remote_config_diff(&bed, &lb, dir.path(), &remote);
}

/// `lb config diff FILE --remote`: the local file is sent and compared (diff(1)'s exit
/// status), the daemon stays as it is; without FILE it names what it needs.
fn remote_config_diff(bed: &TestBed, lb: &Daemon<'_>, dir: &std::path::Path, remote: &[&str]) {
    let full = DaemonConfig::equal(1..=2).to_toml(&lb.socket_path());
    let two = dir.join("two.toml");
    std::fs::write(&two, &full[full.find("\n[[vip]]").expect("VIPs")..]).unwrap();
    let file = two.display().to_string();
    let (code, text, err) = lb_in(bed, &[&["config", "diff", &file][..], remote].concat());
    assert_eq!(code, 1, "changes: {text}{err}");
    let backend = backend_addr(2, false).to_string();
    assert!(text.contains(&backend), "backend 2 would come back: {text}");
    assert!(
        lb.status()
            .unwrap()
            .vips
            .iter()
            .all(|v| v.backends.len() == 1),
        "a diff changes nothing"
    );
    let (code, _, err) = lb_in(bed, &[&["config", "diff"][..], remote].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("FILE"), "{err}");
}

/// `lb trace --remote`: the API's stream of traced packets, as JSON lines, while a
/// client talks to the VIP.
fn remote_trace(bed: &TestBed, remote: &[&str]) {
    let lb = lb_tests::daemon::lb_binary();
    let vip = vip_text(false, true);
    let mut child = Command::new("ip")
        .args(["netns", "exec", bed.lb_ns().name()])
        .arg(&lb)
        .args(["trace", "--json", "--count", "2", "--vip", &vip])
        .args(remote)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("lb trace --remote");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let header = lines.next().expect("a first line").expect("readable");
    assert!(header.contains("\"vip\""), "{header}");
    let reader = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let client = SocketAddr::new(bed.client_addr(0, false), 0);
    let _ = bed
        .tcp_exchange(client, vip_tcp(false), "x")
        .expect("a connection");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let events = reader.join().expect("the reader");
    assert_eq!(events.len(), 2, "{events:?}");
    for line in &events {
        let event: TraceEvent = serde_json::from_str(line).expect("a JSON event");
        assert_eq!(event.vip, vip, "{line}");
    }
}
