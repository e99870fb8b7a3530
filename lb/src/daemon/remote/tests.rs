//! The remote API end to end with a real client: `curl` over TLS against the API server
//! answering through the daemon's service over the in-memory data plane. Certificates
//! are made by the test (rcgen), never committed.

use std::{
    io::Read as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::{
    api::{Server, Service as ApiService},
    config::{Api, ApiToken, Role},
    control::{Request, Response, TraceStarted, server::Reply},
    controller::Controller,
    daemon::{
        service::Service,
        test_fixture::{FILE, start_service, temp_dir},
    },
};
use lb_dataplane::FakeDataplane;

/// 40-character secrets.
const ADMIN_SECRET: &str = "admin-secret-0123456789abcdef0123456789";
const READER_SECRET: &str = "reader-secret-0123456789abcdef012345678";

/// The daemon's service over the in-memory data plane, as the API sees it.
struct Fake(Mutex<Service<FakeDataplane>>);

impl ApiService for Fake {
    fn handle(&self, request: &Request) -> Reply {
        if let Request::Trace { vip, .. } = request {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            let started = TraceStarted {
                vip: vip.map(|v| v.to_string()),
                client: None,
            };
            tx.try_send(Response::ok(started)).expect("room");
            return Reply::Stream(rx);
        }
        let mut service = self.0.lock().unwrap();
        Reply::Once(service.handle(request, &mut |_| {}))
    }
}

/// A CA and what it signed.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `names` with common name `cn`, written as `stem.crt` and
    /// `stem.key` in `dir`.
    fn issue(&self, dir: &Path, stem: &str, cn: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (crt, pem) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&crt, cert.pem()).unwrap();
        std::fs::write(&pem, key.serialize_pem()).unwrap();
        (crt, pem)
    }

    fn write_ca(&self, path: &Path) {
        std::fs::write(path, self.ca.pem()).unwrap();
    }
}

/// A served API and what its clients need.
struct Bed {
    dir: PathBuf,
    addr: SocketAddr,
    pki: Pki,
    service: Arc<Fake>,
    _runtime: tokio::runtime::Runtime,
}

impl Bed {
    /// An API with an admin and a read-only token, limits of 1 s, changed by `tweak`.
    fn new(tweak: impl FnOnce(&mut Api, &Path, &Pki)) -> Self {
        Self::with_file(FILE, tweak)
    }

    /// [`Self::new`] with the daemon's configuration `file`.
    fn with_file(file: &str, tweak: impl FnOnce(&mut Api, &Path, &Pki)) -> Self {
        let dir = temp_dir("lb-api-test");
        let pki = Pki::new("lb test CA");
        pki.write_ca(&dir.join("ca.crt"));
        let (cert_file, key_file) = pki.issue(&dir, "server", "lb", &["localhost", "127.0.0.1"]);
        std::fs::write(dir.join("admin.token"), format!("{ADMIN_SECRET}\n")).unwrap();
        std::fs::write(dir.join("reader.token"), READER_SECRET).unwrap();
        let token = |name: &str, role| ApiToken {
            name: name.into(),
            file: dir.join(format!("{name}.token")),
            role,
        };
        let mut api = Api {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            cert_file,
            key_file,
            tokens: vec![token("admin", Role::Admin), token("reader", Role::ReadOnly)],
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
            ..Api::default()
        };
        tweak(&mut api, &dir, &pki);
        let (controller, _) = Controller::adopt(FakeDataplane::new()).unwrap();
        let service = Arc::new(Fake(Mutex::new(start_service(controller, file, None))));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime
            .block_on(async { Server::bind(&api) })
            .unwrap()
            .unwrap();
        let addr = server.local_addr().unwrap();
        runtime.spawn(server.serve(Arc::clone(&service) as Arc<dyn ApiService>));
        Self {
            dir,
            addr,
            pki,
            service,
            _runtime: runtime,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// `curl` with the CA and `args`: (HTTP status, headers, body); status 0 when curl
    /// got no answer.
    fn curl(&self, args: &[&str]) -> (u16, String, String) {
        let out = Command::new("curl")
            .args(["-sS", "-i", "--max-time", "10", "--cacert"])
            .arg(self.dir.join("ca.crt"))
            .args(args)
            .output()
            .expect("curl runs (apt install curl)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return (
                0,
                String::new(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        };
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head.to_ascii_lowercase(), body.to_owned())
    }

    fn bearer(secret: &str) -> String {
        format!("Authorization: Bearer {secret}")
    }

    fn changes(&self) -> u64 {
        self.service.0.lock().unwrap().status().changes
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const WEIGHT_3: &str =
    r#"{"action":"weight","vip":"203.0.113.10:80/tcp","backend":"198.51.100.11","weight":3}"#;

#[test]
fn reads_answer_what_the_cli_prints_and_need_a_known_token() {
    let bed = Bed::new(|_, _, _| {});
    let admin = Bed::bearer(ADMIN_SECRET);
    let reader = Bed::bearer(READER_SECRET);
    let (status, head, body) = bed.curl(&["-H", &reader, &bed.url("/v1/status")]);
    assert_eq!(status, 200, "{head}{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    // The CLI's --json prints the status decoded and encoded again: the same keys in
    // the same order.
    let expected = serde_json::to_string(&bed.service.0.lock().unwrap().status()).unwrap();
    assert_eq!(body.trim_end(), expected);
    for path in ["/v1/stats", "/v1/overrides"] {
        let (status, _, body) = bed.curl(&["-H", &admin, &bed.url(path)]);
        assert_eq!(status, 200, "{path}: {body}");
    }
    let flow = bed.url("/v1/flow?vip=203.0.113.10%3A80%2Ftcp&client=192.0.2.7%3A40000");
    let (status, _, body) = bed.curl(&["-H", &reader, &flow]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("198.51.100.1"), "{body}");
    let (status, head, _) = bed.curl(&[&bed.url("/v1/status")]);
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let wrong = Bed::bearer("admin-secret-0123456789abcdef012345678X");
    assert_eq!(bed.curl(&["-H", &wrong, &bed.url("/v1/status")]).0, 401);
    assert_eq!(bed.curl(&["-H", &admin, &bed.url("/v2/status")]).0, 404);
    assert_eq!(
        bed.curl(&["-X", "PUT", "-H", &admin, &bed.url("/v1/status")])
            .0,
        405
    );
    // The OpenAPI document needs no token.
    let (status, _, body) = bed.curl(&[&bed.url("/v1/openapi.json")]);
    assert_eq!(status, 200);
    assert_eq!(body, crate::api::openapi::json());
}

#[test]
fn a_change_needs_the_admin_role_and_a_retry_applies_once() {
    let bed = Bed::new(|_, _, _| {});
    let url = bed.url("/v1/backend");
    let post = |secret: &str, id: Option<&str>, body: &str| {
        let auth = Bed::bearer(secret);
        let id = id.map(|i| format!("Idempotency-Key: {i}"));
        let mut args = vec!["-H", &auth, "-H", "Content-Type: application/json"];
        if let Some(id) = &id {
            args.extend(["-H", id.as_str()]);
        }
        args.extend(["--data-binary", body, url.as_str()]);
        bed.curl(&args)
    };
    let before = bed.changes();
    let (status, _, body) = post(READER_SECRET, Some("k1"), WEIGHT_3);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("token:reader is read-only"), "{body}");
    let (status, _, body) = post(ADMIN_SECRET, None, WEIGHT_3);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Idempotency-Key"), "{body}");
    assert_eq!(bed.changes(), before, "refused changes applied nothing");

    let (status, head, first) = post(ADMIN_SECRET, Some("k1"), WEIGHT_3);
    assert_eq!(status, 200, "{first}");
    assert!(head.contains("x-request-id: k1"), "{head}");
    let change: crate::control::Change = serde_json::from_str(&first).unwrap();
    assert!(change.changed);
    assert_eq!(bed.changes(), before + 1);
    let (status, head, again) = post(ADMIN_SECRET, Some("k1"), WEIGHT_3);
    assert_eq!((status, again.as_str()), (200, first.as_str()));
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    assert_eq!(bed.changes(), before + 1, "the retry applied nothing");
    let other = WEIGHT_3.replace("\"weight\":3", "\"weight\":4");
    assert_eq!(post(ADMIN_SECRET, Some("k1"), &other).0, 422);
    // A refusal of the daemon is a 400 with its words.
    let unknown = WEIGHT_3.replace("203.0.113.10", "203.0.113.99");
    let (status, _, body) = post(ADMIN_SECRET, Some("k2"), &unknown);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("203.0.113.99"), "{body}");
    let (status, _, body) = post(
        ADMIN_SECRET,
        Some("k3"),
        &WEIGHT_3.replace('}', ",\"x\":1}"),
    );
    assert_eq!(status, 400, "{body}");
}

#[test]
fn a_trace_streams_json_lines() {
    let bed = Bed::new(|_, _, _| {});
    let (status, head, body) = bed.curl(&[
        "-H",
        &Bed::bearer(READER_SECRET),
        &bed.url("/v1/trace?vip=203.0.113.10%3A80%2Ftcp"),
    ]);
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-type: application/jsonl"), "{head}");
    assert_eq!(body, "{\"vip\":\"203.0.113.10:80/tcp\",\"client\":null}\n");
}

#[test]
fn large_and_slow_bodies_are_refused_and_a_silent_connection_is_cut_off() {
    let bed = Bed::new(|api, _, _| api.max_body_bytes = 1024);
    let admin = Bed::bearer(ADMIN_SECRET);
    let url = bed.url("/v1/backend");
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(4096));
    let (status, _, body) = bed.curl(&[
        "-H",
        &admin,
        "-H",
        "Idempotency-Key: a",
        "--data-binary",
        &big,
        &url,
    ]);
    assert_eq!(status, 413, "{body}");
    // 600 bytes at 200 bytes/s: 3 s, over the 1 s body time.
    let slow = format!("{{\"pad\":\"{}\"}}", "x".repeat(600));
    let (status, _, body) = bed.curl(&[
        "-H",
        &admin,
        "-H",
        "Idempotency-Key: b",
        "--limit-rate",
        "200",
        "--data-binary",
        &slow,
        &url,
    ]);
    assert_eq!(status, 408, "{body}");
    // A client that connects and says nothing is closed after the header time (1 s).
    let mut silent = std::net::TcpStream::connect(bed.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let read = silent.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err() && started.elapsed() < Duration::from_secs(4),
        "{read:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn mutual_tls_admits_the_ca_s_certificates_and_refuses_others() {
    let bed = Bed::new(|api, dir, pki| {
        pki.write_ca(&dir.join("clients-ca.crt"));
        api.client_ca_file = Some(dir.join("clients-ca.crt"));
        api.tokens.clear();
        api.clients = vec![
            ("ops".into(), Role::Admin),
            ("monitor".into(), Role::ReadOnly),
        ];
    });
    let dir = bed.dir.clone();
    let ops = bed.pki.issue(&dir, "ops", "ops", &["ops"]);
    let monitor = bed.pki.issue(&dir, "monitor", "monitor", &["monitor"]);
    let stranger = bed.pki.issue(&dir, "stranger", "stranger", &["stranger"]);
    let other_ca = Pki::new("another CA").issue(&dir, "forged", "ops", &["ops"]);
    let with = |(crt, key): &(PathBuf, PathBuf), extra: &[&str]| {
        let (crt, key) = (crt.to_str().unwrap(), key.to_str().unwrap());
        let mut args = vec!["--cert", crt, "--key", key];
        args.extend(extra);
        bed.curl(&args)
    };
    let status_url = bed.url("/v1/status");
    assert_eq!(with(&monitor, &[&status_url]).0, 200);
    let backend_url = bed.url("/v1/backend");
    let change = [
        "-H",
        "X-Request-Id: w1",
        "--data-binary",
        WEIGHT_3,
        backend_url.as_str(),
    ];
    let (status, _, text) = with(&monitor, &change);
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("cert:monitor is read-only"), "{text}");
    let (status, _, text) = with(&ops, &change);
    assert_eq!(status, 200, "{text}");
    let (status, _, text) = with(&stranger, &[&status_url]);
    assert_eq!(status, 403, "{text}");
    // No certificate, or one of another CA: the handshake fails, nothing is answered.
    assert_eq!(bed.curl(&[&status_url]).0, 0);
    assert_eq!(with(&other_ca, &[&status_url]).0, 0);
}

#[test]
fn two_hundred_concurrent_clients_are_all_answered() {
    // The default header time: the one client process does 200 handshakes in turn.
    let bed = Bed::new(|api, _, _| api.header_timeout = Duration::from_secs(5));
    let url = bed.url("/v1/status");
    let auth = Bed::bearer(READER_SECRET);
    let started = Instant::now();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "--parallel",
            "--parallel-immediate",
        ])
        .args(["--parallel-max", "200", "-w", "%{http_code}\\n"])
        .arg("--cacert")
        .arg(bed.dir.join("ca.crt"))
        .args(["-H", &auth])
        .args((0..200).flat_map(|_| ["-o", "/dev/null", url.as_str()]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("curl runs");
    // Meanwhile another client is answered promptly.
    std::thread::sleep(Duration::from_millis(100));
    let one = Instant::now();
    assert_eq!(bed.curl(&["-H", &auth, &url]).0, 200);
    assert!(
        one.elapsed() < Duration::from_secs(3),
        "{:?}",
        one.elapsed()
    );
    let out = out.wait_with_output().expect("curl ends");
    let codes = String::from_utf8_lossy(&out.stdout);
    let ok = codes.lines().filter(|c| *c == "200").count();
    assert_eq!(ok, 200, "{codes} {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn connections_over_the_limit_are_answered_503() {
    let bed = Bed::new(|api, _, _| api.max_connections = 2);
    // Two connections held open (TCP only: they count from the accept on).
    let held: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(bed.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, _, body) = bed.curl(&["-H", &Bed::bearer(READER_SECRET), &bed.url("/v1/status")]);
    assert_eq!(status, 503, "{body}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        bed.curl(&["-H", &Bed::bearer(READER_SECRET), &bed.url("/v1/status")])
            .0,
        200
    );
}

/// The `percent`-th percentile (nearest rank) of `times` (seconds), sorted in place.
fn percentile(times: &mut [f64], percent: usize) -> f64 {
    times.sort_by(f64::total_cmp);
    times[(percent * (times.len() - 1)).div_ceil(100)]
}

/// Request latency at 100 VIPs x 100 backends (in-memory data plane, debug build, one
/// client over one kept-alive connection, `curl`'s time from request to last byte): printed for
/// the note. Every request must be answered; the times are not asserted.
#[test]
fn latency_of_a_status_read_and_a_backend_change_at_100_vips_by_100_backends() {
    let mut file = String::from("interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n");
    for v in 0..100 {
        file.push_str(&format!(
            "[[vip]]\naddress = \"203.0.113.{}\"\nport = {}\nprotocol = \"tcp\"\ntable_size = 1009\n",
            v / 50 + 10,
            8000 + v
        ));
        for b in 0..100 {
            file.push_str(&format!("[[vip.backend]]\naddress = \"10.{v}.{b}.1\"\n"));
        }
    }
    let bed = Bed::with_file(&file, |_, _, _| {});
    let auth = Bed::bearer(ADMIN_SECRET);
    // One curl, one connection; `--next` between transfers, each with its own options.
    let ca = bed.dir.join("ca.crt").to_string_lossy().into_owned();
    let run = |transfers: Vec<Vec<String>>| -> Vec<f64> {
        let mut args = Vec::new();
        for (i, transfer) in transfers.into_iter().enumerate() {
            if i > 0 {
                args.push("--next".to_owned());
            }
            let common = [
                "-sS",
                "--max-time",
                "60",
                "-o",
                "/dev/null",
                "--cacert",
                &ca,
            ];
            args.extend(common.iter().map(|a| (*a).to_owned()));
            args.extend(["-w".into(), "%{http_code} %{time_total}\\n".into()]);
            args.extend(["-H".into(), auth.clone()]);
            args.extend(transfer);
        }
        let out = Command::new("curl").args(args).output().expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .map(|l| match l.split_once(' ') {
                Some(("200", t)) => t.parse().expect("a time"),
                _ => panic!("not answered 200: {l}"),
            })
            .collect()
    };
    let n = 12;
    let mut read = run((0..n / 4).map(|_| vec![bed.url("/v1/status")]).collect());
    let changes = (0..n).map(|i| {
        let body = format!(
            r#"{{"action":"weight","vip":"203.0.113.10:8000/tcp","backend":"10.0.{}.1","weight":{}}}"#,
            i % 100,
            2 + i
        );
        vec![
            "-H".into(),
            format!("Idempotency-Key: lat{i}"),
            "--data-binary".into(),
            body,
            bed.url("/v1/backend"),
        ]
    });
    let mut change = run(changes.collect());
    assert_eq!((read.len(), change.len()), (n / 4, n));
    let (r50, r99) = (percentile(&mut read, 50), percentile(&mut read, 99));
    let (c50, c99) = (percentile(&mut change, 50), percentile(&mut change, 99));
    // The same read without the API: the service's status, encoded.
    let direct = Instant::now();
    let text = serde_json::to_string(&bed.service.0.lock().unwrap().status()).unwrap();
    let direct = direct.elapsed();
    println!(
        "status built and encoded directly: {:.1} ms ({} bytes)",
        direct.as_secs_f64() * 1e3,
        text.len()
    );
    println!(
        "100 VIPs x 100 backends: status read p50 {:.1} ms p99 {:.1} ms; backend change p50 {:.1} ms p99 {:.1} ms",
        r50 * 1e3,
        r99 * 1e3,
        c50 * 1e3,
        c99 * 1e3
    );
    // Times are printed, not asserted: targets live in `cargo xtask bench`, and this
    // machine's speed changes by 2x between runs.
    assert!(r50 > 0.0 && c50 > 0.0, "{r50} {c50}");
}
