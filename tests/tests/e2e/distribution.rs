//! How 1,000 new TCP connections spread over the backends, equal and weighted.
//!
//! The flows are fixed: connection `j` comes from client address `j % 16` and source
//! port `20,000 + j`. With the configuration's fixed hash and Maglev seeds, every run
//! sends every flow to the same backend, so a result reproduces exactly (b1/b2/b3 got
//! 327/343/330 with equal weights, 254/500/246 with 1:2:1). With kernel-chosen ports each
//! run would draw a fresh sample: a backend's count out of 1,000 is then binomial, and
//! the 15% band is 3.4 standard deviations wide at a share of 1/3 but only 2.7 at 1/4,
//! so the test would fail by chance alone in about 0.26% (equal) and 1.2% (1:2:1) of
//! runs (binomial estimate, confirmed by simulating 20,000 runs of 1,000 random flows
//! against the same tables and hash).
//!
//! Each connection is also checked against the daemon's own prediction (`lb flow`):
//! the backend that answered must be the one the running table gives the flow, which
//! ties the data plane's hash and table to the controller's.

use lb_tests::{
    daemon::{DaemonConfig, backend_of, vip_text},
    testbed::{TestBed, backend_name, vip_tcp},
    traffic::{self, Ports, Tally},
};

use super::{assert_share, bed, daemon};

/// Connections per test.
const CONNECTIONS: usize = 1_000;
/// Source port of connection 0.
const FIRST_PORT: u16 = 20_000;

/// Opens [`CONNECTIONS`] fixed flows to VIP4:80 (each answered, then closed), checks
/// each against `lb flow`, and returns the tally of answering backends.
fn spread(bed: &TestBed, lb: &lb_tests::daemon::Daemon<'_>) -> Tally {
    let vip = vip_text(false, true);
    let srcs = traffic::sources(bed, CONNECTIONS, false, Ports::Fixed(FIRST_PORT));
    let started = std::time::Instant::now();
    let answered = traffic::greet_all(bed, &srcs, vip_tcp(false)).expect("every connection");
    eprintln!(
        "{CONNECTIONS} connections answered in {:?}",
        started.elapsed()
    );
    for (src, backend) in &answered {
        let flow = lb.flow(&vip, *src).expect("lb flow");
        let predicted = flow.table_backend.as_deref().and_then(backend_of);
        assert_eq!(
            predicted.map(backend_name).as_deref(),
            Some(backend.as_str()),
            "{src} was answered by {backend}, but `lb flow` says {flow:?}"
        );
    }
    Tally::of(answered.iter().map(|(_, b)| b.as_str()))
}

#[test]
fn three_equal_backends_share_1000_connections_evenly() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let tally = spread(&bed, &lb);
    eprintln!("equal weights: {tally}");
    assert_eq!(tally.total(), 1_000);
    for k in 1..=3 {
        assert_share(&tally, k, 1.0 / 3.0);
    }
}

#[test]
fn weights_1_2_1_give_shares_of_25_50_25() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::weighted([(1, 1), (2, 2), (3, 1)]));
    let status = lb.status().expect("lb status");
    let vip = vip_text(false, true);
    let v = status
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .expect("the TCP VIP in lb status");
    let weights: Vec<u32> = v.backends.iter().map(|b| b.weight).collect();
    assert_eq!(weights, [1, 2, 1], "{v:?}");

    let tally = spread(&bed, &lb);
    eprintln!("weights 1:2:1: {tally}");
    assert_eq!(tally.total(), 1_000);
    assert_share(&tally, 1, 0.25);
    assert_share(&tally, 2, 0.50);
    assert_share(&tally, 3, 0.25);
}
