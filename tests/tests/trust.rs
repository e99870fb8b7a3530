//! Failures of the control plane are seen and mended (issue 29, stage 1), under a real
//! daemon in a test bed:
//!
//! - the pin directory removed under a running daemon (`rm -rf`): the daemon finds the
//!   loss within seconds, pins everything again from its own descriptors, `lb status`
//!   and the metrics say so (`lb_pins_lost_total`, `lb_datapath_degraded` 0 once
//!   mended), an established connection and new ones keep working, and after a SIGTERM
//!   the program still forwards (the next start adopts the mended pins).
//!
//! Privileged; needs the `lb` binary (`cargo build -p lb --bin lb`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{Daemon, DaemonConfig},
    prometheus::get,
    testbed::{TestBed, TestBedOptions, vip_tcp},
};

/// The metrics endpoint in the LB namespace (the default address).
const ENDPOINT: &str = "127.0.0.1:9469";

fn bed() -> TestBed {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    TestBed::new(TestBedOptions {
        backends: 3,
        clients: 8,
        ..TestBedOptions::default()
    })
    .expect("build the test bed")
}

/// The pins (files) under `dir`, relative to it, sorted.
fn pins(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A TCP connection to the IPv4 VIP from client `i`, greeted: (connection, backend).
fn connect(bed: &TestBed, i: usize) -> (lb_tests::testbed::TcpConn, String) {
    let src = SocketAddr::new(bed.client_addr(i, false), 0);
    let mut c = bed.tcp_connect(src, vip_tcp(false)).expect("connect");
    let name = c.exchange("hello").expect("greeted");
    (c, name)
}

/// The value of the unlabelled series `name` in the exposition `text`.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
}

#[test]
fn a_pin_directory_removed_under_the_daemon_is_seen_and_pinned_again() {
    let bed = bed();
    let lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let status = lb.status().expect("status");
    let dir = PathBuf::from(status.pin_dir.expect("pinned"));
    assert_eq!(status.datapath.pins_lost_total, 0);
    let before = pins(&dir);
    assert!(before.iter().any(|p| p == Path::new("link")), "{before:?}");
    let (mut established, backend) = connect(&bed, 0);

    std::fs::remove_dir_all(&dir).expect("rm -rf the pin directory");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let s = lb.status().expect("lb status exits 0: the loss is mended");
        if s.datapath.pins_lost_total > 0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no loss seen: {:?}", s.datapath);
        std::thread::sleep(Duration::from_millis(200));
    };
    let health = &status.datapath;
    assert!(!health.degraded, "{health:?}");
    assert_eq!(
        health.pins_lost_total,
        before.len() as u64 - 1,
        "{health:?}"
    );
    assert_eq!(health.pins_restored_total, health.pins_lost_total);
    assert!(
        health
            .last_loss
            .as_deref()
            .is_some_and(|l| l.contains("the pin directory with them")),
        "{health:?}"
    );
    assert_eq!(pins(&dir), before, "every pin is back");
    let text = lb.cli(&["status"]).expect("lb status");
    assert!(text.contains("datapath losses since start"), "{text}");
    let metrics = get(
        bed.lb_ns(),
        ENDPOINT.parse().expect("addr"),
        "/metrics",
        None,
    )
    .expect("GET /metrics");
    assert_eq!(
        series(&metrics, "lb_datapath_degraded"),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        series(&metrics, "lb_pins_lost_total"),
        Some(health.pins_lost_total as f64),
        "{metrics}"
    );
    assert_eq!(established.exchange("again").expect("answered"), backend);
    let _ = connect(&bed, 1);

    let log = lb.stop().expect("SIGTERM");
    assert!(
        log.contains("pins lost:") && log.contains("stays attached to"),
        "{log}"
    );
    // The program outlived the daemon: the mended link pin holds it.
    assert_eq!(
        established.exchange("after the exit").expect("answered"),
        backend
    );
    let _ = connect(&bed, 2);
}
