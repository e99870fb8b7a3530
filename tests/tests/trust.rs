//! Failures of the control plane are seen and mended (issue 29, stage 1), under a real
//! daemon in a test bed:
//!
//! - the pin directory removed under a running daemon (`rm -rf`): the daemon finds the
//!   loss within seconds, pins everything again from its own descriptors, `lb status`
//!   and the metrics say so (`lb_pins_lost_total`, `lb_datapath_degraded` 0 once
//!   mended), an established connection and new ones keep working, and after a SIGTERM
//!   the program still forwards (the next start adopts the mended pins);
//! - a link flap (the LB's interface down and up), which flushes the neighbour entries
//!   the daemon has the kernel manage: they are installed again, so new flows to
//!   backends without health checks (nothing else would resolve their next hops) are
//!   answered;
//! - a change sent to a stopped daemon (SIGSTOP): the CLI says the daemon did not answer
//!   and that the change may still apply, with its id (exit status 4), and once the
//!   daemon runs again `lb status` lists that id as applied.
//!
//! Privileged; needs the `lb` binary (`cargo build -p lb --bin lb`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{Daemon, DaemonConfig, backend_addr, lb_binary, vip_text},
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

/// Opens `n` new connections to the IPv4 VIP (clients round-robin, each a new source
/// port); how many were not answered.
fn unanswered(bed: &TestBed, n: usize) -> usize {
    (0..n)
        .filter(|j| {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            bed.tcp_connect(src, vip_tcp(false))
                .and_then(|mut c| Ok(c.exchange("hello")?))
                .is_err()
        })
        .count()
}

#[test]
fn a_link_flap_installs_the_managed_neighbours_again() {
    let bed = bed();
    // No health checks: no probe resolves the backends' next hops after the flap.
    let lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    assert_eq!(unanswered(&bed, 12), 0, "before the flap");
    let iface = bed.lb_iface();
    for state in ["down", "up"] {
        bed.lb_ns()
            .exec("ip", &["link", "set", "dev", iface, state])
            .expect("ip link set");
        std::thread::sleep(Duration::from_millis(300));
    }
    // The routes through the interface went with it: put back, as the host's network
    // configuration would.
    for prefix in ["198.51.100.0/24", "2001:db8:b::/64"] {
        bed.lb_ns()
            .exec("ip", &["route", "replace", prefix, "dev", iface])
            .expect("ip route replace");
    }
    std::thread::sleep(Duration::from_secs(3));
    let no_neigh = lb.reason("drop_fib_no_neigh").expect("lb stats");
    let failed = unanswered(&bed, 24);
    let log = lb.log();
    assert_eq!(failed, 0, "new flows after the flap; log:\n{log}");
    assert_eq!(
        lb.reason("drop_fib_no_neigh").expect("lb stats"),
        no_neigh,
        "no packet met a missing neighbour"
    );
    assert!(log.contains("came up"), "{log}");
}

/// Sends `signal` to the daemon.
fn signal(lb: &Daemon<'_>, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(lb.pid()).expect("pid");
    // SAFETY: kill(2) with the pid of the test's own daemon.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
}

#[test]
fn a_change_a_stopped_daemon_did_not_answer_is_found_by_its_id() {
    let bed = bed();
    let lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let vip = vip_text(false, true);
    let backend = backend_addr(2, false).to_string();
    signal(&lb, libc::SIGSTOP);
    let out = std::process::Command::new(lb_binary())
        .args([
            "backend",
            "drain",
            "--vip",
            &vip,
            "--backend",
            &backend,
            "--socket",
        ])
        .arg(lb.socket_path())
        .output()
        .expect("lb backend drain");
    signal(&lb, libc::SIGCONT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("did not answer") && stderr.contains("may still apply"),
        "{stderr}"
    );
    assert!(!stderr.contains("os error 11"), "{stderr}");
    let id = stderr
        .split("with id ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the change's id")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = lb.status().expect("status");
        if let Some(change) = status.recent_changes.iter().find(|c| c.id == id) {
            assert!(change.applied, "{change:?}");
            let state = status
                .vips
                .iter()
                .find(|v| v.vip == vip)
                .and_then(|v| v.backends.iter().find(|b| b.address == backend))
                .map(|b| b.state.clone());
            assert_eq!(state.as_deref(), Some("drain"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "change {id} not in lb status: {:?}",
            status.recent_changes
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = lb.cli(&["status"]).expect("lb status");
    assert!(text.contains(&format!("{id} (backend) applied")), "{text}");
}
