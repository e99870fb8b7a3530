//! 200 UDP flows (one connected socket each, so one 5-tuple each)
//! send 10 datagrams each, in rounds over all flows; between rounds 5 and 6 a fourth
//! backend is added (`lb backend add`). Every datagram must be answered by the flow's
//! first backend: UDP flows are pinned in conntrack (idle timeout 30 s, far longer
//! than the test) and a table change does not move them. New flows opened after the
//! addition do reach the new backend (the change took effect).

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, vip_text},
    testbed::{backend_name, vip_udp},
    traffic::{self, Ports, Tally, UdpFlow},
};

use super::{bed, daemon};

const FLOWS: usize = 200;
const DATAGRAMS: usize = 10;
/// The backend is added after this many rounds.
const ADD_AFTER: usize = 5;

#[test]
fn udp_flows_keep_their_backend_across_datagrams_and_a_backend_addition() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let vip = vip_text(false, false);
    let srcs = traffic::sources(&bed, FLOWS, false, Ports::Kernel);
    let flows = UdpFlow::open_all(&bed, &srcs, vip_udp(false)).expect("UDP sockets");
    let mut first: Vec<String> = Vec::with_capacity(FLOWS);
    for round in 0..DATAGRAMS {
        if round == ADD_AFTER {
            assert_eq!(bed.add_backend().expect("a fourth backend"), 4);
            let out = lb.backend("add", &vip, 4, None).expect("lb backend add");
            eprintln!("lb backend add: {}", out.trim());
            let status = lb.status().expect("lb status");
            let b4 = backend_addr(4, false).to_string();
            let v = status.vips.iter().find(|v| v.vip == vip).expect("the VIP");
            assert!(
                v.backends.iter().any(|b| b.address == b4 && b.slots > 0),
                "b4 not in the table: {v:?}"
            );
        }
        for (j, flow) in flows.iter().enumerate() {
            let answer = flow
                .exchange(&format!("flow {j} datagram {round}"))
                .unwrap_or_else(|e| panic!("flow {j}, datagram {round}: {e}"));
            if round == 0 {
                first.push(answer);
            } else {
                assert_eq!(
                    answer,
                    first[j],
                    "flow {j} ({:?}) moved at datagram {round}",
                    flow.local_addr()
                );
            }
        }
    }
    let pinned = Tally::of(first.iter().map(String::as_str));
    eprintln!("{FLOWS} flows x {DATAGRAMS} datagrams, each on one backend: {pinned}");
    for k in 1..=3 {
        assert!(
            pinned.get(&backend_name(k)) > 0,
            "b{k} got no flow: {pinned}"
        );
    }
    let served: u64 = bed.backends().map(|b| b.stats().udp_messages).sum();
    assert_eq!(served, u64::try_from(FLOWS * DATAGRAMS).expect("small"));
    assert_eq!(
        bed.backend(4).stats().udp_messages,
        0,
        "an old flow reached b4"
    );

    let srcs = traffic::sources(&bed, FLOWS, false, Ports::Kernel);
    let fresh = UdpFlow::open_all(&bed, &srcs, vip_udp(false)).expect("UDP sockets");
    let answers: Vec<String> = fresh
        .iter()
        .enumerate()
        .map(|(j, f)| {
            f.exchange("new")
                .unwrap_or_else(|e| panic!("new flow {j}: {e}"))
        })
        .collect();
    let tally = Tally::of(answers.iter().map(String::as_str));
    eprintln!("new flows after the addition: {tally}");
    assert!(tally.get("b4") > 0, "no new flow reached b4: {tally}");
}
