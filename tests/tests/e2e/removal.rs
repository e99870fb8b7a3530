//! Removing a backend (`lb backend remove`) while it has live connections.
//!
//! - Connections on the other backends are untouched: same backend, no error.
//! - The removed backend's own connections fail fast. With IP-in-IP direct server
//!   return the load balancer keeps no per-connection state it could hand over: the
//!   removed backend's pins no longer hold, the next packet of each such flow is
//!   re-picked on the new table to a remaining backend, whose kernel has no socket for
//!   it and answers with a RST from the VIP (it owns the VIP on `lo`), so
//!   the client gets ECONNRESET at once rather than hanging in retransmissions
//!   (failure scenario BR-13.T3 in `docs/src/operations/failure-scenarios.md`). Asserted: every such
//!   connection's next exchange fails with `ConnectionReset` (a hang would end in the
//!   socket's read timeout instead), and the data plane counted the re-picks
//!   (`ct_stale_repicked`). How long the reset took is printed, not asserted.
//! - New connections never reach the removed backend: its server accepts none after
//!   the removal.

use std::{
    io::ErrorKind,
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, vip_text},
    testbed::{backend_name, vip_tcp},
    traffic::{self, Ports, Tally},
};

use super::{bed, daemon};

#[test]
fn removing_a_backend_resets_only_its_connections_and_new_ones_avoid_it() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let vip = vip_text(false, true);
    let srcs = traffic::sources(&bed, 90, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let before = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    eprintln!("live connections: {before}");
    let on_b2 = before.get("b2");
    assert!(on_b2 > 0, "no connection on b2: {before}");

    let out = lb
        .backend("remove", &vip, 2, None)
        .expect("lb backend remove");
    eprintln!("lb backend remove: {}", out.trim());
    let status = lb.status().expect("lb status");
    let v = status.vips.iter().find(|v| v.vip == vip).expect("the VIP");
    let b2 = backend_addr(2, false).to_string();
    assert!(
        v.backends.iter().all(|b| b.address != b2) && v.backends.len() == 2,
        "b2 still listed: {v:?}"
    );
    let b2_accepted = bed.backend(2).stats().tcp_connections;

    let mut reset = 0;
    let mut slowest_reset = Duration::ZERO;
    for (j, g) in greeted.iter_mut().enumerate() {
        let started = Instant::now();
        let result = g.conn.exchange("after the removal");
        let took = started.elapsed();
        if g.backend == backend_name(2) {
            let err = result.expect_err("a connection of the removed b2 still got an answer");
            assert_eq!(
                err.kind(),
                ErrorKind::ConnectionReset,
                "connection {j} of b2: {err} after {took:?}"
            );
            reset += 1;
            slowest_reset = slowest_reset.max(took);
        } else {
            let answer = result.unwrap_or_else(|e| {
                panic!(
                    "connection {j} of {} broke after the removal: {e}",
                    g.backend
                )
            });
            assert_eq!(answer, g.backend, "connection {j} moved");
        }
    }
    eprintln!("{reset} connections of b2 reset, the slowest after {slowest_reset:?}");
    assert_eq!(reset, on_b2);
    // Still fine a second time.
    for g in greeted.iter_mut().filter(|g| g.backend != backend_name(2)) {
        assert_eq!(g.conn.exchange("again").expect("exchange"), g.backend);
    }

    let stats = lb.stats().expect("lb stats");
    let counters = &stats
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .expect("the VIP in lb stats")
        .counters;
    let repicked = counters
        .iter()
        .find(|c| c.name == "ct_stale_repicked")
        .expect("ct_stale_repicked")
        .value;
    assert!(repicked >= on_b2, "ct_stale_repicked {repicked} < {on_b2}");

    let srcs = traffic::sources(&bed, 300, false, Ports::Kernel);
    let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
    let after = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    eprintln!("new connections after the removal: {after}");
    assert_eq!(after.get("b2"), 0, "{after}");
    assert_eq!(after.total(), 300);
    assert!(after.get("b1") > 0 && after.get("b3") > 0, "{after}");
    assert_eq!(
        bed.backend(2).stats().tcp_connections,
        b2_accepted,
        "b2's server accepted a connection after the removal"
    );
}
