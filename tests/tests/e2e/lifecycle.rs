//! Backend lifecycle on a running daemon (issue 32, stage 2): `lb backend weight`
//! reweights the table and answers what moved; `lb backend drain --timeout` keeps the
//! backend's connections, then removes it when the timeout passes or, if that is first,
//! when its last connection ends.

use std::time::{Duration, Instant};

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, vip_text},
    testbed::{backend_name, vip_tcp},
    traffic::{self, Ports, Tally},
};

use super::{bed, daemon};

/// Walk conntrack every 500 ms, so that a drain ends soon after its cause.
fn config(ks: std::ops::RangeInclusive<u8>) -> DaemonConfig {
    let mut c = DaemonConfig::equal(ks);
    c.metrics = "connections_interval_ms = 500".to_owned();
    c
}

fn listed(lb: &lb_tests::daemon::Daemon<'_>, vip: &str, k: u8) -> bool {
    let b = backend_addr(k, false).to_string();
    lb.status()
        .expect("lb status")
        .vips
        .iter()
        .filter(|v| v.vip == vip)
        .flat_map(|v| v.backends.iter())
        .any(|x| x.address == b)
}

#[test]
fn weight_reweights_the_table_and_answers_what_moved() {
    let bed = bed(2);
    let lb = daemon(&bed, &config(1..=2));
    let vip = vip_text(false, true);
    let b1 = backend_addr(1, false).to_string();
    let out = lb
        .cli(&["backend", "weight", "--vip", &vip, "--backend", &b1, "3"])
        .expect("lb backend weight");
    eprintln!("lb backend weight: {}", out.trim());
    assert!(
        out.starts_with(&format!(
            "backend {b1} of VIP {vip}: active (weight 1) -> active (weight 3)\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("generation 2") && out.contains("slots changed owner"),
        "{out}"
    );
    let status = lb.status().expect("lb status");
    let v = status.vips.iter().find(|v| v.vip == vip).expect("the VIP");
    let share = v
        .backends
        .iter()
        .find(|b| b.address == b1)
        .expect("b1")
        .share;
    assert!(
        (0.70..0.80).contains(&share),
        "b1's share after weight 3: {share}"
    );
    let srcs = traffic::sources(&bed, 200, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let tally = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    assert!(tally.share(&backend_name(1)) > 0.6, "{tally}");
    let again = lb
        .cli(&["backend", "add", "--vip", &vip, "--backend", &b1])
        .expect_err("add of an existing backend");
    assert!(
        format!("{again:#}").contains("lb backend weight --vip"),
        "{again:#}"
    );
}

/// A drained backend with live connections keeps them until the timeout, then is
/// removed; one without connections is removed at the next walk.
#[test]
fn drain_timeout_removes_the_backend_at_the_timeout_or_its_last_connection() {
    let bed = bed(3);
    let lb = daemon(&bed, &config(1..=3));
    let vip = vip_text(false, true);
    let srcs = traffic::sources(&bed, 60, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    assert!(
        greeted.iter().any(|g| g.backend == backend_name(2)),
        "none on b2"
    );
    let b2 = backend_addr(2, false).to_string();
    let started = Instant::now();
    let out = lb
        .cli(&[
            "backend",
            "drain",
            "--vip",
            &vip,
            "--backend",
            &b2,
            "--timeout",
            "4s",
        ])
        .expect("lb backend drain --timeout");
    eprintln!("lb backend drain: {}", out.trim());
    assert!(out.contains("whichever is first"), "{out}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        listed(&lb, &vip, 2),
        "b2 removed before its timeout with live connections"
    );
    for g in greeted.iter_mut().filter(|g| g.backend == backend_name(2)) {
        assert_eq!(
            g.conn.exchange("draining").expect("a drained connection"),
            g.backend
        );
    }
    lb.wait_status("b2 removed at its timeout", Duration::from_secs(10), |_| {
        !listed(&lb, &vip, 2)
    })
    .expect("the timeout removes b2");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "removed before the timeout"
    );
    assert!(lb.log().contains("its 4s timeout passed"), "{}", lb.log());

    // b3 drained with a long timeout, then its connections end: it is removed at the
    // next walk. (Drained first, so that the closing packets of b2's connections, now
    // re-picked, go to b1 and open no pin to b3.)
    let b3 = backend_addr(3, false).to_string();
    lb.cli(&[
        "backend",
        "drain",
        "--vip",
        &vip,
        "--backend",
        &b3,
        "--timeout",
        "1h",
    ])
    .expect("lb backend drain --timeout 1h");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        listed(&lb, &vip, 3),
        "b3 removed while its connections are open"
    );
    drop(greeted);
    lb.wait_status(
        "b3 removed after its last connection",
        Duration::from_secs(30),
        |_| !listed(&lb, &vip, 3),
    )
    .expect("the last connection's end removes b3");
    assert!(
        lb.log().contains("its last connection ended"),
        "{}",
        lb.log()
    );
}
