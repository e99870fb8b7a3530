//! The scheduler with real probers against real servers on loopback: each way a backend
//! fails is detected within `fall` x interval + timeout, and a fixed backend is back
//! within `rise` x interval. Bounds carry a margin of one interval (the probe phase) and
//! one second (a loaded machine); they are correctness bounds, not speed targets.

mod health_support;

use std::{net::SocketAddr, time::Duration};

use health_support::{DnsMode, DnsServer, HttpServer, TcpServer};
use lb_health::{
    file::HealthFile,
    outcome::{Failure, Stage},
    scheduler::{ProbeSpec, Scheduler, SchedulerConfig, Start},
    settings::ProbeSettings,
    target::ProbeTarget,
    validate::VipHealth,
};
use lb_maglev::BackendKey;
use tokio::time::Instant;

const VIP: u32 = 1;
const INTERVAL: Duration = Duration::from_millis(200);
const TIMEOUT: Duration = Duration::from_millis(100);
const RISE: u32 = 2;
const FALL: u32 = 3;
const MARGIN: Duration = Duration::from_secs(1);

fn spec(kind: &str, dest: SocketAddr) -> ProbeSpec {
    let text = format!(
        "{kind}\ninterval_ms = {}\ntimeout_ms = {}\nrise = {RISE}\nfall = {FALL}",
        INTERVAL.as_millis(),
        TIMEOUT.as_millis()
    );
    let file: HealthFile = toml::from_str(&text).unwrap();
    let settings: ProbeSettings = VipHealth::from_file("vip[0].health", Some(&file), dest.port())
        .unwrap()
        .probe
        .unwrap();
    ProbeSpec {
        target: ProbeTarget::direct(dest.ip(), settings.port, None).unwrap(),
        settings,
    }
}

fn backend(dest: SocketAddr) -> BackendKey {
    BackendKey::new(dest.ip(), Some(dest.port()))
}

/// Polls until the backend's health is `healthy`; the time it took.
async fn until(s: &Scheduler<u32>, b: &BackendKey, healthy: bool, limit: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if s.is_healthy(&VIP, b) == healthy {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "not {} within {limit:?}: {:?}",
        if healthy { "healthy" } else { "unhealthy" },
        s.status(&VIP, b)
    );
}

fn detection_bound() -> Duration {
    INTERVAL * FALL + TIMEOUT + INTERVAL + MARGIN
}

fn recovery_bound() -> Duration {
    INTERVAL * RISE + TIMEOUT + INTERVAL + MARGIN
}

/// Starts probing `dest`, waits for the first successful probe.
async fn probed(kind: &str, dest: SocketAddr) -> (Scheduler<u32>, BackendKey) {
    let (s, _batches) = Scheduler::start(SchedulerConfig::default());
    let b = backend(dest);
    s.set(VIP, b, spec(kind, dest), Start::AssumeHealthy)
        .unwrap();
    let start = Instant::now();
    while s.status(&VIP, &b).unwrap().assumed {
        assert!(start.elapsed() < Duration::from_secs(5), "never probed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.is_healthy(&VIP, &b));
    (s, b)
}

#[tokio::test]
async fn killed_tcp_server_is_detected_and_its_return_seen() {
    let server = TcpServer::start().await;
    let addr = server.addr;
    let (s, b) = probed("kind = \"tcp\"", addr).await;
    drop(server);
    let took = until(&s, &b, false, detection_bound()).await;
    eprintln!("refused: unhealthy after {took:?}");
    assert_eq!(
        s.status(&VIP, &b).unwrap().last_error,
        Some(Failure::Refused)
    );
    let _server = TcpServer::start_on(addr).await;
    let took = until(&s, &b, true, recovery_bound()).await;
    eprintln!("refused: healthy again after {took:?}");
}

#[tokio::test]
async fn http_503_is_detected_and_200_recovers() {
    let server = HttpServer::start(None).await;
    let (s, b) = probed("kind = \"http\"", server.addr).await;
    server.set_status(503);
    until(&s, &b, false, detection_bound()).await;
    let status = s.status(&VIP, &b).unwrap();
    assert_eq!(status.last_error, Some(Failure::HttpStatus { status: 503 }));
    assert_eq!(
        status.last_reason.as_deref(),
        Some("HTTP 503 (3 consecutive failed probes)")
    );
    server.set_status(200);
    until(&s, &b, true, recovery_bound()).await;
}

#[tokio::test]
async fn a_hung_http_server_times_out() {
    let server = HttpServer::start(None).await;
    let (s, b) = probed("kind = \"http\"", server.addr).await;
    server.set_mode(health_support::HttpMode::Hang);
    until(&s, &b, false, detection_bound()).await;
    assert_eq!(
        s.status(&VIP, &b).unwrap().last_error,
        Some(Failure::Timeout {
            stage: Stage::Response,
            after: TIMEOUT
        })
    );
}

#[tokio::test]
async fn dns_garbage_is_detected_and_good_answers_recover() {
    let server = DnsServer::start().await;
    let (s, b) = probed(
        "kind = \"dns\"\ndns_name = \"health.example.com\"",
        server.addr,
    )
    .await;
    server.set_mode(DnsMode::Garbage);
    until(&s, &b, false, detection_bound()).await;
    assert!(matches!(
        s.status(&VIP, &b).unwrap().last_error,
        Some(Failure::DnsMalformed(_))
    ));
    server.set_mode(DnsMode::Good);
    until(&s, &b, true, recovery_bound()).await;
}

/// A DNS server that stops answering (its packets dropped): timeouts.
#[tokio::test]
async fn a_silent_dns_server_times_out() {
    let server = DnsServer::start().await;
    let (s, b) = probed(
        "kind = \"dns\"\ndns_name = \"health.example.com\"",
        server.addr,
    )
    .await;
    server.set_mode(DnsMode::Silent);
    let took = until(&s, &b, false, detection_bound()).await;
    eprintln!("silent: unhealthy after {took:?}");
    assert_eq!(
        s.status(&VIP, &b).unwrap().last_error,
        Some(Failure::Timeout {
            stage: Stage::Answer,
            after: TIMEOUT
        })
    );
}

/// A reload that changes the probe (here: the interval) keeps an unhealthy backend
/// unhealthy until the new probes pass `rise` times.
#[tokio::test]
async fn a_reload_with_new_settings_keeps_the_state() {
    let server = HttpServer::start(None).await;
    let (s, b) = probed("kind = \"http\"", server.addr).await;
    server.set_status(500);
    until(&s, &b, false, detection_bound()).await;
    let mut changed = spec("kind = \"http\"", server.addr);
    changed.settings.interval = Duration::from_millis(300);
    s.set(VIP, b, changed.clone(), Start::AssumeHealthy)
        .unwrap();
    assert!(!s.is_healthy(&VIP, &b), "kept unhealthy across the reload");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!s.is_healthy(&VIP, &b));
    assert_eq!(
        s.status(&VIP, &b).unwrap().went_down,
        1,
        "no new transition"
    );
    server.set_status(200);
    until(&s, &b, true, recovery_bound()).await;
    // The same settings again change nothing.
    s.set(VIP, b, changed, Start::AssumeUnhealthy).unwrap();
    assert!(s.is_healthy(&VIP, &b));
}
