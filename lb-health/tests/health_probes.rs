//! Each prober against real servers on loopback: what counts as a success, and the
//! reason each failure is reported with.

mod health_support;

use std::{net::SocketAddr, time::Duration};

use health_support::{DnsMode, DnsServer, HttpMode, HttpServer, TcpServer, TempFile, TestPki};
use lb_health::{
    file::HealthFile,
    outcome::{Failure, ProbeResult, Stage},
    probe::Prober,
    settings::ProbeSettings,
    target::ProbeTarget,
    validate::VipHealth,
};

/// Settings from a `[vip.health]` table (through validation, as the daemon gets them).
fn settings(text: &str, port: u16) -> ProbeSettings {
    let file: HealthFile = toml::from_str(text).unwrap();
    VipHealth::from_file("vip[0].health", Some(&file), port)
        .unwrap_or_else(|e| panic!("{text}: {e:?}"))
        .probe
        .unwrap()
}

async fn probe_from(text: &str, dest: SocketAddr, source: Option<&str>) -> ProbeResult {
    let s = settings(text, dest.port());
    let source = source.map(|s| s.parse().unwrap());
    let target = ProbeTarget::direct(dest.ip(), s.port, source).unwrap();
    Prober::new(&s.check, target).unwrap().run(s.timeout).await
}

async fn probe(text: &str, dest: SocketAddr) -> ProbeResult {
    probe_from(text, dest, None).await
}

/// A loopback port that nothing listens on (bound once, then released).
async fn closed_tcp_port() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

const TCP: &str = "kind = \"tcp\"\ntimeout_ms = 500";

#[tokio::test]
async fn tcp_connects_or_is_refused() {
    let server = TcpServer::start().await;
    let latency = probe(TCP, server.addr).await.unwrap();
    assert!(latency < Duration::from_millis(500));
    let addr = server.addr;
    drop(server);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(probe(TCP, addr).await, Err(Failure::Refused));
    assert_eq!(
        probe(TCP, closed_tcp_port().await).await,
        Err(Failure::Refused)
    );
}

#[tokio::test]
async fn probes_bind_the_source_address() {
    let server = HttpServer::start(None).await;
    probe_from("kind = \"http\"", server.addr, Some("127.0.0.2"))
        .await
        .unwrap();
    let (_, peer) = server.last_request.lock().unwrap().clone().unwrap();
    assert_eq!(peer.ip().to_string(), "127.0.0.2");
}

#[tokio::test]
async fn http_checks_status_path_and_host() {
    let server = HttpServer::start(None).await;
    let text = "kind = \"http\"\npath = \"/healthz?deep=1\"\nhost = \"www.example.com\"";
    probe(text, server.addr).await.unwrap();
    let (head, _) = server.last_request.lock().unwrap().clone().unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.starts_with("get /healthz?deep=1 http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nhost: www.example.com\r\n"), "{head}");
    assert!(head.contains("\r\nuser-agent: lb-health/"), "{head}");

    server.set_status(503);
    assert_eq!(
        probe(text, server.addr).await,
        Err(Failure::HttpStatus { status: 503 })
    );
    server.set_status(302);
    probe(text, server.addr).await.unwrap();
    let strict = "kind = \"http\"\nstatus = \"200,204\"";
    assert_eq!(
        probe(strict, server.addr).await,
        Err(Failure::HttpStatus { status: 302 })
    );
    server.set_status(204);
    probe(strict, server.addr).await.unwrap();
}

#[tokio::test]
async fn the_default_host_header_is_the_destination() {
    let server = HttpServer::start(None).await;
    probe("kind = \"http\"", server.addr).await.unwrap();
    let (head, _) = server.last_request.lock().unwrap().clone().unwrap();
    let want = format!("\r\nhost: {}\r\n", server.addr);
    assert!(head.to_ascii_lowercase().contains(&want), "{head}");
}

#[tokio::test]
async fn http_failures_have_their_reasons() {
    let server = HttpServer::start(None).await;
    let text = "kind = \"http\"\ntimeout_ms = 300";
    server.set_mode(HttpMode::Garbage);
    assert!(
        matches!(probe(text, server.addr).await, Err(Failure::Http(_))),
        "not HTTP"
    );
    server.set_mode(HttpMode::Close);
    assert_eq!(
        probe(text, server.addr).await,
        Err(Failure::Reset {
            stage: Stage::Response
        })
    );
    server.set_mode(HttpMode::Hang);
    assert_eq!(
        probe(text, server.addr).await,
        Err(Failure::Timeout {
            stage: Stage::Response,
            after: Duration::from_millis(300)
        })
    );
    assert_eq!(
        probe(text, closed_tcp_port().await).await,
        Err(Failure::Refused)
    );
}

#[tokio::test]
async fn https_without_verification_accepts_any_certificate() {
    let pki = TestPki::new();
    let server = HttpServer::start(Some(pki.server.clone())).await;
    probe("kind = \"https\"\npath = \"/tls\"", server.addr)
        .await
        .unwrap();
    let (head, _) = server.last_request.lock().unwrap().clone().unwrap();
    assert!(head.starts_with("GET /tls HTTP/1.1"), "{head}");
    server.set_status(503);
    assert_eq!(
        probe("kind = \"https\"", server.addr).await,
        Err(Failure::HttpStatus { status: 503 })
    );
    // A plain HTTP server waits for a request head that the TLS client never sends.
    let plain = HttpServer::start(None).await;
    assert_eq!(
        probe("kind = \"https\"\ntimeout_ms = 300", plain.addr).await,
        Err(Failure::Timeout {
            stage: Stage::Tls,
            after: Duration::from_millis(300)
        })
    );
}

#[tokio::test]
async fn https_with_verification_checks_the_chain_and_the_name() {
    let pki = TestPki::new();
    let ca = TempFile::new("ca.pem", &pki.ca_pem);
    let ca = ca.0.display().to_string();
    let server = HttpServer::start(Some(pki.server.clone())).await;
    let by_name = format!(
        "kind = \"https\"\ntls_verify = true\nca_file = {ca:?}\ntls_server_name = \"backend.test\""
    );
    probe(&by_name, server.addr).await.unwrap();
    // Without a name the address is checked: the certificate holds 127.0.0.1.
    let by_address = format!("kind = \"https\"\ntls_verify = true\nca_file = {ca:?}");
    probe(&by_address, server.addr).await.unwrap();
    // The Host header's name is the default server name.
    let by_host = format!(
        "kind = \"https\"\ntls_verify = true\nca_file = {ca:?}\nhost = \"other.test:8443\""
    );
    let Err(Failure::Tls(e)) = probe(&by_host, server.addr).await else {
        panic!("a certificate for another name was accepted")
    };
    assert!(e.contains("certificate"), "{e}");
    // Another CA does not vouch for the server.
    let other = TestPki::new();
    let other_ca = TempFile::new("other-ca.pem", &other.ca_pem);
    let text = format!(
        "kind = \"https\"\ntls_verify = true\nca_file = {:?}",
        other_ca.0.display().to_string()
    );
    assert!(matches!(
        probe(&text, server.addr).await,
        Err(Failure::Tls(_))
    ));
}

const DNS: &str = "kind = \"dns\"\ndns_name = \"health.example.com\"\ntimeout_ms = 300";

#[tokio::test]
async fn dns_answers_count_only_when_well_formed_with_the_right_id() {
    let server = DnsServer::start().await;
    probe(DNS, server.addr).await.unwrap();
    server.set_mode(DnsMode::Garbage);
    assert!(matches!(
        probe(DNS, server.addr).await,
        Err(Failure::DnsMalformed(_))
    ));
    server.set_mode(DnsMode::WrongId);
    let Err(Failure::DnsWrongId { sent, got }) = probe(DNS, server.addr).await else {
        panic!("wrong id accepted")
    };
    assert_eq!(got, sent.wrapping_add(1));
    server.set_mode(DnsMode::Silent);
    assert_eq!(
        probe(DNS, server.addr).await,
        Err(Failure::Timeout {
            stage: Stage::Answer,
            after: Duration::from_millis(300)
        })
    );
    server.set_mode(DnsMode::Good);
    probe(DNS, server.addr).await.unwrap();
}

#[tokio::test]
async fn dns_to_a_closed_port_is_refused() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    drop(socket);
    assert_eq!(probe(DNS, addr).await, Err(Failure::Refused));
}
