//! Backend lifecycle on a running daemon (issue 32, stage 2): `lb backend weight`
//! reweights the table and answers what moved; `lb backend drain --timeout` keeps the
//! backend's connections, then removes it when the timeout passes or, if that is first,
//! when its last connection ends. On a VIP with health checks a backend added at run
//! time gets slots only after its first successful probe (`initial = "down"`).

use std::time::{Duration, Instant};

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, vip_text},
    testbed::{
        backend_name,
        health::{PortListener, TCP_PROBE_PORT},
        vip_tcp,
    },
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

/// Backend `k`'s (slots, health label) in `vip`.
fn slots_and_health(lb: &lb_tests::daemon::Daemon<'_>, vip: &str, k: u8) -> (u32, String) {
    let b = backend_addr(k, false).to_string();
    let status = lb.status().expect("lb status");
    let found = status
        .vips
        .iter()
        .filter(|v| v.vip == vip)
        .flat_map(|v| v.backends.iter())
        .find(|x| x.address == b)
        .unwrap_or_else(|| panic!("no backend {b} in {vip}"));
    let label = found
        .health
        .as_ref()
        .map_or_else(|| "not probed".to_owned(), |h| h.state.clone());
    (found.slots, label)
}

/// Issue 32: a backend added at run time to a VIP with TCP checks waits for its first
/// successful probe. b2 is typed wrong (nothing listens on its probe port): it never
/// gets a slot nor a new connection; b3 listens: it gets slots once a probe has passed
/// (its health is then `healthy`, not `healthy (assumed)`), and then connections.
#[test]
fn a_backend_added_to_a_checked_vip_takes_flows_only_after_its_first_probe_passes() {
    let bed = bed(3);
    let _listeners: Vec<PortListener> = [1, 3]
        .into_iter()
        .map(|k| PortListener::open(bed.backend_ns(k), TCP_PROBE_PORT).expect("listener"))
        .collect();
    let vip = vip_text(false, true);
    let config = DaemonConfig::equal(1..=1).with_health(
        &vip,
        &format!(
            "kind = \"tcp\"\nport = {TCP_PROBE_PORT}\ninterval_ms = 1000\ntimeout_ms = 200\n\
             rise = 2\nfall = 3\nflap_transitions = 0\n"
        ),
    );
    let lb = daemon(&bed, &config);
    for k in [2, 3] {
        let b = backend_addr(k, false).to_string();
        let out = lb
            .cli(&["backend", "add", "--vip", &vip, "--backend", &b])
            .expect("lb backend add");
        eprintln!("lb backend add b{k}: {}", out.trim());
        assert!(
            out.contains(&format!(
                "backend {b} gets slots after its first successful probe"
            )),
            "{out}"
        );
        let (slots, label) = slots_and_health(&lb, &vip, k);
        assert!(
            slots == 0 || label == "healthy",
            "b{k}: {slots} slots while {label}"
        );
    }
    // b3 gets slots, and only with a probe passed.
    let started = Instant::now();
    loop {
        let (slots, label) = slots_and_health(&lb, &vip, 3);
        if slots > 0 {
            assert_eq!(
                label, "healthy",
                "b3 got {slots} slots before a probe passed"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "b3 has no slots 10 s after it was added ({label})\n{}",
            lb.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let srcs = traffic::sources(&bed, 300, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let tally = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    assert!(
        tally.share(&backend_name(3)) > 0.3,
        "b3 takes flows: {tally}"
    );
    assert_eq!(tally.share(&backend_name(2)), 0.0, "b2 took flows: {tally}");
    // Several probes later b2 is still out: no slot, no connection.
    std::thread::sleep(Duration::from_secs(3));
    let (slots, label) = slots_and_health(&lb, &vip, 2);
    assert_eq!((slots, label.as_str()), (0, "unhealthy"));
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let tally = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    assert_eq!(tally.share(&backend_name(2)), 0.0, "b2 took flows: {tally}");
}
